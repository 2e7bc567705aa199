"""The probe's arithmetic without Ray: concurrency, the simulated search, stored measurements,
and the measurement read from a probe's tables."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tunekit.config.spec import ExperimentSpec, load_spec
from tunekit.errors import TunekitError
from tunekit.layout import EPOCHS_FILE, PREDICTION_FILE, SPEC_FILE, STARTED_FILE, STARTED_KEY, TRIALS_FILE
from tunekit.results.load import load
from tunekit.search.forecast import (
    Measurement,
    _quantile,
    attach_prediction,
    concurrency,
    fingerprint,
    load_measurement,
    predict,
    read_prediction,
    save_measurement,
    target_of,
)
from tunekit.search.plan import plan_budget
from tunekit.search.probe import describe, measure, probe_overrides, probe_sections

REPO = Path(__file__).resolve().parents[3]
DIGITS = REPO / "search_spaces" / "digits_mlp.yaml"
COSTS = Measurement(
    target="local",
    measured_at=0.0,
    cpus=2.0,
    gpus=0.0,
    startup_s=10.0,
    new_worker_first_epoch_s=5.0,
    reused_first_epoch_s=1.0,
    epoch_s=0.5,
    gap_s=0.2,
    end_s=0.1,
    probe_trials=4,
    probe_epochs=12,
    probe_seconds=30.0,
)


def digits(*overrides: str) -> ExperimentSpec:
    return load_spec(DIGITS, overrides)


def test_concurrency_is_the_tightest_of_max_concurrent_trials_and_what_fits() -> None:
    assert concurrency(digits("budget.max_concurrent=4"), cpus=2, gpus=0) == (2, "2 CPUs fit 2 trials of 1 CPU")
    assert concurrency(digits(), cpus=8, gpus=0) == (2, "max_concurrent 2")
    gpu = digits("resources.gpu=0.5", "budget.max_concurrent=8")
    assert concurrency(gpu, cpus=16, gpus=1) == (2, "1 GPUs fit 2 trials of 0.5 GPU")


def test_a_fifo_search_is_simulated_exactly() -> None:
    spec = digits("scheduler.type=fifo", "budget.num_samples=4", "budget.max_epochs=3")
    prediction = predict(spec, COSTS, simulations=3)
    # Two new workers start at 10 s: first report 15, then 15.5, 16, end 16.1; the next two
    # start 0.2 s later in reused workers: 17.3, 17.8, 18.3, end 18.4.
    assert prediction.wall_seconds == pytest.approx(18.4)
    assert prediction.epochs == 12
    assert prediction.slot_hours == pytest.approx((2 * 6.1 + 2 * 2.1) / 3600)
    assert (prediction.concurrency, prediction.slot_unit, prediction.planned_epochs) == (2, "CPU", 12)


def test_asynchronous_asha_spends_more_than_the_ideal_plan_and_less_than_every_epoch() -> None:
    spec = digits()
    prediction = predict(spec, COSTS, simulations=50)
    assert plan_budget(spec).planned_epochs < prediction.epochs < 24 * 20
    # One slot: the first trial at each rung always goes on, so at least one trains to the end.
    alone = predict(digits("budget.max_concurrent=1"), COSTS, simulations=20)
    assert alone.epochs >= 20 + 23 * 2
    assert alone.wall_seconds > prediction.wall_seconds


def test_a_time_budget_caps_the_predicted_wall_time() -> None:
    capped = predict(digits("budget.time_budget_s=20"), COSTS, simulations=10)
    assert capped.wall_seconds <= COSTS.startup_s + 20 + 1e-9


def test_the_cutoff_is_numpys_linear_percentile_as_in_rays_asha() -> None:
    values = [0.3, 0.9, 0.1, 0.5, 0.7]
    for q in (0.0, 0.5, 2 / 3, 0.75, 1.0):
        assert _quantile(sorted(values), q) == pytest.approx(float(np.percentile(values, q * 100)))


def test_a_measurement_is_kept_per_training_fingerprint_and_target(tmp_path: Path) -> None:
    spec = digits()
    assert fingerprint(spec, "local") == fingerprint(digits("budget.num_samples=48", "name=other"), "local")
    # Epochs were timed at the spec's concurrency: a probe at 1 at a time predicts no search at 2.
    assert fingerprint(spec, "local") != fingerprint(
        digits(f"budget.max_concurrent={spec.budget.max_concurrent + 1}"), "local"
    )
    assert fingerprint(spec, "local") != fingerprint(digits("space.units.values=[8, 16]"), "local")
    assert fingerprint(spec, "local") != fingerprint(spec, "10.0.0.1:6379")
    save_measurement(tmp_path, spec, COSTS)
    assert load_measurement(tmp_path, digits("budget.num_samples=48"), "local") == COSTS
    assert load_measurement(tmp_path, spec, "10.0.0.1:6379") is None


def test_target_of_an_address(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert (target_of(None), target_of("local"), target_of("head:6379")) == ("local", "local", "head:6379")
    monkeypatch.setenv("RAY_ADDRESS", "head:6379")
    assert target_of(None) == "head:6379"


def test_run_files_a_prediction_only_when_a_probe_of_the_spec_is_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    spec = digits()
    experiment_dir = tmp_path / "digits-1"
    experiment_dir.mkdir()
    attach_prediction(spec, experiment_dir, None, launched_at=123.0)
    assert not (experiment_dir / PREDICTION_FILE).exists()
    save_measurement(tmp_path, spec, COSTS)
    attach_prediction(spec, experiment_dir, None, launched_at=123.0)
    record = read_prediction(experiment_dir)
    assert record is not None
    assert record["launched_at"] == 123.0
    assert Measurement.from_dict(record["measurement"]) == COSTS
    assert record["predicted_wall_seconds"] == round(predict(spec, COSTS).wall_seconds, 1) > COSTS.startup_s


def test_a_search_whose_spec_changed_since_its_probe_says_what_the_probe_measured_instead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    experiment_dir = tmp_path / "digits-1"
    experiment_dir.mkdir()
    assert attach_prediction(digits(), experiment_dir, None, launched_at=1.0) is None  # never probed: nothing to say
    save_measurement(tmp_path, digits(), COSTS)
    changed = digits("budget.max_concurrent=1", "training.batch_size=16", "budget.num_samples=48")

    note = attach_prediction(changed, experiment_dir, None, launched_at=1.0)

    assert not (experiment_dir / PREDICTION_FILE).exists()
    assert note == (
        f"no prediction for this search: the closest probe of digits-mlp under {tmp_path} measured "
        "training.batch_size 32, not 16; budget.max_concurrent 2, not 1 (`tunekit plan --probe` with the same "
        "spec and --set values measures this one)"
    )
    # A newer probe of another training does not hide the closer one (a user pass: the note
    # named a training change the search had not made).
    save_measurement(tmp_path, digits("training.batch_size=64"), dataclasses.replace(COSTS, measured_at=9.0))
    closest = attach_prediction(digits("budget.max_concurrent=1"), experiment_dir, None, launched_at=1.0)
    assert closest is not None and "measured budget.max_concurrent 2, not 1 (" in closest
    assert attach_prediction(digits("name=other", "training.batch_size=16"), experiment_dir, None, 1.0) is None
    assert attach_prediction(digits("budget.num_samples=48"), experiment_dir, None, launched_at=1.0) is None
    assert read_prediction(experiment_dir) is not None


def test_the_probe_runs_short_fifo_trials_at_the_specs_concurrency() -> None:
    sections = probe_sections(digits(), slots=2)
    assert sections["budget"] == {"num_samples": 4, "max_epochs": 3, "max_concurrent": 2, "time_budget_s": None}
    assert (sections["scheduler"], sections["tracking"]) == ({"type": "fifo"}, {"enabled": False})
    # The space's cost corners run first: units and batch_size are named like what costs.
    corners = [(p["units"], p["batch_size"]) for p in sections["search"]["warm_start"]]
    assert corners == [(256, 16), (32, 64), (32, 16), (256, 64)]
    assert "algorithm" not in sections["search"]  # the spec's own sampler goes on after them
    assert load_spec(DIGITS, [], sections).search.warm_start[0]["units"] == 256  # points the spec accepts


def test_the_users_set_values_shape_the_prediction_never_the_probes_own_budget() -> None:
    overrides = [
        "budget.num_samples=8",
        "budget={num_samples: 9, max_epochs: 50}",
        "scheduler.grace_period=2",
        "tracking.uri=sqlite:///x.db",
        "search.algorithm=grid",
        "search.seed=3",
        "training.batch_size=256",
        "space.units.values=[8, 16]",
    ]
    grid = load_spec(REPO / "search_spaces" / "cifar_resnet_grid.yaml")
    kept = probe_overrides(overrides, probe_sections(grid, slots=2))  # a grid probe samples at random
    assert kept == ["search.seed=3", "training.batch_size=256", "space.units.values=[8, 16]"]
    assert probe_overrides(["search.algorithm=random"], probe_sections(digits(), slots=2)) == [
        "search.algorithm=random"
    ]


PROBE_TRIALS = """\
trial_id,number,status,reason,epochs,final_metric,best_metric,rung,wall_seconds,samples_per_second,started_at,ended_at,params.units
a,0,completed,trained all 3 epochs,3,0.9,0.9,,9,100,1012,1021,32
b,1,completed,trained all 3 epochs,3,0.9,0.9,,9,100,1012,1021.2,256
c,2,completed,trained all 3 epochs,3,0.9,0.9,,2,100,1021.5,1023.6,32
d,3,stopped,the search was stopped after 1 epoch,1,0.9,0.9,,2,100,1021.6,,256
"""
# Reports, in seconds since the search's clock started at 1005.
PROBE_EPOCHS = """\
trial_id,epoch,attempt,resumed_from_epoch,time,val_accuracy,epoch_seconds
a,1,1,0,15,0.5,7
a,2,1,,15.5,0.6,0.4
a,3,1,,16,0.7,0.4
b,1,1,0,14,0.5,7
b,2,1,,15,0.6,0.4
b,3,1,,16,0.7,0.4
c,1,1,0,17.5,0.5,0.8
c,2,1,,18,0.6,0.4
c,3,1,,18.5,0.7,0.4
d,1,1,0,17.7,0.5,0.8
"""


def test_the_measurement_read_from_a_probes_tables(tmp_path: Path) -> None:
    (tmp_path / SPEC_FILE).write_text(digits().to_yaml())
    (tmp_path / TRIALS_FILE).write_text(PROBE_TRIALS)
    (tmp_path / EPOCHS_FILE).write_text(PROBE_EPOCHS)
    (tmp_path / STARTED_FILE).write_text(json.dumps({STARTED_KEY: 1005.0}))
    m = measure(load(tmp_path), {"launched_at": 1000.0, "cpus": 2, "gpus": 0}, slots=2, target="local", elapsed=30)
    assert m.startup_s == 12.0  # launch -> the first trial's start
    assert m.new_worker_first_epoch_s == pytest.approx(7.5)  # a: 1020 - 1012, b: 1019 - 1012
    assert m.reused_first_epoch_s == pytest.approx(1.05)  # c: 1022.5 - 1021.5, d: 1022.7 - 1021.6
    assert m.epoch_s == pytest.approx(4 / 6)  # the mean of a 0.5, 0.5; b 1, 1; c 0.5, 0.5
    assert m.gap_s == pytest.approx(0.35)  # after b's end at 1021.2: c 0.3 s, d 0.4 s
    assert m.end_s == pytest.approx(0.1)  # a 1021 - 1021, b 1021.2 - 1021, c 1023.6 - 1023.5
    assert (m.probe_trials, m.probe_epochs, m.cpus, m.notes) == (4, 10, 2.0, ())
    # Each configuration that reached a second epoch, with its own mean (d reported only one).
    assert m.config_costs == (
        {"config": {"units": 32}, "epoch_s": 0.5},
        {"config": {"units": 256}, "epoch_s": 1.0},
        {"config": {"units": 32}, "epoch_s": 0.5},
    )


def test_probing_code_imports_nothing_heavy(imported_after: Callable[[str], list[str]]) -> None:
    code = (
        "import tunekit; from tunekit.search import forecast, probe; from tunekit.results import ledger; "
        "forecast.predict(tunekit.load_spec('search_spaces/digits_mlp.yaml'), "
        "forecast.Measurement('local', 0, 2, 0, 10, 5, 1, 0.5, 0.2, 0.1, 4, 12, 30), simulations=5)"
    )
    assert imported_after(code) == []


def test_plain_plan_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    from tunekit.cli import main

    assert main(["plan", str(DIGITS), "--format", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert (plan["planned_epochs"], plan["exhaustive_epochs"]) == (118, 480)
    assert [rung["epoch"] for rung in plan["rungs"]] == [2, 6, 18, 20]


def test_the_probe_table_names_each_figure_and_where_it_is_kept() -> None:
    spec = digits()
    text = describe(spec, COSTS, predict(spec, COSTS, simulations=5), Path("/store/.probes/x.json"))
    assert "probe: 4 trials, 12 epochs in 30 s on local (2 CPUs, 0 GPUs)" in text
    assert "first epoch in a new worker (process, TensorFlow import, tracing)" in text
    assert "prediction: 24 trials, 2 at a time (max_concurrent 2)" in text
    assert "saved: /store/.probes/x.json" in text


def test_a_probe_whose_trials_failed_says_why_not_that_it_needs_more_time(tmp_path: Path) -> None:
    (tmp_path / SPEC_FILE).write_text(digits().to_yaml())
    header = PROBE_TRIALS.splitlines()[0]
    reason = "metric 'val_digit_accuracy' was never reported (did you mean 'val_accuracy'?)"
    rows = [f"a,0,failed,{reason},0,,,,3,,1012,1015,32", "b,1,stopped,the search was stopped,0,,,,1,,1012,1015,32"]
    (tmp_path / TRIALS_FILE).write_text("\n".join([header, *rows]) + "\n")
    (tmp_path / EPOCHS_FILE).write_text(PROBE_EPOCHS.splitlines()[0] + "\n")
    (tmp_path / STARTED_FILE).write_text(json.dumps({STARTED_KEY: 1005.0}))
    with pytest.raises(TunekitError) as raised:
        measure(load(tmp_path), {"launched_at": 1000.0}, slots=2, target="local", elapsed=14, tail="\n--- tail")
    assert (
        str(raised.value) == f"the probe's trials reported no epoch: 1 of the 2 that started failed; trial 0: {reason}"
    )
    (tmp_path / TRIALS_FILE).write_text(header + "\n" + rows[1] + "\n")  # only stopped: time ran out
    with pytest.raises(TunekitError, match=r"reported no epoch in 14 s; allow more with --probe-seconds"):
        measure(load(tmp_path), {"launched_at": 1000.0}, slots=2, target="local", elapsed=14)


def test_an_edit_to_the_trainables_code_forces_a_new_probe(tmp_path: Path) -> None:
    import shutil

    from tunekit.search.forecast import why_no_prediction

    source = REPO / "trainables" / "digits_mlp.py"
    copy = tmp_path / "my_mlp.py"
    shutil.copy(source, copy)
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text((REPO / "search_spaces" / "digits_mlp.yaml").read_text())
    spec = load_spec(spec_file, [f"trainable={copy}"])
    save_measurement(tmp_path, spec, COSTS)
    assert load_measurement(tmp_path, load_spec(spec_file, [f"trainable={copy}"]), "local") == COSTS
    copy.write_text(copy.read_text() + "\n# a wider first layer\n")
    edited = load_spec(spec_file, [f"trainable={copy}"])
    assert load_measurement(tmp_path, edited, "local") is None
    why = why_no_prediction(tmp_path, edited, "local")
    assert why is not None and "the trainable's code as it was then (it changed since)" in why
