"""Reaches into Ray Tune's saved experiment state files: what a resume reads and mends before
``Tuner.restore`` (see ``tunekit.compat``).

Ray saves its controller's and trials' state as ``experiment_state-<session>.json`` (plus
the search's and callbacks' files) in the experiment directory. A resume reads which trials
it holds as ended or damaged, and ends trials the study already ended, before Ray reads
the files again.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def _newest_saved_state(experiment_dir: Path) -> tuple[Path, dict[str, Any]] | None:
    """Ray's newest saved experiment state: its file and its JSON (Ray 2.60: ``save_to_dir``
    writes ``experiment_state-<session>.json``, with ``runner_data``, the controller's
    attributes, and ``trial_data``, pairs of JSON strings whose first holds ``trial_id`` and
    ``status``)."""
    import json

    from ray.tune.execution.experiment_state import _find_newest_experiment_checkpoint

    newest = _find_newest_experiment_checkpoint(str(experiment_dir))
    if newest is None:
        return None
    return Path(newest), json.loads(Path(newest).read_text())


def _write_saved_state(path: Path, state: dict[str, Any]) -> None:
    from tunekit.storage.store import write_json

    write_json(path, state)


def saved_callback_states(experiment_dir: Path) -> list[Any]:
    """The callbacks' states of Ray's newest save, as Ray hands them back on restore; none when
    there is no save or it does not load (Ray 2.60: ``TuneController.save_to_dir`` pickles
    ``CallbackList.get_state()``, a dict of each callback's ``get_state()`` by its place, into
    ``callback-states-<session>.pkl``; a restore reads the greatest name). Read with the standard
    pickle, which loads what cloudpickle wrote of classes by reference, without importing Ray."""
    import pickle

    saves = sorted(experiment_dir.glob("callback-states-*.pkl"))
    if not saves:
        return []
    try:
        with saves[-1].open("rb") as file:
            states = pickle.load(file)
    except Exception:  # a damaged save is resumable's to refuse (damaged_saved_state)
        return []
    return list(states.values()) if isinstance(states, Mapping) else []


def saved_trials(experiment_dir: Path) -> dict[str, dict[str, Any]]:
    """Each trial in Ray's newest saved experiment state, as saved: ``status`` (RUNNING,
    PENDING, TERMINATED, ...), ``config`` (the trial's configuration, plain JSON), ..."""
    import json

    saved = _newest_saved_state(experiment_dir)
    if saved is None:
        return {}
    trials = [json.loads(trial_json) for trial_json, _ in saved[1].get("trial_data", [])]
    return {str(trial["trial_id"]): trial for trial in trials}


# The files of a save that Tuner.restore reads, each the newest by name (Ray 2.60: the
# controller's CKPT_FILE_TMPL, SearchGenerator's and the callbacks' restore_from_dir).
SAVED_STATE_PATTERNS = ("experiment_state-*.json", "search_gen_state-*.json", "callback-states-*.pkl")


# Every file of one save, by its session (Ray 2.60: TuneController's, SearchGenerator's,
# Searcher's and the callbacks' CKPT_FILE_TMPL); each restore reads the greatest name.
SAVE_FILES = ("experiment_state-{}.json", "search_gen_state-{}.json", "searcher-state-{}.pkl", "callback-states-{}.pkl")
SESSION_FORMAT = "%Y-%m-%d_%H-%M-%S"


def name_the_last_save_newest(experiment_dir: Path) -> str | None:
    """Renames the files of Ray's save written last so that their names sort last, when a driver
    whose clock was behind named it before another session's; returns what it did, or None.

    Why: Ray names a session's saves by its driver's wall clock as it starts and restores the
    greatest name, never the newest file (Ray 2.60: ``_find_newest_experiment_checkpoint``,
    ``_load_newest_checkpoint``, ``Searcher.restore_from_dir``: ``max`` of the names). A resume
    whose clock ran 5 minutes behind (seed 940928 of the fault explorer) named its saves before
    the first driver's; the next resume restored the first driver's state, recorded the trials
    the skewed session held as stopped and ran new ones instead. Which save is the last is told
    by the storage's modification times (stamped by its clock, not a driver's), so only for a
    folder, not a bucket's mirror.
    """
    import datetime as dt

    from tunekit.storage.fences import check_fences

    states = sorted(experiment_dir.glob(SAVE_FILES[0].format("*")))
    if len(states) < 2:
        return None
    last = max(states, key=lambda path: path.stat().st_mtime_ns)
    if last == states[-1]:
        return None
    session, newest = (path.name[len("experiment_state-") : -len(".json")] for path in (last, states[-1]))
    try:
        after = dt.datetime.strptime(newest, SESSION_FORMAT) + dt.timedelta(seconds=1)
    except ValueError:
        return None  # not a name Ray gave: left as it is
    renamed = after.strftime(SESSION_FORMAT)
    check_fences()  # the experiment's writer alone renames its files
    for template in SAVE_FILES:
        if (old := experiment_dir / template.format(session)).is_file():
            os.replace(old, experiment_dir / template.format(renamed))
    return (
        f"Ray's last save ({last.name}) was named before {states[-1].name} by a clock that ran behind: "
        f"renamed to session {renamed}, so that this resume continues from it"
    )


def damaged_saved_state(experiment_dir: Path) -> tuple[str, str] | None:
    """The newest saved-state file ``Tuner.restore`` would fail to read and what is wrong with it
    (``empty``, or JSON ``cut short``), or None. Ray logs such a failure and starts a new search
    over the old one's files."""
    import json

    for pattern in SAVED_STATE_PATTERNS:
        newest = max(experiment_dir.glob(pattern), default=None)
        if newest is None:
            continue
        if newest.stat().st_size == 0:
            return newest.name, "empty"
        if newest.name.startswith("experiment_state-"):  # JSON (search_gen_state, despite its name, is a pickle)
            try:
                json.loads(newest.read_text())
            except ValueError:
                return newest.name, "cut short"
    return None


def finished_trials(saved: Mapping[str, Mapping[str, Any]]) -> set[str]:
    """The trials of Ray's saved state (``saved_trials``) held as TERMINATED: a resume runs them no more.

    Why: a search that its time budget ended saves its ``ConcurrencyLimiter`` with the
    trials it stopped still live (``live_trials``). Resumed with a larger budget, Ray does
    not run those trials again, so nothing removes them, and the limiter, full, proposes
    no new trial: the search waited forever.
    """
    return {trial_id for trial_id, trial in saved.items() if trial.get("status") == "TERMINATED"}


def end_saved_trials(experiment_dir: Path, trial_ids: set[str]) -> None:
    """Marks trials TERMINATED in Ray's newest saved experiment state, without decisions pending.

    Why: a driver killed after a trial ended but before Ray saved that leaves the trial
    running in the saved state; ``Tuner.restore`` would train it again (see
    ``tunekit.driver.late_endings``). A TERMINATED trial is skipped (Ray 2.60:
    ``_requeue_restored_trials`` with ``resume_config.finished`` SKIP, ``Trial.__setstate__``
    reading ``status``), and a STOP saved for it (``_cached_trial_decisions``) goes too.
    """
    import json

    saved = _newest_saved_state(experiment_dir)
    if saved is None or not trial_ids:
        return
    path, state = saved
    pairs = []
    for trial_json, metadata_json in state.get("trial_data", []):
        trial = json.loads(trial_json)
        if trial.get("trial_id") in trial_ids:
            trial["status"] = "TERMINATED"
            trial_json = json.dumps(trial)
        pairs.append([trial_json, metadata_json])
    state["trial_data"] = pairs
    runner = state.get("runner_data", {})
    for key in ("_cached_trial_decisions", "_queued_trial_decisions"):
        for trial_id in trial_ids:
            runner.get(key, {}).pop(trial_id, None)
    _write_saved_state(path, state)


@dataclass(frozen=True)
class SavedStopper:
    """What Ray's saved stopper held: its time budget's seconds left (None without one), and
    the stoppers beside it (tunekit's failure guard, as it was at the save)."""

    time_left_s: float | None = None
    others: tuple[Any, ...] = ()


def forget_saved_stopper(experiment_dir: Path) -> SavedStopper:
    """Removes the stopper from Ray's newest saved experiment state, and returns what it held.

    Why: ``TuneController.resume`` sets every attribute it saved over the ones this run
    built, among them ``_stopper``: a pickled copy of tunekit's failure guard, beside the
    time budget. After the guard stopped a search, its resume stopped every trial at once,
    though the user had fixed the trainable since; and the guard the recorder tells of
    failed workers was another copy than the one Ray asked. Without it in the file the
    controller keeps this run's stopper, which the resume gives the saved guard's counts
    (``FailureRules.resumed``) and the time its budget had left. Checked against Ray 2.60
    (``TuneController.save_to_dir``, ``resume``, ``__setstate__``; ``runner_data["_stopper"]``
    encoded by ``TuneFunctionEncoder``; ``CombinedStopper._stoppers``, ``TimeoutStopper._budget``).
    """
    from ray.tune.stopper import CombinedStopper, TimeoutStopper
    from ray.tune.utils.serialization import TuneFunctionDecoder

    saved = _newest_saved_state(experiment_dir)
    if saved is None or "_stopper" not in saved[1].get("runner_data", {}):
        return SavedStopper()
    path, state = saved
    # The same file Tuner.restore unpickles in full: trusted as far as Ray trusts it.
    stopper = TuneFunctionDecoder(allow_cloudpickle=True).object_hook(state["runner_data"].pop("_stopper"))
    _write_saved_state(path, state)
    stoppers = stopper._stoppers if isinstance(stopper, CombinedStopper) else [stopper]
    budgets = [float(s._budget) for s in stoppers if isinstance(s, TimeoutStopper)]
    return SavedStopper(
        budgets[0] if budgets else None, tuple(s for s in stoppers if not isinstance(s, TimeoutStopper))
    )


def forget_saved_concurrency(experiment_dir: Path) -> None:
    """Removes the pending-trial limit from Ray's newest saved experiment state.

    Why: as for the stopper (``forget_saved_stopper``), Ray's resume would set the first
    run's ``_max_pending_trials`` over this run's: a grown search's new concurrency holds.
    """
    saved = _newest_saved_state(experiment_dir)
    if saved is None:
        return
    path, state = saved
    state["runner_data"].pop("_max_pending_trials", None)
    _write_saved_state(path, state)


def saved_stop_decisions(experiment_dir: Path) -> set[str]:
    """Trials that Ray's newest saved experiment state holds a scheduler STOP decision for.

    Why: ASHA's STOP for a trial whose report came with a checkpoint waits in the
    controller until the checkpoint is stored (``_cached_trial_decisions``), and Ray saves
    it with the experiment. A driver killed in that moment leaves the trial running in
    every saved record; the resumed controller carries the decision out on the restored
    trial, which then ends without another report. The recorder counts such a trial as
    pruned, as the dead driver's ASHA (and the study) did. A trial whose last saved result
    carries a failure was stopped by the failure guard, not by the scheduler, and is left
    out. Checked against Ray 2.60 (``TuneController._cached_trial_decisions``,
    ``_queued_trial_decisions``, ``save_to_dir``: ``trial_data`` pairs of JSON strings).
    """
    import json

    from tunekit.layout import FAILURE_KEY

    saved = _newest_saved_state(experiment_dir)
    if saved is None:
        return set()
    state = saved[1]
    runner = state.get("runner_data", {})
    decisions = {**runner.get("_queued_trial_decisions", {}), **runner.get("_cached_trial_decisions", {})}
    stopped = {trial_id for trial_id, decision in decisions.items() if decision == "STOP"}
    for trial_json, metadata_json in state.get("trial_data", []):
        trial_id = json.loads(trial_json).get("trial_id")
        if trial_id in stopped and FAILURE_KEY in (json.loads(metadata_json).get("last_result") or {}):
            stopped.discard(trial_id)
    return stopped


# ------------------------------------------------------------------------- Ray: PBT
