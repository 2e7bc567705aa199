"""MLflow tracking: one parent run per experiment, one child run per trial.

One logging path: only the Ray driver talks to MLflow. ``MlflowTracker`` is a
listener of the driver's ``Recorder``; trial workers never import MLflow, never see
a tracking URI and never hold a run (so Ray's ``MLFLOW_RUN_ID``/``setup_mlflow``
confusions cannot arise: PITFALLS 8 and 9).

Logging never holds up training. The recorder calls its listeners from Ray's driver
loop, which every trial's ``tune.report`` waits on, so each callback here only copies
what it needs into a queue (microseconds). A background thread imports MLflow, opens
the runs and sends everything with batched ``MlflowClient.log_batch`` calls;
``experiment_ended`` waits for it to flush, for at most ``TUNEKIT_TRACKING_FLUSH_TIMEOUT_S``
seconds (default 30). That thread lives in ``tunekit.tracking.writer``. While it talks to an
HTTP server it sets MLflow's ``MLFLOW_HTTP_REQUEST_*`` retry settings (when unset) so a
dead server is noticed in seconds, not minutes, and stops MLflow printing a "View run"
line per run; it restores them when the search ends.

What lands where:

* Experiment: tagged ``mlflow.experimentKind=custom_model_development`` when tunekit
  creates it or first uses it untagged, so MLflow 3's UI treats it as model training.
  ``tracking.json`` in the experiment directory (``tunekit.tracking.record``) records where
  the runs are, for a tracking server a UI link that opens on the runs table, and whether
  MLflow took the whole search.
* Parent run (named after the experiment directory, tag ``tunekit.experiment_dir``):
  the resolved ``spec.yaml`` as an artifact; metric, search, scheduler, budget,
  resources, training and space settings as params; the best value so far after every
  ended trial and, at the end, trial counts, epochs spent against the epochs of
  training every trial to the end, and wall time; the best trial's final model
  (``model.keras``, else ``model.weights.h5`` when Keras could not save it whole) goes
  to that trial's child run, and a whole model to the model registry when
  ``tracking.registered_model`` is set.
* Child run per trial (tags ``mlflow.parentRunId`` and ``tunekit.ray_trial_id``): the
  trial's config exactly as params; every numeric per-epoch metric with
  ``step=epoch``; tags for the outcome (status, ASHA rung, reason), the Ray trial id,
  the Optuna trial number, the software versions and the devices, precision policy and
  replicas the trial ran with. Config values, process ids, timestamps and Ray
  bookkeeping never become metrics.

Resuming adds no duplicate runs: the parent is found again by its experiment-directory
tag and children by their Ray trial id, and epochs MLflow already holds are not sent
again. On resume the tracker also sends whatever an interrupted session had not sent
yet; ``tunekit resume`` of a finished experiment, which runs no search, sends what MLflow
lacks through ``tunekit sync`` when ``tracking.json`` says it lacks some.

An unreachable tracking server costs one warning and the search goes on untracked; a
server that goes away mid-search costs one warning, the tracker keeps what it has not
sent and retries in the background. With ``tracking.required: true`` both fail the search
instead (``tunekit.tracking.preflight``): at start-up, and at the end when MLflow still
lacks records, pointing to ``tunekit sync``. Credentials (``MLFLOW_TRACKING_USERNAME``,
``MLFLOW_TRACKING_PASSWORD``, ``MLFLOW_TRACKING_TOKEN``) are read by MLflow from the
environment; they are never logged, and user:password in a URI is removed before the
URI is shown or stored anywhere.

Tracking URI: ``tracking.uri`` in the spec, else MLflow's own default
(``MLFLOW_TRACKING_URI``, ``mlflow.set_tracking_uri``, else ``sqlite:///mlflow.db`` in
the working directory, which is what ``mlflow ui`` started there opens).
"""

from __future__ import annotations

import os
import queue
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunekit.config.spec import ExperimentSpec
from tunekit.layout import TrialStatus, finite, stopped_for_good
from tunekit.storage.buckets import shown
from tunekit.storage.clock import SearchClock
from tunekit.tracking.events import (
    STOP,
    EpochEvent,
    ExploitEvent,
    Flush,
    InfoEvent,
    ProgressEvent,
    TrackerEvent,
    TrialEndEvent,
    TrialEvent,
)
from tunekit.tracking.writer import PROBE_TIMEOUT_S, MlflowWriter

if TYPE_CHECKING:
    from tunekit.driver.recorder import EpochRow, Recorder, TrialRecord


FLUSH_TIMEOUT_ENV = "TUNEKIT_TRACKING_FLUSH_TIMEOUT_S"
DEFAULT_FLUSH_TIMEOUT_S = 30.0


class MlflowTracker:
    """Recorder listener that mirrors the search into MLflow from a background thread.

    Args:
        spec: the experiment's spec (``tracking`` section: uri, experiment, registered_model).
        experiment_dir: the experiment directory (its path tags the parent run).
        flush_timeout: how long ``experiment_ended`` waits for outstanding logging.
    """

    def __init__(self, spec: ExperimentSpec, experiment_dir: Path, *, flush_timeout: float | None = None) -> None:
        self.spec = spec
        self.experiment_dir = Path(experiment_dir)
        if flush_timeout is None:
            flush_timeout = float(os.environ.get(FLUSH_TIMEOUT_ENV, DEFAULT_FLUSH_TIMEOUT_S))
        self.flush_timeout = flush_timeout
        self._init_runtime()

    def _init_runtime(self) -> None:
        self._queue: queue.SimpleQueue[TrackerEvent] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._writer: MlflowWriter | None = None
        self._info_seen: dict[str, int] = {}  # trial id -> id() of the info dict already queued
        self._clock: SearchClock | None = None  # the recorder's, from experiment_started on
        self._ended_trials = 0
        self._exploits_sent = 0  # PBT steps of recorder.exploits already queued
        self._cut_off = False  # the writer was still sending when the flush timeout ended

    # Ray pickles callbacks (the recorder drops its listeners, but be safe): no thread,
    # queue or client in the pickle.
    def __getstate__(self) -> dict[str, Any]:
        return {
            "spec": self.spec,
            "experiment_dir": self.experiment_dir,
            "flush_timeout": self.flush_timeout,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_runtime()

    @property
    def backlog(self) -> int:
        """Events queued for MLflow and not yet taken by the writer thread."""
        return self._queue.qsize()

    # ------------------------------------------------------------ listener (driver)

    def experiment_started(self, recorder: Recorder) -> None:
        self._clock = recorder.clock
        if self._thread is None:
            self._writer = MlflowWriter(
                self.spec, self.experiment_dir, self._queue, self.flush_timeout, recorder.clock.started_at
            )
            self._thread = threading.Thread(target=self._writer.run, name="tunekit-mlflow", daemon=True)
            self._thread.start()
        # On resume the recorder already holds trials: send what MLflow may lack.
        for record in list(recorder.trials.values()):
            self.trial_started(record)
        for row in list(recorder.epochs):
            owner = recorder.trials.get(row.trial_id)
            if owner is not None:
                self.epoch_reported(owner, row)
        for record in list(recorder.trials.values()):
            if _status(record).is_finished():
                self.trial_ended(record)
        self._queue_exploits(recorder)

    def trial_started(self, record: TrialRecord) -> None:
        if self._off():
            return
        self._queue.put(
            TrialEvent(
                record.trial_id,
                record.number,
                dict(record.params),
                record.started_at,
                record.attempts,
                _status(record) == TrialStatus.RUNNING,
            )
        )
        self._queue_info(record)

    def epoch_reported(self, record: TrialRecord, row: EpochRow) -> None:
        if self._off():
            return
        metrics = {key: number for key, value in row.metrics.items() if (number := finite(value)) is not None}
        at = self._clock.wall_at(row.at) if self._clock is not None else time.time()
        self._queue.put(EpochEvent(record.trial_id, row.epoch, metrics, int(at * 1000)))
        self._queue_info(record)

    def trial_ended(self, record: TrialRecord) -> None:
        if self._off():
            return
        self._queue_info(record)
        self._queue.put(
            TrialEndEvent(
                record.trial_id,
                _status(record),
                record.reason,
                record.rung,
                record.epochs,
                record.attempts,
                record.ended_at or time.time(),
                record.active_seconds(self._clock.now() if self._clock is not None else 0.0),
                record.kept_epoch,
            )
        )
        self._ended_trials += 1

    def warning(self, message: str) -> None:
        pass  # warnings are for the console; the trial's run already has its reason and tags

    def tick(self, recorder: Recorder) -> None:
        self._queue_exploits(recorder)
        if self._off() or not self._ended_trials:
            return
        # After trials ended (not on every step of Ray's loop), the best value so far.
        self._queue.put(self._progress(recorder, final=False))
        self._ended_trials = 0

    def experiment_ended(self, recorder: Recorder) -> None:
        writer, thread = self._writer, self._thread
        if writer is None or thread is None:
            return
        if not writer.disabled:
            self._queue.put(self._progress(recorder, final=True))
        self._queue.put(STOP)
        thread.join(self.flush_timeout + PROBE_TIMEOUT_S)
        self._cut_off = thread.is_alive()
        if self._cut_off:
            writer.warn_once(
                f"MLflow at {writer.uri or 'the tracking URI'} did not take everything in "
                f"{self.flush_timeout:.0f} s; MLflow may lack some of this search's records "
                f"(`tunekit sync {shown(self.experiment_dir)}` sends what it lacks)"
            )
        self._thread = None

    def shortfall(self) -> str | None:
        """After ``experiment_ended``: why MLflow does not hold the whole search, or None when it does."""
        writer = self._writer
        if writer is None:
            return None
        if self._cut_off:
            return f"MLflow at {writer.uri or 'the tracking URI'} did not take everything in {self.flush_timeout:.0f} s"
        return writer.problem

    def flush(self, timeout: float | None = None) -> bool:
        """Waits until everything queued so far was sent (for tests and benchmarks)."""
        done = threading.Event()
        self._queue.put(Flush(done))
        return done.wait(timeout)

    def _queue_info(self, record: TrialRecord) -> None:
        if record.info and self._info_seen.get(record.trial_id) != id(record.info):
            self._info_seen[record.trial_id] = id(record.info)
            self._queue.put(InfoEvent(record.trial_id, dict(record.info)))

    def _queue_exploits(self, recorder: Recorder) -> None:
        """PBT's new exploit steps: each moved trial's run gets all its steps again as tags."""
        if self._off() or len(recorder.exploits) <= self._exploits_sent:
            return
        moved = {step.trial_id for step in recorder.exploits[self._exploits_sent :]}
        self._exploits_sent = len(recorder.exploits)

        def number_of(trial_id: str) -> int | None:
            record = recorder.trials.get(trial_id)
            return None if record is None else record.number

        for trial_id in sorted(moved):
            steps = tuple(s.describe(number_of) for s in recorder.exploits if s.trial_id == trial_id)
            self._queue.put(ExploitEvent(trial_id, steps))

    def _progress(self, recorder: Recorder, *, final: bool) -> ProgressEvent:
        # From the recorder's running tally, not a walk of every record: this runs after every
        # ended trial, and a walk cost 1.4 ms per trial at 10,000 trials.
        _, ended_epochs = recorder.ended_epochs()
        best = recorder.best()
        counts = recorder.counts()
        return ProgressEvent(
            ended=sum(count for status, count in counts.items() if status != TrialStatus.RUNNING),
            best=None if best is None else best.final_metric,
            best_trial=None if best is None else best.trial_id,
            counts=counts,
            epochs_spent=ended_epochs + sum(record.epochs for record in recorder.running()),
            wall_seconds=recorder.clock.now(),
            final=final,
            sessions=tuple((start, end) for start, end in recorder.clock.sessions) if final else (),
            # A signal's stop leaves its trials stopped for a resume (the parent run reads KILLED,
            # not FINISHED); the time budget's and the failure guard's are for good. The walk runs
            # once, at the search's end.
            interrupted=counts.get(TrialStatus.RUNNING, 0) > 0 or (final and _stopped_for_a_resume(recorder)),
        )

    def _off(self) -> bool:
        """True once the writer gave up (unreachable at start, refused credentials)."""
        return self._writer is not None and self._writer.disabled


# ---------------------------------------------------------------------- helpers


def _stopped_for_a_resume(recorder: Recorder) -> bool:
    """Whether a signal stopped trials of the search, which a resume trains on."""
    return any(
        r.status == TrialStatus.STOPPED and not stopped_for_good(r.status, r.reason) for r in recorder.trials.values()
    )


def _status(record: TrialRecord) -> TrialStatus:
    # The recorder sets TrialStatus members; a plain string (set by hand) is read the same way.
    return TrialStatus(record.status)
