"""The one computation of every derived figure, over hand-made experiments (milliseconds, no Ray).

The experiment: 2 trials on 1 CPU each, ASHA grace 1, reduction factor 2, 4 epochs. The
search ran 30 s, was stopped for 8,970 s (2 h 29 min), and was resumed for 20 s more:

    trial  spans (active s)    reports at (active s)    status     val_accuracy per epoch
    a      1-30, 31-45         10, 20 | 40, 44          completed  0.5, 0.7 | 0.8, 0.9
    b      2-9                 8                        pruned     0.6

a's time is 29 + 14 = 43 s; its epoch costs are 9, 20 (10 + the 10 s its first span ran on
after epoch 2, lost with the interruption), 9 and 5 (4 + a 1 s tail). Nothing counts the
night between the sessions.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tunekit.layout import (
    EPOCHS_FILE,
    EXPLOITS_FILE,
    PREDICTION_FILE,
    SPANS_FILE,
    SPEC_FILE,
    TRIALS_FILE,
    WARM_START_FILE,
)
from tunekit.results.load import load
from tunekit.results.summary import summarize
from tunekit.storage.clock import SearchClock

SPEC = """\
name: summary
trainable: trainables.digits_mlp
metric: {name: val_accuracy, mode: max}
budget: {num_samples: 2, max_epochs: 4, max_concurrent: 2}
scheduler: {type: asha, grace_period: 1, reduction_factor: 2}
resources: {cpu: 1, gpu: 0}
space:
  learning_rate: {type: loguniform, low: 0.0001, high: 0.1}
  units: {type: choice, values: [64, 128]}
"""
TRIALS = """\
trial_id,number,status,reason,epochs,final_metric,best_metric,rung,wall_seconds,samples_per_second,attempts,started_at,ended_at,params.learning_rate,params.units
a,0,completed,trained all 4 epochs,4,0.9,0.9,1,43.0,,2,1001,10015,0.001,64
b,1,pruned,pruned by ASHA at rung 0 (epoch 1),1,0.6,0.6,0,7.0,,1,1002,1009,0.01,128
"""
EPOCHS = """\
trial_id,epoch,attempt,resumed_from_epoch,time,val_accuracy
a,1,1,0,10,0.5
b,1,1,0,8,0.6
a,2,1,,20,0.7
a,3,2,2,40,0.8
a,4,2,,44,0.9
"""
SPANS = """\
trial_id,span,start,end
a,1,1,30
a,2,31,45
b,1,2,9
"""


def experiment(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / SPEC_FILE).write_text(SPEC)
    (root / TRIALS_FILE).write_text(TRIALS)
    (root / EPOCHS_FILE).write_text(EPOCHS)
    (root / SPANS_FILE).write_text(SPANS)
    SearchClock(1000.0, [[1000.0, 1030.0], [10000.0, 10020.0]]).write(root)
    return root


def test_a_stop_and_a_resume_bill_active_time_only_and_say_how_long_the_search_was_stopped(tmp_path: Path) -> None:
    summary = summarize(load(experiment(tmp_path)))
    assert (summary.active_seconds, summary.downtime_seconds, summary.sessions) == (50.0, 8970.0, 2)
    assert summary.time_lines() == ["active time 0m 50s in 2 sessions; stopped for 2h 29m between them"]
    ledger = summary.ledger
    assert ledger.slot_hours == pytest.approx((43 + 7) / 3600)  # not (10015 - 1001) s for trial a
    assert [t.slot_hours * 3600 for t in ledger.trials] == pytest.approx([43.0, 7.0])
    # Rung 0 holds the first epochs (a: 9 s, b: 7 s), rung 1 a's second (20 s), the rest 14 s.
    assert [round(r.slot_hours * 3600, 6) for r in ledger.rungs] == [16.0, 20.0, 14.0]
    assert ledger.seconds_to_best == 44.0  # active seconds: the resumed session's 14th
    assert ledger.slot_hours_to_best == pytest.approx((29 + 13 + 7) / 3600)
    assert summary.flat_metrics()["wall_seconds"] == 50.0
    assert summary.flat_metrics()["downtime_seconds"] == 8970.0


def test_every_renderer_shows_the_summarys_times(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tunekit.cli import main
    from tunekit.results.report import render_html

    results = load(experiment(tmp_path))
    assert main(["report", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "active time 0m 50s in 2 sessions; stopped for 2h 29m between them" in text
    assert "after 44.0 active s" in text
    assert main(["report", str(tmp_path), "--format", "json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert (record["active_seconds"], record["downtime_seconds"]) == (50.0, 8970.0)
    assert record["ledger"]["slot_hours"] == pytest.approx(50 / 3600)
    page = render_html(results, {})
    assert "<b>0m 50s</b><span>active time</span>" in page
    assert "<b>2h 29m</b><span>stopped between 2 sessions</span>" in page


def test_pbts_best_config_is_the_one_its_model_was_trained_under(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tunekit.cli import main
    from tunekit.results.report import render_html

    root = experiment(tmp_path)
    # Trial a copied trial b at epoch 2 and went on with b's units and a perturbed learning rate.
    (root / EXPLOITS_FILE).write_text(
        "trial_id,number,epoch,source_trial_id,source_number,source_epoch,time,"
        "old.learning_rate,old.units,new.learning_rate,new.units\n"
        "a,0,2,b,1,2,21.0,0.001,64,0.012,128\n"
    )
    results = load(root)
    best = results.best
    assert best is not None and best.trial_id == "a"
    assert best.config == {"learning_rate": 0.012, "units": 128}
    assert best.initial_config == {"learning_rate": 0.001, "units": 64}
    assert [(s.epoch, s.source_number, s.changed) for s in best.lineage] == [
        (2, 1, {"learning_rate": [0.001, 0.012], "units": [64, 128]})
    ]
    assert results.best_config == {"learning_rate": 0.012, "units": 128}
    assert main(["report", str(root)]) == 0
    text = capsys.readouterr().out
    assert (
        "best config (after PBT's exploit steps; the model was trained under it): learning_rate=0.012, units=128"
        in text
    )
    assert "  started as: learning_rate=0.001, units=64" in text
    assert "  epoch 2: copied trial 1 (epoch 2); learning_rate 0.001 -> 0.012, units 64 -> 128" in text
    assert main(["report", str(root), "--format", "json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["best"]["config"] == {"learning_rate": 0.012, "units": 128}
    assert record["best"]["lineage"][0]["source_number"] == 1
    page = render_html(results, {})
    assert '<td class="text">units</td><td class="text">128</td><td class="text">64</td>' in page


def test_a_warm_start_reports_both_scopes_of_best(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tunekit.cli import main

    root = experiment(tmp_path)
    inherited = {"source": "/runs/earlier", "number": 3, "metric": 0.95, "status": "completed", "epochs": 4}
    record = {"sources": ["/runs/earlier"], "used": 5, "skipped": {}, "best": {**inherited, "config": {"units": 64}}}
    (root / WARM_START_FILE).write_text(json.dumps(record))
    summary = summarize(load(root))
    assert summary.best is not None and (summary.best.trial_id, summary.best.scope) == ("a", "this experiment")
    other = summary.best_including_history
    assert other is not None and (other.scope, other.source, other.number, other.metric) == (
        "inherited history",
        "/runs/earlier",
        3,
        0.95,
    )
    assert main(["report", str(root)]) == 0
    text = capsys.readouterr().out
    assert "best: trial 0 (a) val_accuracy=0.9000 after 4 epochs, completed" in text
    assert "best including warm-start history: trial 3 of /runs/earlier val_accuracy=0.9500 (units=64)" in text


def test_a_grown_search_is_predicted_again_for_all_its_trials(tmp_path: Path) -> None:
    root = experiment(tmp_path)
    measurement = {
        "target": "local",
        "measured_at": 0.0,
        "cpus": 2.0,
        "gpus": 0.0,
        "startup_s": 5.0,
        "new_worker_first_epoch_s": 6.0,
        "reused_first_epoch_s": 2.0,
        "epoch_s": 1.0,
        "gap_s": 0.5,
        "end_s": 0.5,
        "probe_trials": 4,
        "probe_epochs": 8,
        "probe_seconds": 30.0,
    }
    # Filed for 1 trial; the search then grew to 2 (spec.yaml's budget).
    filed = {"predicted_wall_seconds": 12.0, "trials": 1, "launched_at": 995.0, "measurement": measurement}
    (root / PREDICTION_FILE).write_text(json.dumps(filed))
    rows = summarize(load(root)).predicted_vs_actual
    assert rows is not None
    by_figure = {row["figure"]: row for row in rows}
    assert (by_figure["trials"]["predicted"], by_figure["trials"]["actual"]) == (2.0, 2.0)
    # Made again for 2 trials, and for its 2 sessions: the second starts Ray again (5 s) and its
    # workers import TensorFlow again (a new worker's first epoch over a reused one's: 4 s).
    from tunekit.search.forecast import Measurement, predict

    one_session = predict(load(root).spec, Measurement.from_dict(measurement)).wall_seconds
    assert one_session > 12.0
    assert by_figure["wall seconds"]["predicted"] == pytest.approx(one_session + 5 + 4)
    assert by_figure["trials"]["sessions"] == 2
    # Actual: active seconds to the last trial's end, on the ledger's clock (30 s, then 15 s).
    assert by_figure["wall seconds"]["actual"] == pytest.approx(30 + 15)
    # The CPU-hours too: each slot's new worker imports TensorFlow again (4 s, 1 CPU a trial).
    predicted = predict(load(root).spec, Measurement.from_dict(measurement))
    extra = predicted.concurrency * 4 / 3600
    assert by_figure["CPU-hours"]["predicted"] == pytest.approx(predicted.slot_hours + extra, abs=1e-5)
    assert by_figure["CPU-hours"]["error_percent"] is not None and not by_figure["trials"]["partial"]

    # Grown to 3: the third has not run yet, so nothing is compared but the trials.
    spec_file = root / "spec.yaml"
    spec_file.write_text(spec_file.read_text().replace("num_samples: 2", "num_samples: 3"))
    rows = summarize(load(root)).predicted_vs_actual
    assert rows is not None and rows[0]["partial"] and rows[0]["predicted"] == 3.0
    assert [row["error_percent"] for row in rows[1:]] == [None, None, None]
    from tunekit.results.ledger import describe

    text = describe(summarize(load(root)).ledger, rows)
    assert "predicted for 3 trials; 2 ran in 2 sessions (the figures below are compared once all have run)" in text


def test_the_clock_leaves_out_the_time_between_sessions() -> None:
    clock = SearchClock(100.0, [[100.0, 110.0], [500.0, 505.0]])
    assert [clock.active_at(t) for t in (100.0, 105.0, 300.0, 502.0, 900.0)] == [0.0, 5.0, 10.0, 12.0, 15.0]
    assert clock.wall_at(12.0) == 502.0
    assert (clock.active_seconds, clock.downtime_seconds) == (15.0, 390.0)
    clock.begin(now=1000.0)  # a third session, running: its end follows the wall clock
    assert clock.active_at(1004.0) == 19.0


def test_a_session_whose_clock_runs_behind_counts_after_the_earlier_ones() -> None:
    # Seed 694332 of the fault explorer: a resume on a clock 5 minutes behind began its session
    # before the last one's end, and its moments read 0 s on, overlapping the trial's earlier span.
    clock = SearchClock(1000.0, [[1000.0, 1025.9]])
    clock.begin(now=700.0)
    assert clock.active_at(711.2) == pytest.approx(25.9 + 11.2)
    clock.end(now=720.0)
    clock.begin(now=2000.0)  # and a later one on a clock that is right again
    assert [clock.active_at(t) for t in (715.0, 1010.0, 1900.0, 2001.0)] == pytest.approx([40.9, 10.0, 45.9, 46.9])


def test_the_report_counts_trials_the_tables_still_hold_running(tmp_path: Path) -> None:
    # After a kill -9 of the driver, trials.csv keeps its running trials: the counts say so.
    from tunekit.results.closing import closing_lines

    results = load(experiment(tmp_path))
    assert closing_lines(results, summarize(results))[0] == "trials: 1 completed, 1 pruned, 0 stopped, 0 failed"
    results.trials.loc[results.trials["trial_id"] == "b", "status"] = "running"
    lines = closing_lines(results, summarize(results))
    assert lines[0] == "trials: 1 completed, 0 pruned, 0 stopped, 0 failed, 1 running"


def test_the_report_says_how_many_trials_a_spent_time_budget_left_unstarted(tmp_path: Path) -> None:
    import dataclasses

    from tunekit.results.closing import closing_lines

    results = load(experiment(tmp_path))
    spec = results.spec
    planned = dataclasses.replace(spec, budget=dataclasses.replace(spec.budget, num_samples=5, time_budget_s=14.0))
    results = dataclasses.replace(results, spec=planned)
    assert "not started" not in closing_lines(results, summarize(results))[0]  # no budget ran out
    stopped = results.trials["trial_id"] == "b"
    results.trials.loc[stopped, ["status", "reason"]] = [
        "stopped",
        "the search's time budget of 14 s ran out after 1 epoch",
    ]
    line = closing_lines(results, summarize(results))[0]
    assert line == "trials: 1 completed, 0 pruned, 1 stopped, 0 failed, 3 not started (the time budget ran out)"
