"""Test trainable whose build_model fails the same way in every trial (a shape bug)."""

from __future__ import annotations

from typing import Any

from trainables.digits_mlp import build_data  # noqa: F401 - part of the contract
from tunekit.contract import TrialContext


def build_model(config: dict[str, Any], ctx: TrialContext) -> Any:
    raise ValueError("Input 0 of layer 'dense' is incompatible: expected shape (None, 64), found (None, 63)")
