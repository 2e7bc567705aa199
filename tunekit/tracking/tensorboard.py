"""TensorBoard logs of a search, written by the driver with tensorboardX (never TensorFlow).

Layout: ``<experiment>/tensorboard/`` is the log directory (``tensorboard --logdir`` it);
each trial is one run, ``trial-<number>`` (the Optuna trial number, as in trials.csv and
MLflow), holding:

* a scalar per reported numeric metric per epoch (``step`` = the epoch), the objectives
  tunekit measures included;
* the HParams plugin's session start (the trial's parameters, its start time) and, once
  the trial ended for good, its session end: completed -> success, failed -> failure;
  pruned, stopped for good and lost -> unknown, since TensorBoard's HParams API (2.21) has no
  aborted status;
* a text summary ``outcome`` with the status and the reason ("pruned: pruned by ASHA at rung
  1 (epoch 1)"), which the Text tab shows;
* under PBT, a scalar ``pbt/<parameter>`` per mutated parameter: its starting value at step 0
  and its new value at the epoch of each exploit, so PBT's steps show beside the metrics, and
  a text ``exploit`` there saying what was copied ("epoch 4: copied trial 2 (epoch 4); ...").

The log directory itself holds the HParams experiment: the space's parameters with their
domains (intervals for ranges, the values of a choice) and the objectives as its metrics.

Logging never holds up training. The recorder calls its listeners from Ray's driver loop,
so each hook here only queues a small tuple; one background thread writes the event files
and flushes them every few seconds, when a trial ends and at the end of the search.

Resuming continues the same runs: ``.tunekit-written.json`` in the log directory records
what was written (per run: started, last epoch, ended), so a resumed driver, which hears
the whole record again, writes only what is new, in a new event file of the same run.
TensorBoard summary metadata is locked by the first event of a tag, so a trial a signal
stopped (which a resume trains on) gets no session end until it really ends.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import queue
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunekit.config.objectives import tracked_metrics
from tunekit.config.space import Choice, Fixed, FloatRange, IntRange, SearchSpace
from tunekit.config.spec import ExperimentSpec
from tunekit.layout import TENSORBOARD_DIR, TrialStatus, finite, stopped_for_good, trial_name

if TYPE_CHECKING:
    from tunekit.driver.recorder import EpochRow, Recorder, TrialRecord

logger = logging.getLogger(__name__)

STATE_FILE = ".tunekit-written.json"
OUTCOME_TAG = "outcome"
FLUSH_EVERY_S = 5.0
FLUSH_TIMEOUT_S = 30.0

# The HParams plugin's tags and version (tensorboard.plugins.hparams.metadata).
_PLUGIN = "hparams"
_EXPERIMENT_TAG = "_hparams_/experiment"
_SESSION_START_TAG = "_hparams_/session_start_info"
_SESSION_END_TAG = "_hparams_/session_end_info"
# tensorboard.plugins.hparams.api_pb2.Status; TensorBoard 2.21 has no "aborted".
STATUS_UNKNOWN, STATUS_SUCCESS, STATUS_FAILURE = 0, 1, 2


def session_status(status: TrialStatus) -> int:
    """The HParams session status of an ended trial (completed: success, failed: failure, else unknown)."""
    if status == TrialStatus.COMPLETED:
        return STATUS_SUCCESS
    if status == TrialStatus.FAILED:
        return STATUS_FAILURE
    return STATUS_UNKNOWN


# ------------------------------------------------------------------ queued events


@dataclass(frozen=True)
class _Start:
    run: str
    params: dict[str, Any]
    at: float


@dataclass(frozen=True)
class _Scalars:
    run: str
    epoch: int
    metrics: dict[str, float]
    at: float


@dataclass(frozen=True)
class _Exploit:
    """The ``index``-th exploit of the run's trial (0, 1, ...), at ``epoch``: its mutated values."""

    run: str
    index: int
    epoch: int
    values: dict[str, float]
    text: str
    at: float


@dataclass(frozen=True)
class _End:
    run: str
    status: TrialStatus
    reason: str
    at: float


@dataclass(frozen=True)
class _Flush:
    done: threading.Event


_STOP = "stop"
_Event = _Start | _Scalars | _Exploit | _End | _Flush | str
PBT_PREFIX = "pbt/"  # the scalars of PBT's mutated parameters
EXPLOIT_TAG = "exploit"


class TensorBoardLogger:
    """Recorder listener that writes the search's TensorBoard logs from a background thread.

    Args:
        spec: the experiment's spec (the space's domains, the objectives).
        experiment_dir: the experiment directory; the logs go to its ``tensorboard/``.
        flush_every: seconds between flushes of the open event files.
    """

    def __init__(self, spec: ExperimentSpec, experiment_dir: Path, *, flush_every: float = FLUSH_EVERY_S) -> None:
        self.spec = spec
        self.experiment_dir = Path(experiment_dir)
        self.flush_every = flush_every
        self._init_runtime()

    def _init_runtime(self) -> None:
        self._queue: queue.SimpleQueue[_Event] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._clock: Any = None
        self._exploits_seen = 0  # the recorder's exploit steps queued so far (all again on a resume)

    # Ray may pickle callbacks: no thread or queue in the pickle.
    def __getstate__(self) -> dict[str, Any]:
        return {"spec": self.spec, "experiment_dir": self.experiment_dir, "flush_every": self.flush_every}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_runtime()

    @property
    def logdir(self) -> Path:
        return self.experiment_dir / TENSORBOARD_DIR

    # ------------------------------------------------------------ listener (driver)

    def experiment_started(self, recorder: Recorder) -> None:
        self._clock = recorder.clock
        if self._thread is None:
            writer = _Writer(self.logdir, self.spec, self._queue, self.flush_every)
            self._thread = threading.Thread(target=writer.run, name="tunekit-tensorboard", daemon=True)
            self._thread.start()
        # On resume the recorder already holds trials: the writer keeps only what it lacks.
        for record in list(recorder.trials.values()):
            self.trial_started(record)
        for row in list(recorder.epochs):
            owner = recorder.trials.get(row.trial_id)
            if owner is not None:
                self.epoch_reported(owner, row)
        for record in list(recorder.trials.values()):
            if TrialStatus(record.status).is_finished():
                self.trial_ended(record)

    def trial_started(self, record: TrialRecord) -> None:
        run = trial_name(record.number, record.trial_id)
        self._queue.put(_Start(run, dict(record.params), record.started_at))
        if self.spec.scheduler.type == "pbt":  # the mutated parameters' first values, at step 0
            self._queue.put(_Exploit(run, -1, 0, self._mutated(record.params), "", record.started_at))

    def epoch_reported(self, record: TrialRecord, row: EpochRow) -> None:
        metrics = {key: number for key, value in row.metrics.items() if (number := finite(value)) is not None}
        at = self._clock.wall_at(row.at) if self._clock is not None else time.time()
        self._queue.put(_Scalars(trial_name(record.number, record.trial_id), row.epoch, metrics, at))

    def trial_ended(self, record: TrialRecord) -> None:
        status = TrialStatus(record.status)
        if status == TrialStatus.STOPPED and not stopped_for_good(status, record.reason):
            return  # a resume trains it on; its session end comes when it really ends
        at = record.ended_at or time.time()
        self._queue.put(_End(trial_name(record.number, record.trial_id), status, record.reason, at))

    def tick(self, recorder: Recorder) -> None:
        """PBT's new exploit steps (the recorder takes them from the scheduler on each step of Ray's loop)."""
        steps = recorder.exploits
        if len(steps) <= self._exploits_seen:
            return

        def number_of(trial_id: str) -> int | None:
            record = recorder.trials.get(trial_id)
            return None if record is None else record.number

        for index, step in enumerate(steps[self._exploits_seen :], start=self._exploits_seen):
            run = trial_name(number_of(step.trial_id), step.trial_id)
            before = sum(1 for earlier in steps[:index] if earlier.trial_id == step.trial_id)
            text = step.describe(number_of)
            self._queue.put(_Exploit(run, before, step.epoch, self._mutated(step.new), text, step.wall_time))
        self._exploits_seen = len(steps)

    def _mutated(self, config: Mapping[str, Any]) -> dict[str, float]:
        return {
            f"{PBT_PREFIX}{name}": float(config[name])
            for name in self.spec.scheduler.mutate
            if isinstance(config.get(name), int | float) and not isinstance(config.get(name), bool)
        }

    def warning(self, message: str) -> None:
        pass  # warnings are for the console

    def experiment_ended(self, recorder: Recorder) -> None:
        thread = self._thread
        if thread is None:
            return
        self.tick(recorder)  # exploits of the loop's last step
        self._queue.put(_STOP)
        thread.join(FLUSH_TIMEOUT_S)
        if thread.is_alive():
            logger.warning("TensorBoard logs in %s: not all written in %.0f s", self.logdir, FLUSH_TIMEOUT_S)
        self._thread = None

    def flush(self, timeout: float | None = None) -> bool:
        """Waits until everything queued so far is written and flushed (for tests and benchmarks)."""
        done = threading.Event()
        self._queue.put(_Flush(done))
        return done.wait(timeout)


# ---------------------------------------------------------------------- the writer


class _Writer:
    """Owns the event files and the written-state file; runs on the logger's thread only."""

    def __init__(self, logdir: Path, spec: ExperimentSpec, events: queue.SimpleQueue[_Event], flush_every: float):
        self.logdir = logdir
        self.spec = spec
        self.events = events
        self.flush_every = flush_every
        self.files: dict[str, Any] = {}  # run -> tensorboardX EventsWriter
        self.state: dict[str, Any] = {"experiment": False, "runs": {}}
        self.dirty = False
        self.failed = False
        self._suffixes = itertools.count()

    def run(self) -> None:
        try:
            self.logdir.mkdir(parents=True, exist_ok=True)
            self.state = _read_state(self.logdir / STATE_FILE)
            if not self.state["experiment"]:
                self._write(".", _hparams_summary(_EXPERIMENT_TAG, "experiment", experiment_config(self.spec)), 0, 0.0)
                self.state["experiment"] = True
        except Exception as error:  # logging must never stop a search
            self._fail(error)
        last_flush = time.monotonic()
        while True:
            try:
                event = self.events.get(timeout=self.flush_every)
            except queue.Empty:
                event = None
            if event == _STOP:
                self._flush(close=True)
                return
            if isinstance(event, _Flush):
                self._flush()
                event.done.set()
                continue
            if event is not None and not self.failed:
                try:
                    self._handle(event)
                except Exception as error:
                    self._fail(error)
            if time.monotonic() - last_flush >= self.flush_every:
                self._flush()
                last_flush = time.monotonic()

    def _handle(self, event: _Event) -> None:
        if isinstance(event, _Start):
            seen = self._run_state(event.run)
            if not seen["started"]:
                info = session_start_info(event.params, event.at)
                self._write(event.run, _hparams_summary(_SESSION_START_TAG, "session_start_info", info), 0, event.at)
                seen["started"] = True
        elif isinstance(event, _Scalars):
            seen = self._run_state(event.run)
            if event.epoch > seen["epoch"]:
                self._write(event.run, _scalars_summary(event.metrics), event.epoch, event.at)
                seen["epoch"] = event.epoch
        elif isinstance(event, _Exploit):
            seen = self._run_state(event.run)
            if event.index >= seen.setdefault("exploits", -1):  # -1: the starting values
                self._write(event.run, _scalars_summary(event.values), event.epoch, event.at)
                if event.text:
                    self._write(event.run, _text_summary(EXPLOIT_TAG, event.text), event.epoch, event.at)
                seen["exploits"] = event.index + 1
        elif isinstance(event, _End):
            seen = self._run_state(event.run)
            if not seen["ended"]:
                text = f"{event.status}: {event.reason}" if event.reason else str(event.status)
                self._write(event.run, _text_summary(OUTCOME_TAG, text), seen["epoch"], event.at)
                info = session_end_info(event.status, event.at)
                self._write(
                    event.run, _hparams_summary(_SESSION_END_TAG, "session_end_info", info), seen["epoch"], event.at
                )
                seen["ended"] = True
                self._close(event.run)

    def _run_state(self, run: str) -> dict[str, Any]:
        self.dirty = True
        runs: dict[str, dict[str, Any]] = self.state["runs"]
        return runs.setdefault(run, {"started": False, "epoch": 0, "ended": False})

    def _write(self, run: str, summary: Any, step: int, at: float) -> None:
        from tensorboardX.event_file_writer import EventsWriter
        from tensorboardX.proto.event_pb2 import Event

        writer = self.files.get(run)
        if writer is None:
            folder = self.logdir / run
            folder.mkdir(parents=True, exist_ok=True)
            # A name of its own per writer (EventsWriter truncates a file of the same name) that
            # sorts after the run's earlier files, as TensorBoard reads them in name order.
            suffix = f".{time.time_ns()}.{os.getpid()}.{next(self._suffixes)}"
            writer = self.files[run] = EventsWriter(str(folder / "events"), suffix)
        writer.write_event(Event(wall_time=at or time.time(), step=step, summary=summary))

    def _close(self, run: str) -> None:
        writer = self.files.pop(run, None)
        if writer is not None:
            writer.close()
        self._save_state()

    def _flush(self, *, close: bool = False) -> None:
        if self.failed:
            return
        try:
            for run in list(self.files):
                if close:
                    self._close(run)
                else:
                    self.files[run].flush()
            self._save_state()
        except Exception as error:
            self._fail(error)

    def _save_state(self) -> None:
        # After the event files' flush: what the state says is written, is on disk.
        if not self.dirty:
            return
        from tunekit.storage.store import write_text

        write_text(self.logdir / STATE_FILE, json.dumps(self.state, sort_keys=True))
        self.dirty = False

    def _fail(self, error: Exception) -> None:
        if not self.failed:
            logger.warning("TensorBoard logs in %s stopped: %s", self.logdir, error)
        self.failed = True


def _read_state(path: Path) -> dict[str, Any]:
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return {"experiment": False, "runs": {}}
    if not isinstance(state, dict) or not isinstance(state.get("runs"), dict):
        return {"experiment": False, "runs": {}}
    return {"experiment": bool(state.get("experiment")), "runs": state["runs"]}


# ------------------------------------------------------------- the HParams protos


def experiment_config(spec: ExperimentSpec) -> Any:
    """The HParams plugin's ``Experiment``: the space's parameters with domains, the objectives as metrics."""
    from tensorboardX.proto.api_pb2 import Experiment, MetricInfo, MetricName

    return Experiment(
        name=spec.name,
        hparam_infos=hparam_infos(spec.space),
        metric_infos=[
            MetricInfo(name=MetricName(tag=name), display_name=name)
            for name in tracked_metrics(spec.objectives, spec.constraints, spec.select)
        ],
    )


def hparam_infos(space: SearchSpace) -> list[Any]:
    """One ``HParamInfo`` per parameter: ranges as intervals, choices and fixed values as discrete domains."""
    from google.protobuf.struct_pb2 import ListValue
    from tensorboardX.proto.api_pb2 import DataType, HParamInfo, Interval

    infos = []
    for param in space.params:
        dist = param.distribution
        if isinstance(dist, FloatRange | IntRange):
            infos.append(
                HParamInfo(
                    name=param.name,
                    type=DataType.DATA_TYPE_FLOAT64,
                    domain_interval=Interval(min_value=float(dist.low), max_value=float(dist.high)),
                )
            )
            continue
        values = list(dist.values) if isinstance(dist, Choice) else [dist.value] if isinstance(dist, Fixed) else []
        values = [v for v in values if v is not None]
        kind = _data_type(values)
        domain = ListValue()
        domain.extend([v if kind != DataType.DATA_TYPE_STRING else str(v) for v in values])
        infos.append(HParamInfo(name=param.name, type=kind, domain_discrete=domain))
    return infos


def _data_type(values: list[Any]) -> Any:
    from tensorboardX.proto.api_pb2 import DataType

    if values and all(isinstance(v, bool) for v in values):
        return DataType.DATA_TYPE_BOOL
    if values and all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return DataType.DATA_TYPE_FLOAT64
    return DataType.DATA_TYPE_STRING


def session_start_info(params: Mapping[str, Any], at: float) -> Any:
    """The HParams plugin's ``SessionStartInfo`` of a trial: its parameters and start time."""
    from tensorboardX.proto.plugin_hparams_pb2 import SessionStartInfo

    info = SessionStartInfo(start_time_secs=at)
    for name, value in params.items():
        if value is None:
            continue
        if isinstance(value, bool):
            info.hparams[name].bool_value = value
        elif isinstance(value, int | float):
            info.hparams[name].number_value = float(value)
        else:
            info.hparams[name].string_value = str(value)
    return info


def session_end_info(status: TrialStatus, at: float) -> Any:
    from tensorboardX.proto.plugin_hparams_pb2 import SessionEndInfo

    return SessionEndInfo(status=session_status(status), end_time_secs=at)


def _hparams_summary(tag: str, field: str, message: Any) -> Any:
    from tensorboardX.proto.plugin_hparams_pb2 import HParamsPluginData
    from tensorboardX.proto.summary_pb2 import Summary, SummaryMetadata

    content = HParamsPluginData(version=0, **{field: message})
    metadata = SummaryMetadata(
        plugin_data=SummaryMetadata.PluginData(plugin_name=_PLUGIN, content=content.SerializeToString())
    )
    return Summary(value=[Summary.Value(tag=tag, metadata=metadata)])


def _scalars_summary(metrics: Mapping[str, float]) -> Any:
    from tensorboardX.proto.summary_pb2 import Summary

    return Summary(value=[Summary.Value(tag=name, simple_value=value) for name, value in metrics.items()])


def _text_summary(tag: str, body: str) -> Any:
    from tensorboardX.summary import text

    return text(tag, body)
