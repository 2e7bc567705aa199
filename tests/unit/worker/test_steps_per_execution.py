"""How many batches each compiled call runs: the spec's choice, or tunekit's for a model it compiled."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf

from tunekit.config.spec import load_spec
from tunekit.errors import SpecError
from tunekit.worker.autocompile import AUTO_STEPS_PER_EXECUTION, steps_per_execution

SPEC: dict[str, Any] = {
    "name": "spe",
    "budget": {"num_samples": 1, "max_epochs": 1},
    "trainable": "trainables.digits_mlp",
    "metric": {"name": "val_accuracy", "mode": "max"},
    "space": {"units": {"type": "fixed", "value": 32}},
}


class CountsBatches(keras.callbacks.Callback):
    def __init__(self) -> None:
        super().__init__()
        self.ends: list[int] = []

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self.ends.append(batch)


def test_auto_runs_several_batches_per_call_only_for_a_model_tunekit_compiled_without_batch_callbacks() -> None:
    assert steps_per_execution("auto", True, [keras.callbacks.EarlyStopping()], 45)[0] == AUTO_STEPS_PER_EXECUTION
    per_call, why = steps_per_execution("auto", True, [keras.callbacks.EarlyStopping(), CountsBatches()], 45)
    assert (per_call, why) == (1, "auto: callback CountsBatches acts on batches and must see each one")
    assert steps_per_execution("auto", True, [], None)[0] == 1  # unknown epoch length: batches counted exactly
    assert steps_per_execution("auto", True, [], 45, replicas=2)[0] == 1  # MirroredStrategy
    assert steps_per_execution("auto", False, [], 45)[0] is None  # the trainable's own compile stands
    assert steps_per_execution(4, False, [CountsBatches()], None) == (4, "training.steps_per_execution")


def test_the_spec_takes_auto_or_a_positive_integer() -> None:
    assert load_spec(SPEC).training.steps_per_execution == "auto"
    assert load_spec(SPEC, ["training.steps_per_execution=8"]).training.steps_per_execution == 8
    for bad in ("0", "fast", "true", "2.5"):
        with pytest.raises(SpecError) as raised:
            load_spec(SPEC, [f"training.steps_per_execution={bad}"])
        assert "training.steps_per_execution: must be auto or an integer >= 1" in str(raised.value)


def test_set_after_compile_keras_runs_that_many_batches_per_call_with_the_same_results() -> None:
    """The worker sets model.steps_per_execution after compile (fit_options come later): Keras must obey it."""
    x = np.random.default_rng(0).random((80, 4), dtype=np.float32)
    y = (x.sum(axis=1) > 2).astype("int32")

    def fit(per_call: int | None) -> tuple[list[float], list[int]]:
        keras.utils.set_random_seed(0)
        data = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)  # 10 batches per epoch
        inputs = keras.Input((4,))
        model = keras.Model(inputs, keras.layers.Dense(2, activation="softmax")(inputs))
        model.compile("adam", "sparse_categorical_crossentropy")
        if per_call is not None:
            model.steps_per_execution = per_call
        counter = CountsBatches()
        history = model.fit(data, epochs=2, verbose=0, callbacks=[counter])
        return history.history["loss"], counter.ends

    losses, ends = fit(None)
    several_losses, several_ends = fit(4)
    assert ends == list(range(10)) * 2
    # Calls of 4, 4 and the epoch's last 2 batches, numbered as if the last were full:
    # the reporter bounds its batch count by the epoch's known length.
    assert several_ends == [3, 7, 11] * 2
    assert several_losses == pytest.approx(losses, rel=1e-6)
