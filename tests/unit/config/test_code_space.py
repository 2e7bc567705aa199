"""A spec without ``space:`` takes the space its ``build_model(hp)`` declares (no TensorFlow here:
the builders below only call ``hp``; the child process that builds a file trainable's model is
tested end to end in tests/e2e/test_kerastuner_port.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tunekit.config.code_space import _declares_hp, space_in_code
from tunekit.config.spec import parse_spec
from tunekit.contract import builders_from
from tunekit.errors import SpecError

RAW = {"name": "x", "metric": {"name": "val_accuracy", "mode": "max"}, "budget": {"num_samples": 2, "max_epochs": 1}}


def build_model(hp: Any, ctx: Any) -> None:
    if hp.Choice("depth", [1, 2]) == 2:
        hp.Int("width", 8, 16, step=8)
    assert ctx.replicas == 1 and ctx.max_epochs == 1  # found under a one-replica context


def build_data(config: Any, ctx: Any) -> None:
    raise AssertionError("finding the space builds no data")


def test_the_space_of_build_model_hp_ctx_is_found_with_its_conditions() -> None:
    found = space_in_code(builders_from(build_data=build_data, build_model=build_model), RAW)
    assert found == {
        "depth": {"type": "choice", "values": [1, 2]},
        "width": {"type": "int", "low": 8, "high": 16, "step": 8, "when": {"depth": [2]}},
    }


def test_a_builder_of_config_declares_no_space_and_the_spec_must_give_one() -> None:
    def by_config(config: Any, ctx: Any) -> None:
        return None

    assert space_in_code(builders_from(build_data=build_data, build_model=by_config), RAW) is None
    with pytest.raises(SpecError, match=r"^space: must be a non-empty mapping"):
        parse_spec(RAW, None, builders_from(build_data=build_data, build_model=by_config))


@pytest.mark.parametrize(
    ("source", "declares"),
    [
        ("def build_model(hp):\n    pass\n", True),
        ("def build_model(hp, ctx):\n    pass\n", True),
        ("def build_model(config, ctx):\n    pass\n", False),
        ("from elsewhere import build_model\n", False),  # not its own: a spec then gives space:
        ("def build_model(hp:\n", False),  # does not parse: the trial's import says why
    ],
)
def test_only_a_module_s_own_build_model_taking_hp_first_is_searched_for_a_space(
    tmp_path: Path, source: str, declares: bool
) -> None:
    (tmp_path / "model.py").write_text(source)
    assert _declares_hp(tmp_path / "model.py") is declares
