"""Test trainable: the digits MLP, except that units=32 starts from NaN weights (loss NaN at epoch 1)."""

from __future__ import annotations

from typing import Any

import keras

from trainables.digits_mlp import build_data  # noqa: F401 - part of the contract
from trainables.digits_mlp import build_model as build_digits_model
from tunekit.contract import TrialContext


def build_model(config: dict[str, Any], ctx: TrialContext) -> keras.Model:
    model = build_digits_model(config, ctx)
    if config["units"] == 32:
        last = model.layers[-1]
        last.kernel.assign(last.kernel * float("nan"))
    return model
