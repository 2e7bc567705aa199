"""Test trainable whose training data is a TFRecord file that is not there.

TensorFlow only opens the file when ``fit`` first pulls a batch, inside the traced train
step, so every trial fails with a graph execution error whose cause comes after a stack.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from trainables.digits_mlp import build_model  # noqa: F401 - part of the contract
from tunekit.contract import TrialContext

MISSING_FILE = "data/train.tfrecord"
FEATURES = {"pixels": tf.io.FixedLenFeature([64], tf.float32), "digit": tf.io.FixedLenFeature([], tf.int64)}


def build_data(config: dict[str, Any], ctx: TrialContext) -> tuple[tf.data.Dataset, tf.data.Dataset]:
    def parse(record: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        example = tf.io.parse_single_example(record, FEATURES)
        return example["pixels"], example["digit"]

    train = tf.data.TFRecordDataset(MISSING_FILE).map(parse).batch(ctx.batch_size)
    return train, train
