"""Digits from TFRecords the author wrote, two named outputs, compiled by the author.

``kind: functional`` is a functional model tunekit can give float32 outputs under a
mixed policy; ``kind: subclassed`` ends in a layer of the policy's dtype, which tunekit
cannot rewrite.
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from tunekit import data


def _named(dataset: tf.data.Dataset) -> tf.data.Dataset:
    return dataset.map(lambda image, label: (image, {"digit": label, "parity": label % 2}))


def build_data(config: dict[str, Any], ctx: Any) -> tuple[tf.data.Dataset, tf.data.Dataset]:
    train = data.from_tfrecord(ctx.data["train"], ctx, training=True, image_size=8, channels=1)
    val = data.from_tfrecord(ctx.data["val"], ctx, training=False, image_size=8, channels=1)
    return _named(train), _named(val)


class TwoHeads(keras.Model):
    def __init__(self) -> None:
        super().__init__()
        self.flat = keras.layers.Flatten()
        self.hidden = keras.layers.Dense(32, activation="relu")
        self.digit = keras.layers.Dense(10, activation="softmax")
        self.parity = keras.layers.Dense(1, activation="sigmoid")

    def call(self, x: Any) -> dict[str, Any]:
        hidden = self.hidden(self.flat(x))
        return {"digit": self.digit(hidden), "parity": self.parity(hidden)}


def _functional() -> keras.Model:
    inputs = keras.Input((8, 8, 1))
    hidden = keras.layers.Dense(32, activation="relu")(keras.layers.Flatten()(inputs))
    digit = keras.layers.Dense(10, activation="softmax", name="digit")(hidden)
    parity = keras.layers.Dense(1, activation="sigmoid", name="parity")(hidden)
    return keras.Model(inputs, {"digit": digit, "parity": parity})


def build_model(config: dict[str, Any], ctx: Any) -> keras.Model:
    model = _functional() if config["kind"] == "functional" else TwoHeads()
    model.compile(
        optimizer=keras.optimizers.Adam(config["learning_rate"]),
        loss={"digit": "sparse_categorical_crossentropy", "parity": "binary_crossentropy"},
        metrics={"digit": ["accuracy"], "parity": ["accuracy"]},
    )
    return model
