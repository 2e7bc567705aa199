"""What one trial leaves behind in a reused worker: nothing the next trial's reset keeps."""

from __future__ import annotations

import gc

from tunekit.worker.trial import _reset_trial_state


def _alive_graphs() -> int:
    from tensorflow.python.framework import func_graph

    gc.collect()
    return sum(isinstance(o, func_graph.FuncGraph) for o in gc.get_objects())


def _train_a_small_model() -> None:
    import keras
    import numpy as np
    import tensorflow as tf
    from sklearn.datasets import load_digits

    digits = load_digits()
    data = tf.data.Dataset.from_tensor_slices(((digits.data / 16).astype(np.float32), digits.target)).batch(128)
    model = keras.Sequential(
        [keras.Input((64,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(10, activation="softmax")]
    )
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(data, validation_data=data, epochs=1, verbose=0)


def test_the_next_trials_reset_frees_every_graph_the_last_trial_traced() -> None:
    _reset_trial_state("float32", 0)
    before = _alive_graphs()
    _train_a_small_model()
    assert _alive_graphs() > before  # fit traced its train and test steps
    # TensorFlow's custom-gradient registry pins traced graphs (tensorflow#97697);
    # clear_session alone leaves ~20 of them per trial alive.
    _reset_trial_state("float32", 0)
    assert _alive_graphs() == before
