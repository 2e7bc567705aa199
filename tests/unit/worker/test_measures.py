"""The objectives tunekit measures, on a real Keras model (no Ray)."""

from __future__ import annotations

from pathlib import Path

import keras
import numpy as np

from tunekit.layout import FINAL_WEIGHTS
from tunekit.worker.checkpoints import export_model
from tunekit.worker.measures import Measures


def small_model() -> keras.Model:
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(10)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def test_only_the_named_measures_are_added_and_parameters_are_counted_by_hand() -> None:
    model = small_model()
    batch = np.zeros((32, 64), dtype="float32")
    metrics: dict[str, float] = {"val_accuracy": 0.5}
    Measures({"model_params", "latency_ms", "val_accuracy"}, batch).add(metrics, model)
    assert metrics["model_params"] == 64 * 16 + 16 + 16 * 10 + 10  # 1210 weights and biases
    assert 0 < metrics["latency_ms"] < 1000
    assert set(metrics) == {"val_accuracy", "model_params", "latency_ms"}


def test_model_size_is_the_saved_models() -> None:
    metrics: dict[str, float] = {}
    Measures({"model_size_mb"}, np.zeros((4, 64), dtype="float32")).add(metrics, small_model())
    # 1210 float32 weights are under 5 kB; the .keras zip adds its config: well under 1 MB.
    assert 0.004 < metrics["model_size_mb"] < 1.0


class Subclassed(keras.Model):
    """A subclassed model with constructor arguments and no get_config: Keras cannot save it whole."""

    def __init__(self, units: int) -> None:
        super().__init__()
        self.dense = keras.layers.Dense(units)

    def call(self, x: object) -> object:
        return self.dense(x)


def test_model_size_of_a_model_keras_cannot_save_whole_is_its_weights_as_exported(tmp_path: Path) -> None:
    model = Subclassed(10)
    model(np.zeros((2, 64), dtype="float32"))
    metrics: dict[str, float] = {}
    Measures({"model_size_mb"}, np.zeros((4, 64), dtype="float32")).add(metrics, model)  # raised before
    assert export_model(tmp_path, model).startswith("saved weights only")
    assert metrics["model_size_mb"] == (tmp_path / FINAL_WEIGHTS).stat().st_size / 2**20
