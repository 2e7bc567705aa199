"""Objectives tunekit measures itself: ``model_params``, ``model_size_mb`` and ``latency_ms``.

A trial measures only those its spec names (as objectives, in constraints or in
``select``), so a single-objective search pays nothing. ``peak_memory_mb`` is reported
every epoch by the epoch reporter already. Imported only inside trial workers.

* ``model_params``: trainable parameters; fixed by the architecture, counted once.
* ``model_size_mb``: the size of the model saved as ``.keras`` (weights and optimizer
  state, which exists after the first epoch); measured once per attempt.
* ``latency_ms``: the median time of one inference on a batch of ``training.batch_size``
  on the trial's own device, after warm-up calls. Measured at every epoch's end, so at
  each rung MO-ASHA compares and at the last epoch (the worker does not know the rungs:
  they are the search's, and a few milliseconds against an epoch's training is cheap).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

from tunekit.config.objectives import MEASURED

_WARM_UP_CALLS = 2  # the first calls trace and compile; they are not what a deployed model costs
_TIMED_CALLS = 7


class Measures:
    """The measured objectives a trial's spec names, added to each epoch's metrics."""

    def __init__(self, names: Collection[str], batch: Any) -> None:
        """``names``: the metrics the spec tracks; ``batch``: one batch of validation inputs."""
        self._names = {name for name in names if name in MEASURED}
        self._batch = batch
        self._last: dict[str, float] = {}

    def add(self, metrics: dict[str, float], model: Any) -> None:
        """Puts the named measurements into ``metrics`` for this epoch."""
        if "model_params" in self._names and "model_params" not in self._last:
            self._last["model_params"] = float(sum(int(w.numpy().size) for w in model.trainable_weights))
        if "model_size_mb" in self._names and "model_size_mb" not in self._last:
            self._last["model_size_mb"] = saved_size_mb(model)
        if "latency_ms" in self._names:
            self._last["latency_ms"] = latency_ms(model, self._batch)
        metrics.update(self._last)


def saved_size_mb(model: Any) -> float:
    """Megabytes of the model as tunekit exports it: ``model.keras``, or ``model.weights.h5``
    for a model Keras cannot save whole (``tunekit.worker.checkpoints.export_model``)."""
    from tunekit.worker.checkpoints import export_model

    with tempfile.TemporaryDirectory(prefix="tunekit-size-") as scratch:
        export_model(Path(scratch), model)
        saved = [path.stat().st_size for path in Path(scratch).iterdir()]
        if not saved:
            raise RuntimeError("model_size_mb: Keras could save neither the model nor its weights")
        return saved[0] / 2**20


def latency_ms(model: Any, batch: Any) -> float:
    """Median milliseconds of one inference on ``batch``, after warm-up."""
    for _ in range(_WARM_UP_CALLS):
        model.predict_on_batch(batch)
    times = []
    for _ in range(_TIMED_CALLS):
        started = time.perf_counter()
        model.predict_on_batch(batch)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)
