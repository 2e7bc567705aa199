"""Spec validation: every malformed spec gives one exact line, exit status 2, and writes nothing."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tunekit import SpecError, load_spec
from tunekit.cli import main
from tunekit.config.space import Choice, FloatRange, IntRange

REPO = Path(__file__).resolve().parents[3]
DEFAULT_SPEC = REPO / "search_spaces" / "digits_mlp.yaml"


def base() -> dict[str, Any]:
    return yaml.safe_load(DEFAULT_SPEC.read_text())


def with_change(path: str, value: Any) -> dict[str, Any]:
    spec = copy.deepcopy(base())
    node = spec
    *parents, last = path.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    if value is DELETE:
        del node[last]
    else:
        node[last] = value
    return spec


DELETE = object()

# (spec mutation, exact error line). Each is a distinct way to get a spec wrong.
MALFORMED = [
    (("name", DELETE), "name: is required"),
    (
        ("name", "has space"),
        "name: must start with a letter or digit and use only letters, digits, '_', '.' and '-', got 'has space'",
    ),
    (("name", 7), "name: must be a non-empty string, got 7"),
    (
        ("colour", "blue"),
        "spec.colour: unknown key; valid keys are extends, name, trainable, metric, budget, search, scheduler, resources, training, space, data, storage, tracking, constraints, select",
    ),
    (
        ("trainable", "trainables.nope"),
        "trainable: cannot import module: not found in {spec_dir}, {cwd} or on the Python path, got 'trainables.nope'",
    ),
    (
        ("trainable", "missing_file.py"),
        "trainable: no such trainable file (looked for {spec_dir}/missing_file.py, {cwd}/missing_file.py), got 'missing_file.py'",
    ),
    (
        ("trainable", "tunekit.errors"),
        "trainable: must define build_data(config, ctx) and build_model(config, ctx), got 'tunekit.errors'",
    ),
    (("metric.mode", "maximise"), "metric.mode: must be one of max, min, got 'maximise'"),
    (("metric", "val_accuracy"), "metric: must be a mapping, got 'val_accuracy'"),
    (("budget.num_samples", -3), "budget.num_samples: must be an integer >= 1, got -3"),
    (("budget.num_samples", "ten"), "budget.num_samples: must be an integer >= 1, got 'ten'"),
    (("budget.max_epochs", 0), "budget.max_epochs: must be an integer >= 1, got 0"),
    (("budget.max_concurrent", 1.5), "budget.max_concurrent: must be an integer >= 1, got 1.5"),
    (("budget.time_budget_s", -60), "budget.time_budget_s: must be > 0, got -60"),
    (
        ("budget.num_smples", 3),
        "budget.num_smples: unknown key; valid keys are num_samples, max_epochs, max_concurrent, time_budget_s",
    ),
    (("search.algorithm", "bayes"), "search.algorithm: must be one of tpe, random, grid, nsga2, got 'bayes'"),
    (("search.seed", True), "search.seed: must be an integer >= 0, got true"),
    (("scheduler.grace_period", 30), "scheduler.grace_period: must be <= budget.max_epochs (20), got 30"),
    (("scheduler.reduction_factor", 1), "scheduler.reduction_factor: must be > 1, got 1"),
    (("scheduler.type", "hyperbands"), "scheduler.type: must be one of asha, hyperband, fifo, pbt, got 'hyperbands'"),
    (("scheduler.brackets", 2), "scheduler.brackets: is a hyperband setting; set scheduler.type: hyperband, got 2"),
    (("resources.gpu", 1.5), "resources.gpu: must be a fraction below 1 or a whole number of GPUs, got 1.5"),
    (("resources.cpu", 0), "resources.cpu: must be > 0, got 0"),
    (
        ("training.precision", "float16"),
        "training.precision: must be one of auto, float32, mixed_float16, mixed_bfloat16, got 'float16'",
    ),
    (("training.jit_compile", "yes"), "training.jit_compile: must be true or false, got 'yes'"),
    (("space.learning_rate.low", 0.0), "space.learning_rate.low: must be > 0 for loguniform, got 0.0"),
    (("space.learning_rate.high", 1.0e-5), "space.learning_rate.high: must be > low (0.0001), got 1e-05"),
    (("space.units.values", []), "space.units.values: must not be empty, got a list of 0"),
    (("space.units.values", [32, 32]), "space.units.values[1]: duplicates an earlier value, got 32"),
    (
        ("space.units", "choice(32, 64)"),
        "space.units: must be a mapping such as {type: uniform, low: 0, high: 1}, got 'choice(32, 64)'",
    ),
    (
        ("space.dropout.type", "normal"),
        "space.dropout.type: must be one of uniform, loguniform, int, choice, fixed, got 'normal'",
    ),
    (("space.dropout.mean", 0.1), "space.dropout.mean: unknown key; valid keys are type, low, high, step, when"),
    (
        ("space.layers", {"type": "int", "low": 4, "high": 2}),
        "space.layers: must be >= low (4); int bounds are inclusive, got 2".replace(
            "space.layers:", "space.layers.high:"
        ),
    ),
    (
        ("space.layers", {"type": "int", "low": 1, "high": 6, "step": 2}),
        "space.layers.step: must divide high - low (5), got 2",
    ),
    (
        ("space.momentum", {"type": "uniform", "low": 0.5, "high": 0.99, "when": {"optimizer": "sgd"}}),
        "space.momentum.when.optimizer: must name a parameter defined above momentum, got 'optimizer'",
    ),
    (("space", {}), "space: must be a non-empty mapping of parameter names to distributions, got a mapping"),
    (
        ("space.batch_size.values", [16, "big"]),
        "space.batch_size.values[1]: is not a valid training.batch_size, got 'big'",
    ),
    (
        ("search.warm_start", [{"learning_rate": 0.5}]),
        "search.warm_start[0].learning_rate: must lie in the space (0.0001 to 0.01), got 0.5",
    ),
    (
        ("search.warm_start", [{"lr": 0.001}]),
        "search.warm_start[0].lr: unknown parameter; the space has learning_rate, units, dropout, batch_size",
    ),
    (("tracking.enabled", "no"), "tracking.enabled: must be true or false, got 'no'"),
]


@pytest.mark.parametrize(
    ("change", "message"), MALFORMED, ids=[m[1].split(":")[0] + f"-{i}" for i, m in enumerate(MALFORMED)]
)
def test_malformed_spec_gives_exact_message_exit_2_and_writes_nothing(
    change: tuple[str, Any],
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(REPO)
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(with_change(*change), sort_keys=False))
    storage = tmp_path / "results"

    status = main(["run", str(spec_file), "--storage", str(storage)])

    assert status == 2
    expected = message.replace("{spec_dir}", str(tmp_path.resolve())).replace("{cwd}", str(REPO.resolve()))
    assert capsys.readouterr().err == f"tunekit: error: {expected}\n"
    assert not storage.exists()


def test_there_are_at_least_25_distinct_malformed_cases() -> None:
    assert len({message for _, message in MALFORMED}) >= 25


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        (
            "budget.num_smples=3",
            "--set budget.num_smples: unknown key; valid keys under budget are num_samples, max_epochs, max_concurrent, time_budget_s",
        ),
        (
            "bugdet.num_samples=3",
            "--set bugdet.num_samples: unknown section; valid sections are extends, name, trainable, metric, budget, search, scheduler, resources, training, space, data, storage, tracking, constraints, select, got 'bugdet'",
        ),
        ("budget.num_samples", "--set: expected key.path=value, got 'budget.num_samples'"),
        ("name.first=x", "--set name.first: name is not a mapping, got 'digits-mlp'"),
        ("budget.num_samples=0", "budget.num_samples: must be an integer >= 1, got 0"),
        ("space.dropout.high=-1", "space.dropout.high: must be > low (0), got -1.0"),
    ],
)
def test_bad_set_override(
    assignment: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    storage = tmp_path / "results"
    assert main(["run", str(DEFAULT_SPEC), "--set", assignment, "--storage", str(storage)]) == 2
    assert capsys.readouterr().err == f"tunekit: error: {message}\n"
    assert not storage.exists()


def test_set_override_is_applied_and_typed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    spec = load_spec(DEFAULT_SPEC, ["budget.num_samples=5", "space.units.values=[8, 16]", "search.seed=3"])
    assert spec.budget.num_samples == 5
    assert spec.search.seed == 3
    assert spec.space.params[1].distribution == Choice((8, 16))


def test_yaml_11_exponent_strings_are_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    spec = load_spec(DEFAULT_SPEC, ["space.learning_rate.low='1e-5'"])
    assert spec.space.params[0].distribution == FloatRange(1e-5, 1e-2, log=True)


def test_defaults_are_filled_and_spec_is_frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    raw = base()
    del raw["scheduler"], raw["resources"], raw["training"]
    spec = load_spec(raw)
    assert (spec.scheduler.type, spec.scheduler.grace_period, spec.scheduler.reduction_factor) == ("asha", 1, 3.0)
    assert (spec.resources.cpu, spec.resources.gpu, spec.training.precision) == (1.0, 0.0, "auto")
    assert yaml.safe_load(spec.to_yaml())["training"]["max_failures"] == 2
    with pytest.raises(AttributeError):
        spec.name = "other"  # type: ignore[misc]


def test_failures_in_a_row_have_no_limit_unless_one_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    assert load_spec(base()).training.max_consecutive_failures is None
    spec = load_spec(base(), ["training.max_consecutive_failures=3"])
    assert spec.training.max_consecutive_failures == 3
    assert load_spec(yaml.safe_load(spec.to_yaml())).training.max_consecutive_failures == 3
    with pytest.raises(SpecError, match=r"training.max_consecutive_failures: must be an integer >= 1, got 0"):
        load_spec(base(), ["training.max_consecutive_failures=0"])


def test_int_bounds_are_inclusive_and_conditionals_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    raw = base()
    raw["space"] = {
        "layers": {"type": "int", "low": 1, "high": 3},
        "optimizer": {"type": "choice", "values": ["adam", "sgd"]},
        "momentum": {"type": "uniform", "low": 0.5, "high": 0.9, "when": {"optimizer": "sgd"}},
    }
    spec = load_spec(raw)
    layers, _, momentum = spec.space.params
    assert layers.distribution == IntRange(1, 3)
    assert layers.distribution.contains(3) and not layers.distribution.contains(4)
    assert momentum.is_active({"optimizer": "sgd"}) and not momentum.is_active({"optimizer": "adam"})


def test_spec_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match=r"^metric: is required$"):
        load_spec({"name": "x", "trainable": "trainables.digits_mlp", "space": {"a": {"type": "fixed", "value": 1}}})
    assert issubclass(SpecError, ValueError)


def test_validate_prints_ok(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    assert main(["validate", str(DEFAULT_SPEC)]) == 0
    assert capsys.readouterr().out == "ok\n"


def test_cli_fast_paths_import_neither_tensorflow_nor_ray() -> None:
    code = (
        "import sys, tunekit, tunekit.cli\n"
        "tunekit.cli.main(['validate', 'search_spaces/digits_mlp.yaml'])\n"
        "tunekit.cli.main(['plan', 'search_spaces/digits_mlp.yaml'])\n"
        "heavy = sorted(m for m in ('tensorflow', 'keras', 'ray', 'mlflow') if m in sys.modules)\n"
        "print('heavy:', heavy)\n"
    )
    output = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert output.endswith("heavy: []\n")
