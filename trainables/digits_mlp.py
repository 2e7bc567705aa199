"""A small MLP on scikit-learn's bundled digits (8×8 images, 10 classes): the default search.

The data ships with scikit-learn, so this runs anywhere without a download.
"""

from __future__ import annotations

import functools
from typing import Any

import keras
import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from tunekit.contract import TrialContext
from tunekit.data import from_arrays

VALIDATION_SHARE = 0.2
SPLIT_SEED = 0  # fixed: every trial must be judged on the same validation set


@functools.cache  # a reused worker loads and splits them once, not once per trial (45 ms each)
def load_arrays() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Digits scaled to [0, 1], split 80/20 with stratification (read-only: every trial shares them)."""
    digits = load_digits()
    features = (digits.data / 16.0).astype("float32")
    labels = digits.target.astype("int32")
    x_train, x_val, y_train, y_val = train_test_split(
        features, labels, test_size=VALIDATION_SHARE, random_state=SPLIT_SEED, stratify=labels
    )
    for array in (x_train, x_val, y_train, y_val):
        array.flags.writeable = False
    return x_train, x_val, y_train, y_val


def build_data(config: dict[str, Any], ctx: TrialContext) -> tuple[Any, Any]:
    x_train, x_val, y_train, y_val = load_arrays()
    return from_arrays(x_train, y_train, ctx, training=True), from_arrays(x_val, y_val, ctx, training=False)


def build_model(config: dict[str, Any], ctx: TrialContext) -> keras.Model:
    """Uncompiled on purpose: tunekit compiles it from config (optimizer, learning_rate)."""
    units = int(config.get("units", 64))
    dropout = float(config.get("dropout", 0.1))
    inputs = keras.Input(shape=(64,), name="pixels")
    x = keras.layers.Dense(units, activation="relu")(inputs)
    x = keras.layers.Dropout(dropout, seed=ctx.seed)(x)
    x = keras.layers.Dense(units // 2, activation="relu")(x)
    outputs = keras.layers.Dense(10, activation="softmax", dtype="float32", name="digit")(x)
    return keras.Model(inputs, outputs, name="digits_mlp")
