"""Several objectives in the spec: the list form, constraints, select, and every refusal's exact line."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tunekit.config.objectives import Constraint, MetricSpec, Selection, tracked_metrics
from tunekit.config.spec import parse_spec
from tunekit.errors import SpecError

TWO = [{"name": "val_accuracy", "mode": "max"}, {"name": "model_params", "mode": "min"}]
RAW: dict[str, Any] = {
    "name": "mo",
    "trainable": "python: __main__.build_data, __main__.build_model",
    "metric": TWO,
    "budget": {"num_samples": 4, "max_epochs": 4},
    "space": {"units": {"type": "choice", "values": [8, 16]}},
}


def spec_with(**changes: Any) -> Any:
    raw = copy.deepcopy(RAW)
    raw.update(changes)
    return parse_spec(raw, None, locate_trainable=False)


def test_a_list_of_objectives_keeps_the_first_as_the_metric() -> None:
    spec = spec_with(constraints=["model_params <= 5e4", "latency_ms<=5"])
    assert spec.objectives == (MetricSpec("val_accuracy", "max"), MetricSpec("model_params", "min"))
    assert spec.metric == MetricSpec("val_accuracy", "max")
    assert spec.multi_objective
    assert spec.constraints == (
        Constraint("model_params", "<=", 50000.0, "model_params <= 50000"),
        Constraint("latency_ms", "<=", 5.0, "latency_ms <= 5"),
    )
    assert spec.raw["metric"] == TWO
    assert spec.raw["constraints"] == ["model_params <= 50000", "latency_ms <= 5"]
    assert "select" not in spec.raw
    assert tracked_metrics(spec.objectives, spec.constraints, spec.select) == (
        "val_accuracy",
        "model_params",
        "latency_ms",
    )


def test_the_single_form_records_as_before() -> None:
    spec = spec_with(metric={"name": "val_accuracy", "mode": "max"})
    assert spec.objectives == (MetricSpec("val_accuracy", "max"),)
    assert not spec.multi_objective
    assert spec.raw["metric"] == {"name": "val_accuracy", "mode": "max"}
    assert "constraints" not in spec.raw


def test_select_rule() -> None:
    spec = spec_with(select={"minimize": "model_params", "subject_to": ["val_accuracy >= 0.9"]})
    assert spec.select == Selection(
        "model_params", "min", (Constraint("val_accuracy", ">=", 0.9, "val_accuracy >= 0.9"),)
    )
    assert spec.select.describe() == "minimize model_params among the Pareto front subject to val_accuracy >= 0.9"
    assert spec.raw["select"] == {"minimize": "model_params", "subject_to": ["val_accuracy >= 0.9"]}


def test_constraint_violation_follows_optunas_sign() -> None:
    at_most = Constraint("latency_ms", "<=", 5.0, "latency_ms <= 5")
    at_least = Constraint("val_accuracy", ">=", 0.9, "val_accuracy >= 0.9")
    assert at_most.violation(4.0) == -1.0 and at_most.holds(5.0)
    assert at_most.violation(7.5) == 2.5 and not at_most.holds(7.5)
    assert at_least.violation(0.95) == pytest.approx(-0.05) and not at_least.holds(0.8)
    assert at_most.violation(None) == float("inf")  # never measured: infeasible


REFUSED = [
    ({"metric": []}, "metric: must name at least one objective, got a list of 0"),
    (
        {"metric": [*TWO, *[{"name": f"m{i}", "mode": "min"} for i in range(3)]]},
        "metric: takes at most 4 objectives, got 5",
    ),
    (
        {"metric": [*TWO, {"name": "val_accuracy", "mode": "min"}]},
        "metric[2].name: repeats metric[0].name, got 'val_accuracy'",
    ),
    (
        {"metric": [TWO[0], {"name": "latency", "mode": "min"}]},
        "metric[1].name: unknown metric; tunekit measures model_params, model_size_mb, latency_ms, "
        "peak_memory_mb (did you mean 'latency_ms'?), got 'latency'",
    ),
    ({"metric": [TWO[0], {"name": "model_params"}]}, "metric[1].mode: is required"),
    (
        {"scheduler": {"type": "pbt", "perturbation_interval": 2}},
        "scheduler.type: ranks trials by one metric and cannot take 2 objectives; "
        "use asha (MO-ASHA early stopping) or fifo, got 'pbt'",
    ),
    (
        {"constraints": ["model_params < 5"]},
        "constraints[0]: must read 'NAME <= NUMBER' or 'NAME >= NUMBER', got 'model_params < 5'",
    ),
    ({"constraints": "model_params <= 5"}, "constraints: must be a list, got 'model_params <= 5'"),
    (
        {"constraints": ["peak_memory <= 5"]},
        "constraints[0]: unknown metric; tunekit measures model_params, model_size_mb, latency_ms, "
        "peak_memory_mb (did you mean 'peak_memory_mb'?), got 'peak_memory'",
    ),
    (
        {"metric": TWO[0], "constraints": ["model_params <= 5"]},
        "constraints: needs several objectives (metric: a list of 2 to 4); with one, set no constraints, "
        "got a list of 1",
    ),
    (
        {"select": {"maximize": "loss"}},
        "select.maximize: must be one of the objectives (val_accuracy, model_params), got 'loss'",
    ),
    (
        {"select": {"maximize": "val_accuracy", "minimize": "model_params"}},
        "select: needs exactly one of maximize or minimize, got maximize and minimize",
    ),
    ({"select": {"best": "val_accuracy"}}, "select.best: unknown key; valid keys are maximize, minimize, subject_to"),
    (
        {"select": {"maximize": "val_accuracy", "subject_to": ["latency_ms = 3"]}},
        "select.subject_to[0]: must read 'NAME <= NUMBER' or 'NAME >= NUMBER', got 'latency_ms = 3'",
    ),
]


@pytest.mark.parametrize(("changes", "message"), REFUSED, ids=[m.split(":")[0] for _, m in REFUSED])
def test_refusals_name_the_path_the_rule_and_the_value(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError) as caught:
        spec_with(**changes)
    assert str(caught.value) == message
