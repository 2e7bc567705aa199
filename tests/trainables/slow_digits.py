"""Test trainable: the digits MLP whose epochs last at least ``data.epoch_seconds``.

A digits epoch takes a tenth of a second; a test that must act mid-trial (kill a node
while a trial runs on it, read ``tunekit status`` during a search) needs epochs it can
catch.
"""

from __future__ import annotations

import time
from typing import Any

import keras

from trainables.digits_mlp import build_data, build_model
from tunekit.contract import TrialContext

__all__ = ["build_data", "build_model", "fit_options"]


class _Linger(keras.callbacks.Callback):
    def __init__(self, seconds: float) -> None:
        super().__init__()
        self._seconds = seconds

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        time.sleep(self._seconds)


def fit_options(config: dict[str, Any], ctx: TrialContext) -> dict[str, Any]:
    return {"callbacks": [_Linger(float(ctx.data["epoch_seconds"]))]}
