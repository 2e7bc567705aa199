"""``training.keep: best``: the exported model is the best epoch's, and the last report says which.

A real Keras ``fit`` on a small learnable dataset with the reporter's ``tune.report`` replaced
by the stand-in of test_reporter. Before the last epoch a callback turns the model's kernel
around, so the last epoch is the worst: the epoch kept must be an earlier one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf

from tunekit.contract import TrialContext
from tunekit.layout import EPOCH_KEY, FINAL_MODEL, INFO_KEY, KEPT_EPOCH, KEPT_VALUE, KEPT_WEIGHTS
from tunekit.worker import reporter as reporter_module
from tunekit.worker.checkpoints import TrialProgress
from tunekit.worker.devices import WorkerDevices
from tunekit.worker.keep import KeptEpoch, read_kept
from tunekit.worker.reporter import EpochReporter

from .test_reporter import MAX_EPOCHS, DriverStandIn, spec


class Exported(DriverStandIn):
    """Keeps each checkpoint's kept epoch and the final export's validation accuracy: the
    reporter removes the folder once the report returns."""

    def __init__(self, validation: Any) -> None:
        super().__init__({})
        self.validation = validation
        self.kept: list[int | None] = []
        self.export_accuracy: float | None = None

    def report(self, result: dict[str, Any], checkpoint: Any = None) -> None:
        if checkpoint is not None:
            saved = read_kept(Path(checkpoint))
            self.kept.append(None if saved is None else saved[0])
            if (Path(checkpoint) / FINAL_MODEL).is_file():
                model = keras.saving.load_model(Path(checkpoint) / FINAL_MODEL)
                self.export_accuracy = float(model.evaluate(self.validation, verbose=0, return_dict=True)["accuracy"])
        super().report(result, checkpoint)


class TurnAroundBeforeTheLastEpoch(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if epoch + 1 == MAX_EPOCHS:
            dense = self.model.layers[-1]
            dense.kernel.assign(-10.0 * dense.kernel)


def fit_and_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keep: str) -> Exported:
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.random((96, 4), dtype=np.float32)
    y = (x[:, 0] > 0.5).astype("int64")  # learnable in a few epochs
    train = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
    validation = tf.data.Dataset.from_tensor_slices((x[:48], y[:48])).batch(16)
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(2, activation="softmax")(inputs))
    model.compile(keras.optimizers.SGD(0.5), "sparse_categorical_crossentropy", metrics=["accuracy"])
    driver = Exported(validation)
    monkeypatch.setattr(reporter_module, "tune", driver)
    monkeypatch.setattr(reporter_module, "trial_info", lambda ctx, devices, scaled_learning_rate: {})
    ctx = TrialContext(
        batch_size=16, per_replica_batch_size=16, replicas=1, precision="float32", seed=0,
        workdir=str(tmp_path), cpus=1, max_epochs=MAX_EPOCHS, jit_compile=False, trial_dir=str(tmp_path),
    )  # fmt: skip
    devices = WorkerDevices(tf.distribute.get_strategy(), 1, ("/cpu:0",), (), None, 1)
    kept = KeptEpoch("val_accuracy", "max") if keep == "best" else None
    reporter = EpochReporter(
        spec({"keep": keep, "checkpoint_every_s": 0}), ctx, devices, TrialProgress(), 6, validation, kept=kept
    )
    try:
        model.fit(train, validation_data=validation, epochs=MAX_EPOCHS, verbose=0, shuffle=False,
                  callbacks=[TurnAroundBeforeTheLastEpoch(), reporter])  # fmt: skip
    finally:
        reporter.finish_reporting()
    return driver


def test_keep_best_exports_the_best_epochs_model_and_names_it_in_the_last_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    driver = fit_and_report(tmp_path, monkeypatch, "best")
    values = [float(r["val_accuracy"]) for r in driver.results]
    best_epoch = values.index(max(values)) + 1  # ties: the earlier epoch
    last = driver.results[-1]
    assert last[EPOCH_KEY] == MAX_EPOCHS and best_epoch < MAX_EPOCHS  # the turned-around last epoch lost
    assert last[INFO_KEY][KEPT_EPOCH] == best_epoch
    assert last[INFO_KEY][KEPT_VALUE] == pytest.approx(max(values))
    # The exported model is that epoch's: it scores the kept value, not the last epoch's.
    assert driver.export_accuracy == pytest.approx(max(values))
    assert driver.export_accuracy != pytest.approx(values[-1])
    # Every checkpoint remembers the best epoch up to it, so a retry keeps knowing it.
    assert driver.kept == [values[:n].index(max(values[:n])) + 1 for n in range(1, MAX_EPOCHS + 1)]


def test_keep_last_exports_the_last_epoch_and_saves_no_kept_weights(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    driver = fit_and_report(tmp_path, monkeypatch, "last")
    last = driver.results[-1]
    assert last[INFO_KEY][KEPT_EPOCH] == MAX_EPOCHS and KEPT_VALUE not in last[INFO_KEY]
    assert driver.export_accuracy == pytest.approx(float(last["val_accuracy"]))
    assert driver.kept == [None] * MAX_EPOCHS


def test_a_kept_epoch_survives_its_checkpoint(tmp_path: Path) -> None:
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    kept = KeptEpoch("val_loss", "min")
    for epoch, loss in enumerate([0.9, 0.4, 0.4, 0.7], start=1):
        kept.observe(epoch, {"val_loss": loss}, model)
        model.layers[0].kernel.assign(model.layers[0].kernel + 1.0)
    assert (kept.epoch, kept.value) == (2, 0.4)  # the tie at epoch 3 keeps epoch 2
    kept.save(tmp_path)
    assert (tmp_path / KEPT_WEIGHTS).is_file()
    again = KeptEpoch("val_loss", "min")
    again.restore(tmp_path)
    assert (again.epoch, again.value) == (2, 0.4)
    assert all(np.array_equal(a, b) for a, b in zip(again.weights, kept.weights, strict=True))
    kept.observe(5, {"val_loss": float("nan")}, model)  # not a value: nothing kept from it
    assert kept.epoch == 2
