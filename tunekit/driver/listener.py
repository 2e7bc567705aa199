"""What a recorder listener hears of a search (``tunekit.driver.recorder.Recorder``).

The console, the ledger file, the MLflow tracker, the failure guard and the node watch each
take the record as it changes; none of them sees Ray's objects.
"""

from __future__ import annotations

from typing import Any, Protocol

from tunekit.driver.records import EpochRow, TrialRecord

# The recorder (``tunekit.driver.recorder.Recorder``), which imports this module: a listener
# reads its tables and clock, and calls its ``warn``.
Recorder = Any


class Listener(Protocol):
    """Receives the record as it changes. Listeners never see Ray objects.

    A class that names it as a base hears only what it overrides: the other hooks do nothing.
    """

    def experiment_started(self, recorder: Recorder) -> None:
        return None

    def trial_started(self, record: TrialRecord) -> None:
        return None

    def epoch_reported(self, record: TrialRecord, row: EpochRow) -> None:
        return None

    def trial_ended(self, record: TrialRecord) -> None:
        return None

    def tick(self, recorder: Recorder) -> None:
        return None

    def experiment_ended(self, recorder: Recorder) -> None:
        return None

    def warning(self, message: str) -> None:
        return None
