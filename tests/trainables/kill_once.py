"""Test trainable: the digits MLP whose worker process SIGKILLs itself once, mid-trial.

The first trial to start claims a marker file; after the epoch given by
``data.kill_after_epoch`` has been reported and checkpointed, its worker process is
killed with SIGKILL, as an out-of-memory killer or a lost node would. Ray must then
retry the trial from that checkpoint. (tunekit's report of an epoch is in flight while the
next epoch trains; the killer waits for it, or the retry would train that epoch again.)
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import keras

from trainables.digits_mlp import build_data as build_digits_data
from trainables.digits_mlp import build_model as build_digits_model
from tunekit.contract import TrialContext
from tunekit.worker.reporter import EpochReporter


def build_data(config: dict[str, Any], ctx: TrialContext) -> tuple[Any, Any]:
    return build_digits_data(config, ctx)


def build_model(config: dict[str, Any], ctx: TrialContext) -> keras.Model:
    model = build_digits_model(config, ctx)
    claim = Path(ctx.data["marker_dir"]) / "claimed"
    try:
        os.close(os.open(claim, os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return model  # another trial (or an earlier attempt of this one) was the victim
    return KillAfterEpoch(model.inputs, model.outputs, kill_after_epoch=int(ctx.data["kill_after_epoch"]))


class _Killer(keras.callbacks.Callback):
    def __init__(self, epoch: int, reporter: EpochReporter) -> None:
        super().__init__()
        self._epoch = epoch
        self._reporter = reporter

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if epoch + 1 == self._epoch:
            self._reporter.finish_reporting()  # the driver has the epoch and its checkpoint
            os.kill(os.getpid(), signal.SIGKILL)


class KillAfterEpoch(keras.Model):
    """Adds the killer after tunekit's own callbacks, so the epoch is reported first."""

    def __init__(self, *args: Any, kill_after_epoch: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._kill_after_epoch = kill_after_epoch

    def fit(self, *args: Any, callbacks: list[Any] | None = None, **kwargs: Any) -> Any:
        callbacks = list(callbacks or [])
        reporter = next(callback for callback in callbacks if isinstance(callback, EpochReporter))
        return super().fit(*args, callbacks=[*callbacks, _Killer(self._kill_after_epoch, reporter)], **kwargs)
