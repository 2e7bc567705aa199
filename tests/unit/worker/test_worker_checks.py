"""The worker's checks of what a user's builders hand it, on real tf.data and Keras objects (no Ray).

Each mistake a new user makes must end in one line naming what came back and what is
expected, not in a Keras traceback from deep inside ``fit``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf

from tunekit.contract import Builders
from tunekit.errors import FatalTrialError, describe_error
from tunekit.layout import FINAL_MODEL, FINAL_WEIGHTS
from tunekit.worker.checkpoints import export_model
from tunekit.worker.checks import check_model_takes_data, checked_data, checked_fit_options, checked_model

X = np.random.default_rng(0).random((40, 8), dtype=np.float32)
Y = np.arange(40) % 3
EXPECTED = "build_data must return (train_ds, val_ds), two tf.data.Datasets batched with ctx.batch_size"


def batched() -> tf.data.Dataset:
    return tf.data.Dataset.from_tensor_slices((X, Y)).batch(8)


def functional() -> keras.Model:
    inputs = keras.Input((8,))
    model = keras.Model(inputs, keras.layers.Dense(3, activation="softmax")(inputs))
    model.compile("adam", "sparse_categorical_crossentropy")
    return model


class NoConfig(keras.Model):
    """A constructor argument and no get_config: Keras cannot save it whole."""

    def __init__(self, units: int) -> None:
        super().__init__()
        self.dense = keras.layers.Dense(units)

    def call(self, x: Any) -> Any:
        return self.dense(x)


def test_two_batched_datasets_pass() -> None:
    train, val = checked_data((batched(), batched()))
    check_model_takes_data(functional(), train, "train")
    assert val.element_spec[0].shape.as_list() == [None, 8]


def test_arrays_instead_of_datasets_name_what_came_back() -> None:
    with pytest.raises(FatalTrialError) as raised:
        checked_data(((X, Y), (X, Y)))
    assert str(raised.value) == (
        f"{EXPECTED}; its train set is a tuple of 2 (numpy.ndarray, numpy.ndarray) "
        "(wrap arrays: tf.data.Dataset.from_tensor_slices((x, y)).batch(ctx.batch_size))"
    )


def test_one_dataset_instead_of_two() -> None:
    with pytest.raises(FatalTrialError) as raised:
        checked_data(batched())
    assert str(raised.value).startswith(f"{EXPECTED}; it returned tensorflow.")


def test_unbatched_dataset_with_scalar_targets() -> None:
    unbatched = tf.data.Dataset.from_tensor_slices((X, Y))
    with pytest.raises(FatalTrialError) as raised:
        checked_data((batched(), unbatched))
    assert str(raised.value) == (
        f"{EXPECTED}; its validation set is not batched: its elements have shapes ((8,), ()), "
        "with scalar targets; add .batch(ctx.batch_size)"
    )


def test_unbatched_inputs_against_a_functional_model() -> None:
    one_hot = tf.data.Dataset.from_tensor_slices((X, np.eye(3, dtype=np.float32)[Y]))  # targets of rank 1
    with pytest.raises(FatalTrialError) as raised:
        check_model_takes_data(functional(), one_hot, "train")
    assert str(raised.value) == (
        "build_data's train set is not batched: its inputs have shape (8,) but the model takes (None, 8); "
        "add .batch(ctx.batch_size)"
    )


def test_dataset_of_bare_tensors_is_refused() -> None:
    with pytest.raises(FatalTrialError) as raised:
        checked_data((tf.data.Dataset.from_tensor_slices(X).batch(8), batched()))
    assert str(raised.value) == (
        f"{EXPECTED}; its train set yields (None, 8), not (inputs, targets) or (inputs, targets, sample_weights)"
    )


def test_build_model_must_return_a_model() -> None:
    with pytest.raises(FatalTrialError) as raised:
        checked_model(None)
    assert str(raised.value) == "build_model must return a keras.Model; it returned None"


def _options(returned: object) -> dict[str, Any]:
    builders = Builders(lambda c, x: None, lambda c, x: None, lambda config, ctx: returned)
    return checked_fit_options(builders, functional(), {}, None)  # type: ignore[arg-type]


def test_fit_options_pass_through_with_callbacks_as_a_list() -> None:
    stop = keras.callbacks.EarlyStopping(patience=1)
    options = _options({"callbacks": (stop,), "class_weight": {0: 1.0, 1: 2.0, 2: 1.0}, "steps_per_epoch": 3})
    assert options == {"callbacks": [stop], "class_weight": {0: 1.0, 1: 2.0, 2: 1.0}, "steps_per_epoch": 3}


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("epochs", "budget.max_epochs sets it"),
        ("validation_data", "build_data returns the validation set"),
        ("verbose", "tunekit reports every epoch itself"),
        ("initial_epoch", "tunekit resumes from its checkpoints"),
        ("x", "build_data returns the training set"),
    ],
)
def test_fit_options_refuse_what_tunekit_sets(key: str, why: str) -> None:
    with pytest.raises(FatalTrialError) as raised:
        _options({key: 1})
    assert str(raised.value) == f"fit_options returned {key!r}, which tunekit sets ({why})"


def test_fit_options_refuse_what_fit_does_not_take() -> None:
    with pytest.raises(FatalTrialError) as raised:
        _options({"class_weights": {0: 1.0}})
    assert str(raised.value).startswith(
        "fit_options returned 'class_weights', which model.fit does not take; it takes "
    )
    assert "class_weight, " in str(raised.value)


def test_fit_options_refuse_callbacks_that_are_not_keras_callbacks() -> None:
    with pytest.raises(FatalTrialError) as raised:
        _options({"callbacks": ["early_stopping"]})
    assert str(raised.value) == (
        "fit_options' callbacks must be a list of keras.callbacks.Callback; got a list of 1 (builtins.str)"
    )


def test_fit_options_must_return_a_dict() -> None:
    with pytest.raises(FatalTrialError) as raised:
        _options([("class_weight", {})])
    assert str(raised.value).startswith(
        "fit_options must return a dict of model.fit arguments; it returned a list of 1"
    )


def test_a_model_keras_cannot_save_whole_leaves_loadable_weights(tmp_path: Path) -> None:
    model = NoConfig(3)
    model(X[:2])

    note = export_model(tmp_path, model)

    assert note.startswith(
        "saved weights only (model.weights.h5): model.keras failed (NotImplementedError: Object NoConfig was created by passing"
    )
    assert not (tmp_path / FINAL_MODEL).exists()
    rebuilt = NoConfig(3)
    rebuilt(X[:2])
    rebuilt.load_weights(tmp_path / FINAL_WEIGHTS)
    np.testing.assert_allclose(rebuilt(X).numpy(), model(X).numpy())


class Scaled(keras.layers.Layer):
    """A custom layer whose constructor arguments Keras records by itself, not registered."""

    def __init__(self, factor: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.factor = factor

    def call(self, x: Any) -> Any:
        return x * self.factor


def test_a_model_with_an_unregistered_layer_is_saved_as_weights_not_as_a_file_that_cannot_load(
    tmp_path: Path,
) -> None:
    inputs = keras.Input((8,))
    model = keras.Model(inputs, keras.layers.Dense(2)(Scaled(2.0)(inputs)))
    model.save(tmp_path / "plain.keras")  # Keras saves it without a word...
    with pytest.raises(TypeError, match="could not be deserialized"):
        keras.saving.load_model(tmp_path / "plain.keras")  # ...and cannot load it

    note = export_model(tmp_path, model)

    assert note == (
        "saved weights only (model.weights.h5): model.keras would not load on its own "
        "(Scaled: not registered with @keras.saving.register_keras_serializable())"
    )
    assert not (tmp_path / FINAL_MODEL).exists() and (tmp_path / FINAL_WEIGHTS).is_file()


def test_a_serialisable_model_is_saved_whole(tmp_path: Path) -> None:
    model = functional()
    assert export_model(tmp_path, model) == ""
    assert keras.saving.load_model(tmp_path / FINAL_MODEL).count_params() == model.count_params()


def test_reason_keeps_type_and_whole_multi_line_message() -> None:
    error = ValueError("Exception encountered when calling Dense.call().\n\n  Input 0 is incompatible:\n  expected 8")
    assert describe_error(error) == (
        "ValueError: Exception encountered when calling Dense.call(). Input 0 is incompatible: expected 8"
    )
    assert describe_error(RuntimeError("x" * 1000), limit=40) == "RuntimeError: " + "x" * 25 + "…"
    assert describe_error(KeyError()) == "KeyError"
