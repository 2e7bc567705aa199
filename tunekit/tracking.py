"""MLflow tracking: one parent run per experiment, one child run per trial.

Placeholder until the tracking work lands: records nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tunekit.spec import ExperimentSpec


class MlflowTracker:
    def __init__(self, spec: ExperimentSpec, experiment_dir: Path) -> None:
        self.spec = spec
        self.experiment_dir = experiment_dir

    def experiment_started(self, recorder: Any) -> None: ...
    def trial_started(self, record: Any) -> None: ...
    def epoch_reported(self, record: Any, row: Any) -> None: ...
    def trial_ended(self, record: Any) -> None: ...
    def tick(self, recorder: Any) -> None: ...
    def experiment_ended(self, recorder: Any) -> None: ...
