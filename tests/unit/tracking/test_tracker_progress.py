"""The best-so-far event the tracker queues after trials end: from the recorder's tally, not a walk of every record.

It is queued after every ended trial, so a walk of the records made the driver's cost per
trial grow with the search (1.4 ms per trial at 10,000 trials in the scale benchmark).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tunekit.layout import EPOCH_KEY, INFO_KEY, TrialStatus
from tunekit.tracking.tracker import MlflowTracker

from ..driver.test_recorder_state import recorder, run_trial


class WalkedRecords(dict[str, Any]):
    """The recorder's records, counting the walks over all of them."""

    walks = 0

    def values(self) -> Any:
        WalkedRecords.walks += 1
        return super().values()

    def __iter__(self) -> Any:
        WalkedRecords.walks += 1
        return super().__iter__()


def test_epochs_spent_and_counts_come_from_the_tally_with_running_trials_counted(tmp_path: Path) -> None:
    tmp_path.mkdir(exist_ok=True)
    rec = recorder(tmp_path)
    rec.clock.begin()
    for number, values in enumerate([[0.2] * 9, [0.5, 0.6], [0.3] * 4]):
        run_trial(rec, number, values)
    running: Any = SimpleNamespace(trial_id="t3", config={"lr": 0.3})
    rec.on_trial_start(0, [], running)
    for epoch in (1, 2):
        rec.on_trial_result(0, [], running, {EPOCH_KEY: epoch, "acc": 0.4, INFO_KEY: {"metrics": ["acc"]}})
    every_epoch = sum(record.epochs for record in rec.trials.values())
    rec.trials = WalkedRecords(rec.trials)

    event = MlflowTracker(rec.spec, tmp_path)._progress(rec, final=False)

    assert (event.epochs_spent, every_epoch) == (17, 17)
    assert (event.ended, event.counts["running"], event.best_trial) == (3, 1, "t0")  # the one trial that completed
    assert WalkedRecords.walks == 0


def test_the_search_s_end_is_interrupted_when_a_signal_left_stopped_trials_for_a_resume(tmp_path: Path) -> None:
    # The parent run read FINISHED after a Ctrl-C: the session's end settles the running trials
    # as stopped, so "a trial still running" was never true at the final event.
    tmp_path.mkdir(exist_ok=True)
    rec = recorder(tmp_path)
    rec.clock.begin()
    run_trial(rec, 0, [0.2] * 9)
    tracker = MlflowTracker(rec.spec, tmp_path)
    assert tracker._progress(rec, final=True).interrupted is False
    stopped = rec.trials["t0"]
    stopped.status, stopped.reason = TrialStatus.STOPPED, "the search was stopped after 9 epochs"
    assert tracker._progress(rec, final=True).interrupted is True
    assert tracker._progress(rec, final=False).interrupted is False  # no walk of the records mid-search
    for for_good in ("the search's time budget of 9 s ran out after 9 epochs", "the failure guard stopped the search"):
        stopped.reason = for_good
        assert tracker._progress(rec, final=True).interrupted is False
