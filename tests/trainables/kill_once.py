"""Test trainable: the digits MLP whose worker process SIGKILLs itself once, mid-trial.

The first trial to start claims a marker file; after the epoch given by
``data.kill_after_epoch`` has been reported and checkpointed, its worker process is
killed with SIGKILL, as an out-of-memory killer or a lost node would. Ray must then
retry the trial from that checkpoint. (tunekit's report of an epoch is in flight while the
next epoch trains; the killer waits for it, or the retry would train that epoch again.)

With ``data.hold_epoch``, every trial that starts that epoch after two others finished it
sleeps ``data.hold_s`` first, until a file ``resumed`` exists in the marker folder: a test
can stop a PBT search while half its population waits at a meeting, and resume it.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import keras

from trainables.digits_mlp import build_data as build_digits_data
from trainables.digits_mlp import build_model as build_digits_model
from tunekit.contract import TrialContext
from tunekit.worker.reporter import EpochReporter

REACHED_PREFIX = "reached_"  # a marker per trial that finished data.hold_epoch
RESUMED_FILE = "resumed"


def build_data(config: dict[str, Any], ctx: TrialContext) -> tuple[Any, Any]:
    return build_digits_data(config, ctx)


def build_model(config: dict[str, Any], ctx: TrialContext) -> keras.Model:
    model = build_digits_model(config, ctx)
    markers = Path(ctx.data["marker_dir"])
    callbacks: list[keras.callbacks.Callback] = []
    if "hold_epoch" in ctx.data:
        hold_epoch, hold_s = int(ctx.data["hold_epoch"]), float(ctx.data["hold_s"])
        callbacks.append(_Holder(markers, Path(ctx.trial_dir).name, hold_epoch, hold_s))
    try:
        os.close(os.open(markers / "claimed", os.O_CREAT | os.O_EXCL))
        kill_after_epoch: int | None = int(ctx.data["kill_after_epoch"])
    except FileExistsError:
        kill_after_epoch = None  # another trial (or an earlier attempt of this one) was the victim
    if kill_after_epoch is None and not callbacks:
        return model
    return WithTestCallbacks(model.inputs, model.outputs, kill_after_epoch=kill_after_epoch, extra=callbacks)


class _Killer(keras.callbacks.Callback):
    def __init__(self, epoch: int, reporter: EpochReporter) -> None:
        super().__init__()
        self._epoch = epoch
        self._reporter = reporter

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if epoch + 1 == self._epoch:
            self._reporter.finish_reporting()  # the driver has the epoch and its checkpoint
            os.kill(os.getpid(), signal.SIGKILL)


class _Holder(keras.callbacks.Callback):
    def __init__(self, markers: Path, trial: str, epoch: int, seconds: float) -> None:
        super().__init__()
        self._markers, self._trial, self._epoch, self._seconds = markers, trial, epoch, seconds

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if epoch + 1 != self._epoch or (self._markers / RESUMED_FILE).exists():
            return
        if len([p for p in self._markers.glob(f"{REACHED_PREFIX}*") if p.name != REACHED_PREFIX + self._trial]) >= 2:
            time.sleep(self._seconds)

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if epoch + 1 == self._epoch:
            (self._markers / f"{REACHED_PREFIX}{self._trial}").touch()


class WithTestCallbacks(keras.Model):
    """Adds the killer (when this trial is the victim) and the others after tunekit's own
    callbacks, so an epoch is reported first."""

    def __init__(self, *args: Any, kill_after_epoch: int | None, extra: list[Any], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._kill_after_epoch = kill_after_epoch
        self._extra = extra

    def fit(self, *args: Any, callbacks: list[Any] | None = None, **kwargs: Any) -> Any:
        callbacks = [*(callbacks or []), *self._extra]
        if self._kill_after_epoch is not None:
            reporter = next(callback for callback in callbacks if isinstance(callback, EpochReporter))
            callbacks.append(_Killer(self._kill_after_epoch, reporter))
        return super().fit(*args, callbacks=callbacks, **kwargs)
