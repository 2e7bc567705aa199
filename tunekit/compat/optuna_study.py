"""Reaches into private Optuna APIs: trials reopened, the journal's listings, TPE's history
view, ``search.reproducible``'s lagged view, and the views a proposal made apart from the
study is sampled through (see ``tunekit.compat``)."""

from __future__ import annotations

import copy
import errno
import fcntl
import json
import os
from collections.abc import Generator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import optuna
from optuna.storages.journal import JournalFileBackend, JournalStorage
from optuna.storages.journal._file import get_lock_file
from optuna.trial import FrozenTrial, TrialState

from tunekit.storage.fences import check_fences

_FINISHED = frozenset(state for state in TrialState if state.is_finished())
_WAITING_ONLY = (TrialState.WAITING,)
# What a file system that does not support flock answers (some network mounts).
_NO_FLOCK = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL})


def reopen_trial(study: optuna.Study, frozen: optuna.trial.FrozenTrial) -> optuna.Trial:
    """A live ``optuna.Trial`` for a RUNNING trial of the study, as ``study.ask`` made it.

    Why: after a resume (or a restarted worker) the searcher must report further epochs of
    a trial asked in an earlier process; Optuna only constructs ``Trial`` objects in
    ``ask`` and identifies them by the storage's private ``_trial_id``. Checked against
    Optuna 5.0.
    """
    return optuna.Trial(study, frozen._trial_id)


def study_trial_count(study: optuna.Study) -> int:
    """How many trials ``study`` holds (the number its next trial takes), without listing them.

    Why: ``len(study.trials)`` copies every trial, ``get_trials(deepcopy=False)`` still lists
    them all; the storage's count is one lookup in tunekit's journal (``ExperimentJournal``).
    Reads the study's private ``_storage`` and ``_study_id``. Checked against Optuna 5.0.
    """
    return study._storage.get_n_trials(study._study_id)


def set_system_attrs(trial: optuna.Trial, attrs: Mapping[str, Any]) -> None:
    """Sets ``attrs`` as system attributes of ``trial``, a RUNNING trial of its study.

    Why: a proposal sampled apart from the study (``tunekit.search.study.PinnableSampler.propose``)
    carries what the sampler wrote on its trial there (NSGA-II's generation, which its next
    proposals count); the study's trial that takes the proposal must carry it too. Optuna 5.0
    has no public setter for system attributes: the storage's, by the private ``_trial_id``.
    """
    for key, value in attrs.items():
        trial.storage.set_trial_system_attr(trial._trial_id, key, value)


def replace_intermediate_value(trial: optuna.Trial, step: int, value: float) -> bool:
    """Sets ``trial``'s value at ``step`` to ``value`` when the study holds another one there;
    whether it did.

    Why: an epoch trained again after a restart (a lost worker, a resume from an older
    checkpoint) has a new value, which the tables and MLflow take as the epoch's; Optuna's
    ``Trial.report`` ignores a step it holds, while its storage's setter replaces it (the
    journal's replay keeps the last). Reads the storage's private ``_trial_id``. Checked against
    Optuna 5.0.
    """
    held = trial.storage.get_trial(trial._trial_id).intermediate_values.get(step)
    if held is None or held == value:
        return False
    trial.storage.set_trial_intermediate_value(trial._trial_id, step, value)
    return True


def pareto_front_of(trials: list[FrozenTrial], directions: list[Any]) -> list[FrozenTrial]:
    """Optuna's Pareto front of ``trials`` (its own computation, as ``Study.best_trials`` makes
    it, constraints considered where any trial has them).

    Why: ``Study.best_trials`` ranks every trial of the study, and a warm-started study holds
    the earlier search's trials as history: one of them that dominates this search's own
    front made ``tunekit check`` report the search's front as wrong. Checked against Optuna
    5.0 (``optuna.study._multi_objective._get_pareto_front_trials_by_trials``,
    ``optuna.study._constrained_optimization._CONSTRAINTS_KEY`` via ``FrozenTrial.constraints``).
    """
    from optuna.study._multi_objective import _get_pareto_front_trials_by_trials

    constrained = any(trial.constraints for trial in trials)
    return _get_pareto_front_trials_by_trials(trials, directions, consider_constraint=constrained)


def journal_storage(path: Path) -> ExperimentJournal:
    """The journal storage of a study file (see ``ExperimentJournal``)."""
    return ExperimentJournal(UnsyncedJournalFile(str(path)))


class UnsyncedJournalFile(JournalFileBackend):
    """Optuna's journal file, with each write handed to the operating system but not forced to
    disk, under a lock on the file itself.

    Why, the sync: Optuna's ``append_logs`` calls ``os.fsync`` after every line, and a search
    writes about 12 lines per trial (its start, each parameter, each epoch, its end), all on
    the driver's main thread, which also starts the next trial: a third of the study's cost
    per trial on an idle machine, more beside a busy database. A killed driver loses nothing
    without it (the lines are in the operating system's cache); only a machine that loses
    power can lose the last seconds, as it can lose Ray's saved state, which is written
    without a sync too. A torn last line is skipped by Optuna's reader.

    Why, the lock: Optuna's default lock creates a symlink beside the journal, renames it
    and removes it at every write: three changes to the experiment's folder and a uuid,
    45-60 us of the driver's CPU a write (12 a trial), and its share of the profile grew
    from 0.85 to 1.46 ms per trial over a 10,000-trial search. ``flock`` on the journal's
    own handle takes about 1 us and changes no folder. Every tunekit process that writes a
    study (a search's driver, ``run`` or ``resume``, a notebook through ``study_storage``) takes this
    lock, so their lines never interleave; where the file system refuses ``flock`` (some
    network mounts) writes fall back to Optuna's lock. Checked against Optuna 5.0:
    ``JournalFileBackend.append_logs``, ``_file_path`` and ``_lock``.
    """

    _flock_refused = False
    _reader: BinaryIO | None = None  # opened once: see read_logs
    _appender: BinaryIO | None = None

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        check_fences()  # a driver that lost its lease appends nothing more (tunekit.storage.lease)
        lines = "".join(json.dumps(log, separators=(",", ":")) + "\n" for log in logs).encode("utf-8")
        file = self._appender = self._appender or open(self._file_path, "ab")  # noqa: SIM115 - kept open
        if not self._flock_refused:
            try:
                fcntl.flock(file, fcntl.LOCK_EX)
            except OSError as error:
                if error.errno not in _NO_FLOCK:
                    raise
                self._flock_refused = True
            else:
                try:
                    file.write(lines)
                    file.flush()
                finally:
                    fcntl.flock(file, fcntl.LOCK_UN)
                return
        with get_lock_file(self._lock):
            file.write(lines)
            file.flush()

    def read_logs(self, log_number_from: int) -> Generator[dict[str, Any], None, None]:
        """The logs from ``log_number_from`` on, read through a handle kept open.

        Why: Optuna opens the file at every read, and the study reads it about 19 times a
        trial (after each write, before each listing): a path lookup in the experiment's
        folder each, which holds a folder per trial: 0.5 ms of the driver's CPU per trial
        over the first 1,000 of a 10,000-trial search, 1.0 over the last. A read with nothing
        new now costs one ``fstat``. As Optuna's: a last line cut short (a write under way,
        or a power loss) is left for the next read; a bad line before others raises.
        """
        start = self._log_number_offset.get(log_number_from)
        if start is None:  # an offset not read through this handle yet: Optuna's walk from the start
            yield from super().read_logs(log_number_from)
            return
        reader = self._reader = self._reader or open(self._file_path, "rb")  # noqa: SIM115 - kept open
        end = os.fstat(reader.fileno()).st_size
        if start >= end:
            return
        reader.seek(start)
        lines = reader.read(end - start).splitlines(keepends=True)
        number, offset = log_number_from, start
        for index, line in enumerate(lines):
            last = index == len(lines) - 1
            if not line.endswith(b"\n"):
                return  # the last line, not whole yet
            try:
                log = json.loads(line)
            except json.JSONDecodeError:
                if last:
                    return
                raise
            number, offset = number + 1, offset + len(line)
            self._log_number_offset[number] = offset
            yield log

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("_reader", None)
        state.pop("_appender", None)
        return state

    def __del__(self) -> None:
        # The handles end with the storage (a study opened in a notebook, then dropped).
        for handle in (self._reader, self._appender):
            if handle is not None:
                handle.close()


class ExperimentJournal(JournalStorage):
    """A journal storage answering a search's two per-ask questions without
    walking every trial: which trials wait (``Study.ask``) and which are recent (the TPE view).

    Why: Optuna's journal answers every ``get_all_trials`` by testing each trial of the study.
    At 10,000 trials that cost 3.7 ms per ask for the waiting queue alone, and 5.6 ms per
    listing for TPE's search space and the ``search.tpe_history`` view, each then filtered
    again by the study and the view. This storage keeps the numbers of the unfinished trials
    (Optuna's in-memory storage keeps the like for WAITING): a trial leaves RUNNING or
    WAITING only to finish and is never updated once finished, and new trials are always
    appended, so only trials added or unfinished since the last look are looked at again.
    Trials another process appends to the file are read (``_sync_with_backend``) first.
    Checked against Optuna 5.0: ``JournalStorage._thread_lock``, ``_sync_with_backend``,
    ``_replay_result`` with its ``_study_id_to_trial_ids`` (trial ids in number order) and
    ``_trials``.
    """

    def __init__(self, backend: JournalFileBackend) -> None:
        super().__init__(backend)
        # study id -> (trials looked at, numbers of those that were unfinished then)
        self._unfinished: dict[int, tuple[int, set[int]]] = {}

    def get_all_trials(self, study_id: int, deepcopy: bool = True, states: Any = None) -> list[FrozenTrial]:
        if states != _WAITING_ONLY:
            return super().get_all_trials(study_id, deepcopy=deepcopy, states=states)
        with self._thread_lock:
            trials = [t for t in self._synced_unfinished(study_id) if t.state == TrialState.WAITING]
        return copy.deepcopy(trials) if deepcopy else trials

    def get_n_trials(self, study_id: int, state: Any = None) -> int:
        """The number of trials of the study (in ``state``): all of them from the replay's index,
        which Optuna's default counts by listing every trial (asked at each proposal, for the
        number the proposal's trial takes: ``study_trial_count``)."""
        if state is not None:
            return super().get_n_trials(study_id, state)
        with self._thread_lock:
            self._sync_with_backend()
            numbered = self._replay_result._study_id_to_trial_ids.get(study_id)
        if numbered is None:
            raise KeyError("Record does not exist.")  # Optuna's storages' words
        return len(numbered)

    def recent_trials(self, study_id: int, window: int, states: Any) -> list[FrozenTrial]:
        """The trials in ``states`` (None: all) from the ``window``-th most recent finished
        one on, after every older unfinished one: ``recent_trials_study``'s answer."""
        with self._thread_lock:
            unfinished = self._synced_unfinished(study_id)
            replay = self._replay_result
            numbered = replay._study_id_to_trial_ids[study_id]
            recent: list[FrozenTrial] = []
            number, finished = len(numbered), 0
            while number > 0 and finished < window:
                number -= 1
                trial = replay._trials[numbered[number]]
                if states is None or trial.state in states:
                    recent.append(trial)
                    finished += trial.state in _FINISHED
        older = [t for t in unfinished if t.number < number and (states is None or t.state in states)]
        return older + recent[::-1]

    def _synced_unfinished(self, study_id: int) -> list[FrozenTrial]:
        """The study's unfinished trials in number order, with the file read first (lock held)."""
        self._sync_with_backend()
        replay = self._replay_result
        numbered = replay._study_id_to_trial_ids.get(study_id)
        if numbered is None:
            raise KeyError("Record does not exist.")  # Optuna's storages' words
        seen, known = self._unfinished.get(study_id, (0, set()))
        new = range(seen, len(numbered))
        candidates = sorted(known.union(n for n in new if replay._trials[numbered[n]].state not in _FINISHED))
        unfinished = [t for t in (replay._trials[numbered[n]] for n in candidates) if t.state not in _FINISHED]
        self._unfinished[study_id] = (len(numbered), {t.number for t in unfinished})
        return unfinished


def recent_trials_study(study: optuna.Study, window: int) -> Any:
    """``study`` as a sampler sees it, with only the ``window`` most recent finished trials.

    Why: TPE reads the study's trials through the private ``Study._get_trials`` and fits its
    estimators to all of them, so its cost per proposal grows with the search (14 ms at 1,000
    synthetic trials, 63 ms at 5,000). This view answers ``_get_trials`` with the finished
    trials of the highest ``window`` numbers and every unfinished one (constant liar reads
    the running ones); everything else is the study's. Checked against Optuna 5.0:
    ``TPESampler._sample_relative``, ``sample_independent`` and ``_sample`` call
    ``study._get_trials(deepcopy=False, states=..., use_cache=...)``.
    """
    return _RecentTrials(study, window)


class _RecentTrials:
    """The view ``recent_trials_study`` returns; every other attribute is the study's."""

    def __init__(self, study: optuna.Study, window: int) -> None:
        self._study, self._window = study, window
        # A study's directions never change, but Study.direction asks the storage each time,
        # and TPE reads it once per pruned trial per proposal (_get_pruned_trial_score):
        # 1.15 s of a 3,000-trial synthetic search went to that alone.
        self.directions = study.directions
        if len(self.directions) == 1:
            self.direction = self.directions[0]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)

    def _get_trials(self, deepcopy: bool = True, states: Any = None, use_cache: bool = False) -> list[Any]:
        storage = self._study._storage
        if isinstance(storage, ExperimentJournal):  # the experiment's study: looks at the window only
            trials = storage.recent_trials(self._study._study_id, self._window, states)
            return copy.deepcopy(trials) if deepcopy else trials
        trials = self._study._get_trials(deepcopy=deepcopy, states=states, use_cache=use_cache)
        # Optuna lists trials in number order: walk back to the window's oldest finished
        # trial, so the sampler's cost is the window's, not the study's.
        cut, seen = len(trials), 0
        while cut > 0 and seen < self._window:
            cut -= 1
            seen += trials[cut].state in _FINISHED
        if cut == 0:
            return trials
        if states is not None and _FINISHED.issuperset(states):
            return trials[cut:]
        return [t for t in trials[:cut] if t.state not in _FINISHED] + trials[cut:]


# --------------------------------------------------------------------------- search.reproducible
# With several trials at once, what TPE proposes depends on which earlier trials have ended when
# it is asked, which depends on the machine's load: the same seed gives other configurations from
# one run to the next. With ``search.reproducible: K``, the proposal made when the study holds
# ``m`` trials waits until every trial numbered below ``m - K`` has ended, and the sampler is shown
# those as they are and every later trial as RUNNING (constant liar's "being tried": its
# parameters, no value), whatever it really is. What the sampler sees is then the same in every
# run that got the same results, at any concurrency up to ``K + 1``. Nothing is written to the study.

WAITING = object()  # ask_lagged's answer while earlier trials must end first


def ask_lagged(study: optuna.Study, lag: int | None, ask: Any) -> Any:
    """``ask()`` with the study's sampler shown only the trials numbered below ``m - lag``, or
    ``WAITING`` until they have all ended; ``ask()`` itself when ``lag`` is None.

    The sampler (``tunekit.search.study.PinnableSampler``) applies ``lagged_study`` while
    its ``lag_cut`` is set.
    """
    if lag is None:
        return ask()
    trials = study.get_trials(deepcopy=False)
    # Enqueued (WAITING) trials hold the lowest numbers and are taken first: the proposal's
    # number is the count of the others.
    cut = sum(t.state != TrialState.WAITING for t in trials) - lag
    if any(t.state not in _FINISHED for t in trials if t.number < cut):
        return WAITING
    sampler: Any = study.sampler
    sampler.lag_cut = cut
    try:
        return ask()
    finally:
        sampler.lag_cut = None


def lagged_study(study: Any, sampler: Any) -> Any:
    """``study`` (or a view of one) as the sampler may see it under ``ask_lagged``: trials numbered
    ``sampler.lag_cut`` or more shown RUNNING, without values; ``study`` itself when no cut is set
    (a sampler pickled before ``search.reproducible`` existed has none).

    Checked against Optuna 5.0: ``TPESampler`` (constant liar included) and
    ``IntersectionSearchSpace`` read trials through ``study._get_trials(deepcopy=..., states=...,
    use_cache=...)``.
    """
    cut = getattr(sampler, "lag_cut", None)
    return study if cut is None else _Lagged(study, cut)


def shown_running(frozen: FrozenTrial) -> FrozenTrial:
    """A finished trial as one still being tried: its parameters, no value, no end."""
    running = copy.copy(frozen)
    running.state = TrialState.RUNNING
    running.values = None
    running.datetime_complete = None
    running.intermediate_values = {}
    return running


class _Lagged:
    """The view ``lagged_study`` returns; every other attribute is the study's."""

    def __init__(self, study: Any, cut: int) -> None:
        self._study, self._cut = study, cut
        self._shown: dict[int, FrozenTrial] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)

    def _get_trials(self, deepcopy: bool = True, states: Any = None, use_cache: bool = False) -> list[Any]:
        visible = []
        for trial in self._study._get_trials(deepcopy=False, states=None, use_cache=use_cache):
            # A trial still running is shown without the epochs it has reported so far, too.
            if trial.number >= self._cut and trial.state != TrialState.WAITING:
                if trial.number not in self._shown:
                    self._shown[trial.number] = shown_running(trial)
                trial = self._shown[trial.number]
            if states is None or trial.state in states:
                visible.append(trial)
        return copy.deepcopy(visible) if deepcopy else visible


# --------------------------------------------------------------------------- proposals apart from the study
# A proposal that repeats a configuration an earlier trial ran is not trained. Asked of the study
# itself it would take a trial number all the same, and the numbers users see (trials.csv, MLflow's
# trial-N runs, a TensorBoard folder per trial) would skip it. So proposals are sampled on a trial
# of a throwaway in-memory study, with the sampler shown the real study through these views, and
# only a proposal to be trained becomes a trial of the study (``PinnableSampler.propose``).


def with_repeats(study: Any, repeats: Mapping[int, int]) -> Any:
    """``study`` (or a view of one) with each finished trial numbered in ``repeats`` listed
    ``repeats[number]`` times more, right after itself.

    Why: the sampler proposed those trials' configurations again (the searcher trained none of
    them twice); seeing each outcome once more per repeat moves it on from them, as a repeat told
    to the study did, with no trial in the study. Listed right after the trial, so the listing
    stays in number order (``IntersectionSearchSpace`` walks it back to the last number it saw).
    Checked against Optuna 5.0: samplers read trials through ``study._get_trials(deepcopy=...,
    states=..., use_cache=...)``; TPE ranks and weighs trials by number (``_split_trials``), so a
    copy sits beside its original.
    """
    return _Repeated(study, repeats)


class _Repeated:
    """The view ``with_repeats`` returns; every other attribute is the study's."""

    def __init__(self, study: Any, repeats: Mapping[int, int]) -> None:
        self._study, self._repeats = study, repeats

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)

    def _get_trials(self, deepcopy: bool = True, states: Any = None, use_cache: bool = False) -> list[Any]:
        shown = []
        for trial in self._study._get_trials(deepcopy=False, states=states, use_cache=use_cache):
            shown.append(trial)
            if trial.state in _FINISHED:  # one still running is shown once, as constant liar's guess
                shown.extend([trial] * self._repeats.get(trial.number, 0))
        return copy.deepcopy(shown) if deepcopy else shown


def proposing_apart(study: Any, apart: optuna.Study) -> Any:
    """``study`` (or a view of one) as a sampler sees it while it samples a trial of ``apart``,
    the throwaway study a proposal is made on: system attributes it sets on that trial go to
    ``apart``'s storage, where the trial is; everything else is ``study``'s.

    Why: samplers write on the trial they sample through ``study._storage.set_trial_system_attr(
    trial._trial_id, ...)`` with the study they were handed: written to the real study's storage,
    the throwaway trial's id would name another trial. Checked against Optuna 5.0:
    ``TPESampler.sample_relative`` (relative parameters under constant liar),
    ``BaseGASampler.get_trial_generation`` (NSGA-II); no sampler tunekit builds writes a trial's
    system attributes otherwise while it samples.
    """
    return _Apart(study, _TrialWritesApart(study._storage, apart._storage))


class _Apart:
    """The view ``proposing_apart`` returns; every other attribute is the study's."""

    def __init__(self, study: Any, storage: _TrialWritesApart) -> None:
        self._study, self._storage = study, storage

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)


class _TrialWritesApart:
    """The study's storage, with trials' system attributes written to another (``proposing_apart``)."""

    def __init__(self, storage: Any, apart: Any) -> None:
        self._storage, self._apart = storage, apart

    def __getattr__(self, name: str) -> Any:
        return getattr(self._storage, name)

    def set_trial_system_attr(self, trial_id: int, key: str, value: Any) -> None:
        self._apart.set_trial_system_attr(trial_id, key, value)
