"""What a new user's first searches showed (a trial of tunekit from the README alone), each fixed and pinned.

No Ray, no TensorFlow: each rule is driven directly.
"""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any

import optuna
import pandas as pd
import pytest

from tunekit.config.spec import load_spec
from tunekit.driver.progress import ConsoleProgress
from tunekit.driver.records import TrialRecord, settle_ended
from tunekit.errors import FatalTrialError, TrialFailure
from tunekit.layout import ENDED_STATUSES, TrialStatus
from tunekit.results.load import ExperimentResults
from tunekit.results.summary import summarize
from tunekit.search.forecast import trial_epochs
from tunekit.search.study import open_study
from tunekit.worker.checks import check_epoch_metrics

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SPEC = REPO / "search_spaces" / "digits_mlp.yaml"


def test_a_reopened_study_does_not_propose_its_first_configurations_again(tmp_path: Path) -> None:
    # A resume reopens the study; a sampler seeded as at the start would propose the
    # first configurations again, and each repeat would be spent as a duplicate.
    spec = load_spec(DEFAULT_SPEC, ["search.algorithm=random"])
    storage = optuna.storages.InMemoryStorage()
    first = open_study(spec, tmp_path, storage)
    proposed = []
    for _ in range(3):
        trial = first.ask()
        proposed.append(spec.space.sample(trial))
        first.tell(trial, 0.5)

    reopened = open_study(spec, tmp_path, storage)
    again = spec.space.sample(reopened.ask())

    assert again not in proposed
    assert len(reopened.trials) == 4


def test_report_json_lists_trials_best_first(tmp_path: Path) -> None:
    spec = load_spec(DEFAULT_SPEC)
    trials = pd.DataFrame(
        {
            "trial_id": ["a", "b", "c", "d"],
            "number": [0, 1, 2, 3],
            "status": ["pruned", "completed", "failed", "completed"],
            "final_metric": [0.99, 0.90, None, 0.95],
        }
    )
    results = ExperimentResults(tmp_path, spec, trials, pd.DataFrame(), None)

    ranked = [t["trial_id"] for t in json.loads(summarize(results).to_json(results))["trials"]]

    assert ranked == ["d", "b", "a", "c"]


def test_a_warning_on_a_terminal_gets_its_own_line_above_the_status_line() -> None:
    spec = load_spec(DEFAULT_SPEC)
    stream = io.StringIO()
    console = ConsoleProgress(spec, stream, live=True)
    recorder: Any = _EmptyRecorder()  # what the console reads of the recorder, without Ray
    console.tick(recorder)  # draws the status line, no newline

    console.warning("trial 1: saved weights only")

    text = stream.getvalue()
    drawn, after = text.split("\r\x1b[2Ktunekit: warning: trial 1: saved weights only\n")
    assert drawn.startswith("\r\x1b[2K[00:00] done 0/24")
    assert after.startswith("\r\x1b[2K[00:00] done 0/24")  # the status line comes back below it


class _EmptyRecorder:
    def __init__(self) -> None:
        self.trials: dict[str, TrialRecord] = {}
        self.epochs: list[object] = []
        self.exploits: list[object] = []  # PBT's steps (none here)

    def counts(self) -> dict[str, int]:
        return dict.fromkeys(TrialStatus, 0)

    def best(self) -> None:
        return None


@pytest.mark.parametrize(
    ("epochs", "stopped_by_model", "restored", "reason"),
    [
        (20, None, False, "trained all 20 epochs"),
        (20, None, True, "trained all 20 epochs; the model restored its best weights"),
        (7, 7, True, "stopped by the model at epoch 7; the model restored its best weights"),
        (7, 7, False, "stopped by the model at epoch 7"),
    ],
)
def test_a_completed_trial_says_when_its_model_restored_earlier_weights(
    epochs: int, stopped_by_model: int | None, restored: bool, reason: str
) -> None:
    record = TrialRecord("t", 0, {}, epochs=epochs, stopped_by_model=stopped_by_model, restored_weights=restored)
    settle_ended(record, load_spec(DEFAULT_SPEC), pruned=False, elapsed=1.0)
    assert (record.status, record.reason) == (TrialStatus.COMPLETED, reason)


def test_one_epoch_is_singular() -> None:
    record = TrialRecord("t", 0, {}, epochs=1)
    settle_ended(record, load_spec(DEFAULT_SPEC), pruned=False, elapsed=1.0)
    assert record.reason == "the search was stopped after 1 epoch"


def test_a_misspelt_metric_suggests_the_reported_name() -> None:
    reported = {"loss": 0.5, "accuracy": 0.8, "val_loss": 0.6, "val_accuracy": 0.7}
    with pytest.raises(FatalTrialError) as raised:
        check_epoch_metrics(reported, "val_acuracy", 1)
    assert str(raised.value) == (
        "metric 'val_acuracy' was never reported (did you mean 'val_accuracy'?); "
        "the trainable reported: accuracy, loss, val_accuracy, val_loss"
    )
    with pytest.raises(TrialFailure, match="non-finite loss at epoch 3"):
        check_epoch_metrics({**reported, "loss": float("nan")}, "val_accuracy", 3)


class _Recorder:
    def __init__(self, records: list[TrialRecord], epochs: int) -> None:
        self.experiment_dir = Path("/nonexistent")
        self.trials = {r.trial_id: r for r in records}
        self.epochs = [object()] * epochs
        self.exploits: list[object] = []  # PBT's steps (none here)

    # What the recorder keeps as records change, here read off the records.
    def running(self) -> list[TrialRecord]:
        return [r for r in self.trials.values() if r.status == TrialStatus.RUNNING]

    def ended_epochs(self) -> tuple[int, int]:
        ended = [r for r in self.trials.values() if r.status in ENDED_STATUSES]
        return len(ended), sum(r.epochs for r in ended)

    def counts(self) -> dict[TrialStatus, int]:
        return {status: sum(r.status == status for r in self.trials.values()) for status in TrialStatus}

    def best(self) -> TrialRecord | None:
        return None


def _time_left(ended: list[TrialRecord], running: list[TrialRecord]) -> float | None:
    """The console's time left for the default search (24 trials) at one second an epoch."""
    console = ConsoleProgress(load_spec(DEFAULT_SPEC), io.StringIO())
    recorder: Any = _Recorder([], epochs=0)
    console.experiment_started(recorder)  # a new search: nothing resumed
    recorder.trials = {r.trial_id: r for r in [*ended, *running]}
    trained = sum(r.epochs for r in [*ended, *running])
    recorder.epochs = [object()] * trained
    console._first_epoch_at = time.monotonic() - (trained - 1)  # one second an epoch since the first
    return console.time_left()


def test_time_left_does_not_collapse_when_the_first_trial_to_end_was_cut_at_the_first_rung() -> None:
    # The README's run printed "about 4 s left" of a 70-s search: its first trial to end was
    # cut by ASHA after 2 epochs, and the estimate took every trial to come to train 2.
    simulated = trial_epochs(load_spec(DEFAULT_SPEC))
    left = _time_left(
        [TrialRecord("a", 0, {}, status=TrialStatus.PRUNED, epochs=2)],
        [TrialRecord("b", 1, {}, status=TrialStatus.RUNNING, epochs=2)],
    )
    assert left is not None and left > 3 * 22 * 2  # the old estimate: 22 trials to come of 2 epochs
    # ... near the simulated search's own count of the epochs still to come
    assert left == pytest.approx(23 * simulated.mean, rel=0.25)


def test_time_left_follows_what_ended_trials_really_trained() -> None:
    # Once many trials have ended, what they trained outweighs the simulation: 20 trials of
    # 11 epochs each leave 4 trials of about 11 epochs.
    left = _time_left([TrialRecord(str(n), n, {}, status=TrialStatus.COMPLETED, epochs=11) for n in range(20)], [])
    assert left == pytest.approx(4 * 11, rel=0.1)


def test_a_running_trial_is_expected_to_train_as_far_as_simulated_trials_that_got_as_far() -> None:
    # At epoch 6 of the default search's ASHA (rungs at 2, 6 and 18) a trial still running has
    # passed the second rung: the simulated trials that did went on to epoch 18 or 20.
    simulated = trial_epochs(load_spec(DEFAULT_SPEC))
    assert 12 <= simulated.left_after(6) <= 14
    assert simulated.left_after(20) == 0.0


def test_no_time_is_left_once_a_signal_is_stopping_the_search() -> None:
    # After a Ctrl-C the last status line read "running 0; ... about 11 s left".
    ended = [TrialRecord("a", 0, {}, status=TrialStatus.PRUNED, epochs=2)]
    running = [TrialRecord("b", 1, {}, status=TrialStatus.RUNNING, epochs=2)]
    console = ConsoleProgress(load_spec(DEFAULT_SPEC), io.StringIO())
    recorder: Any = _Recorder([*ended, *running], epochs=0)  # a new search: nothing resumed
    console.experiment_started(recorder)
    recorder.epochs = [object()] * 4
    console._first_epoch_at = time.monotonic() - 3
    assert console.time_left() is not None
    console.search_stopping()
    assert console.time_left() is None


def test_time_left_prices_each_trial_to_come_at_its_fixed_cost() -> None:
    # The README's search: 50-ms epochs, trials of about 2 s. With its first, long trials'
    # wall time per epoch it said "about 7 s left" of 24 s.
    from tunekit.driver.records import EpochRow

    console = ConsoleProgress(load_spec(DEFAULT_SPEC), io.StringIO())  # 24 trials, 2 at a time
    recorder: Any = _Recorder([], epochs=0)
    console.experiment_started(recorder)

    def start(trial_id: str, pid: int, at: float) -> TrialRecord:
        record = TrialRecord(trial_id, len(recorder.trials), {}, status=TrialStatus.RUNNING)
        record.spans = [[at, None]]
        record.span_workers = [{"attempt": 1, "node_id": "n", "pid": pid}]
        recorder.trials[trial_id] = record
        console.trial_started(record)
        return record

    def train(record: TrialRecord, first_epoch_at: float, epochs: int, *, ends: bool) -> None:
        for epoch in range(1, epochs + 1):
            row = EpochRow(record.trial_id, epoch, {"val_accuracy": 0.9}, 1, 0, first_epoch_at + 0.05 * (epoch - 1))
            record.epochs = epoch
            recorder.epochs.append(row)
            console.epoch_reported(record, row)
        if ends:
            record.status, record.spans[-1][1] = TrialStatus.COMPLETED, first_epoch_at + 0.05 * epochs
            console.trial_ended(record)

    a, b = start("a", 1, 0.0), start("b", 2, 0.0)
    train(a, 5.0, 20, ends=True)  # new workers: 5 s of TensorFlow's import first
    train(b, 5.1, 20, ends=True)
    c = start("c", 1, 6.0)
    d = start("d", 2, 6.1)
    train(c, 7.0, 20, ends=True)  # a reused worker: 2 s in all, 1 s of it fixed
    train(d, 7.1, 2, ends=False)
    assert console._costs.epoch_s() == pytest.approx(0.05)
    assert console._costs.fixed_s() == pytest.approx(1.0)
    left = console.time_left()
    assert left is not None and left >= 20 * 1.0 / 2  # 20 trials to come, their fixed seconds alone, 2 slots
    assert left <= 20 * (1.0 + 0.05 * 20) / 2  # and no trial to come trains more than 20 epochs


def test_time_left_waits_for_a_second_epoch_of_each_slot_before_pricing_the_pace() -> None:
    # A search of several objectives printed "about 1 s left" of 60: both slots' first epochs
    # came in at once, and one trial was cut there, so the wall time per epoch looked like 0.
    from tunekit.driver.records import EpochRow

    console = ConsoleProgress(load_spec(DEFAULT_SPEC), io.StringIO())  # 24 trials, 2 at a time
    recorder: Any = _Recorder([], epochs=0)
    console.experiment_started(recorder)
    records = []
    for number in range(2):
        record = TrialRecord(f"t{number}", number, {}, status=TrialStatus.RUNNING)
        record.spans, record.span_workers = [[0.0, None]], [{"attempt": 1, "node_id": "n", "pid": number}]
        recorder.trials[record.trial_id] = record
        console.trial_started(record)
        records.append(record)

    def report(record: TrialRecord, epoch: int, at: float) -> None:
        row = EpochRow(record.trial_id, epoch, {"val_accuracy": 0.5}, 1, 0, at)
        record.epochs = epoch
        recorder.epochs.append(row)
        console.epoch_reported(record, row)

    report(records[0], 1, 5.0)
    report(records[1], 1, 5.01)
    records[1].status, records[1].spans[-1][1] = TrialStatus.PRUNED, 5.01
    console.trial_ended(records[1])
    assert console.time_left() is None  # one epoch in 10 ms says nothing of an epoch's cost
    records[1].status = TrialStatus.RUNNING
    report(records[0], 2, 6.0)
    report(records[1], 2, 6.0)
    report(records[0], 3, 7.0)
    assert console.time_left() is not None


def test_time_left_is_at_least_the_trials_to_come_at_the_pace_new_trials_start() -> None:
    # A 10,000-trial search of 10-ms epochs said "about 51 s left" with 156 s to go: its
    # driver started a trial every 50 ms while each trial took its slot for 30 ms.
    from tunekit.driver.records import EpochRow
    from tunekit.driver.trial_costs import START_PACE_TRIALS

    console = ConsoleProgress(load_spec(DEFAULT_SPEC, ["budget.num_samples=1000"]), io.StringIO())
    recorder: Any = _Recorder([], epochs=0)
    console.experiment_started(recorder)
    lefts = []
    for number in range(100):
        at = 0.1 * number  # one new trial every 0.1 s; each runs 2 epochs of 0.01 s
        record = TrialRecord(str(number), number, {}, status=TrialStatus.RUNNING)
        record.spans, record.span_workers = [[at, None]], [{"attempt": 1, "node_id": "n", "pid": 1}]
        recorder.trials[record.trial_id] = record
        console.trial_started(record)
        for epoch in (1, 2):
            row = EpochRow(record.trial_id, epoch, {"val_accuracy": 0.9}, 1, 0, at + 0.01 * epoch)
            record.epochs = epoch
            recorder.epochs.append(row)
            console.epoch_reported(record, row)
        if console._first_epoch_at is None:
            console._first_epoch_at = time.monotonic()
        record.status, record.spans[-1][1] = TrialStatus.PRUNED, at + 0.03
        console.trial_ended(record)
        lefts.append(console.time_left())
    # Before START_PACE_TRIALS new trials, the slots' work alone: 0.03 s a trial on 2 slots.
    before_pace = lefts[START_PACE_TRIALS - 2]
    assert before_pace is not None and before_pace < 0.05 * 937
    # Then the pace of starts: 900 trials to come, one every 0.1 s.
    assert lefts[-1] == pytest.approx(900 * 0.1, rel=0.01)
