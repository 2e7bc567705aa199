"""The Ray ``Searcher`` that drives an Optuna study (imported only where Ray already is).

See ``tunekit.search`` for why tunekit does not use Ray's ``OptunaSearch``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import optuna
from ray.tune.search import Searcher

from tunekit.layout import EPOCH_KEY, FAILURE_KEY, STUDY_FILE
from tunekit.search import study_url
from tunekit.spec import ExperimentSpec


class _GridSampler(optuna.samplers.GridSampler):
    """Optuna's grid sampler without its end-of-grid ``study.stop()``.

    That call raises outside ``study.optimize`` (tunekit asks and tells itself and stops
    at num_samples), which made Ray count the last trial of every grid as failed.
    """

    def after_trial(self, *args: Any, **kwargs: Any) -> None:
        pass


def build_sampler(spec: ExperimentSpec) -> optuna.samplers.BaseSampler:
    search = spec.search
    if search.algorithm == "grid":
        return _GridSampler(spec.space.grid(), seed=search.seed)
    if search.algorithm == "random":
        return optuna.samplers.RandomSampler(seed=search.seed)
    # constant_liar: running trials count as bad guesses, so parallel trials spread out.
    return optuna.samplers.TPESampler(
        seed=search.seed, n_startup_trials=search.n_startup_trials, constant_liar=True, multivariate=True
    )


def open_study(spec: ExperimentSpec, experiment_dir: Path) -> optuna.Study:
    """Creates the study (enqueuing warm starts) or, when it exists, loads it unchanged."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = study_url(experiment_dir)
    existed = (experiment_dir / STUDY_FILE).exists() and spec.name in {
        s.study_name for s in optuna.get_all_study_summaries(url)
    }
    study = optuna.create_study(
        storage=url,
        study_name=spec.name,
        direction="maximize" if spec.metric.mode == "max" else "minimize",
        sampler=build_sampler(spec),
        load_if_exists=True,
    )
    if not existed:
        for point in spec.search.warm_start:
            study.enqueue_trial(spec.space.check_point(point, "search.warm_start"))
    return study


class OptunaStudySearcher(Searcher):
    """Asks an Optuna study in SQLite for configs; tells it COMPLETE, PRUNED or FAIL.

    A trial is COMPLETE only when it trained ``max_epochs`` epochs; one that stopped
    earlier (ASHA, time budget) is PRUNED with its per-epoch intermediate values.
    """

    def __init__(self, spec: ExperimentSpec, experiment_dir: Path) -> None:
        super().__init__(metric=spec.metric.name, mode=spec.metric.mode)
        self._spec = spec
        self._experiment_dir = experiment_dir
        # Ray trial id -> Optuna trial number; saved with Ray's experiment state so a
        # resumed run maps its trials back onto the same study trials.
        self._numbers: dict[str, int] = {}
        self._study: optuna.Study | None = None
        self._live: dict[str, optuna.Trial] = {}
        self._reported: dict[int, int] = {}  # Optuna trial number -> last epoch reported

    @property
    def study(self) -> optuna.Study:
        if self._study is None:
            self._study = open_study(self._spec, self._experiment_dir)
        return self._study

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        if trial_id in self._numbers:  # Ray asks again for a trial it restores
            return None
        if len(self._numbers) >= self._spec.budget.num_samples:
            return Searcher.FINISHED  # type: ignore[return-value]  # Ray's "no more trials" sentinel
        trial = self.study.ask()
        trial.set_user_attr("ray_trial_id", trial_id)
        self._numbers[trial_id] = trial.number
        self._live[trial_id] = trial
        return self._spec.space.sample(trial)

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        trial = self._open_trial(trial_id)
        if trial is not None:
            self._report(trial, result)

    def _report(self, trial: optuna.Trial, result: dict[str, Any]) -> None:
        value = _finite(result.get(self._spec.metric.name))
        if value is None or EPOCH_KEY not in result:
            return
        step = int(result[EPOCH_KEY])
        # on_trial_complete repeats the last result when the trial was not stopped early.
        if self._reported.get(trial.number, 0) < step:
            trial.report(value, step=step)
            self._reported[trial.number] = step

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
        trial = self._open_trial(trial_id)
        self._live.pop(trial_id, None)
        if trial is None:
            return
        result = result or {}
        # Ray skips on_trial_result for the result on which the scheduler stops a trial,
        # so that last epoch reaches the study here.
        self._report(trial, result)
        value = _finite(result.get(self._spec.metric.name))
        if error or result.get(FAILURE_KEY) or value is None:
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
        elif int(result.get(EPOCH_KEY, 0)) >= self._spec.budget.max_epochs:
            self.study.tell(trial, value, skip_if_finished=True)
        else:
            # Stopped before the end: Optuna keeps the last intermediate value as the
            # trial's value and its samplers treat it as the partial run it was.
            self.study.tell(trial, state=optuna.trial.TrialState.PRUNED, skip_if_finished=True)

    def trial_number(self, trial_id: str) -> int | None:
        return self._numbers.get(trial_id)

    def _open_trial(self, trial_id: str) -> optuna.Trial | None:
        if trial_id in self._live:
            return self._live[trial_id]
        number = self._numbers.get(trial_id)
        if number is None:
            return None
        frozen = self.study.trials[number]
        if frozen.state.is_finished():
            return None
        trial = optuna.Trial(self.study, frozen._trial_id)
        self._live[trial_id] = trial
        return trial

    # Ray pickles the searcher into tuner.pkl and saves it with every experiment
    # checkpoint; the study itself lives in SQLite and is reopened on demand.
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_study"] = None
        state["_live"] = {}
        return state

    def save(self, checkpoint_path: str) -> None:
        Path(checkpoint_path).write_text(json.dumps({"numbers": self._numbers}))

    def restore(self, checkpoint_path: str) -> None:
        self._numbers = json.loads(Path(checkpoint_path).read_text())["numbers"]
        self._live = {}
        self._close_orphans()

    def _close_orphans(self) -> None:
        """Fails study trials asked for after Ray's last experiment checkpoint.

        The driver died between asking Optuna and saving Ray's state: Ray will never run
        those trials, so they must not stay RUNNING (samplers would count them forever).
        """
        known = set(self._numbers.values())
        for frozen in self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            if frozen.number not in known:
                self.study.tell(frozen.number, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)


def _finite(value: object) -> float | None:
    """The metric as a float, or None when missing or not finite."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None
