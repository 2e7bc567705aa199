"""How a trial ended and why, from made-up records (no Ray): the recorder's rules."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import pytest

from tunekit.config.spec import ExperimentSpec, parse_spec
from tunekit.driver.records import (
    EpochRow,
    TrialRecord,
    TrialsTable,
    apply_epoch,
    reason_beside_epochs,
    settle_ended,
    settle_errored,
)
from tunekit.layout import TrialStatus


def spec(lr: dict[str, Any] | None = None, **budget: Any) -> ExperimentSpec:
    raw = {
        "name": "unit",
        "trainable": "not.looked.for",
        "metric": {"name": "acc", "mode": budget.pop("mode", "max")},
        "budget": {"num_samples": 9, "max_epochs": 9, **budget},
        "scheduler": {"type": "asha", "grace_period": 1, "reduction_factor": 3},
        "space": {"lr": lr or {"type": "uniform", "low": 0.0, "high": 1.0}},
    }
    return parse_spec(raw, None, locate_trainable=False)


def record(epochs: int, **fields: Any) -> TrialRecord:
    return TrialRecord("t0", 0, {"lr": 0.1}, epochs=epochs, **fields)


def test_a_trial_that_trained_every_epoch_completed() -> None:
    trial = record(9)
    settle_ended(trial, spec(), pruned=False, elapsed=1.0)
    assert (trial.status, trial.reason) == (TrialStatus.COMPLETED, "trained all 9 epochs")


def test_a_trial_its_model_stopped_completed() -> None:
    trial = record(4, stopped_by_model=4)
    settle_ended(trial, spec(), pruned=False, elapsed=1.0)
    assert (trial.status, trial.reason) == (TrialStatus.COMPLETED, "stopped by the model at epoch 4")


def test_a_trial_asha_stopped_is_pruned_at_its_rung() -> None:
    trial = record(3)
    settle_ended(trial, spec(), pruned=True, elapsed=1.0)
    assert (trial.status, trial.rung) == (TrialStatus.PRUNED, 1)
    assert trial.reason == "pruned by ASHA at rung 1 (epoch 3)"


def test_a_trial_the_time_budget_ended_is_stopped() -> None:
    trial = record(2)
    settle_ended(trial, spec(time_budget_s=60), pruned=False, elapsed=61.0)
    assert trial.status == TrialStatus.STOPPED
    assert trial.reason == "the search's time budget of 60 s ran out after 2 epochs"


def test_a_trial_the_search_stopped_around_is_stopped() -> None:
    trial = record(2)
    settle_ended(trial, spec(time_budget_s=60), pruned=False, elapsed=5.0)
    assert (trial.status, trial.reason) == (TrialStatus.STOPPED, "the search was stopped after 2 epochs")


def test_a_trial_that_reported_its_failure_failed_with_that_reason() -> None:
    trial = record(9, reason="TrialFailure: non-finite loss")
    settle_ended(trial, spec(), pruned=False, elapsed=1.0)
    assert (trial.status, trial.reason) == (TrialStatus.FAILED, "TrialFailure: non-finite loss")


@pytest.mark.parametrize(
    ("traceback", "reason"),
    [
        ("Traceback (most recent call last):\n  File x\nRuntimeError: worker died\n\n", "RuntimeError: worker died"),
        ("", "the trial's worker failed"),
    ],
)
def test_an_errored_trial_takes_the_tracebacks_last_line(traceback: str, reason: str) -> None:
    trial = record(1)
    settle_errored(trial, traceback)
    assert (trial.status, trial.reason) == (TrialStatus.FAILED, reason)


def test_an_errored_trial_keeps_the_reason_it_reported() -> None:
    trial = record(1, reason="TrialFailure: non-finite loss")
    settle_errored(trial, "ray.exceptions.RayTaskError: something else")
    assert trial.reason == "TrialFailure: non-finite loss"


def test_epochs_count_finite_metrics_only_and_follow_the_mode() -> None:
    trial = record(0)
    minimise = spec(mode="min")
    for epoch, value in enumerate((0.5, 0.3, math.nan, 0.4), start=1):
        apply_epoch(
            trial, EpochRow("t0", epoch, {"acc": value, "samples_per_second": 100.0 * epoch}, 1, None, 0.0), minimise
        )
    assert (trial.epochs, trial.final_metric, trial.best_metric) == (4, 0.4, 0.3)
    assert trial.samples_per_second == pytest.approx(250.0)


def test_a_status_saved_as_a_plain_string_becomes_the_enum() -> None:
    trial = TrialRecord("t0", 0, {}, status="pruned")  # type: ignore[arg-type]
    assert trial.status is TrialStatus.PRUNED and trial.status.is_finished()


def test_trials_csv_holds_plain_status_strings_and_the_seconds_of_the_trials_spans(tmp_path: Path) -> None:
    trial = record(9)
    # Ran 0-4 s, its worker died; retried 5-9 s; the search stopped; resumed 9-12 s, where it ended.
    for start, end in [(0.0, 4.0), (5.0, 9.0), (9.0, 12.0)]:
        trial.begin_span(start)
        trial.close_span(end)
    settle_ended(trial, spec(), pruned=False, elapsed=1.0)
    TrialsTable(tmp_path / "trials.csv").write({trial.trial_id: trial}, set(), now=30.0)
    with (tmp_path / "trials.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert rows[0]["status"] == "completed"
    assert float(rows[0]["wall_seconds"]) == 11.0  # never the gaps, never up to "now"


def test_a_running_trials_open_span_counts_up_to_now() -> None:
    trial = record(1)
    trial.begin_span(2.0)
    assert trial.active_seconds(now=7.5) == 5.5
    trial.begin_span(10.0)  # a new span closes the open one where it starts
    assert trial.spans == [[2.0, 10.0], [10.0, None]]


@pytest.mark.parametrize(
    ("epochs", "fields", "settle", "beside"),
    [
        (9, {}, {"pruned": False, "elapsed": 1.0}, ""),  # "trained all 9 epochs"
        (9, {"restored_weights": True}, {"pruned": False, "elapsed": 1.0}, "the model restored its best weights"),
        (4, {}, {"pruned": True, "elapsed": 1.0}, "by ASHA at rung 1"),
        (1, {"stopped_by_model": 1}, {"pruned": False, "elapsed": 1.0}, "stopped by the model"),
        (0, {}, {"pruned": False, "elapsed": 1.0}, "the search was stopped"),
        (1, {}, {"pruned": False, "elapsed": 1.0}, "the search was stopped"),
        (2, {}, {"pruned": False, "elapsed": 1.0, "aborted": True}, "the failure guard stopped the search"),
        (3, {"reason": "ValueError: at epoch 3 (epoch 3)"}, {"pruned": False, "elapsed": 1.0}, None),
    ],
)
def test_the_console_line_gives_what_a_reason_adds_to_the_status_and_the_epoch_count(
    epochs: int, fields: dict[str, Any], settle: dict[str, Any], beside: str | None
) -> None:
    trial = record(epochs, **fields)
    settle_ended(trial, spec(), **settle)
    assert reason_beside_epochs(trial) == (trial.reason if beside is None else beside), trial.reason
