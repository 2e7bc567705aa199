"""The Keras callback that turns each finished epoch into one Ray Tune report.

Imported only inside trial workers (it imports Keras, hence TensorFlow).
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import keras
from ray import tune

from tunekit.config.objectives import tracked_metrics
from tunekit.config.spec import ExperimentSpec
from tunekit.contract import TrialContext
from tunekit.layout import (
    CHECKPOINT_NOTE,
    CHECKPOINTED,
    EPOCH_KEY,
    EXPORT_NOTE,
    INFO_KEY,
    KEPT_EPOCH,
    RESTORED_WEIGHTS,
    STOPPED_BY_MODEL,
)
from tunekit.storage.checksums import write_checksums
from tunekit.worker.checkpoints import CheckpointPolicy, TrialProgress, export_model, save_checkpoint
from tunekit.worker.checks import check_epoch_metrics
from tunekit.worker.devices import WorkerDevices, memory_mb, node_id, trial_info
from tunekit.worker.executions import first_execution
from tunekit.worker.heartbeat import HeartbeatWriter
from tunekit.worker.keep import KeptEpoch
from tunekit.worker.measures import Measures
from tunekit.worker.profile import TrialProfile


class EpochReporter(keras.callbacks.Callback):
    """Checks the epoch's metrics, checkpoints where ``CheckpointPolicy`` says, and reports.

    ``tune.report`` blocks until the driver has processed the result (Ray's round trip, 6-8 ms
    on 2 cores), and raises ``SystemExit`` there when the scheduler stops the trial. An epoch's
    report therefore goes out on a ``ReportInFlight`` thread while the next epoch trains: the
    training thread waits for it only at the next epoch's end (one report at a time, in
    order), and stops at its next batch once the report raised (``stop_if_stopped``). A
    stopped trial trains on for about that round trip and a batch: the time it used to wait. The
    last report, and a failure's (``finish_reporting`` first), are sent from the training
    thread: the trial ends once the driver has them.

    It runs after the trainable's own callbacks (it is last in the list), so a learning
    rate that ReduceLROnPlateau lowered is in the checkpoint, and a ``stop_training`` that
    EarlyStopping set is seen at the same epoch's end.
    """

    # Its on_train_batch_end only counts batches: Keras may call it from its callback thread,
    # as it does when no callback has batch-end hooks. Without this, Keras turns the step's
    # logs into Python floats on the training thread after every batch, a device sync per step.
    async_safe = True

    def __init__(
        self,
        spec: ExperimentSpec,
        ctx: TrialContext,
        devices: WorkerDevices,
        progress: TrialProgress,
        steps: int | None,
        validation: Any,
        measures: Measures | None = None,
        profile: TrialProfile | None = None,
        kept: KeptEpoch | None = None,
    ) -> None:
        super().__init__()
        self._kept = kept  # training.keep: best; None: the last epoch is kept
        self._spec = spec
        self._ctx = ctx
        self._devices = devices
        self._progress = progress
        self._start_epoch = progress.epoch
        self._steps = steps
        self._epoch_started = 0.0
        self._train_seconds = 0.0
        self._batches = 0  # training batches of the current epoch, counted as they end
        self._validation = validation
        self._last: tuple[int, dict[str, float], dict[str, Any]] | None = None
        self._last_weights: list[Any] = []  # the weights at the last epoch's end
        self._measures = measures
        self._epoch = progress.epoch  # the epoch in progress, counted from 1 once it begins
        self._heartbeat = HeartbeatWriter(Path(ctx.trial_dir), node_id()) if ctx.trial_dir else None
        self._profile = profile or TrialProfile()
        self._validation_started = 0.0
        self._epoch_ended = 0.0  # when the last epoch's report was handed over: the gap to the next is Keras's
        self._checkpoints = CheckpointPolicy.for_spec(spec)
        self._checkpointed_at = time.perf_counter()  # the trial's start counts as its restored checkpoint
        self._in_flight: ReportInFlight | None = None

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        _reset_peak_rss()

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._epoch_started = time.perf_counter()
        if self._epoch_ended:
            self._profile.add("epoch.between", self._epoch_started - self._epoch_ended)
        self._train_seconds = 0.0
        self._batches = 0
        self._epoch = epoch + 1

    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        # Batch-begin hooks take no logs, so this costs Keras no sync; Keras calls them on the
        # training thread, where the SystemExit of a stopped trial must be raised.
        self.stop_if_stopped()
        if self._heartbeat is not None:
            self._heartbeat.batch_began(self._epoch, "train", batch + 1, self._steps)

    def on_test_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self.stop_if_stopped()
        if self._heartbeat is not None:
            self._heartbeat.batch_began(self._epoch, "validate", batch + 1, None)

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        # Keras numbers a step's last batch (several with steps_per_execution): the count is
        # known even when tf.data cannot tell a dataset's length (TFRecords, filter). max():
        # in Keras's callback thread, batch ends may run out of order.
        self._batches = max(self._batches, batch + 1)

    def on_test_begin(self, logs: dict[str, Any] | None = None) -> None:
        # Validation runs inside the epoch; throughput counts training time only.
        self._validation_started = time.perf_counter()
        self._train_seconds = self._validation_started - self._epoch_started

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        completed = epoch + 1
        metrics = {key: float(value) for key, value in (logs or {}).items()}
        ended = time.perf_counter()
        elapsed = ended - self._epoch_started
        if self._validation_started > self._epoch_started:
            self._profile.add("epoch.train", self._validation_started - self._epoch_started)
            self._profile.add("epoch.validate", ended - self._validation_started)
        metrics["epoch_seconds"] = elapsed
        # Keras numbers the last call's batches as if it were full (steps_per_execution):
        # a known epoch length bounds the count.
        steps = min((n for n in (self._batches, self._steps) if n), default=0)
        if steps:
            train_seconds = self._train_seconds or elapsed
            metrics["steps_per_second"] = steps / train_seconds
            metrics["samples_per_second"] = steps * self._ctx.batch_size / train_seconds
        with self._profile.piece("epoch.memory"):
            metrics["memory_mb"] = memory_mb(self._devices)
            # On a GPU memory_mb is already TensorFlow's peak; on a CPU it is the RSS at the epoch's end.
            metrics["peak_memory_mb"] = metrics["memory_mb"] if self._devices.on_gpu else _peak_rss_mb()
        if self._measures is not None:
            with self._profile.piece("epoch.measures"):
                self._measures.add(metrics, first_execution(self.model))
        with self._profile.piece("epoch.checks"):
            for name in tracked_metrics(self._spec.objectives, self._spec.constraints, self._spec.select):
                check_epoch_metrics(metrics, name, completed)
        if self._kept is not None:
            self._kept.observe(completed, metrics, self.model)
        bookkeeping: dict[str, Any] = {"metrics": sorted(metrics)}
        if completed == self._start_epoch + 1:
            bookkeeping["resumed_from_epoch"] = self._start_epoch
            bookkeeping["info"] = trial_info(self._ctx, self._devices, self._progress.scaled_learning_rate)
            if self._progress.space_read is not None:  # what a builder read during the first epoch counts
                bookkeeping["info"]["space_read"] = sorted(self._progress.space_read)
        self._progress.epoch = completed
        if completed < self._spec.budget.max_epochs and not self.model.stop_training:
            self._report(completed, metrics, bookkeeping, final=False)
            return
        # The last epoch, by the budget or because the model's own callbacks (EarlyStopping)
        # stopped training: reported from on_train_end, after those callbacks have finished
        # (EarlyStopping restores its best weights there), so the exported model is final.
        if completed < self._spec.budget.max_epochs:
            bookkeeping[STOPPED_BY_MODEL] = completed
        self._last = (completed, metrics, bookkeeping)
        self._last_weights = self.model.get_weights()

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        if self._heartbeat is not None:
            self._heartbeat.remove()
        if self._last is None:
            return
        completed, metrics, bookkeeping = self._last
        self._last = None
        if self._weights_changed():
            # EarlyStopping(restore_best_weights=True) put back an earlier epoch's weights: the
            # model that is saved and ranked is that one, so its validation metrics are the
            # trial's final ones and replace this epoch's own in its row (the docs say so).
            measured = self.model.evaluate(self._validation, verbose=0, return_dict=True)
            metrics.update({f"val_{k}": float(v) for k, v in measured.items() if f"val_{k}" in metrics})
            bookkeeping[RESTORED_WEIGHTS] = True
        self._report(completed, metrics, bookkeeping, final=True)

    def _weights_changed(self) -> bool:
        import numpy as np

        now = self.model.get_weights()
        # equal_nan: weights that went NaN and stayed NaN were not put back by anyone.
        return len(now) != len(self._last_weights) or any(
            not np.array_equal(a, b, equal_nan=True) for a, b in zip(now, self._last_weights, strict=True)
        )

    def stop_if_stopped(self) -> None:
        """Raises, on the training thread, what the report in flight raised: ``SystemExit`` when
        the scheduler stopped the trial, so the epoch after it ends at its next batch."""
        if self._in_flight is not None and self._in_flight.raised_already():
            self.finish_reporting()

    def finish_reporting(self) -> None:
        """Waits for the report in flight, and raises what it raised."""
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is not None:
            in_flight.wait()

    def _report(self, completed: int, metrics: dict[str, float], bookkeeping: dict[str, Any], *, final: bool) -> None:
        """Checkpoints when due, then reports: in flight while the next epoch trains, or, the last
        epoch's, here."""
        started = time.perf_counter()
        self.finish_reporting()  # the driver has the previous epoch before this one
        waited = time.perf_counter() - started
        checkpoint_dir = None
        if final or self._checkpoints.due(completed, started - self._checkpointed_at):
            checkpoint_dir = Path(tempfile.mkdtemp(prefix="tunekit-ckpt-"))
            with self._profile.piece("epoch.checkpoint"):
                save_checkpoint(checkpoint_dir, self.model, completed, self._progress.config)
                if self._kept is not None:
                    self._kept.save(checkpoint_dir)
            self._checkpointed_at = started
            bookkeeping[CHECKPOINTED] = True
        if final:
            assert checkpoint_dir is not None
            # The checkpoint holds the last epoch (a grown budget trains on from it); the
            # exported model and the trial's figure, the kept epoch.
            if self._kept is not None:
                bookkeeping.update(self._kept.put_back(self.model))
            else:
                bookkeeping[KEPT_EPOCH] = completed
            with self._profile.piece("end.export"):
                note = export_model(checkpoint_dir, first_execution(self.model))
            if note:
                print(f"tunekit: warning: {note}", file=sys.stderr)  # into the trial's output.log
                bookkeeping[EXPORT_NOTE] = note
        if checkpoint_dir is not None:
            write_checksums(checkpoint_dir)  # last: tunekit check and a restore verify every payload
        if self._progress.restore_note:  # said once, in the first report after the restore
            bookkeeping[CHECKPOINT_NOTE], self._progress.restore_note = self._progress.restore_note, ""
        result = {EPOCH_KEY: completed, **metrics, INFO_KEY: bookkeeping}
        handed_over = time.perf_counter()
        try:
            if final:
                _send_report(result, checkpoint_dir)
            else:
                self._in_flight = ReportInFlight(lambda: _send_report(result, checkpoint_dir))
        finally:
            # epoch.report: what the training thread spent on reports, waiting for the previous
            # one included; the round trip itself overlaps the next epoch's training.
            self._profile.add("epoch.report", waited + time.perf_counter() - handed_over)
            self._epoch_ended = time.perf_counter()


def _send_report(result: dict[str, Any], checkpoint_dir: Path | None) -> None:
    """``tune.report``: copies the checkpoint into the trial's storage, then waits for the driver."""
    checkpoint = None if checkpoint_dir is None else tune.Checkpoint.from_directory(checkpoint_dir)
    try:
        tune.report(result, checkpoint=checkpoint)
    finally:
        if checkpoint_dir is not None:  # Ray copied it into the trial's storage before blocking
            shutil.rmtree(checkpoint_dir, ignore_errors=True)


class ReportInFlight:
    """One report sent on its own thread; ``wait`` re-raises on the caller's thread what it raised."""

    def __init__(self, send: Callable[[], None]) -> None:
        self._raised: BaseException | None = None
        self._send = send
        # A daemon: a worker process that Ray ends never waits for a report the driver will not answer.
        self._thread = threading.Thread(target=self._run, name="tunekit-report", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._send()
        except BaseException as error:  # SystemExit above all: the scheduler stopped the trial
            self._raised = error

    def raised_already(self) -> bool:
        return not self._thread.is_alive() and self._raised is not None

    def wait(self) -> None:
        self._thread.join()
        if self._raised is not None:
            raise self._raised


# ------------------------------------------------------------------ peak memory

_PROC_SELF = Path("/proc/self")


def _reset_peak_rss() -> None:
    """Starts the worker's resident-memory high-water mark afresh, so a reused worker reports this trial's peak.

    Linux resets VmHWM to the current RSS on writing 5 to clear_refs; elsewhere the peak
    stays the process's since it started.
    """
    with contextlib.suppress(OSError):
        (_PROC_SELF / "clear_refs").write_text("5")


def _peak_rss_mb() -> float:
    """The worker's peak resident memory (VmHWM) since the trial began, in MB."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in (_PROC_SELF / "status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024  # bytes on macOS, kB elsewhere
