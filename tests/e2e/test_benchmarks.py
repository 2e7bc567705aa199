"""The benchmarks' analysis and rendering, on made-up numbers, with no Ray and no TensorFlow.

Timings are never checked: benchmarks are not tests. The benchmarks themselves run with
``python -m benchmarks.run`` (``--smoke`` checks that each runs); even at smoke size each
costs one to nine minutes of real searches, which CI's 25 minutes cannot hold beside the
end-to-end tests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks import common, pareto, quality, run

# ------------------------------------------------------------- fast, no Ray or TF


def test_curve_metrics_area_and_times() -> None:
    points = [
        {"t": 10.0, "val_accuracy": 0.5, "epoch": 1, "trial": "a"},
        {"t": 20.0, "val_accuracy": 0.96, "epoch": 2, "trial": "a"},
        {"t": 30.0, "val_accuracy": 0.9, "epoch": 1, "trial": "b"},
        {"t": 50.0, "val_accuracy": 0.99, "epoch": 2, "trial": "b"},  # after the budget: ignored
    ]
    metrics = quality.curve_metrics(points, budget=40.0, max_epochs=2)
    assert metrics["area"] == pytest.approx((0.5 * 10 + 0.96 * 20) / 40)
    assert metrics["time_to_accuracy_s"] == 20.0
    assert metrics["time_to_first_full_model_s"] == 20.0
    assert metrics["best_at_budget"] == 0.96
    assert metrics["epochs_reported"] == 3 and metrics["trials_reporting"] == 2


def test_pareto_hypervolume_follows_the_epochs_as_trials_end() -> None:
    # Parameters are scaled by 60,000: 6,000 is 0.1, 30,000 is 0.5. Reference (accuracy 0, 1.0).
    trials = [
        {"status": "completed", "epochs": 4, "ended_at": 2.0, "val_accuracy": 0.5, "model_params": 30000.0},
        {"status": "pruned", "epochs": 1, "ended_at": 1.0, "val_accuracy": 0.9, "model_params": 6000.0},
        {"status": "completed", "epochs": 4, "ended_at": 3.0, "val_accuracy": 0.8, "model_params": 6000.0},
    ]
    # The pruned trial counts its epoch, never its point; then 0.5 x 0.5; then 0.8 x 0.9 dominates it.
    assert pareto.hypervolume_curve(trials) == [(1, 0.0), (5, 0.25), (9, pytest.approx(0.72))]
    assert pareto.epochs_to_reach(pareto.hypervolume_curve(trials), 0.5) == 9
    assert pareto.epochs_to_reach(pareto.hypervolume_curve(trials), 0.9) is None


def test_curve_metrics_nothing_reached() -> None:
    metrics = quality.curve_metrics([], budget=30.0, max_epochs=20)
    assert metrics["area"] == 0.0
    assert metrics["time_to_accuracy_s"] is None
    assert metrics["time_to_first_full_model_s"] is None


def test_median_counts_missing_as_worst() -> None:
    assert common.median([3.0, None, 1.0]) == 3.0
    assert common.median([None, None, 1.0]) is None
    assert common.median([1.0, 2.0]) == 1.5


def _fake_results(status: str = "ok") -> dict[str, Any]:
    payload = {
        "benchmark": "overhead",
        "mode": "quick",
        "title": "t",
        "ratios": ["a vs b -> 2x"],
        "figures": [common.figure("wall-time ratio", 2.0, "x", ">= 2.5x", False), common.figure("a | b", None)],
        "definitions": {"x": "y"},
        "setup": {"trials": 3, "grid": {"lr": [1, 2]}},
        "notes": ["n"],
    }
    return {
        "date": "2026-01-01T00:00:00",
        "mode": "quick",
        "command": "python -m benchmarks.run --quick",
        "elapsed_s": 60.0,
        "machine": {
            "cpu_count": 2,
            "cpus_usable": 2,
            "cpu_model": "cpu",
            "memory_gb": 8.0,
            "gpus": [],
            "platform": "linux",
            "python": "3.11",
            "load_average": [1.0, 1.0, 1.0],
        },
        "stack": {"python": "3.11", "tunekit": "0.1.0"},
        "benchmarks": {
            "overhead": {
                "status": status,
                "mode": "quick",
                "date": "d",
                "elapsed_s": 10.0,
                "load_before": [1.0, 1, 1],
                "load_after": [2.0, 1, 1],
                "result": payload,
                "description": "x",
                "reason": "exit status 1",
            },
            "pipeline": {
                "status": "not available",
                "reason": "benchmarks/pipeline.py does not exist",
                "description": "p",
            },
            "logging_cost": {"status": "ok", "description": "l", "files": {"l.json": {"a": {"b": 1.5}, "c": [1, 2]}}},
        },
    }


def test_markdown_has_a_table_per_benchmark() -> None:
    markdown = run.render_markdown(_fake_results())
    assert "| wall-time ratio | 2 x | >= 2.5x | **no** |" in markdown
    assert "a \\| b" in markdown  # pipes in names do not break the table
    assert "**not available**: benchmarks/pipeline.py does not exist" in markdown
    assert "| a.b | 1.5 |" in markdown and "| c | 1, 2 |" in markdown
    assert "no GPU" in markdown and "8.0 GB memory" in markdown


def test_missing_benchmark_is_reported_not_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(common, "REPO", tmp_path)
    entry = run.run_one("logging_cost", "quick", tmp_path / "out", keep=False)
    assert entry["status"] == "not available"
    assert "logging_cost: not available" in capsys.readouterr().out


def test_unknown_only_name_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        run.main(["--only", "nope"])
    assert exit_info.value.code == 2
    assert "unknown benchmark nope; valid names are overhead, memory, grid, quality" in capsys.readouterr().err
