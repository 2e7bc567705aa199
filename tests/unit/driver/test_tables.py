"""The recorder's tables render only what changed, and write what a fresh render writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tunekit.driver import records
from tunekit.driver.records import EpochRow, EpochsTable, SpansTable, TrialRecord, TrialsTable
from tunekit.layout import TrialStatus


def trial(number: int, **params: Any) -> TrialRecord:
    record = TrialRecord(f"t{number:04d}", number, {"units": 32 * (number % 4 + 1), **params})
    record.begin_span(float(number))
    return record


def finish(record: TrialRecord, at: float) -> None:
    record.status, record.epochs, record.final_metric = TrialStatus.COMPLETED, 3, 0.5 + record.number / 1e4  # type: ignore[operator]
    record.info = {"node_id": "n1", "devices": ["CPU:0", "CPU:1"]}
    record.note_worker("n1", 100 + (record.number or 0))
    record.close_span(at)


def fresh_text(kind: str, tmp: Path, state: dict[str, Any], now: float) -> str:
    """What a table that never wrote before writes for the same records."""
    path = tmp / f"fresh-{kind}.csv"
    if kind == "trials":
        TrialsTable(path).write(state["trials"], set(state["trials"]), now)
    elif kind == "spans":
        SpansTable(path).write(state["trials"], set(state["trials"]))
    else:
        EpochsTable(path).write(state["epochs"], set())
    return path.read_text()


@pytest.fixture
def render_count(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Rows rendered, counted: how many lines a write had to build in Python."""
    counted = [0]
    render = records._Lines.render

    def counting(self: records._Lines, rows: list[list[Any]]) -> str:
        counted[0] += len(rows)
        return render(self, rows)

    monkeypatch.setattr(records._Lines, "render", counting)
    return counted


def test_incremental_writes_equal_a_fresh_render_through_a_search_s_changes(tmp_path: Path) -> None:
    trials: dict[str, TrialRecord] = {}
    epochs: list[EpochRow] = []
    tables = TrialsTable(tmp_path / "trials.csv"), SpansTable(tmp_path / "spans.csv"), EpochsTable(tmp_path / "e.csv")
    state = {"trials": trials, "epochs": epochs}

    def write(changed: set[str], replaced: set[int], now: float) -> None:
        tables[0].write(trials, changed, now)
        tables[1].write(trials, changed)
        tables[2].write(epochs, replaced)
        for kind, table in zip(("trials", "spans", "epochs"), ("trials.csv", "spans.csv", "e.csv"), strict=True):
            assert (tmp_path / table).read_text() == fresh_text(kind, tmp_path, state, now), (kind, now)

    for number in range(5):  # started out of number order: the table sorts by number
        trials[f"t{4 - number:04d}"] = trial(4 - number)
    write(set(trials), set(), now=6.0)
    epochs += [EpochRow("t0001", 1, {"val_accuracy": 0.4}, 1, 0, 6.5)]
    write({"t0001"}, set(), now=7.0)  # the running trials' wall seconds move without a change
    finish(trials["t0001"], 8.0)
    write({"t0001"}, set(), now=9.0)
    epochs += [EpochRow("t0002", 1, {"val_accuracy": 0.3, "loss": 1.2}, 1, 0, 9.5)]  # a new metric column
    epochs[0] = EpochRow("t0001", 1, {"val_accuracy": 0.41}, 2, 0, 10.0)  # an epoch trained again
    write({"t0002"}, {0}, now=10.0)
    trials["t0009"] = trial(9, dropout=0.25)  # a new parameter column
    write({"t0009"}, set(), now=11.0)
    trials["t0009"].begin_span(12.0)  # a retry: a second span
    write({"t0009"}, set(), now=13.0)


def test_a_write_renders_the_changed_and_running_trials_not_the_finished_ones(
    tmp_path: Path, render_count: list[int]
) -> None:
    """The access pattern the driver's flat cost per trial rests on: rows rendered per write
    do not grow with the trials already written (benchmarks/scale.py measures the time)."""
    trials: dict[str, TrialRecord] = {}
    epochs: list[EpochRow] = []
    table, spans, epoch_table = (
        TrialsTable(tmp_path / "t.csv"),
        SpansTable(tmp_path / "s.csv"),
        EpochsTable(tmp_path / "e.csv"),
    )
    rendered: list[int] = []
    for size in (100, 1000):
        while len(trials) < size:
            record = trial(len(trials))
            finish(record, float(len(trials)) + 0.5)
            trials[record.trial_id] = record
            epochs.append(EpochRow(record.trial_id, 1, {"val_accuracy": 0.5}, 1, 0, 1.0))
        table.write(trials, set(trials), 2000.0)
        spans.write(trials, set(trials))
        epoch_table.write(epochs, set())
        running = trial(size + 5000)
        trials[running.trial_id] = running  # one trial starts, another ends
        epochs.append(EpochRow(running.trial_id, 1, {"val_accuracy": 0.5}, 1, 0, 1.0))
        render_count[0] = 0
        table.write(trials, {running.trial_id, "t0003"}, 2001.0)
        spans.write(trials, {running.trial_id, "t0003"})
        epoch_table.write(epochs, set())
        rendered.append(render_count[0])
        del trials[running.trial_id]
        epochs.pop()
    # The headers (3) and the two changed trials in two tables plus one epoch row.
    assert rendered == [3 + 5, 3 + 5]
