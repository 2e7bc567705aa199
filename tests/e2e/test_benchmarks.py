"""The benchmark suite runs and writes its outputs. Timings are never checked: benchmarks are not tests.

The slow test runs ``python -m benchmarks.run --smoke`` once for overhead (tunekit against
plain Ray Tune) and memory, at their smallest size, and checks the JSON and the Markdown it
leaves. quality (against KerasTuner), grid, eta and pbt cost minutes even at that size and
are left to ``--quick`` runs: CI has 25 minutes, and the smoke run of overhead, memory, grid
and quality alone took 9 of them. The fast tests drive the analysis and rendering code on made-up
numbers, with no Ray and no TensorFlow.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks import common, quality, run

REPO = Path(__file__).resolve().parents[2]
OWN = ("overhead", "memory")
FIGURE_KEYS = {"name", "value", "unit", "target", "met", "note"}
PAYLOAD_KEYS = {
    "benchmark",
    "mode",
    "title",
    "figures",
    "ratios",
    "definitions",
    "setup",
    "notes",
    "details",
    "elapsed_s",
    "load_before",
    "load_after",
    "date",
}
# figures each benchmark must report, whatever their values
EXPECTED_FIGURES = {
    "overhead": [
        "wall-time ratio (plain Ray Tune / tunekit)",
        "tunekit per-trial overhead",
        "plain Ray Tune per-trial overhead",
        "tunekit share of slot time training",
        "tunekit best val_accuracy",
        "plain Ray Tune best val_accuracy",
    ],
    "memory": ["growth after the first trial", "worker processes used", "RSS after the first trial"],
}


# ------------------------------------------------------------------ the real runs


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    out = tmp_path_factory.mktemp("bench-out")
    completed = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--smoke", "--only", ",".join(OWN), "--out", str(out)],
        cwd=REPO,
        env=common.child_env(),
        capture_output=True,
        text=True,
        timeout=3000,
        check=False,
    )
    return out, completed


@pytest.mark.slow
@pytest.mark.timeout(3000)
def test_runner_smoke_writes_results(smoke_run: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    out, completed = smoke_run
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-4000:]
    results = json.loads((out / "results.json").read_text())
    assert results["mode"] == "smoke"
    assert {"date", "command", "elapsed_s", "machine", "stack", "benchmarks"} <= set(results)
    assert {"cpu_count", "memory_gb", "gpus", "cpu_model", "load_average"} <= set(results["machine"])
    assert {"python", "tunekit", "tensorflow", "keras", "ray", "optuna", "mlflow", "keras-tuner"} <= set(
        results["stack"]
    )
    assert set(OWN) <= set(results["benchmarks"])
    markdown = (out / "results.md").read_text()
    assert markdown.startswith("# tunekit benchmarks")
    assert "| figure | value | target | met |" in markdown
    assert "- Machine: " in markdown and "- Stack: " in markdown and "- Date: " in markdown
    for name in OWN:
        assert f"## {name}: " in markdown
        assert "ratio: " in completed.stdout


@pytest.mark.slow
@pytest.mark.timeout(3000)
@pytest.mark.parametrize("name", OWN)
def test_benchmark_smoke_output(smoke_run: tuple[Path, subprocess.CompletedProcess[str]], name: str) -> None:
    out, completed = smoke_run
    results = json.loads((out / "results.json").read_text())
    entry = results["benchmarks"][name]
    assert entry["status"] == "ok", entry
    payload = entry["result"]
    assert set(payload) >= PAYLOAD_KEYS
    assert payload["benchmark"] == name and payload["mode"] == "smoke"
    assert payload["ratios"] and all(isinstance(r, str) for r in payload["ratios"])
    for figure in payload["figures"]:
        assert set(figure) == FIGURE_KEYS
    names = {f["name"] for f in payload["figures"]}
    assert set(EXPECTED_FIGURES[name]) <= names, names
    # the benchmark's own JSON sits beside the runner's summary
    assert json.loads((out / name / f"{name}.json").read_text())["benchmark"] == name
    assert f"== {name}: " in completed.stdout


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
