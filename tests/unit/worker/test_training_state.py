"""Building a model's training state before fit, so TensorFlow traces each step once."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf

from tunekit.compat.tf_keras import build_training_state

X = np.random.default_rng(0).random((48, 6), dtype=np.float32)
Y = (X.sum(axis=1) > 3).astype("int32")


def data() -> tf.data.Dataset:
    return tf.data.Dataset.from_tensor_slices((X, Y)).batch(16)


def compiled(model: keras.Model) -> keras.Model:
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


class Subclassed(keras.Model):
    def __init__(self) -> None:
        super().__init__()
        self.hidden = keras.layers.Dense(4, activation="relu")
        self.out = keras.layers.Dense(2, activation="softmax")

    def call(self, inputs: Any) -> Any:
        return self.out(self.hidden(inputs))


def functional() -> keras.Model:
    inputs = keras.Input((6,))
    return keras.Model(inputs, keras.layers.Dense(2, activation="softmax")(inputs))


def fit_creating(model: keras.Model) -> tuple[list[str], list[float]]:
    """The variables fit creates (inside its first traced steps), and its losses."""
    created: list[str] = []

    def creator(next_creator: Any, **kwargs: Any) -> Any:
        created.append(str(kwargs.get("name")))
        return next_creator(**kwargs)

    keras.utils.set_random_seed(0)
    with tf.variable_creator_scope(creator):
        history = model.fit(data(), validation_data=data(), epochs=2, verbose=0)
    return created, history.history["loss"]


@pytest.mark.parametrize("make", [functional, Subclassed])
def test_built_first_fit_creates_no_variable_and_trains_the_same(make: Any) -> None:
    keras.utils.set_random_seed(0)
    plain = compiled(make())
    created, losses = fit_creating(plain)
    assert created, "Keras no longer creates variables inside fit: build_training_state may be unneeded"

    keras.utils.set_random_seed(0)
    built = compiled(make())
    assert build_training_state(built, data().element_spec)
    assert built.optimizer.built
    built_created, built_losses = fit_creating(built)
    assert built_created == []  # nothing left to create while tracing: each step traces once
    assert built_losses == pytest.approx(losses, rel=1e-6)


def test_a_model_it_cannot_build_is_left_for_keras_to_build_while_tracing() -> None:
    model = compiled(functional())
    wrong = (tf.TensorSpec((None, 3), tf.float32), tf.TensorSpec((None,), tf.int32))  # 3 features, not 6
    assert not build_training_state(model, wrong)
    created, _ = fit_creating(model)
    assert created  # fit built what was missing, as without tunekit
