"""Schedulers tunekit builds for Ray Tune: ASHA that remembers whom it stopped."""

from __future__ import annotations

from typing import Any

from ray.tune.experiment import Trial
from ray.tune.schedulers import ASHAScheduler, TrialScheduler

from tunekit.compat import asha_max_t, asha_metric_sign, asha_rungs
from tunekit.layout import EPOCH_KEY


class RecordingASHA(ASHAScheduler):
    """ASHA that remembers which trials it stopped, so 'pruned' means pruned by ASHA.

    Ray does not save scheduler state with the experiment (a restored ASHA starts with
    empty rungs and would promote everything), so ``replay`` rebuilds the rungs from
    the recorded epochs when a search is resumed.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
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
