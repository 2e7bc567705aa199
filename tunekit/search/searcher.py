"""The Ray ``Searcher`` that drives an Optuna study (imported only where Ray already is).

See ``tunekit.search.plan`` for why tunekit does not use Ray's ``OptunaSearch``.

Grid search is tunekit's own: Optuna's ``GridSampler`` takes a cartesian product, which
would count a conditional parameter where it is inactive. The searcher enumerates the
distinct configurations (``SearchSpace.grid_points``), shuffles them with
``search.seed`` and hands out slot k to the k-th Ray trial (repeats after the whole
grid has run once), pinning the study trial's values to that point: the study holds
exactly the parameters each trial ran. Slots follow the Ray trials the searcher knows
(saved with Ray's experiment state), so a resumed grid neither re-runs nor skips one.

TPE and random search never train the same configuration twice, and a proposal that is not
trained takes no trial number: see ``OptunaStudySearcher.suggest``.

Failures teach TPE. Optuna's samplers ignore FAIL trials, so a trainable that fails in one
region of the space (a learning rate that diverges, a model too big for the memory) would
have TPE propose there again and again. A trial that failed for its own reasons (a "trial"
failure, not a fatal one, a lost trial or one held for a resume) stays FAIL in the study and
carries ``TRIAL_FAILURE_ATTR``; TPE sees it as an infeasible trial, ranked below every
feasible one (``tunekit.compat.optuna_failures``). benchmarks/failures.py measures it.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState
from ray.tune.search import Searcher

from tunekit.compat.optuna_study import WAITING, ask_lagged, reopen_trial, replace_intermediate_value, set_system_attrs
from tunekit.config.objectives import tracked_metrics
from tunekit.config.space import REPEAT_SEED_KEY
from tunekit.config.spec import ExperimentSpec
from tunekit.layout import (
    EPOCH_KEY,
    FAILURE_KEY,
    FAILURE_KIND_KEY,
    RAY_TRIAL_ATTR,
    finite,
    kept_value,
    stopped_by_model,
)
from tunekit.search.attrs import (
    EPOCH_RESULT_ATTR_PREFIX,
    EXHAUSTED_ATTR,
    FINAL_RESULT_ATTR,
    GRID_POINT_ATTR,
    HELD_ATTR,
    LOST_ATTR,
    PBT_STEPS_ATTR,
    REPEAT_ATTR,
    UNSEEN_PICK_ATTR,
    epoch_results,
)
from tunekit.search.study import TRIAL_FAILURE_ATTR, PinnableSampler, open_study

# Proposals in a row that may repeat an earlier trial before the searcher picks an unseen
# configuration itself.
MAX_REPEATED_PROPOSALS = 20
_RANDOM_DRAWS = 1000  # unseen-configuration draws in a space too large to enumerate
_TRIAL_FAILURE_KIND = "trial"  # tunekit.worker.trial reports "trial" or "fatal"


class OptunaStudySearcher(Searcher):
    """Asks an Optuna study in SQLite for configs; tells it COMPLETE, PRUNED or FAIL.

    A trial that failed on its own (``FAILURE_KIND_KEY`` "trial") is FAIL with its reason in
    ``TRIAL_FAILURE_ATTR``, which TPE learns from (the module's docstring).

    A trial is COMPLETE when it trained ``max_epochs`` epochs or the model's own
    callbacks ended it (EarlyStopping); one that stopped earlier for any other reason
    (ASHA, time budget) is PRUNED with its per-epoch intermediate values.

    Attributes the driver may show:
        repeated: the study number of the trial each proposal that repeated its configuration
            repeated, in order: those proposals were neither trained nor told to the study.
        exhausted_reason: set when the search ended before ``num_samples`` trials because
            every configuration of the space had run; None otherwise.
        lost_numbers: study trials a resume closed as lost (see ``lost_note``).
    """

    # Class defaults: a searcher pickled before they existed (an experiment's tuner.pkl) has them too.
    lost_numbers: tuple[int, ...] = ()
    repeated: tuple[int, ...] = ()

    def __init__(
        self, spec: ExperimentSpec, experiment_dir: Path, storage: optuna.storages.BaseStorage | None = None
    ) -> None:
        super().__init__(metric=spec.metric.name, mode=spec.metric.mode)
        self._spec = spec
        self._experiment_dir = experiment_dir
        self._storage = storage  # None: the experiment's study file
        # Ray trial id -> Optuna trial number; saved with Ray's experiment state so a
        # resumed run maps its trials back onto the same study trials. Its order is the
        # order trials were asked for: a grid's slots follow it.
        self._numbers: dict[str, int] = {}
        self._study: optuna.Study | None = None
        self._live: dict[str, optuna.Trial] = {}
        self._reported: dict[int, int] = {}  # Optuna trial number -> last epoch reported
        self._grid: tuple[list[dict[str, Any]], list[int]] | None = None  # rebuilt from the spec
        self._ran: dict[tuple[Any, ...], int] | None = None  # config key -> number of the Ray trial that ran it
        self._holding = False  # a signal is stopping the search: see hold_endings
        self.exhausted_reason: str | None = None

    def resumed_from(self, experiment_dir: Path) -> None:
        """The experiment is resumed from ``experiment_dir``, where its study is: it may have
        been copied or moved since this searcher was pickled (``tunekit.driver.runner``)."""
        self._experiment_dir = experiment_dir
        self._study = None

    def grow(self, spec: ExperimentSpec) -> None:
        """Takes a resumed search's grown spec: only its budget differs (``tunekit.config.growth``)."""
        self._spec = spec

    @property
    def study(self) -> optuna.Study:
        if self._study is None:
            self._study = open_study(self._spec, self._experiment_dir, self._storage)
        return self._study

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        """The next configuration, or ``Searcher.FINISHED``.

        The sampler proposes apart from the study (``PinnableSampler.propose``); only a proposal
        no Ray trial ran becomes a study trial, so the study's numbers, which trials.csv, MLflow
        and TensorBoard name trials by, are 0, 1, 2, ... (warm-start history aside) as
        KerasTuner's. A TPE (or NSGA-II) proposal equal to a configuration a Ray trial already
        ran is counted in ``repeated``, which the sampler then sees as that trial's outcome
        once more (once the trial has ended), and the sampler is asked again, up to
        ``MAX_REPEATED_PROPOSALS`` times; then an unseen configuration is picked at random. A
        random search draws unseen ones only. Warm-start points (``search.warm_start``, enqueued
        in the study, and taken first) run as the spec gives them, even one that repeats another.
        When no configuration is left the search ends with ``exhausted_reason`` set."""
        if trial_id in self._numbers:  # Ray asks again for a trial it restores
            return None
        if self.exhausted_reason is not None or len(self._numbers) >= self._spec.budget.num_samples:
            return Searcher.FINISHED  # type: ignore[return-value]  # Ray's "no more trials" sentinel
        if self._spec.search.algorithm == "grid":
            trial, config = self._ask_grid(len(self._numbers))
        else:
            asked = ask_lagged(self.study, self._spec.search.reproducible, self._ask_new)
            if asked is None or asked is WAITING:  # WAITING: Ray asks again once earlier trials ended
                return None if asked is WAITING else Searcher.FINISHED  # type: ignore[return-value]
            trial, config = asked
            self._runs().setdefault(self._spec.space.key(config), trial.number)
        trial.set_user_attr(RAY_TRIAL_ATTR, trial_id)
        self._numbers[trial_id] = trial.number
        self._live[trial_id] = trial
        return config

    # ------------------------------------------------------------------------ grid

    def _grid_points(self) -> tuple[list[dict[str, Any]], list[int]]:
        """The grid in spec order, and the order trials take its points in."""
        if self._grid is None:
            points = self._spec.space.grid_points()
            # Shuffled, as Optuna's GridSampler did: a search cut short by its time budget
            # still covers the space evenly. Deterministic, so a resume sees the same order.
            order = list(range(len(points)))
            random.Random(self._spec.search.seed).shuffle(order)
            self._grid = (points, order)
        return self._grid

    def _ask_grid(self, slot: int) -> tuple[optuna.Trial, dict[str, Any]]:
        points, order = self._grid_points()
        repeat, position = divmod(slot, len(points))
        index = order[position]
        trial, config = self._ask_pinned(points[index])
        trial.set_user_attr(GRID_POINT_ATTR, index)
        if self._spec.budget.num_samples > len(points):
            # Repeats of a point differ only in their seed; every pass carries it, so the
            # trials table shows which pass a row belongs to.
            config[REPEAT_SEED_KEY] = self._spec.training.seed + repeat
            trial.set_user_attr(REPEAT_ATTR, repeat)
            trial.set_user_attr(REPEAT_SEED_KEY, config[REPEAT_SEED_KEY])
        return trial, config

    def _ask_pinned(self, point: Mapping[str, Any]) -> tuple[optuna.Trial, dict[str, Any]]:
        sampler = self._sampler()
        sampler.point = point
        try:
            trial = self.study.ask()
            config = self._spec.space.sample(trial)
        finally:
            sampler.point = None
        return trial, config

    # -------------------------------------------------------------- no repeated work

    def _ask_new(self) -> tuple[optuna.Trial, dict[str, Any]] | None:
        space, study = self._spec.space, self.study
        if study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):  # a search.warm_start point
            trial = study.ask()
            return trial, space.sample(trial)
        sampler = self._sampler()
        drawn = self._spec.search.algorithm == "random"
        sampler.repeats = Counter(self.repeated)
        for _ in range(0 if drawn else MAX_REPEATED_PROPOSALS):
            proposal, system_attrs = sampler.propose(study, space.sample)
            if (earlier := self._runs().get(space.key(proposal))) is None:
                trial, config = self._ask_pinned(proposal)
                set_system_attrs(trial, system_attrs)
                return trial, config
            self.repeated = (*self.repeated, earlier)
            sampler.repeats = Counter(self.repeated)
        if (point := self._unseen_configuration()) is None:
            return None
        trial, config = self._ask_pinned(point)
        if not drawn:
            trial.set_user_attr(UNSEEN_PICK_ATTR, True)
        return trial, config

    def _sampler(self) -> PinnableSampler:
        sampler = self.study.sampler
        if not isinstance(sampler, PinnableSampler):  # open_study builds it; a study opened elsewhere does not
            raise TypeError(f"the searcher needs the study tunekit opened, not one with a {type(sampler).__name__}")
        return sampler

    def _runs(self) -> dict[tuple[Any, ...], int]:
        """Which Ray trial ran each configuration (rebuilt from the study after a restore)."""
        if self._ran is None:
            trials = self.study.get_trials(deepcopy=False)
            self._ran = {}
            for number in self._numbers.values():
                self._ran.setdefault(self._spec.space.key(trials[number].params), number)
        return self._ran

    def _unseen_configuration(self) -> dict[str, Any] | None:
        """A configuration no Ray trial ran, drawn at random; None (and why) when none is left."""
        space, runs = self._spec.space, self._runs()
        rng = random.Random(f"{self._spec.search.seed}/{len(self._numbers)}")
        everything = space.configurations()
        if everything is not None:
            unseen = [point for point in everything if space.key(point) not in runs]
            if unseen:
                return rng.choice(unseen)
            self.exhausted_reason = (
                f"every configuration of the space has run ({len(everything)} distinct); "
                f"{len(self._numbers)} of budget.num_samples={self._spec.budget.num_samples} trials"
            )
            self.study.set_user_attr(EXHAUSTED_ATTR, self.exhausted_reason)
            return None
        for _ in range(_RANDOM_DRAWS):
            point = space.random_configuration(rng)
            if space.key(point) not in runs:
                return point
        self.exhausted_reason = (
            f"no configuration left that has not run ({_RANDOM_DRAWS} random draws repeated one); "
            f"{len(self._numbers)} of budget.num_samples={self._spec.budget.num_samples} trials"
        )
        self.study.set_user_attr(EXHAUSTED_ATTR, self.exhausted_reason)
        return None

    # ------------------------------------------------------------------- outcomes

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        trial = self._open_trial(trial_id)
        if trial is not None:
            self._report(trial, result)

    def _report(self, trial: optuna.Trial, result: dict[str, Any]) -> None:
        value = finite(result.get(self._spec.metric.name))
        if value is None or EPOCH_KEY not in result:
            return
        step = int(result[EPOCH_KEY])
        # on_trial_complete repeats the last result when the trial was not stopped early (the
        # same value: nothing to write); an epoch trained again after a restart has a new value,
        # which the study takes as the tables and MLflow do: the last attempt's wins.
        if self._reported.get(trial.number, 0) >= step:
            if not self._spec.multi_objective:
                replace_intermediate_value(trial, step, value)
            return
        if self._spec.multi_objective:  # Optuna keeps no intermediate values for them (trial.report raises)
            trial.set_user_attr(f"{EPOCH_RESULT_ATTR_PREFIX}{step}", final_result(self._spec, result)["metrics"])
        else:
            trial.report(value, step=step)
        self._reported[trial.number] = step

    def hold_endings(self) -> None:
        """A signal is stopping the search: the trials Ray stops now are a resume's to continue.

        Ray hands each of them to ``on_trial_complete`` with its last result, which would close
        its study trial as PRUNED while the resume trains it on (PBT's paused trials too). Until
        this process ends, only a trial that really finished is told; ``Recorder.settle_study``
        closes the rest when the resumed search ends.
        """
        self._holding = True

    def mark_held(self, held: bool) -> None:
        """Records on the study whether its stopped trials are held for a resume (``HELD_ATTR``):
        ``tunekit check`` then expects them RUNNING there."""
        if self.study.user_attrs.get(HELD_ATTR, False) != held:
            self.study.set_user_attr(HELD_ATTR, held)

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
        if getattr(self, "_holding", False) and not error and not self._finished(result or {}):  # older pickles lack it
            return
        trial = self._open_trial(trial_id)
        self._live.pop(trial_id, None)
        if trial is None:
            return
        result = result or {}
        # Ray skips on_trial_result for the result on which the scheduler stops a trial,
        # so that last epoch reaches the study here.
        self._report(trial, result)
        value = finite(kept_value(result, self._spec.metric.name))  # training.keep's epoch
        # EarlyStopping (or any callback setting model.stop_training) ended it: the model
        # is finished as its author meant it, not cut short by the search.
        by_model = stopped_by_model(result)
        values = objective_values(self._spec, result)
        if error or result.get(FAILURE_KEY) or value is None or values is None:
            if result.get(FAILURE_KEY) and result.get(FAILURE_KIND_KEY) == _TRIAL_FAILURE_KIND:
                trial.set_user_attr(TRIAL_FAILURE_ATTR, str(result[FAILURE_KEY]))
            self.study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
            return
        set_constraints(trial, self._spec, result)
        if self._spec.multi_objective:
            trial.set_user_attr(FINAL_RESULT_ATTR, final_result(self._spec, result))
        if by_model or int(result.get(EPOCH_KEY, 0)) >= self._spec.budget.max_epochs:
            self.study.tell(trial, values if self._spec.multi_objective else value, skip_if_finished=True)
        else:
            # Stopped before the end: Optuna keeps the last intermediate value as the
            # trial's value and its samplers treat it as the partial run it was.
            self.study.tell(trial, state=TrialState.PRUNED, skip_if_finished=True)

    def _finished(self, result: Mapping[str, Any]) -> bool:
        """The result is a trial's last by its own account: all epochs, or its model stopped it."""
        return stopped_by_model(result) or int(result.get(EPOCH_KEY, 0)) >= self._spec.budget.max_epochs

    def trial_number(self, trial_id: str) -> int | None:
        return self._numbers.get(trial_id)

    def note_exploit(self, trial_id: str, step: Mapping[str, Any]) -> None:
        """PBT moved this trial onto another's checkpoint: its study trial lists every step
        (user attr ``PBT_STEPS_ATTR``), since its params are only where it started."""
        trial = self._open_trial(trial_id)
        if trial is not None:
            trial.set_user_attr(PBT_STEPS_ATTR, [*trial.user_attrs.get(PBT_STEPS_ATTR, []), dict(step)])

    def exploit_steps(self) -> dict[str, list[dict[str, Any]]]:
        """PBT's steps of each trial as the study lists them (``note_exploit``), by Ray trial id."""
        steps: dict[str, list[dict[str, Any]]] = {}
        for trial in self.study.get_trials(deepcopy=False):
            trial_id = trial.user_attrs.get(RAY_TRIAL_ATTR)
            if trial_id is not None and trial.user_attrs.get(PBT_STEPS_ATTR):
                steps[str(trial_id)] = list(trial.user_attrs[PBT_STEPS_ATTR])
        return steps

    def keep_exploit_steps(self, steps: Mapping[str, list[dict[str, Any]]]) -> None:
        """A resume under PBT: each unfinished trial's steps in the study become ``steps``,
        the steps the resumed search goes on from (``Recorder.set_state``)."""
        for trial in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            trial_id = trial.user_attrs.get(RAY_TRIAL_ATTR)
            kept = trial.user_attrs.get(PBT_STEPS_ATTR, [])
            if trial_id is not None and kept != steps.get(str(trial_id), []):
                reopen_trial(self.study, trial).set_user_attr(PBT_STEPS_ATTR, list(steps.get(str(trial_id), [])))

    def _open_trial(self, trial_id: str) -> optuna.Trial | None:
        if trial_id in self._live:
            return self._live[trial_id]
        number = self._numbers.get(trial_id)
        if number is None:
            return None
        frozen = self.study.trials[number]
        if frozen.state.is_finished():
            return None
        trial = reopen_trial(self.study, frozen)
        if RAY_TRIAL_ATTR not in frozen.user_attrs:
            # The journal's line naming it was lost (chaos seed 826701: a cut after the asking
            # line, taken for a torn tail); Ray's saved state still maps its trial to this number.
            trial.set_user_attr(RAY_TRIAL_ATTR, trial_id)
        # Reopened after a resume: epochs the study already holds are not reported again
        # (Optuna would warn for each), even when Ray's pickled state predates them.
        held = [*frozen.intermediate_values, *epoch_results(frozen.user_attrs)]
        if held:
            self._reported[number] = max(self._reported.get(number, 0), max(held))
        self._live[trial_id] = trial
        return trial

    # Ray pickles the searcher into tuner.pkl and saves it with every experiment
    # checkpoint; the study itself lives in SQLite and is reopened on demand.
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_study"] = None
        state["_live"] = {}
        state["_grid"] = None  # rebuilt from the spec: up to 100,000 configurations
        state["_ran"] = None  # rebuilt from the study
        state["_holding"] = False  # a resume tells its trials' endings again
        state.pop("_unsaved_numbers", None)
        return state

    def save(self, checkpoint_path: str) -> None:
        state = {
            "numbers": self._numbers,
            "repeated": list(self.repeated),
            "exhausted": self.exhausted_reason,
        }
        Path(checkpoint_path).write_text(json.dumps(state))

    def count_unsaved_trials(self, numbers: Mapping[str, int]) -> None:
        """Trials asked after Ray's last save that ended before the driver died (``{ray id:
        study number}``, see ``tunekit.driver.late_endings``): Ray will never list them, but
        they count toward the budget, as in the study. ``restore`` adds them."""
        self._unsaved_numbers = dict(numbers)

    def restore(self, checkpoint_path: str) -> None:
        state = json.loads(Path(checkpoint_path).read_text())
        self._numbers = {**state["numbers"], **self.__dict__.pop("_unsaved_numbers", {})}
        self.repeated = tuple(state.get("repeated", ()))
        self.exhausted_reason = state.get("exhausted")
        self._live = {}
        self._ran = None
        self.close_orphans()

    def settle_ended(self, ended: Mapping[str, dict[str, Any]]) -> None:
        """Closes the study trials of trials the search ended without telling this searcher.

        When a stopper ends the whole search (the failure guard, a time budget), Ray stops
        the trials still running through a path that never calls ``on_trial_complete``, so
        their study trials would stay RUNNING while trials.csv has them stopped. ``ended``
        maps each ended trial's id to a result as a trial's last report holds it (its epoch
        and metric, or ``FAILURE_KEY``); each still open in the study is told as Ray would.
        """
        open_numbers = {t.number for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}
        for trial_id, result in ended.items():
            if self._numbers.get(trial_id) in open_numbers:
                self.on_trial_complete(trial_id, dict(result), error=bool(result.get(FAILURE_KEY)))

    def close_orphans(self) -> None:
        """Fails study trials asked for after Ray's last experiment checkpoint.

        The driver died between asking Optuna and saving Ray's state: Ray will never run
        those trials, so they must not stay RUNNING (samplers would count them forever).
        A grid point such a trial held goes to the next trial Ray asks for (see also
        ``tunekit.driver.tune_run``: a search started over).
        """
        known = set(self._numbers.values())
        lost = [t for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)) if t.number not in known]
        for frozen in lost:
            # Marked, so tunekit check knows why trials.csv has no row for it.
            reopen_trial(self.study, frozen).set_user_attr(LOST_ATTR, True)
            self.study.tell(frozen.number, state=TrialState.FAIL, skip_if_finished=True)
        self.lost_numbers = tuple(frozen.number for frozen in lost)

    def lost_note(self) -> str | None:
        """What the console says of the trials ``restore`` closed as lost; None when none were."""
        if not self.lost_numbers:
            return None
        *first, last = map(str, self.lost_numbers)
        numbers = f"{', '.join(first)} and {last}" if first else last
        return (
            f"study trial{'s' if first else ''} {numbers}: asked for just before the last driver died and "
            f"never run; closed as failed (user attr {LOST_ATTR}), so trial numbers skip {numbers}"
        )


def objective_values(spec: ExperimentSpec, result: Mapping[str, Any]) -> list[float] | None:
    """Each objective's value in a trial's result, in the spec's order; None when one is missing."""
    values = [finite(result.get(objective.name)) for objective in spec.objectives]
    return None if any(value is None for value in values) else [float(v) for v in values if v is not None]


def final_result(spec: ExperimentSpec, result: Mapping[str, Any]) -> dict[str, Any]:
    """A trial's last epoch and its finite tracked metrics there (``FINAL_RESULT_ATTR``)."""
    names = tracked_metrics(spec.objectives, spec.constraints, spec.select)
    metrics = {name: value for name in names if (value := finite(result.get(name))) is not None}
    return {"epoch": int(result.get(EPOCH_KEY, 0)), "metrics": metrics}


def set_constraints(trial: optuna.Trial, spec: ExperimentSpec, result: Mapping[str, Any]) -> None:
    """Each constraint's violation on the trial (<= 0 holds), keyed by its text; samplers and
    ``study.best_trials`` read them. A metric the result lacks breaks its constraint."""
    for constraint in spec.constraints:
        trial.set_constraint(constraint.text, constraint.violation(finite(result.get(constraint.name))))
