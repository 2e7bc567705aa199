"""tunekit.tuner.hp: KerasTuner's ``hp`` API, the space discovered from a ``build_model(hp)``, and name checks.

The builders here are plain functions that only call ``hp``: no TensorFlow, no Ray.
"""

from __future__ import annotations

from typing import Any

import pytest

from tunekit.config.space import parse_space
from tunekit.errors import FatalTrialError, SpecError
from tunekit.tuner.discover import discover, spec_name
from tunekit.tuner.hp import HyperParameters, UnknownParameterError


def kerastuner_mlp(hp: HyperParameters) -> dict[str, Any]:
    """The shape of KerasTuner's getting-started example: layers, units per layer, dropout, lr."""
    layers = []
    for i in range(hp.Int("num_layers", 1, 3)):
        layers.append(hp.Int(f"units_{i}", min_value=32, max_value=512, step=32))
    activation = hp.Choice("activation", ["relu", "tanh"])
    dropout = hp.Float("dropout_rate", 0.1, 0.5) if hp.Boolean("dropout") else None
    lr = hp.Float("lr", min_value=1e-4, max_value=1e-2, sampling="log")
    return {"layers": layers, "activation": activation, "dropout": dropout, "lr": lr}


def model_selection(hp: HyperParameters) -> str:
    """KerasTuner's conditional_scope example: each model type has its own parameters."""
    model_type = hp.Choice("model_type", ["mlp", "cnn"])
    with hp.conditional_scope("model_type", ["mlp"]):
        if model_type == "mlp":
            hp.Int("mlp_units", 16, 64, step=16)
    with hp.conditional_scope("model_type", ["cnn"]):
        if model_type == "cnn":
            hp.Choice("filters", [8, 16])
            hp.Boolean("pool", parent_name="filters", parent_values=[16])
    return model_type


# --------------------------------------------------------------------------- the API


def test_defaults_are_kerastuners() -> None:
    hp = HyperParameters()
    assert hp.Int("i", 3, 9) == 3
    assert hp.Float("f", 0.5, 2.0) == 0.5
    assert hp.Choice("c", ["a", "b"]) == "a"
    assert hp.Choice("n", [None, 1]) is None
    assert hp.Choice("d", [1, 2, 4], default=4) == 4
    assert hp.Boolean("b") is False
    assert hp.Fixed("k", 7) == 7
    assert hp.values == {"i": 3, "f": 0.5, "c": "a", "n": None, "d": 4, "b": False, "k": 7}
    assert hp.get("i") == 3 and hp["c"] == "a" and "b" in hp


def test_a_trials_values_are_handed_out_and_typed() -> None:
    hp = HyperParameters({"units": 64.0, "lr": 0.01, "act": "tanh", "flag": 1})
    assert hp.Int("units", 32, 128, step=32) == 64 and isinstance(hp.values["units"], int)
    assert hp.Float("lr", 1e-4, 1e-1, sampling="log") == 0.01
    assert hp.Choice("act", ["relu", "tanh"]) == "tanh"
    assert hp.Boolean("flag") is True


def test_ranges_map_onto_the_spec_as_kerastuner_defines_them() -> None:
    hp = HyperParameters()
    hp.Int("steps", 6, 13, step=3)  # KerasTuner: 6, 9, 12
    hp.Int("log_step", 2, 32, step=2, sampling="log")  # 2, 4, 8, 16, 32
    hp.Int("log_int", 1, 1000, sampling="log")
    hp.Float("stepped", 0.0, 0.5, step=0.2)  # 0.0, 0.2, 0.4
    hp.Float("log_float", 1e-4, 1e-2, sampling="log")
    hp.Float("log_stepped", 1.0, 1000.0, step=10, sampling="log")  # 1, 10, 100, 1000
    hp.Choice("kind", ["a", "b"])
    hp.Boolean("flag")
    hp.Fixed("fixed", "x")
    spec = {d.name: d.to_spec() for d in hp.space}
    assert spec == {
        "steps": {"type": "int", "low": 6, "high": 12, "step": 3},
        "log_step": {"type": "choice", "values": [2, 4, 8, 16, 32]},
        "log_int": {"type": "int", "low": 1, "high": 1000, "log": True},
        "stepped": {"type": "uniform", "low": 0.0, "high": 0.4, "step": 0.2},
        "log_float": {"type": "loguniform", "low": 1e-4, "high": 1e-2},
        "log_stepped": {"type": "choice", "values": [1.0, 10.0, 100.0, 1000.0]},
        "kind": {"type": "choice", "values": ["a", "b"]},
        "flag": {"type": "choice", "values": [False, True]},
        "fixed": {"type": "fixed", "value": "x"},
    }
    parse_space(spec)  # every entry is a valid spec distribution


def test_inactive_parameters_return_none_and_have_no_value() -> None:
    hp = HyperParameters({"model_type": "cnn"})
    assert model_selection(hp) == "cnn"
    assert hp.values == {"model_type": "cnn", "filters": 8}
    with hp.conditional_scope("model_type", ["mlp"]):
        assert hp.Int("mlp_units", 16, 64, step=16) is None  # declared, inactive: None as in KerasTuner
    with pytest.raises(ValueError, match="mlp_units is currently inactive"):
        hp.get("mlp_units")
    with pytest.raises(KeyError, match="nope does not exist"):
        hp.get("nope")
    assert not hp.is_active("mlp_units") and hp.is_active("filters")


def test_a_scope_on_an_undeclared_parent_is_kerastuners_error() -> None:
    hp = HyperParameters()
    with (
        pytest.raises(ValueError, match=r"^`HyperParameter` named: missing not defined\.$"),
        hp.conditional_scope("missing", ["x"]),
    ):
        pass


def test_name_scopes_prefix_names_and_spec_names_are_identifiers() -> None:
    hp = HyperParameters()
    with hp.name_scope("block"):
        hp.Int("units", 1, 2)
    assert list(hp.values) == ["block/units"]
    assert spec_name("block/units") == "block__units" and spec_name("2-layers") == "p_2_layers"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda hp: hp.Int("n", 5, 1), "hp.n.max_value: must be >= min_value (5), got 1"),
        (lambda hp: hp.Float("f", 0.0, 1.0, sampling="log"), "hp.f.min_value: must be > 0 for sampling=log, got 0.0"),
        (lambda hp: hp.Int("n", 1, 8, step=1, sampling="log"), "hp.n.step: must be > 1 with sampling=log"),
        (lambda hp: hp.Float("f", 0.0, 1.0, sampling="square"), "hp.f.sampling: must be one of linear, log"),
        (lambda hp: hp.Choice("c", [1, "a"]), "hp.c: Choice values must all be of one type"),
        (lambda hp: hp.Int("n", 1.5, 3), "hp.n.min_value: must be an integer, got 1.5"),
    ],
)
def test_bad_ranges_say_the_parameter_and_the_rule(call: Any, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        call(HyperParameters())
    assert str(caught.value).startswith(message)


# --------------------------------------------------------------------------- discovery


def test_discovery_finds_loop_layers_and_makes_them_conditional() -> None:
    found = discover(kerastuner_mlp)
    assert found.names == ("num_layers", "units_0", "activation", "dropout", "lr", "units_1", "units_2", "dropout_rate")
    assert found.when == {
        "units_1": {"num_layers": (2, 3)},
        "units_2": {"num_layers": (3,)},
        "dropout_rate": {"dropout": (True,)},
    }
    space = parse_space(found.to_space())
    assert space.params[-2].when == {"num_layers": (3,)}
    assert found.notes == [] and found.builds < 20


def test_discovered_space_samples_only_the_branch_that_runs() -> None:
    import random

    space = parse_space(discover(kerastuner_mlp).to_space())
    for seed in range(30):
        config = space.random_configuration(random.Random(seed))
        hp = HyperParameters(config)
        built = kerastuner_mlp(hp)
        assert set(hp.values) == set(config), config  # every sampled value read, nothing read unsampled
        assert len(built["layers"]) == config["num_layers"]


def test_discovery_keeps_written_conditions_and_nests_them() -> None:
    found = discover(model_selection)
    assert found.names == ("model_type", "mlp_units", "filters", "pool")
    assert found.when == {
        "mlp_units": {"model_type": ("mlp",)},
        "filters": {"model_type": ("cnn",)},
        "pool": {"model_type": ("cnn",), "filters": (16,)},
    }
    parse_space(found.to_space())


def test_a_branch_behind_a_float_is_sampled_always_and_said() -> None:
    def build(hp: HyperParameters) -> None:
        if hp.Float("rate", 0.0, 1.0) > 0.5:
            hp.Int("extra", 1, 4)

    found = discover(build)
    assert found.names == ("rate", "extra") and found.when == {}
    assert found.notes == [
        "extra is declared only for some values of rate, which cannot all be tried; it is sampled in every trial"
    ]


def test_discovery_stops_at_its_build_limit_and_says_so() -> None:
    def build(hp: HyperParameters) -> None:
        for i in range(hp.Int("depth", 1, 6)):
            hp.Choice(f"kind_{i}", ["a", "b", "c", "d", "e"])

    found = discover(build, max_builds=10)  # depth: 6 builds, then kind_1, ... only one by one
    assert found.builds == 10 and "explored 10 builds" in found.notes[0]


def test_the_models_own_error_at_defaults_propagates() -> None:
    def build(hp: HyperParameters) -> None:
        hp.Int("units", 1, 2)
        raise RuntimeError("shape mismatch")

    with pytest.raises(RuntimeError, match="shape mismatch"):
        discover(build)


# --------------------------------------------------------------------------- name checks


def test_a_name_the_space_lacks_is_fatal_with_the_names_and_a_suggestion() -> None:
    hp = HyperParameters({"units_two": 64}, known=["units_two", "learning_rate"], strict=True)
    with pytest.raises(UnknownParameterError) as caught:
        hp.Int("units_2", 32, 128)
    assert isinstance(caught.value, FatalTrialError) and isinstance(caught.value, KeyError)
    assert str(caught.value) == (
        "build_model reads 'units_2', which the space lacks; the space has: units_two, learning_rate; "
        "did you mean 'units_two'?"
    )


def test_outside_strict_mode_an_unknown_name_gets_its_default_and_is_noted() -> None:
    hp = HyperParameters({}, known=["a"])
    assert hp.Int("b", 4, 8) == 4
    assert hp.unknown == ["b"]


# --------------------------------------------------------------------------- a spec's builders


def spec_with(build_model: Any, space: dict[str, Any], build_data: Any = None) -> Any:
    from tunekit.config.spec import load_spec
    from tunekit.contract import builders_from

    trainable = builders_from(build_data=build_data or (lambda config, ctx: (config, ctx)), build_model=build_model)
    raw = {
        "name": "s",
        "metric": {"name": "val_accuracy", "mode": "max"},
        "budget": {"num_samples": 1, "max_epochs": 1},
    }
    return load_spec({**raw, "space": space}, trainable=trainable)


SPACE = {
    "layers": {"type": "choice", "values": [1, 2]},
    "units_two": {"type": "int", "low": 8, "high": 16, "when": {"layers": 2}},
    "learning_rate": {"type": "loguniform", "low": 1e-4, "high": 1e-2},
}


def test_a_spec_builder_reading_a_key_the_space_lacks_fails_fatally_naming_the_keys() -> None:
    from tunekit.contract import load_builders

    def build_model(config: dict[str, Any], ctx: Any) -> Any:
        return config["units_2"] if config["layers"] == 2 else None

    builders = load_builders(spec_with(build_model, SPACE).trainable)
    assert builders.build_model({"layers": 1, "learning_rate": 0.01}, None) is None
    with pytest.raises(UnknownParameterError) as caught:
        builders.build_model({"layers": 2, "units_two": 8, "learning_rate": 0.01}, None)
    assert str(caught.value) == (
        "build_model reads 'units_2', which the space lacks; the space has: layers, units_two, learning_rate; "
        "did you mean 'units_two'?"
    )


def test_reading_an_inactive_conditional_parameter_is_the_trials_own_failure() -> None:
    from tunekit.contract import load_builders

    builders = load_builders(spec_with(lambda config, ctx: config["units_two"], SPACE).trainable)
    with pytest.raises(KeyError) as caught:
        builders.build_model({"layers": 1, "learning_rate": 0.01}, None)
    assert not isinstance(caught.value, FatalTrialError)
    assert "reads 'units_two', a conditional parameter this trial does not have" in str(caught.value)
    assert builders.build_data({"layers": 1}, "ctx") == ({"layers": 1}, "ctx")


def test_a_spec_builder_may_take_hp_and_reads_the_trials_values_strictly() -> None:
    from tunekit.contract import load_builders

    def build_model(hp: HyperParameters, ctx: Any) -> Any:
        units = hp.Int("units_two", 8, 16) if hp.Choice("layers", [1, 2]) == 2 else None
        return units, hp.Float("learning_rate", 1e-4, 1e-2, sampling="log"), ctx

    builders = load_builders(spec_with(build_model, SPACE).trainable)
    assert builders.build_model({"layers": 2, "units_two": 12, "learning_rate": 0.01}, "ctx") == (12, 0.01, "ctx")

    def renamed(hp: HyperParameters) -> Any:
        return hp.Int("units_2", 8, 16)

    with pytest.raises(UnknownParameterError, match="did you mean 'units_two'"):
        load_builders(spec_with(renamed, SPACE).trainable).build_model({"layers": 2}, None)


def test_a_trials_builders_share_one_record_of_the_space_names_they_read() -> None:
    from tunekit.contract import load_builders

    def build_data(config: dict[str, Any], ctx: Any) -> Any:
        return config.get("learning_rate"), "layers" in config

    def build_model(config: dict[str, Any], ctx: Any) -> Any:
        copied = config.copy()  # a copy's reads count too
        return copied["layers"]

    builders = load_builders(spec_with(build_model, SPACE, build_data).trainable)
    assert builders.reads == set()
    builders.build_data({"layers": 1, "learning_rate": 0.01}, None)
    assert builders.reads == {"learning_rate", "layers"}
    builders.build_model({"layers": 1, "learning_rate": 0.01}, None)
    assert builders.reads == {"learning_rate", "layers"}  # units_two: inactive, never read
    import pickle

    unread = load_builders(spec_with(lambda config, ctx: pickle.dumps(config), SPACE).trainable)
    unread.build_model({"layers": 1}, None)
    assert unread.reads == set()  # pickling the config reads nothing
    everything = load_builders(spec_with(lambda config, ctx: dict(config), SPACE).trainable)
    everything.build_model({"layers": 2, "units_two": 8}, None)
    assert everything.reads == {"layers", "units_two"}


def test_an_hp_builder_reads_what_it_declares() -> None:
    from tunekit.contract import load_builders

    def build_model(hp: HyperParameters) -> Any:
        return hp.Choice("layers", [1, 2])

    builders = load_builders(spec_with(build_model, SPACE).trainable)
    builders.build_model({"layers": 2}, None)
    assert builders.reads == {"layers"}
