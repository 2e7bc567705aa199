"""The classic MNIST MLP (784-512-256-10 with dropout) on flattened 28×28 grayscale images.

MNIST itself cannot be downloaded everywhere tunekit runs, so by default this trains on
scikit-learn's bundled digits (1,797 8×8 images, shipped with the package) upscaled to
28×28, split 80/20 with stratification. Point ``data.path`` at a folder with one
sub-folder per class of PNG/JPEG images (e.g. MNIST exported as PNGs) to train on that
instead; ``data.val_path`` or ``data.val_share`` (default 0.2) give the validation set,
and ``data.image_size`` (default 28) the side images are resized to.

Config: ``learning_rate`` and ``optimizer`` (tunekit compiles the model from them),
``dropout`` (default 0.2), ``units`` (first hidden layer, default 512; the second has half).
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from tunekit.contract import TrialContext
from tunekit.data import from_arrays, from_image_files, list_image_folder, split_image_folder

SIDE = 28
VALIDATION_SHARE = 0.2
SPLIT_SEED = 0  # fixed: every trial must be judged on the same validation set


def load_digits_28() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """scikit-learn's digits, bilinearly upscaled to 28×28×1 in [0, 1], split 80/20."""
    digits = load_digits()
    small = (digits.images / 16.0).astype("float32")[..., None]
    images = tf.image.resize(small, [SIDE, SIDE], method="bilinear").numpy().clip(0.0, 1.0)
    labels = digits.target.astype("int32")
    x_train, x_val, y_train, y_val = train_test_split(
        images, labels, test_size=VALIDATION_SHARE, random_state=SPLIT_SEED, stratify=labels
    )
    return x_train, x_val, y_train, y_val


def build_data(config: dict[str, Any], ctx: TrialContext) -> tuple[tf.data.Dataset, tf.data.Dataset]:
    if not ctx.data.get("path"):
        x_train, x_val, y_train, y_val = load_digits_28()
        return from_arrays(x_train, y_train, ctx, training=True), from_arrays(x_val, y_val, ctx, training=False)
    path = str(ctx.data["path"])
    if ctx.data.get("val_path"):
        train_files, train_labels, _ = list_image_folder(path)
        val_files, val_labels, _ = list_image_folder(str(ctx.data["val_path"]))
    else:
        share = float(ctx.data.get("val_share", VALIDATION_SHARE))
        (train_files, train_labels), (val_files, val_labels), _ = split_image_folder(path, share, SPLIT_SEED)
    size = _image_size(ctx)
    train = from_image_files(train_files, train_labels, ctx, training=True, image_size=size, channels=1)
    val = from_image_files(val_files, val_labels, ctx, training=False, image_size=size, channels=1)
    return train, val


def build_model(config: dict[str, Any], ctx: TrialContext) -> keras.Model:
    """Uncompiled on purpose: tunekit compiles it from config (optimizer, learning_rate)."""
    classes = len(list_image_folder(str(ctx.data["path"]))[2]) if ctx.data.get("path") else 10
    units = int(config.get("units", 512))
    dropout = float(config.get("dropout", 0.2))
    size = _image_size(ctx)
    inputs = keras.Input(shape=(size, size, 1), name="image")
    x = keras.layers.Flatten()(inputs)
    x = keras.layers.Dense(units, activation="relu")(x)
    x = keras.layers.Dropout(dropout, seed=ctx.seed)(x)
    x = keras.layers.Dense(units // 2, activation="relu")(x)
    x = keras.layers.Dropout(dropout, seed=ctx.seed + 1)(x)
    x = keras.layers.Dense(classes, name="logits")(x)
    outputs = keras.layers.Activation("softmax", dtype="float32", name="digit")(x)
    return keras.Model(inputs, outputs, name="mnist_mlp")


def _image_size(ctx: TrialContext) -> int:
    return int(ctx.data.get("image_size", SIDE)) if ctx.data.get("path") else SIDE
