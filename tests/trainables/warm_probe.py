"""Test trainable for the warm runtime: scikit-learn's digits, and each trial notes in its folder
what it found as it began (its worker's preload, the seeds, Keras's session and policy, the
devices), then leaves state behind on purpose, which the next trial in its process must not find.
It reads a file by a relative path, as trainables read their data folders."""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits

from tunekit.contract import TrialContext
from tunekit.data import from_arrays

NOTE = "warm.json"


def build_data(config: dict[str, Any], ctx: TrialContext) -> Any:
    preload = sys.modules.get("tunekit.worker.preload")
    note = {
        "pid": os.getpid(),
        "preload": None if preload is None else [preload.STARTED, preload.ENDED],
        "began": time.time(),
        "python_random": random.random(),
        "expected_python_random": random.Random(ctx.seed).random(),
        "numpy_random": float(np.random.random()),
        "expected_numpy_random": float(np.random.RandomState(ctx.seed).random_sample()),
        "policy": keras.mixed_precision.global_policy().name,
        "uid": keras.backend.get_uid("warm_probe"),
        "devices": [device.name for device in tf.config.get_visible_devices()],
        "threads": [
            tf.config.threading.get_intra_op_parallelism_threads(),
            tf.config.threading.get_inter_op_parallelism_threads(),
        ],
        "cwd": os.getcwd(),
    }
    Path(ctx.trial_dir, NOTE).write_text(json.dumps(note))
    scale = float(Path("data/scale.txt").read_text())  # relative: the command's folder
    digits = load_digits()
    features, labels = (digits.data / scale).astype("float32"), digits.target.astype("int32")
    return from_arrays(features[:1400], labels[:1400], ctx, training=True), from_arrays(
        features[1400:], labels[1400:], ctx, training=False
    )


def build_model(config: dict[str, Any], ctx: TrialContext) -> keras.Model:
    inputs = keras.Input(shape=(64,))
    x = keras.layers.Dense(int(config["units"]), activation="relu")(inputs)
    outputs = keras.layers.Dense(10, activation="softmax", dtype="float32")(x)
    return keras.Model(inputs, outputs)


def fit_options(config: dict[str, Any], ctx: TrialContext) -> dict[str, Any]:
    """After the model is built: state a careless trial leaves behind."""
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    random.seed(999)
    np.random.seed(999)
    tf.random.set_seed(999)
    for _ in range(5):
        keras.backend.get_uid("warm_probe")
    return {}
