"""tunekit.tuner.hp_given: KerasTuner's ``hyperparameters=``, ``tune_new_entries`` and ``allow_new_entries``."""

from __future__ import annotations

from typing import Any

import pytest

from tunekit.config.space import parse_space
from tunekit.errors import SpecError
from tunekit.tuner.discover import discover
from tunekit.tuner.hp import HyperParameters
from tunekit.tuner.hp_given import restricted


def build_model(hp: HyperParameters) -> Any:
    units = hp.Int("units", 32, 512, step=32)
    if hp.Boolean("dropout"):
        hp.Float("rate", 0.1, 0.5)
    return units, hp.Float("learning_rate", 1e-4, 1e-2, sampling="log")


def given(*calls: Any) -> HyperParameters:
    hp = HyperParameters()
    for call in calls:
        call(hp)
    return hp


def test_given_parameters_replace_the_codes_and_the_others_are_searched_as_found() -> None:
    hp = given(lambda h: h.Fixed("learning_rate", 1e-3), lambda h: h.Int("units", 32, 64, step=32))
    space = restricted(discover(build_model), hp, tune_new_entries=True, allow_new_entries=True).to_space()
    assert space == {
        "units": {"type": "int", "low": 32, "high": 64, "step": 32},
        "dropout": {"type": "choice", "values": [False, True]},
        "learning_rate": {"type": "fixed", "value": 0.001},
        "rate": {"type": "uniform", "low": 0.1, "high": 0.5, "when": {"dropout": [True]}},
    }
    parse_space(space)


def test_without_tuning_new_entries_the_others_keep_their_defaults() -> None:
    hp = given(lambda h: h.Float("learning_rate", 1e-4, 1e-2, sampling="log"))
    space = restricted(discover(build_model), hp, tune_new_entries=False, allow_new_entries=True).to_space()
    assert space == {
        "units": {"type": "fixed", "value": 32},
        "dropout": {"type": "fixed", "value": False},
        "learning_rate": {"type": "loguniform", "low": 1e-4, "high": 1e-2},
    }  # rate, which exists only with dropout, is gone with it
    parse_space(space)


def test_a_given_parameter_the_code_never_declares_is_searched_first() -> None:
    hp = given(lambda h: h.Choice("optimizer", ["adam", "sgd"]))
    found = restricted(discover(build_model), hp, tune_new_entries=True, allow_new_entries=True)
    assert found.names[0] == "optimizer" and len(found.names) == 5


def test_new_entries_refused_name_what_the_code_declares_and_what_was_given() -> None:
    hp = given(lambda h: h.Int("units", 32, 64))
    with pytest.raises(SpecError) as caught:
        restricted(discover(build_model), hp, tune_new_entries=True, allow_new_entries=False)
    assert str(caught.value) == (
        "allow_new_entries: is False, but build_model declares dropout, learning_rate, rate, which hyperparameters "
        "lacks; it has units"
    )


def test_restricting_without_given_parameters_is_kerastuners_error() -> None:
    with pytest.raises(SpecError, match=r"^hyperparameters: is needed with tune_new_entries=False"):
        restricted(discover(build_model), None, tune_new_entries=False, allow_new_entries=True)
