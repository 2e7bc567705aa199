"""A trial's reason for a real TensorFlow graph error, raised live by ``fit`` (no Ray).

The error texts kept under ``tests/unit/fixtures`` came from the same failure inside Ray
trials; ``tests/unit/test_errors.py`` pins the reasons made from them.
"""

from __future__ import annotations

from pathlib import Path

import keras
import pytest
import tensorflow as tf

from tunekit.errors import describe_error, failure_fingerprint

FIXTURE = Path(__file__).parents[1] / "fixtures" / "tf_graph_error_later_trial.txt"


def fit_on_missing_tfrecord() -> tf.errors.NotFoundError:
    """What ``tests/trainables/missing_tfrecord.py`` makes ``fit`` raise in a trial."""
    features = {"pixels": tf.io.FixedLenFeature([64], tf.float32), "digit": tf.io.FixedLenFeature([], tf.int64)}

    def parse(record: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        example = tf.io.parse_single_example(record, features)
        return example["pixels"], example["digit"]

    train = tf.data.TFRecordDataset("data/train.tfrecord").map(parse).batch(8)
    inputs = keras.Input((64,))
    model = keras.Model(inputs, keras.layers.Dense(10, activation="softmax")(inputs))
    model.compile("adam", "sparse_categorical_crossentropy")
    with pytest.raises(tf.errors.NotFoundError) as raised:
        model.fit(train, epochs=1, verbose=0, shuffle=False)
    return raised.value


def test_a_missing_tfrecord_in_fit_gives_its_cause_as_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no data/ folder here
    error = fit_on_missing_tfrecord()
    assert "Detected at node IteratorGetNext defined at (most recent call last):" in str(error)
    reason = describe_error(error)
    assert reason.startswith(
        "NotFoundError: Graph execution error: data/train.tfrecord; No such file or directory "
        "[[{{node IteratorGetNext}}]] [Op:__inference_multi_step_on_iterator_"
    )
    assert "File " not in reason
    # The same error raised in a Ray trial, read back from its error.txt, is recognised as the same.
    assert failure_fingerprint(reason) == failure_fingerprint(describe_error(FIXTURE.read_text()))
