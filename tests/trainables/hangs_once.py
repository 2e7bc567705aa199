"""Test trainable: the digits MLP whose first trial hangs in an epoch, as a stuck reader would.

The first trial to start claims a marker file in ``data.marker_dir``; its epoch
``data.hang_epoch`` never ends (it sleeps an hour). Every other trial trains as ever.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import keras

from trainables.digits_mlp import build_data, build_model
from tunekit.contract import TrialContext

__all__ = ["build_data", "build_model", "fit_options"]


class _Hang(keras.callbacks.Callback):
    def __init__(self, epoch: int) -> None:
        super().__init__()
        self._epoch = epoch

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if epoch + 1 == self._epoch:
            time.sleep(3600)


def fit_options(config: dict[str, Any], ctx: TrialContext) -> dict[str, Any]:
    try:
        os.close(os.open(Path(ctx.data["marker_dir"]) / "claimed", os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return {}  # another trial is the one that hangs
    return {"callbacks": [_Hang(int(ctx.data["hang_epoch"]))]}
