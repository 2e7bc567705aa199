"""An epoch's report is in flight while the next epoch trains; a stopped trial stops at its next batch.

A real Keras ``fit`` on a small real dataset, with Ray's ``tune.report`` replaced by a stand-in
that behaves as Ray's session does: it blocks until the driver answers, and raises
``SystemExit`` there when the scheduler stopped the trial.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf

from tunekit.config.spec import parse_spec
from tunekit.contract import TrialContext
from tunekit.layout import EPOCH_KEY, INFO_KEY, RESTORED_WEIGHTS
from tunekit.worker import reporter as reporter_module
from tunekit.worker.checkpoints import TrialProgress
from tunekit.worker.devices import WorkerDevices
from tunekit.worker.reporter import EpochReporter, ReportInFlight

BATCHES = 6
MAX_EPOCHS = 4


class DriverStandIn:
    """``tune.report`` as Ray's session runs it: each call waits for the driver's answer.

    ``answer(epoch)`` is what the driver decides for that epoch's result: ``None`` lets the
    trial go on, ``"stop"`` raises ``SystemExit`` in the reporting thread, as Ray's session does.
    """

    Checkpoint = type("Checkpoint", (), {"from_directory": staticmethod(lambda path: Path(path))})

    def __init__(self, answers: dict[int, str | None], delay_s: float = 0.0) -> None:
        self.answers = answers
        self.delay_s = delay_s
        self.reports: list[tuple[int, str, bool]] = []  # epoch, thread name, with a checkpoint
        self.results: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def report(self, result: dict[str, Any], checkpoint: Any = None) -> None:
        epoch = int(result[EPOCH_KEY])
        with self._lock:
            self.reports.append((epoch, threading.current_thread().name, checkpoint is not None))
            self.results.append(result)
        threading.Event().wait(self.delay_s)  # the driver's round trip
        if self.answers.get(epoch) == "stop":
            raise SystemExit(0)


class SlowBatches(keras.callbacks.Callback):
    """Batches of 20 ms, counted per epoch."""

    def __init__(self, driver: DriverStandIn) -> None:
        super().__init__()
        self.driver = driver
        self.epoch = 0
        self.batches: dict[int, int] = {}

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self.epoch = epoch + 1

    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self.batches[self.epoch] = self.batches.get(self.epoch, 0) + 1
        threading.Event().wait(0.02)


def spec(training: dict[str, Any] | None = None) -> Any:
    raw = {
        "name": "unit",
        "trainable": "not.looked.for",
        "metric": {"name": "val_accuracy", "mode": "max"},
        "budget": {"num_samples": 1, "max_epochs": MAX_EPOCHS, "max_concurrent": 1},
        "scheduler": {"type": "fifo"},
        "space": {"learning_rate": {"type": "uniform", "low": 0.0, "high": 1.0}},
        "training": training or {},
    }
    return parse_spec(raw, None, locate_trainable=False)


def fit(
    tmp_path: Path,
    driver: DriverStandIn,
    monkeypatch: pytest.MonkeyPatch,
    slow: SlowBatches | None = None,
    more: tuple[keras.callbacks.Callback, ...] = (),
) -> None:
    monkeypatch.setattr(reporter_module, "tune", driver)
    monkeypatch.setattr(reporter_module, "trial_info", lambda ctx, devices, scaled_learning_rate: {})
    rng = np.random.default_rng(0)
    x, y = rng.random((BATCHES * 8, 4), dtype=np.float32), rng.integers(0, 2, BATCHES * 8)
    train = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
    validation = tf.data.Dataset.from_tensor_slices((x[:16], y[:16])).batch(8)
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(2, activation="softmax")(Unused(name="unused")(inputs)))
    model.compile("sgd", "sparse_categorical_crossentropy", metrics=["accuracy"])
    ctx = TrialContext(
        batch_size=8, per_replica_batch_size=8, replicas=1, precision="float32", seed=0,
        workdir=str(tmp_path), cpus=1, max_epochs=MAX_EPOCHS, jit_compile=False, trial_dir=str(tmp_path),
    )  # fmt: skip
    devices = WorkerDevices(tf.distribute.get_strategy(), 1, ("/cpu:0",), (), None, 1)
    reporter = EpochReporter(spec(), ctx, devices, TrialProgress(), BATCHES, validation)
    slow = slow or SlowBatches(driver)
    try:
        model.fit(
            train, validation_data=validation, epochs=MAX_EPOCHS, verbose=0, shuffle=False,
            callbacks=[slow, *more, reporter],
        )  # fmt: skip
    finally:
        reporter.finish_reporting()  # as tunekit.worker.trial does


def test_each_report_goes_out_in_order_while_the_next_epoch_trains_and_the_last_from_the_training_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    driver = DriverStandIn({}, delay_s=0.01)
    fit(tmp_path, driver, monkeypatch)
    assert [epoch for epoch, _, _ in driver.reports] == [1, 2, 3, 4]
    assert {thread for _, thread, _ in driver.reports[:-1]} == {"tunekit-report"}
    assert driver.reports[-1][1] != "tunekit-report"  # the trial ends once the driver has its last result
    assert driver.reports[-1][2], "the last epoch is checkpointed"


def test_a_trial_the_scheduler_stops_ends_at_its_next_batch_not_at_its_next_epoch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The driver answers epoch 2's report 50 ms late, with a stop: epoch 3 (6 batches of 20 ms)
    # has begun by then.
    driver = DriverStandIn({2: "stop"}, delay_s=0.05)
    slow = SlowBatches(driver)
    with pytest.raises(SystemExit):
        fit(tmp_path, driver, monkeypatch, slow)
    assert [epoch for epoch, _, _ in driver.reports] == [1, 2]
    # SystemExit reaches the training thread at the first batch that begins after the stop:
    # 50 ms into epoch 3, its third or fourth batch of six.
    assert slow.batches[1] == slow.batches[2] == BATCHES
    assert 2 <= slow.batches[3] < BATCHES, slow.batches


def test_a_stop_that_comes_while_the_training_thread_waits_for_the_report_ends_the_trial_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Epoch 3's report is held back long enough that epoch 4 ends first and waits for it.
    driver = DriverStandIn({3: "stop"}, delay_s=0.3)
    with pytest.raises(SystemExit):
        fit(tmp_path, driver, monkeypatch)
    assert [epoch for epoch, _, _ in driver.reports] == [1, 2, 3]


def test_a_report_in_flight_raises_what_its_thread_raised_on_the_waiting_thread() -> None:
    def fails() -> None:
        raise OSError("storage went away")

    in_flight = ReportInFlight(fails)
    with pytest.raises(OSError, match="storage went away"):
        in_flight.wait()
    assert in_flight.raised_already()
    quiet = ReportInFlight(lambda: None)
    quiet.wait()
    assert not quiet.raised_already()


class Unused(keras.layers.Layer):
    """Passes its inputs on; its one weight changes no output, so a NaN there leaves the loss finite."""

    def build(self, input_shape: Any) -> None:
        self.unused = self.add_weight(shape=(1,), initializer="zeros", trainable=False)

    def call(self, inputs: Any) -> Any:
        return inputs


class WeightsGoNaN(keras.callbacks.Callback):
    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if epoch + 1 == 2:
            self.model.get_layer("unused").unused.assign([np.nan])


def test_weights_that_went_nan_are_not_taken_for_weights_a_callback_restored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # NaN != NaN: the last epoch's weights compared unequal to themselves, so the trial was
    # re-evaluated and said "the model restored its best weights" (a user pass saw it).
    driver = DriverStandIn({})
    fit(tmp_path, driver, monkeypatch, more=(WeightsGoNaN(),))
    last = driver.results[-1]
    assert last[EPOCH_KEY] == MAX_EPOCHS
    assert RESTORED_WEIGHTS not in last[INFO_KEY]
