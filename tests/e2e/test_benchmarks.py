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

from benchmarks import common, overhead, pareto, quality, regressions, run, scale

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


def test_the_pareto_benchmark_reports_means_over_seeds_and_meets_only_when_every_seed_does() -> None:
    def run(moasha: list[tuple[int, str, float, float]], motpe_epochs: int) -> dict[str, Any]:
        trials = [
            {"status": status, "epochs": epochs, "ended_at": float(i), "val_accuracy": acc, "model_params": params}
            for i, (epochs, status, acc, params) in enumerate(moasha)
        ]
        motpe = [
            {
                "status": "completed",
                "epochs": motpe_epochs,
                "ended_at": 0.0,
                "val_accuracy": 0.9,
                "model_params": 6000.0,
            }
        ]
        return {
            "moasha": {"wall_s": 10.0, "trials": trials},
            "motpe": {"wall_s": 20.0, "trials": motpe},
            "random_asha": {"wall_s": 15.0, "trials": motpe},
        }

    # Seed 0: MO-ASHA reaches MO-TPE's front after 4 of MO-TPE's 10 epochs; seed 1 never does.
    fast = run([(2, "pruned", 0.5, 6000.0), (2, "completed", 0.9, 6000.0)], 10)
    never = run([(2, "completed", 0.5, 6000.0)], 10)
    analysis = pareto.analyse({0: fast, 1: never})
    share = next(f for f in analysis["figures"] if f["name"].startswith("MO-ASHA epochs"))
    assert share["value"] == pytest.approx(40.0) and share["met"] is False
    assert share["note"] == "seeds 0.4, n/a; 1 seed(s) never"
    nearly = next(f for f in analysis["figures"] if f["name"].startswith("MO-ASHA epochs to 99%"))
    assert nearly["value"] == pytest.approx(40.0) and nearly["met"] is False  # seed 1 never gets near
    epochs = next(f for f in analysis["figures"] if f["name"] == "moasha epochs (mean of 2 seeds)")
    assert epochs["value"] == pytest.approx(3.0) and epochs["note"] == "seeds 4, 2"


def test_the_scale_benchmark_judges_growth_floors_and_losses_per_size() -> None:
    assert scale.curve({"learning_rate": 3e-3, "units": 128, "dropout": 0.0}, 9) > scale.curve(
        {"learning_rate": 1e-4, "units": 32, "dropout": 0.5}, 9
    )
    window = {"driver_cpu_per_trial_ms": 10.0, "split_ms": {"sampler": 1.0}, "trials_per_minute": 300.0}
    window |= {"backlog_max": 4, "backlog_now": 0, "rss_mb": 300.0, "experiment_dir_mb": 1.0, "study_mb": 1.0}
    rows = [
        {**window, "window": 1, "ended": 1000},
        {**window, "window": 2, "ended": 2000, "driver_cpu_per_trial_ms": 13.0},
    ]
    counted = {"parents": 1, "children": 2000, "trials": 2000, "epoch_points": 5000, "epochs": 5000}
    tunekit_side = {"wall_s": 200.0, "windows": rows, "mlflow": counted, "tracking_backend": "postgresql"}
    tunekit_side |= {"load_s": 1.0, "report_s": 2.0}
    sides: dict[str, dict[str, Any]] = {
        "tunekit": tunekit_side,
        "ray_floor": {"wall_s": 150.0},
        "ray_optuna": {"wall_s": 260.0},
        "optuna_floor": {"wall_s": 60.0, "sampler_s": 10.0, "best": 0.95, "trials_to_best": 900},
        "optuna_history": {"sampler_s": 4.0, "best": 0.949, "trials_to_best": 1100, "history": 1000},
    }
    figures, ratios = scale.analyse({2000: sides})
    history = next(f for f in figures if "TPE modelling the last 1,000 trials" in f["name"])
    assert history["value"] == 0.4
    assert history["note"].startswith("best final value 0.9490 (reached by trial 1100) against 0.9500 (trial 900)")
    met = {f["name"].split(": ", 1)[1]: f["met"] for f in figures if f["target"]}
    assert met["driver CPU per trial without the sampler, last window / first"] is False  # 12 / 9 > 1.25x
    assert met["wall / (Ray's floor + the sampler's floor)"] is True  # 200 / 160 = 1.25
    assert met["Ray Tune + OptunaSearch wall / tunekit's"] is True
    assert met["MLflow lost nothing (postgresql)"] is True
    sides["tunekit"]["mlflow"] = {**counted, "epoch_points": 4999}
    figures, _ = scale.analyse({2000: sides})
    assert next(f for f in figures if "lost nothing" in f["name"])["met"] is False
    assert ratios[0].startswith("2000 trials: tunekit 200 s; Ray floor 150 s")
    rows[1]["split_ms"] = {"sampler": 4.0}  # the growth is all TPE's own work: (13 - 4) / (10 - 1)
    figures, _ = scale.analyse({2000: sides})
    growth = next(f for f in figures if "without the sampler" in f["name"])
    assert growth["met"] is True and growth["value"] == 1.0 and growth["note"] == "with the sampler's own work: 1.30x"
    ray_window = {"trials": 1000, "trials_per_minute": 600.0}
    sides["ray_floor"]["windows"] = [
        {**ray_window, "window": 1, "ended": 1000, "driver_cpu_per_trial_ms": 5.0},
        {**ray_window, "window": 2, "ended": 2000, "driver_cpu_per_trial_ms": 6.0},
    ]
    figures, _ = scale.analyse({2000: sides})
    growth = next(f for f in figures if "without the sampler" in f["name"])
    assert growth["note"] == "with the sampler's own work: 1.30x; Ray's floor alone: 1.20x"
    ray_last = next(f for f in figures if "Ray's floor, window 2 (to trial 2000)" in f["name"])
    assert (ray_last["value"], ray_last["note"]) == (6.0, "600 trials/min")


def test_the_scale_profile_counts_the_sampler_whole_by_sampling_the_thread_s_cpu() -> None:
    import threading
    import time

    import optuna

    from tunekit.search.searcher import _PinnableSampler

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=_PinnableSampler(optuna.samplers.TPESampler(seed=0, n_startup_trials=5)))
    sampler = scale.CpuSampler(threading.get_ident())
    started = time.thread_time()
    sampler.start()
    study.optimize(lambda trial: trial.suggest_float("x", 0.0, 1.0) ** 2, n_trials=60)
    time.sleep(0.05)  # waiting costs no CPU, and is not counted
    sampler.stop()
    spent = time.thread_time() - started
    # TPE's fitting is most of an in-memory study's CPU; the samples add up to the thread's CPU.
    assert sampler.buckets["sampler"] > 0.5 * sampler.total()
    assert 0.8 * spent <= sampler.total() <= spent * 1.01
    assert any("optuna/samplers" in row["function"] for row in sampler.top_functions(5))


def test_overhead_breakdown_separates_tracing_later_epochs_and_per_trial_pieces() -> None:
    # Two trials: the first epoch traces (1.0 s of train), later ones take 0.1 + 0.02 s; two
    # of the three epochs checkpoint (a rung and the end), amortised over all three.
    trial = {
        "pieces": {
            "epoch.train": [1.0, 0.1, 0.1],
            "epoch.validate": [0.12, 0.02, 0.02],
            "epoch.checkpoint": [0.006, 0.006],
            "epoch.report": [0.013, 0.013, 0.013],
            "epoch.between": [0.002, 0.002],
            "start.build_data": [0.06],
            "end.export": [0.03],
        }
    }
    side = {"trials": [trial, trial]}
    result = overhead.breakdown(side)
    assert result["per_epoch_ms"]["epoch.train"] == pytest.approx(100.0)  # the first epoch left out
    assert result["per_epoch_ms"]["epoch.checkpoint"] == pytest.approx(4.0)
    assert result["per_epoch_ms"]["epoch.between"] == pytest.approx(2.0)  # has no first epoch to leave out
    assert result["per_trial_ms"] == pytest.approx({"end.export": 30.0, "start.build_data": 60.0})
    assert result["tracing_ms"] == pytest.approx(1120.0 - 120.0)
    assert result["model_s"] == pytest.approx(2 * (1.12 + 0.24))
    assert result["later_epoch_overhead"] == pytest.approx((4.0 + 13.0) / 120.0)
    assert overhead.breakdown({"trials": [{"pieces": {}}]})["later_epoch_overhead"] is None


def test_regressions_name_the_pieces_that_grew_beyond_the_threshold_and_noise() -> None:
    published = {"per epoch: epoch.report": 10.0, "per epoch: epoch.memory": 0.4, "per trial: tracing": 900.0}
    now = {
        "per epoch: epoch.report": 13.0,  # +30%
        "per epoch: epoch.memory": 0.9,  # more than doubled, but under a millisecond: noise
        "per trial: tracing": 1000.0,  # +11%
        "per epoch: epoch.new": 2.0,
    }
    assert regressions.grown(published, now) == [
        "per epoch: epoch.new: new, 2.0 ms",
        "per epoch: epoch.report: 10.0 ms -> 13.0 ms (x1.30)",
    ]
    assert regressions.grown(published, now, threshold=0.05)[-1] == "per trial: tracing: 900.0 ms -> 1000.0 ms (x1.11)"
    # On a machine 1.3x slower (plain Keras's epoch says so), the report grew with it: not flagged.
    assert regressions.grown(published, now, pace=1.3) == ["per epoch: epoch.new: new, 2.0 ms"]
    keras = {"plain_keras": {"per_epoch_ms": {"epoch.train": 20.0, "epoch.validate": 2.8}}}
    assert regressions.yardstick_ms({"breakdown": keras}) == pytest.approx(22.8)


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
