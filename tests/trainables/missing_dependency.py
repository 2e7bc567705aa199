"""Test trainable that imports a package this machine does not have."""

from __future__ import annotations

from typing import Any

from trainables.digits_mlp import build_data  # noqa: F401 - part of the contract
from tunekit.contract import TrialContext


def build_model(config: dict[str, Any], ctx: TrialContext) -> Any:
    import tunekit_no_such_package  # noqa: F401

    raise AssertionError("unreachable")
