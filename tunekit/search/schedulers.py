"""Schedulers tunekit builds for Ray Tune: ASHA that remembers whom it stopped (MO-ASHA with
several objectives, ``tunekit.search.moasha``), Hyperband (ASHA's brackets), FIFO, and PBT."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ray.tune.experiment import Trial
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, TrialScheduler

from tunekit.compat.ray_asha import (
    asha_max_t,
    asha_metric_sign,
    asha_rungs,
    assign_bracket,
    bracket_rungs,
    sorted_rungs,
)
from tunekit.compat.ray_tune import QuickFifoChoice
from tunekit.config.rungs import bracket_of
from tunekit.config.spec import ExperimentSpec
from tunekit.layout import EPOCH_KEY

# Checkpoints each trial keeps: the last two are enough to resume (ASHA, FIFO).
CHECKPOINTS_KEPT = 2


def build_scheduler(
    spec: ExperimentSpec, experiment_dir: Path, trial_number: Callable[[str], int | None] | None = None
) -> TrialScheduler:
    """The scheduler ``scheduler.type`` names, configured from the spec (``trial_number``: the
    searcher's, which Hyperband puts trials in brackets by)."""
    if spec.scheduler.type == "asha" and spec.multi_objective:
        from tunekit.search.moasha import RecordingMOASHA

        return RecordingMOASHA(spec)
    settings = {
        "time_attr": EPOCH_KEY,
        "metric": spec.metric.name,
        "mode": spec.metric.mode,
        "max_t": spec.budget.max_epochs,
        "grace_period": spec.scheduler.grace_period,
        "reduction_factor": spec.scheduler.reduction_factor,
    }
    if spec.scheduler.type == "asha":
        return RecordingASHA(**settings)
    if spec.scheduler.type == "hyperband":
        return RecordingHyperband(trial_number or (lambda trial_id: None), brackets=spec.scheduler.brackets, **settings)
    if spec.scheduler.type == "pbt":
        from tunekit.search.pbt import RecordingPBT

        return RecordingPBT(spec, experiment_dir)
    return FIFO()


def checkpoints_to_keep(spec: ExperimentSpec) -> int:
    """How many epoch checkpoints each trial keeps.

    PBT copies a top trial's checkpoint from its last perturbation, up to
    ``perturbation_interval`` epochs before the top trial's newest one, so that many must
    survive its rotation (tunekit then copies it into the exploiting trial's folder).
    """
    if spec.scheduler.type == "pbt":
        return spec.scheduler.perturbation_interval + CHECKPOINTS_KEPT
    return CHECKPOINTS_KEPT


class FIFO(QuickFifoChoice, FIFOScheduler):
    """Ray's FIFO scheduler, choosing the next trial without a walk of every trial."""


class RecordingASHA(QuickFifoChoice, ASHAScheduler):
    """ASHA that remembers which trials it stopped, so 'pruned' means pruned by ASHA.

    Ray does not save scheduler state with the experiment (a restored ASHA starts with
    empty rungs and would promote everything), so ``replay`` rebuilds the rungs from
    the recorded epochs when a search is resumed.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        sorted_rungs(self)
        self.stopped: set[str] = set()

    def replay(self, values: dict[str, dict[int, float]], stopped: set[str]) -> None:
        """Records each trial's metric at every rung it reached, as ASHA saw it live."""
        self.stopped = set(stopped)
        sign = asha_metric_sign(self)
        for milestone, recorded in asha_rungs(self):
            for trial_id, by_epoch in values.items():
                if int(milestone) in by_epoch:
                    recorded[trial_id] = sign * by_epoch[int(milestone)]

    def on_trial_result(self, tune_controller: Any, trial: Trial, result: dict[str, Any]) -> str:
        decision = super().on_trial_result(tune_controller, trial, result)
        if decision == TrialScheduler.STOP and result.get(EPOCH_KEY, 0) < asha_max_t(self):
            self.stopped.add(trial.trial_id)
        return decision


class RecordingHyperband(RecordingASHA):
    """Ray's asynchronous Hyperband: ASHA with several brackets, bracket b first comparing trials at
    ASHA's rung b (``tunekit.config.rungs``), so some trials are judged later, or never.

    A trial's bracket is its number modulo the brackets (``bracket_of``), not Ray's random draw,
    so the same seed fills the same brackets and a resume refills each trial's own (``replay``).
    A trial whose number the searcher does not know (none so far) goes by the order it came in.
    """

    def __init__(self, trial_number: Callable[[str], int | None], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._trial_number = trial_number
        self._brackets_count = int(kwargs["brackets"])
        self._arrivals = 0

    def on_trial_add(self, tune_controller: Any, trial: Trial) -> None:
        number = self._trial_number(trial.trial_id)
        self._arrivals += 1
        index = bracket_of(self._arrivals - 1 if number is None else number, self._brackets_count)
        assign_bracket(self, trial.trial_id, index)

    def replay(self, values: dict[str, dict[int, float]], stopped: set[str]) -> None:
        """Records each trial's metric at every rung of its own bracket it reached."""
        self.stopped = set(stopped)
        sign = asha_metric_sign(self)
        brackets = bracket_rungs(self)
        for trial_id, by_epoch in values.items():
            number = self._trial_number(trial_id)
            if number is None:
                continue
            for milestone, recorded in brackets[bracket_of(number, self._brackets_count)]:
                if int(milestone) in by_epoch:
                    recorded[trial_id] = sign * by_epoch[int(milestone)]
