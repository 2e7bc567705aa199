"""The compute ledger over hand-made tables: rungs, pruned share, time to best, costs, predicted vs actual.

Three trials on 2 CPUs each, ASHA grace 1, reduction factor 2, 4 epochs (rungs at epochs 1
and 2), the search's clock started at t=1000:

    trial  started  reports at (s since start)  ended  status     val_accuracy per epoch
    a      0        4, 6, 8, 9                  10     completed  0.5, 0.7, 0.8, 0.9
    b      1        3                           5      pruned     0.6
    c      5        6, 8                        9      pruned     0.4, 0.88

Epoch costs (since the previous report; the first from the trial's start, the tail after the
last report added to the last epoch): a 4, 2, 2, 2 (1 + a 1 s tail); b 4 (2 + 2); c 1, 3 (2 + 1).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tunekit.layout import EPOCHS_FILE, PREDICTION_FILE, SPEC_FILE, STARTED_FILE, STARTED_KEY, TRIALS_FILE
from tunekit.results.ledger import compute_ledger, describe, predicted_vs_actual
from tunekit.results.load import ExperimentResults, load
from tunekit.storage.clock import SearchClock

SPEC = """\
name: ledger
trainable: trainables.digits_mlp
metric: {{name: val_accuracy, mode: max}}
budget: {{num_samples: 3, max_epochs: 4, max_concurrent: 2}}
scheduler: {scheduler}
resources: {{cpu: 2, gpu: 0}}
space:
  lr: {{type: loguniform, low: 0.0001, high: 0.1}}
"""
TRIALS = """\
trial_id,number,status,reason,epochs,final_metric,best_metric,rung,wall_seconds,samples_per_second,started_at,ended_at
a,0,completed,trained all 4 epochs,4,0.9,0.9,1,10,1000.0,1000,1010
b,1,pruned,pruned by ASHA at rung 0 (epoch 1),1,0.6,0.6,0,4,2000.0,1001,1005
c,2,pruned,pruned by ASHA at rung 1 (epoch 2),2,0.88,0.88,1,4,,1005,1009
"""
EPOCHS = """\
trial_id,epoch,attempt,resumed_from_epoch,time,val_accuracy,memory_mb,peak_memory_mb
a,1,1,0,4,0.5,100,150
a,2,1,,6,0.7,110,160
a,3,1,,8,0.8,120,155
a,4,1,,9,0.9,120,170
b,1,1,0,3,0.6,90,95
c,1,1,0,6,0.4,80,85
c,2,1,,8,0.88,85,99
"""
ASHA = "{type: asha, grace_period: 1, reduction_factor: 2}"


def experiment(root: Path, *, scheduler: str = ASHA, started: bool = True) -> ExperimentResults:
    root.mkdir(parents=True, exist_ok=True)
    (root / SPEC_FILE).write_text(SPEC.format(scheduler=scheduler))
    (root / TRIALS_FILE).write_text(TRIALS)
    (root / EPOCHS_FILE).write_text(EPOCHS)
    if started:
        (root / STARTED_FILE).write_text(json.dumps({STARTED_KEY: 1000.0}))
    return load(root)


def test_each_rung_holds_its_trials_epochs_and_slot_hours(tmp_path: Path) -> None:
    ledger = compute_ledger(experiment(tmp_path))
    assert ledger.slot_unit == "CPU"
    assert ledger.epochs == 7
    assert ledger.slot_hours == pytest.approx(18 * 2 / 3600)  # 18 trial-seconds on 2 CPUs each
    stretches = [(r.rung, r.first_epoch, r.last_epoch, r.trials, r.epochs) for r in ledger.rungs]
    assert stretches == [(0, 1, 1, 3, 3), (1, 2, 2, 2, 2), (None, 3, 4, 1, 2)]
    assert [r.slot_hours * 3600 / 2 for r in ledger.rungs] == pytest.approx([9, 5, 4])


def test_the_share_spent_on_trials_later_pruned(tmp_path: Path) -> None:
    assert compute_ledger(experiment(tmp_path)).pruned_share == pytest.approx(8 / 18)


def test_time_and_slot_hours_until_the_best_so_far_came_within_tolerance(tmp_path: Path) -> None:
    results = experiment(tmp_path)
    loose = compute_ledger(results, tolerance=0.05)  # within 0.045 of 0.9: c's 0.88 at 8 s
    assert (loose.final_best, loose.seconds_to_best) == (0.9, 8.0)
    assert loose.slot_hours_to_best == pytest.approx((8 + 4 + 3) * 2 / 3600)
    strict = compute_ledger(results, tolerance=0.0)
    assert strict.seconds_to_best == 9.0


def test_costs_follow_the_price_per_slot_hour(tmp_path: Path) -> None:
    ledger = compute_ledger(experiment(tmp_path), tolerance=0.05, price_per_hour=3.6)
    assert ledger.cost == pytest.approx(0.036)
    assert ledger.cost_to_best == pytest.approx(0.03)
    assert compute_ledger(experiment(tmp_path)).cost is None


def test_samples_per_second_and_peak_memory_per_trial(tmp_path: Path) -> None:
    trials = compute_ledger(experiment(tmp_path)).trials
    assert [(t.number, t.samples_per_second, t.peak_memory_mb) for t in trials] == [
        (0, 1000.0, 170.0),
        (1, 2000.0, 95.0),
        (2, None, 99.0),
    ]
    assert [t.slot_hours * 3600 / 2 for t in trials] == pytest.approx([10, 4, 4])


def test_a_fifo_search_is_one_stretch(tmp_path: Path) -> None:
    ledger = compute_ledger(experiment(tmp_path, scheduler="{type: fifo}"))
    assert [(r.rung, r.first_epoch, r.last_epoch, r.trials, r.epochs) for r in ledger.rungs] == [(None, 1, 4, 3, 7)]


def test_without_started_json_times_count_from_the_first_trial(tmp_path: Path) -> None:
    ledger = compute_ledger(experiment(tmp_path, started=False), tolerance=0.05)
    assert ledger.seconds_to_best == 8.0  # trial a started the clock at t=1000 here as well
    assert ledger.slot_hours == pytest.approx(18 * 2 / 3600)


def test_predicted_against_actual_when_a_prediction_was_filed(tmp_path: Path) -> None:
    results = experiment(tmp_path)
    ledger = compute_ledger(results)
    clock = SearchClock.read(tmp_path)
    assert predicted_vs_actual(results, ledger, clock) is None
    prediction = {
        "predicted_wall_seconds": 16.0,
        "predicted_epochs": 7.0,
        "slot_hours": 0.02,
        "launched_at": 995.0,
        "trials": 3,
    }
    (tmp_path / PREDICTION_FILE).write_text(json.dumps(prediction))
    rows = predicted_vs_actual(results, ledger, clock)
    assert rows is not None
    assert [(r["figure"], r["predicted"], r["actual"]) for r in rows] == [
        ("trials", 3.0, 3.0),
        ("wall seconds", 16.0, 15.0),  # the last trial ended 15 s after the launch
        ("epochs", 7.0, 7.0),
        ("CPU-hours", 0.02, pytest.approx(0.01)),
    ]
    assert rows[1]["error_percent"] == pytest.approx(100 / 15)
    text = describe(ledger, rows)
    assert "predicted wall seconds: 16 against 15 actual (+7%)" in text
    assert "spent on trials later pruned: 44%" in text


def test_report_prints_the_ledger_and_adds_it_to_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tunekit.cli import main

    experiment(tmp_path)
    assert main(["report", str(tmp_path), "--tolerance", "0.05", "--price-per-hour", "3.6"]) == 0
    text = capsys.readouterr().out
    assert "within 5.0% of the final best (0.9) after 8.0 active s" in text
    assert "cost at 3.6 per CPU-hour: 0.0360, reaching that best 0.0300" in text
    assert main(["report", str(tmp_path), "--format", "json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["ledger"]["epochs"] == 7 and record["predicted_vs_actual"] is None
    assert record["best"]["trial_id"] == "a"


def test_the_html_page_holds_the_ledger_and_predicted_against_actual(tmp_path: Path) -> None:
    from tunekit.results.report import render_html

    results = experiment(tmp_path)
    (tmp_path / PREDICTION_FILE).write_text(json.dumps({"predicted_wall_seconds": 16.0, "launched_at": 995.0}))
    page = render_html(results, {}, price_per_hour=3.6)
    assert "<h2>Compute ledger</h2>" in page
    assert "44% spent on trials later pruned" in page
    assert "<td>final</td><td>3-4</td><td>1</td><td>2</td>" in page
    assert '<td class="text">wall seconds</td><td>16</td><td>15</td><td>+7%</td>' in page


def test_an_experiment_older_than_the_time_columns_has_an_empty_ledger(tmp_path: Path) -> None:
    experiment(tmp_path)  # then its tables replaced by ones without started_at, ended_at or time
    (tmp_path / TRIALS_FILE).write_text(
        "trial_id,number,status,reason,epochs,final_metric,best_metric\na,0,completed,,4,0.9,0.9\n"
    )
    (tmp_path / EPOCHS_FILE).write_text("trial_id,epoch,val_accuracy\na,1,0.5\n")
    ledger = compute_ledger(load(tmp_path))
    assert (ledger.slot_hours, ledger.epochs, ledger.seconds_to_best, ledger.trials) == (0.0, 0, None, [])
