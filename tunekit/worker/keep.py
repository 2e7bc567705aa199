"""``training.keep``: which epoch's model a trial that trains to its end keeps and is ranked by.

``last`` (the default) keeps the last epoch, as Keras leaves the model. ``best`` keeps the epoch
with the best value of the metric, as KerasTuner does: its weights are copied as the trial
trains, saved beside every checkpoint (a retry starts from a checkpoint and must still know the
best epoch before it), and put back into the model before its export. The checkpoint itself
keeps the last epoch's weights and optimizer state: a grown budget trains on from there.

The worker decides the kept epoch; its last report names it (``KEPT_EPOCH``, ``KEPT_VALUE``), and
the driver takes the figure from there for trials.csv, the study, MLflow and TensorBoard.
Ties go to the earlier epoch, as the driver's best_metric does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tunekit.layout import KEPT_EPOCH, KEPT_VALUE, KEPT_WEIGHTS, finite


@dataclass
class KeptEpoch:
    """The best epoch so far of ``metric`` (``mode`` max or min) and its weights."""

    metric: str
    mode: str
    epoch: int | None = None
    value: float | None = None
    weights: list[Any] = field(default_factory=list)

    def observe(self, epoch: int, metrics: dict[str, float], model: Any) -> None:
        """An epoch ended with ``metrics``: its weights are kept when its value is the best yet."""
        value = finite(metrics.get(self.metric))
        if value is None:
            return
        if self.value is None or (value > self.value if self.mode == "max" else value < self.value):
            self.epoch, self.value, self.weights = epoch, value, model.get_weights()

    def save(self, directory: Path) -> None:
        """Beside a checkpoint: the kept epoch, its value and weights (nothing before the first)."""
        import numpy as np

        if self.epoch is None or self.value is None:
            return
        arrays = {f"w{i}": w for i, w in enumerate(self.weights)}
        np.savez(directory / KEPT_WEIGHTS, epoch=self.epoch, value=self.value, **arrays)

    def restore(self, directory: Path) -> None:
        """The kept epoch of the checkpoint a retry or resume starts from, if it holds one."""
        saved = read_kept(directory)
        if saved is not None:
            self.epoch, self.value, self.weights = saved

    def put_back(self, model: Any) -> dict[str, Any]:
        """The kept epoch's weights into ``model`` before its export; what the last report says of it."""
        if self.epoch is None:
            return {}  # no epoch had a value of the metric: the model stays as it is
        model.set_weights(self.weights)
        return {KEPT_EPOCH: self.epoch, KEPT_VALUE: self.value}


def read_kept(directory: Path) -> tuple[int, float, list[Any]] | None:
    """A checkpoint's kept epoch, value and weights; None when it holds none."""
    import numpy as np

    path = directory / KEPT_WEIGHTS
    if not path.is_file():
        return None
    with np.load(path) as saved:
        count = sum(1 for name in saved.files if name.startswith("w"))
        return int(saved["epoch"]), float(saved["value"]), [saved[f"w{i}"] for i in range(count)]
