"""``training.executions``: N models of one configuration in lockstep, a real Keras ``fit`` on digits.

The joint model's logs are the executions' mean and spread, each execution's own evaluation
agrees with them, a checkpoint holds and restores every execution (weights and optimizer
state), and a learning rate set on the joint optimizer reaches every execution.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf
from sklearn.datasets import load_digits

from tunekit.compat.tf_keras import build_training_state
from tunekit.worker.checkpoints import restore_checkpoint, save_checkpoint
from tunekit.worker.executions import Executions, first_execution, in_lockstep


def datasets() -> tuple[Any, Any]:
    x, y = load_digits(return_X_y=True)
    x = (x / 16).astype("float32")
    train = tf.data.Dataset.from_tensor_slices((x[:1400], y[:1400])).batch(64)
    return train, tf.data.Dataset.from_tensor_slices((x[1400:], y[1400:])).batch(64)


def build() -> keras.Model:
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(10)])
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=loss, metrics=["accuracy"])
    return model


def executions(train: Any, count: int = 3) -> Executions:
    keras.utils.set_random_seed(0)
    first = build()
    build_training_state(first, train.element_spec)
    joint = in_lockstep(first, count, 0, build, train.element_spec)
    assert isinstance(joint, Executions) and first_execution(joint) is first
    return joint


def test_each_epoch_logs_the_executions_mean_and_spread() -> None:
    train, validation = datasets()
    joint = executions(train)
    history = joint.fit(train, validation_data=validation, epochs=2, verbose=0, shuffle=False)
    own = [model.evaluate(validation, verbose=0, return_dict=True)["accuracy"] for model in joint.executions]
    assert len(set(own)) == 3  # seeds 0, 1 and 2: three different models
    assert history.history["val_accuracy"][-1] == pytest.approx(np.mean(own), abs=1e-6)
    assert history.history["val_accuracy_std"][-1] == pytest.approx(np.std(own), abs=1e-6)
    assert {"loss", "loss_std", "accuracy", "accuracy_std", "val_loss", "val_loss_std"} <= set(history.history)


def test_a_checkpoint_holds_and_restores_every_execution_and_a_learning_rate_reaches_all(tmp_path: Path) -> None:
    train, validation = datasets()
    joint = executions(train)
    joint.fit(train, epochs=1, verbose=0, shuffle=False)
    save_checkpoint(tmp_path, joint, 1, {"learning_rate": 0.01})
    scores = [model.evaluate(validation, verbose=0)[0] for model in joint.executions]
    restored = executions(train)
    checkpoint = SimpleNamespace(path=str(tmp_path), as_directory=lambda: contextlib.nullcontext(str(tmp_path)))
    assert restore_checkpoint(checkpoint, restored, train, {"learning_rate": 0.005}) == (1, "")
    assert [model.evaluate(validation, verbose=0)[0] for model in restored.executions] == pytest.approx(scores)
    steps = len(list(train))
    assert [int(model.optimizer.iterations) for model in restored.executions] == [steps] * 3
    # The config's new rate (a PBT mutation) was set on every execution's optimizer.
    assert [float(model.optimizer.learning_rate) for model in restored.executions] == pytest.approx([0.005] * 3)
