"""The eta benchmark's second held-out shape: a small CNN on scikit-learn's digits as 8x8 images.

Its epoch cost grows with ``filters`` (8 to 64): the second convolution's work is quadratic
in them, so an epoch at 64 filters costs several times one at 8, as the issue's CNN did
(5 s an epoch at 16 filters, 17 s at 48). The data ships with scikit-learn: no download.
"""

from __future__ import annotations

from typing import Any

import keras

from trainables.digits_mlp import load_arrays
from tunekit.contract import TrialContext
from tunekit.data import from_arrays

SPEC = """\
name: eta-cnn
trainable: benchmarks.eta_cnn
metric: {name: val_accuracy, mode: max}
budget: {num_samples: 12, max_epochs: 9, max_concurrent: 2}
search: {algorithm: tpe, seed: 0, n_startup_trials: 4}
scheduler: {type: asha, grace_period: 1, reduction_factor: 3}
resources: {cpu: 1, gpu: 0}
training: {precision: float32, seed: 0, batch_size: 32}
space:
  learning_rate: {type: loguniform, low: 1.0e-3, high: 1.0e-2}
  filters: {type: int, low: 8, high: 64, log: true}
  dropout: {type: uniform, low: 0.0, high: 0.4}
"""


def build_data(config: dict[str, Any], ctx: TrialContext) -> tuple[Any, Any]:
    x_train, x_val, y_train, y_val = load_arrays()
    images = (x_train.reshape(-1, 8, 8, 1), x_val.reshape(-1, 8, 8, 1))
    return from_arrays(images[0], y_train, ctx, training=True), from_arrays(images[1], y_val, ctx, training=False)


def build_model(config: dict[str, Any], ctx: TrialContext) -> keras.Model:
    filters = int(config.get("filters", 16))
    inputs = keras.Input(shape=(8, 8, 1), name="image")
    x = keras.layers.UpSampling2D(2)(inputs)  # 16x16: the convolutions, not the steps' overhead, set the cost
    x = keras.layers.Conv2D(filters, 3, padding="same", activation="relu")(x)
    x = keras.layers.Conv2D(filters, 3, padding="same", activation="relu")(x)
    x = keras.layers.MaxPooling2D(4)(x)
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dropout(float(config.get("dropout", 0.1)), seed=ctx.seed)(x)
    outputs = keras.layers.Dense(10, activation="softmax", dtype="float32", name="digit")(x)
    return keras.Model(inputs, outputs, name="digits_cnn")
