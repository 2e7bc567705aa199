"""MO-ASHA: asynchronous successive halving that promotes by several objectives.

Ray Tune's ASHA ranks a rung by one metric. With several objectives tunekit ranks it as
Syne Tune's MOASHA does (Schmucker et al., 2021): when a trial reaches a rung, it joins
the trials recorded there, they are ordered by ``tunekit.search.pareto.promotion_order``
(feasible first, then by non-dominated front, then the less crowded first), and the
trial goes on when its position is within the top ``1 / reduction_factor``; the first
trial at a rung always goes on. The rungs are ASHA's own (one bracket, as Ray's default):
``grace_period × reduction_factor^k`` below ``max_epochs``.

Like ``RecordingASHA`` it remembers whom it stopped, and ``replay`` refills its rungs
from the recorded epochs after a resume (Ray saves no scheduler state).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ray.tune.experiment import Trial
from ray.tune.schedulers import FIFOScheduler, TrialScheduler

from tunekit.compat.ray_tune import QuickFifoChoice
from tunekit.config.spec import ExperimentSpec
from tunekit.layout import EPOCH_KEY, finite
from tunekit.search.pareto import is_feasible, promotion_order, to_minimize
from tunekit.search.plan import spec_milestones

# What a rung holds per trial: its smaller-is-better vector and whether it was feasible.
Entry = tuple[tuple[float, ...], bool]


class RecordingMOASHA(QuickFifoChoice, FIFOScheduler):
    """MO-ASHA over the spec's objectives and constraints; ``stopped`` are the trials it pruned."""

    def __init__(self, spec: ExperimentSpec) -> None:
        super().__init__()
        self._objectives = spec.objectives
        self._constraints = spec.constraints
        self._max_t = spec.budget.max_epochs
        self._reduction_factor = spec.scheduler.reduction_factor
        self.rungs: dict[int, dict[str, Entry]] = {epoch: {} for epoch in spec_milestones(spec)}
        self.stopped: set[str] = set()

    def on_trial_result(self, tune_controller: Any, trial: Trial, result: dict[str, Any]) -> str:
        if self.decide(trial.trial_id, result) == TrialScheduler.STOP:
            self.stopped.add(trial.trial_id)
            return TrialScheduler.STOP
        return TrialScheduler.CONTINUE

    def decide(self, trial_id: str, result: Mapping[str, Any]) -> str:
        """CONTINUE or STOP for one epoch's result; records the trial at a rung it reached."""
        epoch = int(result.get(EPOCH_KEY, 0))
        if epoch >= self._max_t:
            return TrialScheduler.CONTINUE  # the trial ends by itself: its last epoch is not a pruning
        entry = self._entry(result)
        for milestone in sorted(self.rungs, reverse=True):
            recorded = self.rungs[milestone]
            if epoch < milestone or trial_id in recorded or entry is None:
                continue
            keep = self._within_top(recorded, entry)
            recorded[trial_id] = entry
            return TrialScheduler.CONTINUE if keep else TrialScheduler.STOP
        return TrialScheduler.CONTINUE

    def _within_top(self, recorded: Mapping[str, Entry], entry: Entry) -> bool:
        if not recorded:
            return True
        entries = [*recorded.values(), entry]
        order = promotion_order([vector for vector, _ in entries], [feasible for _, feasible in entries])
        position = order.index(len(entries) - 1)
        # Syne Tune's rule: stop when the new trial's share of the rung ahead of it exceeds 1/rf.
        return position / len(entries) <= 1 / self._reduction_factor

    def _entry(self, result: Mapping[str, Any]) -> Entry | None:
        values = {name: finite(value) for name, value in result.items()}
        vector = to_minimize(values, self._objectives)
        if vector is None:
            return None
        return vector, is_feasible(values, self._constraints)

    def replay(self, values: Mapping[str, Mapping[int, Mapping[str, float]]], stopped: set[str]) -> None:
        """Records each trial at every rung it reached, as MO-ASHA saw it live ({trial: {epoch: metrics}})."""
        self.stopped = set(stopped)
        for trial_id, by_epoch in values.items():
            for milestone, recorded in self.rungs.items():
                entry = self._entry(by_epoch.get(milestone, {}))
                if entry is not None:
                    recorded[trial_id] = entry
