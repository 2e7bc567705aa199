"""The benchmarks' analysis and rendering, on made-up numbers, with no Ray and no TensorFlow.

Timings are never checked: benchmarks are not tests. The benchmarks themselves run with
``python -m benchmarks.run`` (``--smoke`` checks that each runs); even at smoke size each
costs one to nine minutes of real searches, which CI's 25 minutes cannot hold beside the
end-to-end tests.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from benchmarks import (
    cold_start,
    common,
    overhead,
    pareto,
    quality,
    regressions,
    run,
    scale,
    tracking_cost,
    warm_runtime,
    whole_process,
)

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


def test_quality_reads_each_task_against_its_own_threshold_and_meets_on_ties() -> None:
    settings = {"budget_s": 40.0, "max_epochs": 2}

    def run(method: str, task: str, accuracy: float) -> dict[str, Any]:
        points = [{"t": 10.0, "val_accuracy": accuracy, "epoch": 1, "trial": "a"}]
        return {"method": method, "task": task, "seed": 0, "points": points}

    # 0.96 reaches digits' 0.95 but not breast cancer's 0.97; equal curves meet "at least".
    digits = quality.analyse([run("tunekit", "digits", 0.96), run("kerastuner", "digits", 0.96)], settings, "digits")
    assert digits["medians"]["tunekit"]["time_to_accuracy_s"] == 10.0
    met = {f["name"]: f["met"] for f in digits["figures"] if f["met"] is not None}
    assert met == {
        "digits, 40 s: tunekit (TPE + ASHA): area under best-so-far curve (median)": True,
        "digits, 40 s: tunekit (TPE + ASHA): time to val_accuracy 0.95 (median)": True,
    }
    cancer = quality.analyse([run("tunekit", "breast_cancer", 0.96)], settings, "breast_cancer")
    assert cancer["medians"]["tunekit"]["time_to_accuracy_s"] is None
    spec = quality.task_spec("breast_cancer", training={"seed": 1})
    assert spec["trainable"] == "benchmarks.quality" and spec["space"] == quality.CANCER_SPACE


def test_quality_s_area_from_the_first_report_takes_the_start_up_out_on_a_window_every_run_has() -> None:
    def run(method: str, points: list[tuple[float, float]]) -> dict[str, Any]:
        curve = [{"t": t, "val_accuracy": v, "epoch": 1, "trial": "a"} for t, v in points]
        return {"method": method, "task": "digits", "seed": 0, "points": curve}

    # tunekit starts 10 s later and climbs faster: behind over the budget, ahead from its own start.
    late_fast = run("tunekit", [(15.0, 0.9), (16.0, 1.0)])
    early_slow = run("kerastuner", [(5.0, 0.5), (15.0, 0.9), (25.0, 1.0)])
    result = quality.analyse([late_fast, early_slow], {"budget_s": 40.0, "max_epochs": 2}, "digits")
    # the window is 40 - 15 = 25 s from each run's first report
    assert quality.area_from_first_report(late_fast["points"], 40.0, 25.0) == pytest.approx((0.9 + 24 * 1.0) / 25)
    assert result["medians"]["tunekit"]["area_after_first_report"] == pytest.approx(24.9 / 25)
    assert result["medians"]["kerastuner"]["area_after_first_report"] == pytest.approx((0.5 * 10 + 0.9 * 10 + 5) / 25)
    assert result["medians"]["tunekit"]["area"] < result["medians"]["kerastuner"]["area"]


def test_tracking_cost_reads_tensorboard_s_share_and_its_driver_thread_cost_per_epoch() -> None:
    def side(on: bool, seconds: float, **pieces: float) -> dict[str, Any]:
        return {"tracked": on, "process_s": seconds, "epochs_trained": 200, "pieces": pieces,
                "run_s": seconds, "last_epoch_s": seconds - 1, "driver_cpu_s": 3.0}  # fmt: skip

    on = {"tb_hooks_s": 0.02, "tb_epochs": 200.0, "tb_writer_cpu_s": 0.4, "tb_final_wait_s": 0.05}
    result = tracking_cost.analyse([side(True, 51.0, **on), side(False, 50.0)])
    assert tracking_cost.tensorboard_share(result["ratio"]) == pytest.approx(1 / 51)
    assert result["tb_hooks_per_epoch_ms"] == pytest.approx([0.1])
    assert result["tb_writer_cpu_per_epoch_ms"] == pytest.approx([2.0])
    share = tracking_cost.tensorboard_figures(result)[0]
    assert share["value"] == pytest.approx(100 / 51) and share["met"] is True


def test_tracking_cost_gives_every_pair_s_raw_wall_ratio_beside_the_per_epoch_one() -> None:
    def side(on: bool, seconds: float, epochs: int) -> dict[str, Any]:
        return {"tracked": on, "process_s": seconds, "epochs_trained": epochs, "pieces": {}}

    # ASHA let the second pair's tracked search train fewer epochs: per epoch it reads dearer.
    sides = [side(True, 22.0, 240), side(False, 20.0, 240), side(True, 23.0, 200), side(False, 23.0, 250)]
    result = tracking_cost.analyse(sides)
    assert result["ratios"] == pytest.approx([1.1, 1.0])
    assert result["every_pair_ratio"] == pytest.approx(1.05)
    assert result["per_epoch_ratios"] == pytest.approx([1.1, 1.25])
    assert result["same_work_ratios"] == pytest.approx([1.1])


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
    # One run of each side to 2,000 trials in windows of 100, reported at 1,000 and 2,000.
    window = {"trials": 100, "split_ms": {"sampler": 1.0}, "trials_per_minute": 300.0}
    window |= {"backlog_max": 4, "backlog_now": 0, "rss_mb": 300.0, "experiment_dir_mb": 1.0, "study_mb": 1.0}
    rows = [
        {**window, "window": n, "ended": 100 * n, "elapsed_s": 10.0 * n, "driver_cpu_per_trial_ms": 10.0}
        for n in range(1, 21)
    ]
    rows[9]["driver_cpu_per_trial_ms"] = 11.0  # the 1,000-size's last tenth
    rows[-2]["driver_cpu_per_trial_ms"] = rows[-1]["driver_cpu_per_trial_ms"] = 13.0  # the 2,000-size's
    counted = {"parents": 1, "children": 2000, "trials": 2000, "epoch_points": 5000, "epochs": 5000}
    tunekit_side = {"trials": 2000, "wall_s": 205.0, "windows": rows, "mlflow": counted}
    tunekit_side |= {"tracking_backend": "postgresql", "load_s": 1.0, "report_s": 2.0, "tracking_server_cpu_s": 50.0}
    ray_rows = [
        {"trials": 100, "ended": 100 * n, "elapsed_s": 8.0 * n, "trials_per_minute": 600.0} for n in range(1, 21)
    ]
    for row in ray_rows:
        row |= {"window": row["ended"] // 100, "driver_cpu_per_trial_ms": 5.0 if row["ended"] <= 1800 else 6.0}
    sampler_at = [{"ended": 100 * n, "sampler_s": 0.5 * n} for n in range(1, 21)]
    # 1,000 trials of Ray Tune + OptunaSearch in 120 s; then stopped at tunekit's whole wall.
    optuna_rows = [{**row, "elapsed_s": 12.0 * row["ended"] / 100} for row in ray_rows[:15]]
    sides: dict[str, dict[str, Any]] = {
        "tunekit": tunekit_side,
        "tunekit_untracked": {
            "wall_s": 150.0,
            "windows": [{**row, "elapsed_s": 7.0 * n} for n, row in enumerate(rows, 1)],
        },
        "ray_floor": {"wall_s": 162.0, "windows": ray_rows},
        "ray_optuna": {"wall_s": 206.0, "windows": optuna_rows, "stopped_after_s": 205.0, "ended": 1500},
        "optuna_floor": {"sampler_at": sampler_at, "finals": [[5, 0.90], [899, 0.95]], "history": None},
        "optuna_history": {
            "sampler_at": [{**p, "sampler_s": p["sampler_s"] * 0.4} for p in sampler_at],
            "finals": [[5, 0.90], [1099, 0.949]],
            "history": 1000,
        },
    }
    figures, ratios = scale.analyse(sides, [1000, 2000])
    named = {f["name"]: f for f in figures}
    history = named["2000 trials: TPE modelling the last 1,000 trials, sampler seconds / whole history's"]
    assert history["value"] == pytest.approx(0.4)
    assert history["note"].startswith("best final value 0.9490 (reached by trial 1100) against 0.9500 (trial 900)")
    early = named["1000 trials: TPE modelling the last 1,000 trials, sampler seconds / whole history's"]
    assert early["note"].startswith("best final value 0.9000 (reached by trial 6) against 0.9500 (trial 900)")
    # The 1,000-trial size is the run's first 1,000: walls when trial 1,000 ended, tenths of 100.
    assert named["1000 trials: driver CPU per trial without the sampler, last tenth / first"]["value"] == 1.0 + 1 / 9
    assert named["1000 trials: wall / (Ray's floor + the sampler's floor)"]["value"] == pytest.approx(100 / (80 + 5.0))
    assert named["1000 trials: Ray Tune + OptunaSearch wall / tunekit's"]["value"] == pytest.approx(1.2)
    # The whole run: its last tenth (two windows of 13 ms) against its first (10 ms), sampler left out.
    growth = named["2000 trials: driver CPU per trial without the sampler, last tenth / first"]
    assert growth["value"] == pytest.approx(12 / 9) and growth["met"] is False
    assert growth["note"] == "with the sampler's own work: 1.30x; Ray's floor alone: 1.20x"
    assert named["2000 trials: wall / (Ray's floor + the sampler's floor)"]["value"] == pytest.approx(
        205 / (162 + 10.0)
    )
    untracked = named["2000 trials: tunekit with tracking off, wall / (Ray's floor + the sampler's floor)"]
    assert untracked["value"] == pytest.approx(150 / (162 + 10.0))
    assert untracked["note"] == "150 s against 205 s with MLflow tracking on"
    early_untracked = named["1000 trials: tunekit with tracking off, wall / (Ray's floor + the sampler's floor)"]
    assert early_untracked["value"] == pytest.approx(70 / (80 + 5.0))
    stopped = named["2000 trials: Ray Tune + OptunaSearch wall / tunekit's"]
    assert stopped["met"] is True and stopped["note"].startswith("at least: stopped after 205 s")
    assert named["2000 trials: MLflow lost nothing (postgresql)"]["met"] is True
    server = named["2000 trials: MLflow server and PostgreSQL CPU per trial"]
    assert server["value"] == pytest.approx(25.0)
    assert server["note"] == (
        "50 s of CPU over the search, on the same 2 cores; the tracked search took 55 s longer than the untracked one"
    )
    assert "1000 trials: MLflow lost nothing (postgresql)" not in named  # counted once, at the end
    assert (
        ratios[0]
        == "1000 trials: tunekit 100 s; Ray floor 80 s; Ray Tune + OptunaSearch 120 s; the sampler alone 5.0 s"
    )
    assert ratios[1].startswith("2000 trials: tunekit 205 s; Ray floor 162 s; Ray Tune + OptunaSearch more than 205 s")
    last = named["2000 trials, tenth 10 (to trial 2000): driver CPU per trial"]
    assert "300 trials/min; without the sampler 60 ms of CPU per second; " in last["note"]  # 12 ms x 5/s
    ray_last = named["2000 trials, Ray's floor, tenth 10 (to trial 2000): driver CPU per trial"]
    assert (ray_last["value"], ray_last["note"]) == (6.0, "600 trials/min")
    sides["tunekit"]["mlflow"] = {**counted, "epoch_points": 4999}
    figures, _ = scale.analyse(sides, [1000, 2000])
    assert next(f for f in figures if "lost nothing" in f["name"])["met"] is False
    # TPE's whole history run only to the next-largest size: its comparison stops there.
    sides["optuna_floor"]["sampler_at"] = sampler_at[:10]
    names = {f["name"] for f in scale.analyse(sides, [1000, 2000])[0]}
    assert "1000 trials: TPE modelling the last 1,000 trials, sampler seconds / whole history's" in names
    assert not any(name.startswith("2000 trials: TPE modelling") for name in names)


def test_the_tracking_server_s_cpu_counts_its_ended_children_too() -> None:
    # A shell whose child burns about 0.3 s of CPU and ends before it is measured (the
    # shell reaped it), the way PostgreSQL's backends and MLflow's workers come and go.
    burn = "import time; t = time.process_time(); exec('while time.process_time() - t < 0.3: pass')"
    shell = subprocess.Popen(["sh", "-c", f'"{sys.executable}" -c "{burn}"; sleep 30'])
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and [c.name() for c in psutil.Process(shell.pid).children()] != ["sleep"]:
            time.sleep(0.05)  # the burner is still running
        assert scale._cpu_of_trees([shell.pid]) >= 0.25
        assert scale._cpu_of_trees([shell.pid, shell.pid]) < 0.6  # each process once
    finally:
        shell.kill()
        shell.wait()


def test_the_mlflow_writer_s_cost_follows_the_events_a_window_queued_not_when_it_sent_them() -> None:
    windows = scale.Windows(window=100, planned=200)
    spent = iter([1.0, 3.0])
    windows.writer.seconds = lambda: next(spent)  # type: ignore[method-assign]
    # Window 1 took 100 events in 1 s and left 50 queued; window 2 took 200 (those 50 too) in 2 s.
    windows.writer.taken, windows._backlog = 100, 50
    assert windows._writer_cost(100) == (1.0, pytest.approx(1.5))
    windows.writer.taken, windows._backlog = 300, 0
    assert windows._writer_cost(100) == (2.0, pytest.approx(1.5))
    row = {"driver_cpu_per_trial_ms": 20.0, "driver_cpu_own_ms": 25.0, "split_ms": {"sampler": 5.0}}
    assert (scale._without_sampler(row), scale._without_sampler(row, own=False)) == (20.0, 15.0)


def test_the_scale_profile_counts_the_sampler_whole_by_sampling_the_thread_s_cpu() -> None:
    import inspect
    import threading
    import time

    import optuna

    from tunekit.search.study import PinnableSampler

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=PinnableSampler(optuna.samplers.TPESampler(seed=0, n_startup_trials=5)))
    sampler = scale.CpuSampler(threading.get_ident())
    started = time.thread_time()
    sampler.start()
    # Enough trials for about a hundred samples: a few samples under load gave whole deltas to
    # whatever frame was current (36 ms of CPU in all, 14 in the sampler, in a loaded CI run).
    study.optimize(lambda trial: trial.suggest_float("x", 0.0, 1.0) ** 2, n_trials=200)
    time.sleep(0.05)  # waiting costs no CPU, and is not counted
    sampler.stop()
    spent = time.thread_time() - started
    # TPE's fitting is most of an in-memory study's CPU, numpy's and scipy's under it included
    # (through tunekit's sampler wrapper: with its file's path stale they went to "rest", 30 %);
    # the samples add up to the thread's CPU.
    assert sampler.buckets["sampler"] > 0.8 * sampler.total()
    assert 0.8 * spent <= sampler.total() <= spent * 1.01
    assert any("optuna/samplers" in row["function"] for row in sampler.top_functions(5))
    # The wrapper's file is where it lives (a module split left the profiler naming the old one).
    assert inspect.getsourcefile(PinnableSampler).endswith(scale.SAMPLER_WRAPPER)  # type: ignore[union-attr]


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


def test_regressions_scale_the_start_up_by_plain_ray_tune_s_start_up_not_by_a_model_s_epoch() -> None:
    published = {"search: start-up": 8000.0, "per trial: tracing": 400.0}
    now = {"search: start-up": 9000.0, "per trial: tracing": 410.0}
    # Model steps ran twice as fast as on the published day; Ray and TensorFlow started 1.2x slower.
    assert regressions.grown(published, now, pace=0.5) == [
        "search: start-up: 4000.0 ms -> 9000.0 ms (x2.25)",
        "per trial: tracing: 200.0 ms -> 410.0 ms (x2.05)",
    ]
    assert regressions.grown(published, now, pace=0.5, startup_pace=1.2) == [
        "per trial: tracing: 200.0 ms -> 410.0 ms (x2.05)"
    ]
    assert regressions.startup_yardstick_ms({"summary": {"plain_ray_tune": {"startup_s": 6.5}}}) == 6500.0
    assert regressions.startup_yardstick_ms({"summary": {"plain_ray_tune": {}}}) is None


def _overhead_run(mode: str, startup_s: float, overhead_s: float, plain_startup_s: float) -> dict[str, Any]:
    return {
        "date": "2026-11-28T00:00:00",
        "mode": mode,
        "details": {
            "tracking": "on",
            "summary": {
                "tunekit": {"startup_s": startup_s, "overhead_per_trial_s": overhead_s},
                "plain_ray_tune": {"startup_s": plain_startup_s},
            },
            "breakdown": {
                "tunekit": {"per_epoch_ms": {"epoch.train": 20.0}, "per_trial_ms": {}, "tracing_ms": 400.0},
                "plain_keras": {"per_epoch_ms": {"epoch.train": 12.0, "epoch.validate": 3.0}},
            },
        },
    }


def test_regressions_publish_both_yardsticks_and_leave_out_the_per_trial_overhead_across_modes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(regressions, "PUBLISHED", tmp_path / "published.json")
    quick, full = tmp_path / "quick", tmp_path / "full"
    for folder, run_ in ((quick, _overhead_run("quick", 8.0, 1.5, 6.0)), (full, _overhead_run("full", 7.5, 3.0, 6.0))):
        folder.mkdir()
        (folder / "overhead.json").write_text(json.dumps(run_))
    assert regressions.main(["--out", str(quick), "--publish"]) == 0
    record = json.loads((tmp_path / "published.json").read_text())
    assert (record["mode"], record["yardstick_ms"], record["startup_yardstick_ms"]) == ("quick", 15.0, 6000.0)
    capsys.readouterr()
    # A full run's per-trial overhead doubled only because it is another mode: not flagged.
    assert regressions.main(["--out", str(full)]) == 0
    printed = capsys.readouterr().out
    assert "this is a full run: its per-trial overhead is left out" in printed
    assert "nothing grew by more than 20%" in printed
    # The same figure in a quick run is flagged.
    (quick / "overhead.json").write_text(json.dumps(_overhead_run("quick", 8.0, 3.0, 6.0)))
    assert regressions.main(["--out", str(quick)]) == 1
    assert "search: per-trial overhead: 1500.0 ms -> 3000.0 ms (x2.00)" in capsys.readouterr().out


def test_overhead_pairs_only_sides_that_did_the_same_about_tracking() -> None:
    tracked, untracked = {"tracked": True}, {"tracked": False}
    overhead.check_row(tracked, {"tracked": True}, "tracked")
    overhead.check_row(untracked, {"tracked": False}, "untracked")
    with pytest.raises(ValueError, match="pairs tunekit untracked with plain Ray Tune tracked: not equal terms"):
        overhead.check_row(untracked, tracked, "tracked")
    with pytest.raises(ValueError, match="tunekit tracking unknown"):
        overhead.check_row({}, untracked, "untracked")
    on = {"wall_s": 21.0, "wall_per_epoch_s": 0.21, "epochs_trained": 100}
    off = {"wall_s": 20.0, "wall_per_epoch_s": 0.2, "epochs_trained": 100}
    cost = overhead.tracking_cost(on, off)
    assert cost["wall_ratio"] == pytest.approx(1.05)
    assert cost["per_epoch_ratio"] == pytest.approx(1.05)
    assert cost["same_epochs"] and cost["epochs"] == (100, 100)
    # Each side's own load goes with the headline: a spike during one side moves the ratio.
    loaded = {"load_before": [0.1, 0, 0], "load_after": [2.0, 0, 0]}
    busy = {"load_before": [7.6, 0, 0], "load_after": [14.9, 0, 0]}
    assert overhead.side_loads(loaded, busy) == " (load: tunekit 0.1 -> 2.0, plain 7.6 -> 14.9)"
    assert overhead.side_loads({}, busy) == ""


def test_the_whole_process_row_times_a_command_from_launch_to_exit_and_after_its_last_line(tmp_path: Path) -> None:
    log = tmp_path / "side.log"
    # A side that prints, then keeps running before it exits: its last line comes before its exit.
    command = [sys.executable, "-c", "import time; print('closing line', flush=True); time.sleep(0.3)"]
    timed = whole_process.timed_command(command, log, common.child_env())
    assert log.read_text() == "closing line\n"
    assert (
        0
        < timed["last_line_s"]
        < timed["last_line_s"] + timed["exit_after_last_line_s"]
        == pytest.approx(timed["wall_s"])
    )
    with pytest.raises(common.ChildFailed, match="exited 3; log tail:\nbroken"):
        whole_process.timed_command([sys.executable, "-c", "print('broken'); exit(3)"], log, common.child_env())

    def side(wall: float, epochs: int, gap: float, load: float) -> dict[str, Any]:
        return {
            "wall_s": wall,
            "epochs_trained": epochs,
            "exit_after_last_line_s": gap,
            "load_before": [load, 0, 0],
            "load_after": [load + 1, 0, 0],
        }

    figures, (line,) = whole_process.row(side(30.0, 240, 0.2, 1.5), side(120.0, 256, 1.9, 2.0))
    by_name = {f["name"]: f for f in figures}
    ratio = by_name["whole process, both tracked: wall-time ratio (plain Ray Tune script / tunekit command)"]
    assert ratio["value"] == pytest.approx(4.0)
    gap = by_name["whole process: tunekit command's exit after its last line"]
    assert (gap["value"], gap["target"], gap["met"]) == (0.2, "<= 0.5 s", True)
    assert line == (
        "whole process, both tracked (launch to exit, each a fresh process): tunekit command 30 s vs plain Ray "
        "Tune script 120.0 s -> 4x (240 vs 256 epochs); exit after the last line 0.2 s vs 1.9 s (load: tunekit "
        "1.5 -> 2.5, plain 2.0 -> 3.0)"
    )
    assert not whole_process.row(side(30.0, 240, 2.8, 1.5), side(120.0, 256, 1.9, 2.0))[0][6]["met"]


def test_the_warm_runtime_row_times_the_first_epoch_line_and_the_exit_and_refuses_a_cold_search(
    tmp_path: Path,
) -> None:
    lines = "on the warm runtime (tunekit up, pid 1)", "[00:00] first epoch reported (trial 0); training", "best"
    script = f"import time; print({lines[0]!r}); time.sleep(0.2); print({lines[1]!r}); print({lines[2]!r})"
    timed = warm_runtime.timed_search([sys.executable, "-c", script], tmp_path, common.child_env())
    assert 0.2 < timed["first_epoch_s"] < timed["wall_s"] and timed["exit_after_last_line_s"] >= 0
    with pytest.raises(common.ChildFailed, match="ran cold"):
        warm_runtime.timed_search([sys.executable, "-c", f"print({lines[1]!r})"], tmp_path, common.child_env())

    def search(kind: str, first_epoch: float) -> dict[str, Any]:
        return {"kind": kind, "first_epoch_s": first_epoch, "wall_s": 3.0, "exit_after_last_line_s": 0.1, "load": 1.0}

    runs = [search("first on the new runtime", 2.5), search("after a pause", 1.2), search("right after", 1.9)]
    figures = {f["name"]: f for f in warm_runtime.analyse({"runs": runs})["figures"]}
    assert figures["after a pause: first epoch from the launch (median of 1)"]["met"] is True
    assert figures["right after: first epoch from the launch (median of 1)"]["met"] is False
    assert figures["the runtime's first search (it also made the MLflow store): first epoch from the launch"][
        "value"
    ] == pytest.approx(2.5)


def test_the_tunekit_side_of_the_whole_process_row_is_the_command_a_user_types(tmp_path: Path) -> None:
    command = whole_process.tunekit_command(
        {"num_samples": 3, "max_epochs": 2, "grace_period": 1}, tmp_path, "sqlite:///x.db"
    )
    assert Path(command[0]).name == "tunekit" and command[1:3] == ["run", str(common.DIGITS_SPEC)]
    assert command[3:] == [
        "--storage", str(tmp_path), "--name", "tunekit", "--tracking-uri", "sqlite:///x.db",
        "--set", "budget.num_samples=3", "--set", "budget.max_epochs=2", "--set", "scheduler.grace_period=1",
        "--set", "tracking.experiment=whole-process",
    ]  # fmt: skip


def test_regressions_compare_the_row_that_tracked_as_the_published_one_did() -> None:
    keras = {"per_epoch_ms": {"epoch.train": 12.0, "epoch.validate": 3.0}}
    untracked = {"summary": {"tunekit": {"startup_s": 7.0}}, "breakdown": {"tunekit": {"per_epoch_ms": {}}}}
    run = {
        "tracking": "on",
        "summary": {"tunekit": {"startup_s": 9.0}},
        "breakdown": {"tunekit": {"per_epoch_ms": {}}, "plain_keras": keras},
        "untracked": untracked,
    }
    assert regressions.row_of(run, "on") is run
    off = regressions.row_of(run, "off")
    assert off is not None and off["summary"]["tunekit"]["startup_s"] == 7.0
    assert regressions.yardstick_ms(off) == 15.0  # the machine's yardstick travels with the row
    assert regressions.row_of({"tracking": "on"}, "off") is None
    legacy = {"summary": {"tunekit": {"startup_s": 8.0}}}  # tunekit untracked, before the equal-terms change
    assert regressions.row_of(legacy, "off") is legacy
    assert regressions.row_of(legacy, "on") is None
    whole_process_only: dict[str, Any] = {"whole_process": {}}  # overhead --rows whole
    assert regressions.row_of(whole_process_only, "off") is None
    assert regressions.row_of(whole_process_only, "on") is None


def test_regressions_refuse_to_compare_a_tracked_publication_with_an_untracked_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(regressions, "PUBLISHED", tmp_path / "published.json")
    (tmp_path / "overhead.json").write_text(json.dumps(_overhead_run("quick", 8.0, 1.5, 6.0)))
    assert regressions.main(["--out", str(tmp_path), "--publish"]) == 0
    assert json.loads((tmp_path / "published.json").read_text())["tracking"] == "on"
    legacy = _overhead_run("quick", 8.0, 1.5, 6.0)
    del legacy["details"]["tracking"]
    (tmp_path / "overhead.json").write_text(json.dumps(legacy))
    capsys.readouterr()
    assert regressions.main(["--out", str(tmp_path)]) == 2
    assert "has no tracking on row" in capsys.readouterr().out


def test_cold_start_pieces_follow_the_marks_and_the_pairs_give_the_ratio() -> None:
    marks = {"imported": 1.0, "run_called": 1.1, "ray_init_started": 1.3, "ray_init_ended": 3.3,
             "tuner_started": 3.4, "tuner_ended": 4.0, "loop_started": 4.5, "build_started": 8.0,
             "build_ended": 8.2, "first_epoch": 9.0}  # fmt: skip
    tk = cold_start.pieces(marks, cold_start.TUNEKIT_PIECES)
    assert tk["imports (tunekit, the spec)"] == pytest.approx(1.1)
    assert tk["ray.init"] == pytest.approx(2.0)
    assert tk["to the trial's build_data (actor, TensorFlow import, trial module)"] == pytest.approx(3.5)
    assert tk["first epoch (compile, tracing, steps, report)"] == pytest.approx(0.8)
    assert cold_start.pieces({}, cold_start.KERASTUNER_PIECES)["tuner built"] is None
    runs = [
        {"side": "tunekit", "marks": {**marks, "first_epoch": 9.0}},
        {"side": "kerastuner", "marks": {"first_epoch": 6.0}},
        {"side": "tunekit", "marks": {**marks, "first_epoch": 12.0}},
        {"side": "kerastuner", "marks": {"first_epoch": 6.0}},
    ]
    result = cold_start.analyse(runs)
    assert result["ratios"] == pytest.approx([1.5, 2.0])
    assert result["ratio"] == pytest.approx(1.75)
    assert result["met"] is False


def test_tracking_cost_pairs_tracked_with_the_untracked_run_after_it() -> None:
    def side(tracked: bool, seconds: float, epochs: int, **pieces: float) -> dict[str, Any]:
        return {"tracked": tracked, "process_s": seconds, "epochs_trained": epochs, "pieces": pieces,
                "run_s": seconds - 2, "last_epoch_s": seconds - 2.5, "driver_cpu_s": 5.0 if tracked else 3.0}  # fmt: skip

    sides = [
        side(True, 21.0, 100, writer_cpu_s=2.0),
        side(False, 20.0, 100),
        side(True, 33.0, 110),
        side(False, 30.0, 100),
    ]
    result = tracking_cost.analyse(sides)
    assert result["ratios"] == pytest.approx([1.05, 1.1])
    assert result["per_epoch_ratios"] == pytest.approx([1.05, 1.0])
    assert result["ratio"] == pytest.approx(1.025)  # per trained epoch: the second pair did other work
    assert result["same_work"] == [True, False]
    assert result["same_work_ratios"] == pytest.approx([1.05])
    assert result["writer_cpu_s"] == pytest.approx(2.0)
    assert result["met"] is True


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
