"""Mixed precision and multi-output models in the worker, on real Keras models and digits (no Ray).

Under a mixed policy the float32 boundary sits on the final activation, as Keras's guide
puts it, for uncompiled and compiled functional models and for Sequential ones; named
outputs get their own losses and metrics in tunekit's compile; a subclassed model that
cannot be rewritten fails only the trials under a mixed policy, while float32 ones remain.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf
from sklearn.datasets import load_digits

from tunekit.config.spec import load_spec
from tunekit.contract import TrialContext
from tunekit.errors import FatalTrialError, TrialFailure
from tunekit.worker.autocompile import compile_from_config
from tunekit.worker.checks import check_epoch_metrics
from tunekit.worker.precision import PrecisionError, precision_failure, with_float32_outputs

REPO = Path(__file__).resolve().parents[3]
X, Y = load_digits(return_X_y=True)
X = (X / 16.0).astype("float32")
TARGETS = {"digit": Y, "parity": (Y % 2).astype("float32")}
CTX = TrialContext(
    batch_size=64,
    per_replica_batch_size=64,
    replicas=1,
    precision="float32",
    seed=0,
    workdir="",
    cpus=1,
    max_epochs=2,
    jit_compile=False,
)


@pytest.fixture(autouse=True)
def fresh_policy() -> Iterator[None]:
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    yield
    keras.mixed_precision.set_global_policy("float32")


def datasets(named: bool) -> tuple[tf.data.Dataset, tf.data.Dataset]:
    targets: Any = TARGETS if named else Y
    split = 1400
    train = tf.data.Dataset.from_tensor_slices((X[:split], tf.nest.map_structure(lambda t: t[:split], targets)))
    val = tf.data.Dataset.from_tensor_slices((X[split:], tf.nest.map_structure(lambda t: t[split:], targets)))
    return train.batch(64), val.batch(64)


def named_outputs() -> keras.Model:
    inputs = keras.Input((64,))
    hidden = keras.layers.Dense(32, activation="relu")(inputs)
    digit = keras.layers.Dense(10, activation="softmax", name="digit")(hidden)
    parity = keras.layers.Dense(1, activation="sigmoid", name="parity")(hidden)
    return keras.Model(inputs, {"digit": digit, "parity": parity}, name="two_heads")


def plain_loss(y: Any, p: Any) -> Any:
    """A loss function Keras has no registration for: its compile config cannot be deserialised."""
    return keras.losses.sparse_categorical_crossentropy(y, p)


class Subclassed(keras.Model):
    def __init__(self, last_dtype: str | None = None) -> None:
        super().__init__()
        self.hidden = keras.layers.Dense(16, activation="relu")
        self.head = keras.layers.Dense(10, activation="softmax", dtype=last_dtype)

    def call(self, x: Any) -> Any:
        return self.head(self.hidden(x))


def convert(model: keras.Model, precision: str, named: bool = False) -> keras.Model:
    _, val = datasets(named)
    return with_float32_outputs(model, precision, lambda: next(iter(val))[0], val.element_spec[0])


def head(model: keras.Model, name: str) -> tuple[keras.layers.Layer, keras.layers.Layer]:
    """The float32 layer an output ends in, and the mixed layer before it."""
    return model.get_layer(name), model.get_layer(f"{name}_{keras.mixed_precision.global_policy().name}")


@pytest.mark.parametrize("precision", ["mixed_bfloat16", "mixed_float16"])
def test_the_final_softmax_itself_runs_in_float32(precision: str) -> None:
    keras.mixed_precision.set_global_policy(precision)
    inputs = keras.Input((64,))
    model = keras.Model(inputs, keras.layers.Dense(10, activation="softmax", name="probs")(inputs))

    converted = convert(model, precision)

    activation, dense = head(converted, "probs")
    assert (activation.activation.__name__, activation.compute_dtype) == ("softmax", "float32")
    assert (dense.activation.__name__, dense.compute_dtype) == ("linear", precision.removeprefix("mixed_"))
    assert [str(x.dtype) for x in converted.outputs] == ["float32"]


def test_a_separate_activation_layer_is_replaced_by_a_float32_one() -> None:
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    inputs = keras.Input((64,))
    logits = keras.layers.Dense(10)(inputs)
    model = keras.Model(inputs, keras.layers.Activation("softmax", name="probs")(logits))

    converted = convert(model, "mixed_bfloat16")

    assert converted.get_layer("probs").compute_dtype == "float32"
    assert [layer.name for layer in converted.layers][-1] == "probs"
    assert str(converted.output.dtype) == "float32"


def test_an_unbuilt_sequential_model_is_built_on_the_data_and_converted() -> None:
    keras.mixed_precision.set_global_policy("mixed_float16")
    model = keras.Sequential([keras.layers.Dense(16, activation="relu"), keras.layers.Dense(10, activation="softmax")])

    converted = convert(model, "mixed_float16")

    assert [str(x.dtype) for x in converted.outputs] == ["float32"]
    assert converted.input_shape == (None, 64)  # the batch size is left open


def test_a_float32_model_is_left_alone() -> None:
    model = named_outputs()
    assert convert(model, "float32") is model


@pytest.mark.parametrize("precision", ["float32", "mixed_bfloat16"])
def test_uncompiled_named_outputs_get_a_loss_and_metric_each(precision: str, tmp_path: Path) -> None:
    keras.mixed_precision.set_global_policy(precision)
    train, val = datasets(named=True)
    model = convert(named_outputs(), precision, named=True)
    compile_from_config(model, {"learning_rate": 0.01}, CTX)

    history = model.fit(train, validation_data=val, epochs=2, verbose=0).history

    assert {"val_digit_accuracy", "val_parity_accuracy", "val_digit_loss", "val_parity_loss"} <= set(history)
    assert history["val_digit_accuracy"][-1] > 0.5 and history["val_parity_accuracy"][-1] > 0.5
    model.save(tmp_path / "model.keras")
    reloaded = keras.models.load_model(tmp_path / "model.keras")
    assert [str(x.dtype) for x in reloaded.outputs] == ["float32", "float32"]
    measured = reloaded.evaluate(val, verbose=0, return_dict=True)
    assert measured["digit_accuracy"] == pytest.approx(history["val_digit_accuracy"][-1], abs=1e-6)


def test_a_compiled_model_is_compiled_again_with_its_own_arguments() -> None:
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    model = named_outputs()
    optimizer = keras.optimizers.Adam(0.01)
    model.compile(
        optimizer=optimizer,
        loss={"digit": plain_loss, "parity": "binary_crossentropy"},
        metrics={"digit": ["accuracy"], "parity": [keras.metrics.BinaryAccuracy(name="right")]},
    )
    train, val = datasets(named=True)

    converted = convert(model, "mixed_bfloat16", named=True)
    history = converted.fit(train, validation_data=val, epochs=2, verbose=0).history

    assert converted.compiled and converted.optimizer is optimizer
    assert [str(x.dtype) for x in converted.outputs] == ["float32", "float32"]
    assert {"val_digit_accuracy", "val_parity_right"} <= set(history)
    assert history["val_digit_accuracy"][-1] > 0.5


def test_list_outputs_are_named_after_their_layers() -> None:
    inputs = keras.Input((64,))
    digit = keras.layers.Dense(10, activation="softmax", name="digit")(inputs)
    parity = keras.layers.Dense(1, activation="sigmoid", name="parity")(inputs)
    model = keras.Model(inputs, [digit, parity])
    compile_from_config(model, {}, CTX)
    train = tf.data.Dataset.from_tensor_slices((X, (Y, TARGETS["parity"]))).batch(64)

    history = model.fit(train, validation_data=train, epochs=1, verbose=0).history

    assert {"val_digit_accuracy", "val_parity_accuracy"} <= set(history)


def test_a_loss_mapping_must_name_the_outputs() -> None:
    with pytest.raises(FatalTrialError) as raised:
        compile_from_config(named_outputs(), {"loss": {"digits": "sparse_categorical_crossentropy"}}, CTX)
    assert str(raised.value) == "config loss names digits; the model's outputs are digit, parity"


def test_a_misspelt_output_metric_says_did_you_mean() -> None:
    reported = {"loss": 1.0, "val_digit_accuracy": 0.5, "val_parity_accuracy": 0.9, "val_loss": 1.0}
    with pytest.raises(FatalTrialError) as raised:
        check_epoch_metrics(reported, "val_digits_accuracy", 1)
    assert str(raised.value) == (
        "metric 'val_digits_accuracy' was never reported (did you mean 'val_digit_accuracy'?); the trainable "
        "reported: loss, val_digit_accuracy, val_loss, val_parity_accuracy"
    )


def test_a_subclassed_model_ending_in_float32_runs_under_a_mixed_policy() -> None:
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    model = Subclassed(last_dtype="float32")
    assert convert(model, "mixed_bfloat16") is model


SUBCLASSED = (
    "build_model returned a subclassed model (Subclassed) whose output is bfloat16 under mixed_bfloat16; tunekit "
    "moves the float32 boundary only in functional and Sequential models: end call() with a float32 layer, "
    "e.g. keras.layers.Activation('softmax', dtype='float32')"
)


def test_a_subclassed_model_fails_only_the_trials_under_a_mixed_policy() -> None:
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    model = Subclassed()
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    with pytest.raises(PrecisionError) as raised:
        convert(model, "mixed_bfloat16")
    assert str(raised.value) == SUBCLASSED

    searched = load_spec(
        REPO / "search_spaces" / "digits_mlp.yaml",
        ["space.precision={type: choice, values: [float32, mixed_bfloat16]}"],
    )
    failure = precision_failure(raised.value, searched, lambda p: p)
    assert isinstance(failure, TrialFailure)
    assert str(failure) == f"{SUBCLASSED}; only trials under a mixed precision fail"

    every_trial = load_spec(REPO / "search_spaces" / "digits_mlp.yaml", ["training.precision=mixed_bfloat16"])
    fatal = precision_failure(raised.value, every_trial, lambda p: p)
    assert isinstance(fatal, FatalTrialError) and str(fatal) == SUBCLASSED


def test_auto_counts_as_float32_where_it_resolves_to_it() -> None:
    spec = load_spec(
        REPO / "search_spaces" / "digits_mlp.yaml", ["space.precision={type: choice, values: [auto, mixed_float16]}"]
    )
    on_cpu = precision_failure(PrecisionError("x"), spec, lambda p: "float32" if p == "auto" else p)
    on_tensor_cores = precision_failure(PrecisionError("x"), spec, lambda p: "mixed_float16" if p == "auto" else p)
    assert isinstance(on_cpu, TrialFailure) and isinstance(on_tensor_cores, FatalTrialError)


def test_weights_loaded_before_conversion_are_kept() -> None:
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    model = named_outputs()
    before = [np.array(w) for w in model.get_weights()]
    converted = convert(model, "mixed_bfloat16", named=True)
    after = converted.get_weights()
    assert len(before) == len(after) and all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))
