"""Schedulers tunekit builds for Ray Tune: ASHA that remembers whom it stopped (MO-ASHA with
several objectives, ``tunekit.search.moasha``), FIFO, and PBT."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ray.tune.experiment import Trial
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, TrialScheduler

from tunekit.compat.ray_asha import asha_max_t, asha_metric_sign, asha_rungs, sorted_rungs
from tunekit.compat.ray_tune import QuickFifoChoice
from tunekit.config.spec import ExperimentSpec
from tunekit.layout import EPOCH_KEY

# Checkpoints each trial keeps: the last two are enough to resume (ASHA, FIFO).
CHECKPOINTS_KEPT = 2


def build_scheduler(spec: ExperimentSpec, experiment_dir: Path) -> TrialScheduler:
    """The scheduler ``scheduler.type`` names, configured from the spec."""
    if spec.scheduler.type == "asha" and spec.multi_objective:
        from tunekit.search.moasha import RecordingMOASHA

        return RecordingMOASHA(spec)
    if spec.scheduler.type == "asha":
        return RecordingASHA(
            time_attr=EPOCH_KEY,
            metric=spec.metric.name,
            mode=spec.metric.mode,
            max_t=spec.budget.max_epochs,
            grace_period=spec.scheduler.grace_period,
            reduction_factor=spec.scheduler.reduction_factor,
        )
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
