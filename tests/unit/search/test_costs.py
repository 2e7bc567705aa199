"""The cost model: what an epoch costs by configuration, from a probe's few measured configurations."""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Mapping
from typing import Any

import pytest

from tunekit.config.space import parse_space
from tunekit.config.spec import load_spec
from tunekit.search.costs import cost_direction, fit, probe_points
from tunekit.search.forecast import Measurement, predict

CNN_SPACE = parse_space(
    {
        "learning_rate": {"type": "loguniform", "low": 1e-3, "high": 1e-2},
        "filters": {"type": "int", "low": 8, "high": 64, "log": True},
        "optimizer": {"type": "choice", "values": ["adam", "sgd"]},
    }
)


def cnn_cost(config: Mapping[str, Any]) -> float:
    """An epoch's seconds: 3.4x from 8 to 64 filters, 1.5x for sgd, learning rate irrelevant."""
    filters = float(config["filters"])
    return 0.4 * (filters / 8) ** (math.log(3.4) / math.log(8)) * (1.5 if config["optimizer"] == "sgd" else 1.0)


def test_parameters_named_like_sizes_cost_more_as_they_grow_and_a_batch_less() -> None:
    named = ["units", "filters", "num_layers", "hidden_dim", "conv2_filters", "batch_size", "learning_rate", "dropout"]
    assert [cost_direction(n) for n in named] == [1, 1, 1, 1, 1, -1, 0, 0]


def test_the_probe_spans_the_cost_corners_of_one_size_like_parameter() -> None:
    points = probe_points(CNN_SPACE, 4, seed=0)
    assert [p["filters"] for p in points[:2]] == [64, 8]  # the costliest corner first, then the cheapest
    assert all(8 <= p["filters"] <= 64 and 1e-3 <= p["learning_rate"] <= 1e-2 for p in points)
    assert probe_points(parse_space({"lr": {"type": "uniform", "low": 0.1, "high": 1.0}}), 4, seed=0) == []


def test_the_model_learns_log_cost_from_four_corners_and_one_hot_choices() -> None:
    corners = [
        {"learning_rate": 0.002, "filters": 64, "optimizer": "adam"},
        {"learning_rate": 0.005, "filters": 8, "optimizer": "sgd"},
        {"learning_rate": 0.009, "filters": 8, "optimizer": "adam"},
        {"learning_rate": 0.001, "filters": 64, "optimizer": "sgd"},
    ]
    model = fit(CNN_SPACE, [(c, cnn_cost(c)) for c in corners])
    assert model is not None
    assert model.epoch_s(corners[0]) == cnn_cost(corners[0])  # a measured configuration: its own cost
    for filters in (12, 24, 40):
        for optimizer in ("adam", "sgd"):
            config = {"learning_rate": 0.004, "filters": filters, "optimizer": optimizer}
            assert model.epoch_s(config) == pytest.approx(cnn_cost(config), rel=0.15)
    # Beyond the measured range it stays near it: 1.25x the costliest at most.
    big = parse_space({"filters": {"type": "int", "low": 8, "high": 512, "log": True}})
    clamped = fit(big, [({"filters": 8}, 1.0), ({"filters": 64}, 3.0)])
    assert clamped is not None and clamped.epoch_s({"filters": 512}) == pytest.approx(3.0 * 1.25)
    assert fit(CNN_SPACE, []) is None


def test_the_forecast_prices_each_simulated_trial_by_its_configuration() -> None:
    # FIFO on one slot is simulated exactly: the wall is the trials' first epochs and their
    # later ones, each at its own configuration's cost, drawn from the space.
    spec = load_spec(
        {
            "name": "cnn",
            "trainable": "trainables.digits_mlp",
            "metric": {"name": "val_accuracy", "mode": "max"},
            "budget": {"num_samples": 40, "max_epochs": 5, "max_concurrent": 1},
            "scheduler": {"type": "fifo"},
            "space": {
                "learning_rate": {"type": "loguniform", "low": 1e-3, "high": 1e-2},
                "filters": {"type": "int", "low": 8, "high": 64, "log": True},
                "optimizer": {"type": "choice", "values": ["adam", "sgd"]},
            },
        }
    )
    probed = [p | {"filters": f} for p, f in zip(probe_points(spec.space, 4, 0), (64, 8, 64, 8), strict=True)]
    costs = tuple({"config": c, "epoch_s": cnn_cost(c)} for c in probed)
    mean = statistics.fmean(cnn_cost(c) for c in probed)
    flat = Measurement("local", 0, 1, 0, 0.0, 2.0, 2.0, mean, 0.0, 0.0, 4, 12, 30)
    by_config = Measurement("local", 0, 1, 0, 0.0, 2.0, 2.0, mean, 0.0, 0.0, 4, 12, 30, config_costs=costs)
    assert predict(spec, flat, simulations=3).wall_seconds == pytest.approx(40 * (2.0 + 4 * mean))
    rng = random.Random(1)
    space_mean = statistics.fmean(cnn_cost(spec.space.random_configuration(rng)) for _ in range(4000))
    # The probe's corners average the extremes; the space's log-uniform filters cost less.
    assert space_mean < 0.85 * mean
    assert predict(spec, by_config, simulations=20).wall_seconds == pytest.approx(40 * (2.0 + 4 * space_mean), rel=0.1)
    assert Measurement.from_dict({**by_config.__dict__}).config_costs == costs  # as a stored probe reads back
