"""Known-bad combinations are refused by validate with one line naming both settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tunekit.cli import main
from tunekit.config.spec import parse_spec
from tunekit.errors import SpecError

REPO = Path(__file__).resolve().parents[3]
DIGITS = REPO / "search_spaces" / "digits_mlp.yaml"
RULE = (
    "must be false when resources.gpu is 2 or more: MirroredStrategy's replicas cannot run XLA-compiled "
    "steps (every trial fails with 'Trying to access resource ... replica_1'); "
)


def spec(**sections: Any) -> dict[str, Any]:
    raw = yaml.safe_load(DIGITS.read_text())
    for name, section in sections.items():
        raw[name] = {**(raw.get(name) or {}), **section} if isinstance(section, dict) else section
    return dict(raw)


def test_xla_with_mirrored_strategy_is_refused_naming_both_settings() -> None:
    raw = spec(training={"jit_compile": True}, resources={"cpu": 1, "gpu": 2})
    with pytest.raises(SpecError) as caught:
        parse_spec(raw, DIGITS.parent, locate_trainable=False)
    assert str(caught.value) == (
        f"training.jit_compile: {RULE}set training.jit_compile: false, or resources.gpu: 1, got true"
    )


def test_xla_searched_with_mirrored_strategy_is_refused_at_the_searched_value() -> None:
    raw = spec(resources={"cpu": 1, "gpu": 2})
    raw["space"]["jit_compile"] = {"type": "choice", "values": [False, True]}
    with pytest.raises(SpecError, match=r"^space\.jit_compile\.values\[1\]: must be false when resources\.gpu"):
        parse_spec(raw, DIGITS.parent, locate_trainable=False)


def test_xla_on_one_device_and_mirrored_strategy_without_xla_are_fine() -> None:
    parse_spec(
        spec(training={"jit_compile": True}, resources={"cpu": 1, "gpu": 1}), DIGITS.parent, locate_trainable=False
    )
    parse_spec(spec(resources={"cpu": 1, "gpu": 2}), DIGITS.parent, locate_trainable=False)


def test_validate_refuses_it_in_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["validate", str(DIGITS), "--set", "training.jit_compile=true", "--set", "resources.gpu=2"])
    err = capsys.readouterr().err
    assert status == 2
    assert err.splitlines() == [
        f"tunekit: error: training.jit_compile: {RULE}set training.jit_compile: false, or resources.gpu: 1, got true"
    ]
