"""Experiments side by side and the listing of a results folder, over made-up experiments (no Ray)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tunekit
from tunekit.cli import main
from tunekit.errors import NotAnExperimentError, TunekitError
from tunekit.results.summary import summarize

from .made_up_experiments import asha_experiment


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """Two finished experiments (b newer, better, faster) and one interrupted, in one results folder."""
    asha_experiment(tmp_path / "week-1", "digits", completed=4)
    asha_experiment(tmp_path / "week-2", "digits", completed=6, started_at=9000.0, seconds_per_epoch=1.0, offset=0.02)
    asha_experiment(tmp_path / "stopped", "digits", trials=3, completed=1, started_at=20000.0, finished=False)
    (tmp_path / "not-an-experiment").mkdir()
    return tmp_path


def test_experiments_lists_each_experiment_oldest_first_with_its_status_counts_and_best(folder: Path) -> None:
    table = tunekit.experiments(folder)
    assert list(table["experiment"]) == ["week-1", "week-2", "stopped"]
    assert list(table["status"]) == ["finished", "finished", "interrupted"]
    assert list(table["trials"]) == [10, 10, 3]
    assert list(table["completed"]) == [4, 6, 1] and list(table["pruned"]) == [6, 4, 2]
    for row in table.itertuples():
        results = tunekit.load(row.path)
        assert row.best == results.best_metric and row.best_trial == results.best.number  # type: ignore[union-attr]
        assert row.active_seconds == summarize(results).active_seconds
    assert str(table["started"][1]) == "1970-01-01 02:30:00"


def test_experiments_of_an_experiment_is_its_row_and_of_nothing_an_error(folder: Path) -> None:
    assert list(tunekit.experiments(folder / "week-1")["experiment"]) == ["week-1"]
    assert tunekit.experiments(folder / "not-an-experiment").empty
    with pytest.raises(TunekitError, match="not a directory"):
        tunekit.experiments(folder / "missing")


def test_a_damaged_experiment_is_a_row_saying_so_not_a_failed_listing(folder: Path) -> None:
    (folder / "week-1" / "trials.csv").write_text('trial_id,number,status\nt0,0,"compl')
    table = tunekit.experiments(folder)
    assert table.loc[table["experiment"] == "week-1", "status"].iloc[0].startswith("damaged: ")
    assert len(table) == 3


@pytest.mark.parametrize(
    ("text", "problem"),
    [("name: [oops\n", "not valid YAML at line 2"), ("- just a list\n", "not a mapping of spec keys but list")],
)
def test_a_spec_yaml_that_is_not_a_spec_is_a_damaged_row_not_a_failed_listing(
    folder: Path, text: str, problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (folder / "week-1" / "spec.yaml").write_text(text)
    table = tunekit.experiments(folder)
    status = table.loc[table["experiment"] == "week-1", "status"].iloc[0]
    assert status.startswith(f"damaged: {folder / 'week-1' / 'spec.yaml'}: {problem}; "), status
    assert len(table) == 3
    assert main(["ls", str(folder)]) == 0
    assert "damaged" in capsys.readouterr().out


def test_compare_puts_bests_configs_budgets_counts_and_time_to_best_side_by_side(folder: Path) -> None:
    comparison = tunekit.compare(folder / "week-1", tunekit.load(folder / "week-2"))
    table = comparison.table
    assert list(table.index) == ["week-1", "week-2"]
    for label in table.index:
        summary = summarize(tunekit.load(folder / label))
        row = table.loc[label]
        assert row["best"] == summary.best.metric  # type: ignore[union-attr]
        assert row["time_to_best_s"] == summary.ledger.seconds_to_best
        assert row["epochs_spent"] == summary.epochs_spent
        assert (row["completed"], row["pruned"]) == (summary.counts["completed"], summary.counts["pruned"])
        assert row["params.units"] == summary.best.config["units"]  # type: ignore[union-attr]
        assert (row["num_samples"], row["max_epochs"], row["scheduler"]) == (10, 9, "asha")
    assert comparison.notes == []
    # The curves: best so far never gets worse, and ends at each experiment's best.
    for label, curve in comparison.curves.items():
        assert curve["best"].is_monotonic_increasing and curve["epochs"].is_monotonic_increasing
        assert curve["best"].iloc[-1] == pytest.approx(table.loc[label, "best"])
        assert curve["epochs"].iloc[-1] == table.loc[label, "epochs_spent"]
    fig = comparison.figure(path=folder / "compare.png")
    assert len(fig.axes) == 2 and len(fig.axes[0].get_lines()) == 2 and len(fig.axes[1].get_lines()) == 2
    legend = fig.axes[0].get_legend()
    assert legend is not None
    assert [t.get_text() for t in legend.get_texts()] == ["week-1 (0.7732)", "week-2 (0.7932)"]
    assert (folder / "compare.png").stat().st_size > 0


def test_a_parameter_one_experiment_lacks_stays_a_whole_number_in_the_other(folder: Path) -> None:
    import pandas as pd

    trials = folder / "week-2" / "trials.csv"
    pd.read_csv(trials).drop(columns=["params.units"]).to_csv(trials, index=False)  # a space without units
    table = tunekit.compare(folder / "week-1", folder / "week-2").table
    units = table["params.units"]
    assert units.loc["week-1"] == tunekit.load(folder / "week-1").best.config["units"]  # type: ignore[union-attr]
    assert pd.isna(units.loc["week-2"]) and str(units.dtype) == "Int64"
    assert str(table["params.units"].loc["week-1"]) == str(int(units.loc["week-1"]))  # "64", not "64.0"
    assert table["params.dropout"].dtype == float  # fractions stay fractions
    comparison = tunekit.compare(folder / "week-1", folder / "week-2")
    shown = comparison.side_by_side().loc["params.units"]
    assert list(shown) == [units.loc["week-1"], ""]
    rows = json.loads(comparison.to_json())["experiments"]
    assert [row["params.units"] for row in rows] == [units.loc["week-1"], None]


def test_comparison_text_html_and_repr(folder: Path) -> None:
    comparison = tunekit.compare(folder / "week-1", folder / "week-2")
    text = comparison.to_text()
    assert text.splitlines()[0].split() == ["week-1", "week-2"]
    assert "time to best" in text and "params.units" in text
    fragment = comparison._repr_html_()
    assert "<table" in fragment and "data:image/png;base64," in fragment
    assert repr(comparison).startswith("Comparison of 2 experiments (week-1, week-2)")


def test_compare_says_when_the_metrics_differ_and_refuses_nothing_to_compare(folder: Path) -> None:
    other = asha_experiment(folder / "loss", "digits-loss")
    spec = (
        (other / "spec.yaml").read_text().replace("{name: val_accuracy, mode: max}", "{name: val_accuracy, mode: min}")
    )
    (other / "spec.yaml").write_text(spec)
    comparison = tunekit.compare(folder / "week-1", other)
    assert comparison.notes == [
        "the experiments do not share a metric, so their bests do not compare: "
        "week-1: val_accuracy (max), loss: val_accuracy (min)"
    ]
    with pytest.raises(TunekitError, match="give at least one experiment"):
        tunekit.compare()
    with pytest.raises(NotAnExperimentError):
        tunekit.compare(folder / "not-an-experiment")


def test_two_experiments_of_one_name_in_two_folders_are_told_apart(tmp_path: Path) -> None:
    a = asha_experiment(tmp_path / "laptop" / "digits", "digits")
    b = asha_experiment(tmp_path / "cluster" / "digits", "digits")
    assert list(tunekit.compare(a, b).table.index) == ["laptop/digits", "cluster/digits"]


def test_cli_report_of_two_experiments_and_ls_agree_with_the_api(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = folder / "out" / "compare.html"
    assert main(["report", str(folder / "week-1"), str(folder / "week-2"), "--html", str(page)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["week-1", "week-2"]
    assert out.splitlines()[-1] == f"html report: {page.resolve()}"
    html = page.read_text()
    assert "Comparison: week-1, week-2" in html and "data:image/png;base64," in html
    assert main(["report", str(folder / "week-1"), str(folder / "week-2"), "--format", "json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert [e["best"] for e in record["experiments"]] == list(
        tunekit.compare(folder / "week-1", folder / "week-2").table["best"]
    )

    assert main(["ls", str(folder)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["experiment", "status", "trials", "metric", "best", "started", "active"]
    assert lines[1].split()[:5] == ["week-1", "finished", "10:", "4", "completed,"]
    assert "0.7732" in lines[1] and "1m 37s" in lines[1]
    assert lines[3].startswith("stopped ") and " interrupted " in lines[3]
    assert main(["list", str(folder), "--format", "json"]) == 0
    assert [r["experiment"] for r in json.loads(capsys.readouterr().out)] == ["week-1", "week-2", "stopped"]
    assert main(["ls", str(folder / "not-an-experiment")]) == 0
    assert capsys.readouterr().out.startswith("no experiments in ")


def test_one_experiment_report_is_unchanged(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(folder / "week-1")]) == 0
    assert capsys.readouterr().out.splitlines()[0].split()[:3] == ["number", "status", "epochs"]


def test_ls_json_keeps_every_digit_and_the_start_as_iso(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ls", str(folder), "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    table = tunekit.experiments(folder)
    assert [r["best"] for r in rows] == list(table["best"])
    assert rows[0]["started"] == "1970-01-01T00:16:40"
