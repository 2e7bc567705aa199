"""Grid search's space: expansion of ranges and conditional parameters, its checks, its plan."""

from __future__ import annotations

import random
from typing import Any

import pytest

from tunekit.config.space import parse_space
from tunekit.config.spec import ExperimentSpec, load_spec
from tunekit.errors import SpecError
from tunekit.search.plan import plan_budget


def grid_spec(space: dict[str, Any], **budget: Any) -> ExperimentSpec:
    return load_spec(
        {
            "name": "grid",
            "trainable": "trainables.digits_mlp",
            "metric": {"name": "val_accuracy", "mode": "max"},
            "budget": {"max_epochs": 4, **budget},
            "search": {"algorithm": "grid"},
            "scheduler": {"type": "fifo"},
            "space": space,
        }
    )


def spec_error(space: dict[str, Any], **budget: Any) -> str:
    with pytest.raises(SpecError) as caught:
        grid_spec(space, **budget)
    return str(caught.value)


CONDITIONAL = {
    "optimizer": {"type": "choice", "values": ["adam", "sgd"]},
    "momentum": {"type": "uniform", "low": 0.5, "high": 0.9, "step": 0.2, "when": {"optimizer": "sgd"}},
    "nesterov": {"type": "choice", "values": [True, False], "when": {"optimizer": "sgd"}},
    "layers": {"type": "int", "low": 1, "high": 2},
    "loss": {"type": "fixed", "value": "sparse_categorical_crossentropy"},
}


def test_int_ranges_expand_with_their_step_both_bounds_included() -> None:
    space = parse_space(
        {"units": {"type": "int", "low": 16, "high": 64, "step": 16}, "depth": {"type": "int", "low": 1, "high": 3}}
    )
    assert space.grid() == {"units": [16, 32, 48, 64], "depth": [1, 2, 3]}
    assert space.grid_size() == 12


def test_stepped_uniform_ranges_expand_to_clean_values() -> None:
    space = parse_space({"dropout": {"type": "uniform", "low": 0.0, "high": 0.5, "step": 0.1}})
    # 0.1 * 3 is 0.30000000000000004 in floats; the grid holds what the user wrote
    assert space.grid() == {"dropout": [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]}


def test_conditional_parameters_expand_only_where_active() -> None:
    space = parse_space(CONDITIONAL)
    points = space.grid_points()
    # adam: 2 layers; sgd: 3 momenta x 2 nesterov x 2 layers. Not 2 x 3 x 2 x 2 = 24.
    assert space.grid_size() == len(points) == 2 + 12
    assert len({tuple(sorted(p.items())) for p in points}) == len(points)
    adam = [p for p in points if p["optimizer"] == "adam"]
    assert adam == [
        {"optimizer": "adam", "layers": 1, "loss": "sparse_categorical_crossentropy"},
        {"optimizer": "adam", "layers": 2, "loss": "sparse_categorical_crossentropy"},
    ]
    assert {p["momentum"] for p in points if p["optimizer"] == "sgd"} == {0.5, 0.7, 0.9}


def test_nested_conditions_count_like_the_enumeration() -> None:
    space = parse_space(
        {
            "a": {"type": "choice", "values": [1, 2, 3]},
            "b": {"type": "choice", "values": ["x", "y"], "when": {"a": [2, 3]}},
            "c": {"type": "int", "low": 0, "high": 4, "when": {"b": "y"}},
            "d": {"type": "choice", "values": [True, False]},
        }
    )
    # a=1: 2; a in (2, 3): (b=x: 2, b=y: 5 x 2) = 12 each
    assert space.grid_size() == len(space.grid_points()) == 2 + 2 * 12


def random_conditional_space(rng: random.Random) -> dict[str, Any]:
    space: dict[str, Any] = {}
    for index in range(rng.randint(1, 5)):
        kind = rng.choice(["choice", "int", "uniform", "fixed"])
        bodies: dict[str, dict[str, Any]] = {
            "choice": {"type": "choice", "values": list(range(rng.randint(1, 4)))},
            "int": {"type": "int", "low": 0, "high": rng.randint(0, 4)},
            "uniform": {"type": "uniform", "low": 0.0, "high": 1.0, "step": rng.choice([0.25, 0.5, 1.0])},
            "fixed": {"type": "fixed", "value": 7},
        }
        body = bodies[kind]
        if space and rng.random() < 0.6:
            parent = rng.choice(list(space))
            unconditional = {k: v for k, v in space[parent].items() if k != "when"}
            values = parse_space({parent: unconditional}).configurations()
            assert values is not None
            options = [point[parent] for point in values]
            body["when"] = {parent: rng.sample(options, rng.randint(1, len(options)))}
        space[f"p{index}"] = body
    return space


def test_grid_size_counts_what_the_enumeration_yields_on_random_conditional_spaces() -> None:
    rng = random.Random(0)
    for _ in range(200):
        raw = random_conditional_space(rng)
        space = parse_space(raw)
        points = space.grid_points()
        keys = {space.key(point) for point in points}
        assert space.grid_size() == len(points) == len(keys), raw
        for point in points:  # every point is a configuration sampling could produce
            assert all(p.is_active(point) == (p.name in point) for p in space.params), (raw, point)
        assert space.key(space.random_configuration(rng)) in keys, raw


def test_num_samples_omitted_is_the_grid_size() -> None:
    spec = grid_spec(CONDITIONAL)
    assert spec.budget.num_samples == 14
    assert spec.raw["budget"]["num_samples"] == 14  # spec.yaml records it, so a resume agrees


def test_num_samples_may_be_a_multiple_of_the_grid_size() -> None:
    assert grid_spec(CONDITIONAL, num_samples=42).budget.num_samples == 42


@pytest.mark.parametrize(
    ("space", "budget", "message"),
    [
        (
            CONDITIONAL,
            {"num_samples": 20},
            "budget.num_samples: must be a multiple of the grid size (14) for grid search, got 20",
        ),
        (
            {"seed": {"type": "choice", "values": [1, 2]}},
            {"num_samples": 4},
            "budget.num_samples: repeats each grid point with its own seed, which the space searches itself; "
            "use 2, got 4",
        ),
        (
            {"dropout": {"type": "uniform", "low": 0.0, "high": 0.5}},
            {},
            "space.dropout.step: grid search needs a step for uniform ranges (or use choice), got null",
        ),
        (
            {"learning_rate": {"type": "loguniform", "low": 1e-4, "high": 1e-2}},
            {},
            "space.learning_rate.type: grid search cannot expand a loguniform range (it has no step); "
            "list its values with choice, got 'loguniform'",
        ),
        (
            {"units": {"type": "int", "low": 16, "high": 512, "log": True}},
            {},
            "space.units.log: grid search cannot expand a log int range; list its values with choice, got true",
        ),
        (
            {"seed": {"type": "int", "low": 0, "high": 10**6}},
            {},
            "space.seed: grid search covers at most 100,000 configurations, got 1,000,001 values here alone",
        ),
        (
            {"a": {"type": "int", "low": 1, "high": 400}, "b": {"type": "int", "low": 1, "high": 400}},
            {},
            "space: grid search covers at most 100,000 configurations, got 160,000",
        ),
        (
            {
                "a": {"type": "int", "low": 1, "high": 400},
                "b": {"type": "int", "low": 1, "high": 400, "when": {"a": [1, 2, 3]}},
                "c": {"type": "int", "low": 1, "high": 400},
            },
            {},
            "space: grid search covers at most 100,000 configurations, got more than 100,000",
        ),
    ],
)
def test_grid_errors_name_path_rule_and_value(space: dict[str, Any], budget: dict[str, Any], message: str) -> None:
    assert spec_error(space, **budget) == message


def test_a_conditional_grid_within_the_limit_is_accepted() -> None:
    spec = grid_spec(
        {
            "a": {"type": "int", "low": 1, "high": 400},
            "b": {"type": "int", "low": 1, "high": 400, "when": {"a": [1, 2, 3]}},
        }
    )
    assert spec.budget.num_samples == 397 + 3 * 400


def test_plan_shows_the_grid_and_no_rung_table_for_fifo() -> None:
    plan = plan_budget(grid_spec(CONDITIONAL, num_samples=28))
    assert plan.describe() == "grid: 14 configurations x 2 repeats\nfifo: every trial trains 4 epochs; epochs: 112"
    single = grid_spec({"units": {"type": "choice", "values": [8]}})
    assert plan_budget(single).describe().splitlines()[0] == "grid: 1 configuration x 1 repeat"


def test_plan_of_a_grid_under_asha_keeps_its_rungs() -> None:
    spec = load_spec(
        {
            "name": "grid",
            "trainable": "trainables.digits_mlp",
            "metric": {"name": "val_accuracy", "mode": "max"},
            "budget": {"max_epochs": 9},
            "search": {"algorithm": "grid"},
            "scheduler": {"type": "asha", "grace_period": 1, "reduction_factor": 3},
            "space": {"units": {"type": "int", "low": 1, "high": 9}},
        }
    )
    lines = plan_budget(spec).describe().splitlines()
    assert lines[0] == "grid: 9 configurations x 1 repeat"
    assert lines[1].split() == ["rung", "at", "epoch", "trials"]
    assert lines[-1].startswith("epochs: about ")
