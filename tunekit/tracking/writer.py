"""The background half of ``tunekit.tracking.tracker``: turns queued events into MLflow calls.

Runs in one daemon thread of the Ray driver (see ``tunekit.tracking.tracker`` for the design).
Events are applied to in-memory state first (``_Pending`` per run), then ``_sync``
sends whatever is pending; a failed call leaves its work pending, so the next attempt
picks up where the last one stopped and nothing is sent twice.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import re
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from tunekit.config.spec import ExperimentSpec
from tunekit.layout import FINAL_MODEL, SPEC_FILE, TRACKING_FILE
from tunekit.tracking.tags import (
    EXPERIMENT_KIND,
    EXPERIMENT_KIND_TAG,
    INFO_TAGS,
    MODEL_ARTIFACT_DIR,
    PARENT_RUN_TAG,
    TAG_ATTEMPTS,
    TAG_BEST_TRIAL,
    TAG_EPOCHS,
    TAG_EXPERIMENT_DIR,
    TAG_OUTCOME,
    TAG_REASON,
    TAG_ROLE,
    TAG_RUNG,
    TAG_STATUS,
    TAG_TRIAL_ID,
    TAG_TRIAL_NUMBER,
)
from tunekit.tracking.tracker import (
    PROBE_TIMEOUT_S,
    STOP,
    EpochEvent,
    InfoEvent,
    ProgressEvent,
    TrialEndEvent,
    TrialEvent,
    environment_tags,
    final_model_path,
    is_number,
    redact_uri,
    ui_url,
)

if TYPE_CHECKING:
    from mlflow import MlflowClient

logger = logging.getLogger("tunekit.tracking.tracker")

RETRY_BACKOFF_S = (1.0, 2.0, 5.0, 10.0, 30.0)
LINGER_S = 0.2  # gather a burst of events into one request
# MLflow's REST client retries a refused connection 7 times with exponential backoff
# (minutes); the tracker retries on its own schedule instead, so it learns quickly.
_HTTP_ENV_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",
    # set_terminated prints two "View run ... at" lines per run to stdout (and fetches the
    # run to do it): they would interleave with tunekit's progress lines.
    "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true",
}
# MLflow's limits per log_batch request and per value.
_MAX_METRICS_PER_BATCH = 1000
_MAX_PARAMS_PER_BATCH = 100
_MAX_TAGS_PER_BATCH = 100
_MAX_PARAM_LENGTH = 6000
_MAX_TAG_LENGTH = 8000
_MAX_OUTCOME_REASON = 300  # the outcome tag holds a reason's first line, cut here; the reason tag holds it all
_LOST_REASON = "started just before the driver stopped and not in Ray's last saved state; not resumed"
_INVALID_NAME_CHARS = re.compile(r"[^A-Za-z0-9_\-. :/]")
# Client errors: the request itself is wrong, so sending it again cannot help.
_DATA_ERRORS = {
    "INVALID_PARAMETER_VALUE",
    "RESOURCE_ALREADY_EXISTS",
    "RESOURCE_DOES_NOT_EXIST",
    "INVALID_STATE",
    "BAD_REQUEST",
}
_AUTH_ERRORS = {"PERMISSION_DENIED", "UNAUTHENTICATED"}
# A trial the model ended itself (EarlyStopping) is "completed": a normal end, FINISHED.
# "stopped" is the search stopping around it (time budget, Ctrl-C): KILLED.
_RUN_STATUS = {
    "completed": "FINISHED",
    "pruned": "FINISHED",
    "stopped": "KILLED",
    "failed": "FAILED",
    "running": "KILLED",
}


@dataclass
class _Pending:
    """What one run still has to send; cleared piece by piece as MLflow accepts it."""

    params: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    metrics: list[tuple[str, float, int, int]] = field(default_factory=list)  # key, value, ms, step
    status: tuple[str, int | None] | None = None  # MLflow run status, end time in ms
    reopen: bool = False

    def empty(self) -> bool:
        return not (self.params or self.tags or self.metrics or self.status or self.reopen)


@dataclass
class _TrialRun:
    trial_id: str
    number: int | None = None
    started_at: float = field(default_factory=time.time)
    run_id: str | None = None
    steps: set[int] | None = field(default_factory=set)  # epochs MLflow holds; None: ask it
    pending: _Pending = field(default_factory=_Pending)


class _Disabled(Exception):
    """Tracking cannot work for this search (unreachable at start, bad credentials)."""


class MlflowWriter:
    """Owns the MLflow client and every run id; only its own thread calls it (``run``)."""

    def __init__(
        self,
        spec: ExperimentSpec,
        experiment_dir: Path,
        events: queue.SimpleQueue[Any],
        flush_timeout: float,
        started: float,
    ) -> None:
        self.spec = spec
        self.experiment_dir = experiment_dir
        self.flush_timeout = flush_timeout
        self.disabled = False  # read by the listener's callbacks: they stop queueing
        self.uri = ""
        self._queue = events
        self._started = started
        self._warned = False
        self._client: MlflowClient | None = None
        self._experiment_id: str | None = None
        self._parent_id: str | None = None
        self._children: dict[str, str] | None = None  # trial id -> run id, found on resume
        self._parent = _Pending()
        self._spec_pending = False
        self._model_trial: str | None = None
        self._last_best: tuple[int, float | None] | None = None
        self._trials: dict[str, _TrialRun] = {}
        self._env_set: list[str] = []

    def warn_once(self, message: str) -> None:
        if not self._warned:
            self._warned = True
            logger.warning("tunekit: %s", message)

    def run(self) -> None:
        """The thread's body: connect, then apply and send events until STOP (or give up)."""
        stop_at: float | None = None
        failures = 0
        retry_at = 0.0
        waiters: list[threading.Event] = []
        try:
            self._connect()
        except Exception as error:  # anything at all: tracking must not stop training
            self._disable(
                f"cannot use MLflow at {self.uri or self.spec.tracking.uri}: {_brief(error)}; "
                "the search goes on without tracking"
            )
        while True:
            events = self._take(block=stop_at is None and not failures, wait=max(0.0, retry_at - time.monotonic()))
            for event in events:
                if event is STOP:
                    stop_at = time.monotonic() + self.flush_timeout
                elif isinstance(event, threading.Event):
                    waiters.append(event)
                elif not self.disabled:
                    self._apply(event)
            if self.disabled:
                for waiter in waiters:
                    waiter.set()
                waiters.clear()
                if stop_at is not None:
                    break
                continue
            if time.monotonic() >= retry_at or stop_at is not None:
                try:
                    self._sync()
                except _Disabled as error:
                    self._disable(str(error))
                    continue
                except Exception as error:
                    failures += 1
                    if failures == 1:
                        self.warn_once(
                            f"logging to MLflow at {self.uri} failed ({_brief(error)}); training "
                            "goes on, and tracking keeps what it has not sent and retries"
                        )
                    retry_at = time.monotonic() + RETRY_BACKOFF_S[min(failures, len(RETRY_BACKOFF_S)) - 1]
                    if stop_at is not None and retry_at >= stop_at:
                        break
                    continue
                if failures:
                    logger.info("tunekit: MLflow at %s is reachable again; tracking caught up", self.uri)
                failures, retry_at = 0, 0.0
                for waiter in waiters:
                    waiter.set()
                waiters.clear()
            if stop_at is not None and not failures:
                break
        if not self.disabled and failures:
            left = sum(len(t.pending.metrics) for t in self._trials.values())
            self.warn_once(f"MLflow at {self.uri} stayed unreachable; {left} metric values were not logged")
        for waiter in waiters:
            waiter.set()
        self._restore_env()

    def _take(self, *, block: bool, wait: float) -> list[Any]:
        """The next burst of events: waits for the first (when asked to), then a moment more."""
        events: list[Any] = []
        try:
            events.append(
                self._queue.get(timeout=None if block else wait) if block or wait > 0 else self._queue.get_nowait()
            )
        except queue.Empty:
            return events
        deadline = time.monotonic() + LINGER_S
        while events[-1] is not STOP and not isinstance(events[-1], threading.Event):
            remaining = deadline - time.monotonic()
            try:
                events.append(self._queue.get(timeout=remaining) if remaining > 0 else self._queue.get_nowait())
            except queue.Empty:
                break
        return events

    def _disable(self, message: str) -> None:
        self.disabled = True
        self._trials.clear()
        self.warn_once(message)

    def _connect(self) -> None:
        """Resolves the URI, checks the server answers, and opens experiment and parent run."""
        import mlflow
        from mlflow import MlflowClient

        raw_uri = self.spec.tracking.uri or mlflow.get_tracking_uri()
        self.uri = redact_uri(raw_uri)
        if urlsplit(raw_uri).scheme in ("http", "https"):
            self._set_http_env()
            _probe(raw_uri)
        # A new SQLite store announces its table migrations at INFO, mid-way through the
        # search's progress lines; unless the user configured that logger, keep it quiet.
        migrations = logging.getLogger("mlflow.store.db.utils")
        if migrations.level == logging.NOTSET:
            migrations.setLevel(logging.WARNING)
        self._client = MlflowClient(tracking_uri=raw_uri)
        self._open_parent()

    def _set_http_env(self) -> None:
        for key, value in _HTTP_ENV_DEFAULTS.items():
            if key not in os.environ:
                os.environ[key] = value
                self._env_set.append(key)

    def _restore_env(self) -> None:
        for key in self._env_set:
            os.environ.pop(key, None)
        self._env_set = []

    # ------------------------------------------------------------------- events

    def _apply(self, event: Any) -> None:
        if isinstance(event, EpochEvent):
            trial = self._trial(event.trial_id)
            trial.pending.metrics.extend(
                (_metric_key(key), value, event.timestamp_ms, event.step)
                for key, value in sorted(event.metrics.items())
            )
        elif isinstance(event, TrialEvent):
            trial = self._trial(event.trial_id)
            trial.number, trial.started_at = event.number, event.started_at
            trial.pending.params.update({_param_key(k): _param_value(v) for k, v in event.params.items()})
            if event.number is not None:
                trial.pending.tags[TAG_TRIAL_NUMBER] = str(event.number)
            if event.running:  # a new trial, or one Ray restarts (after a lost worker, on resume)
                trial.pending.tags.update({TAG_STATUS: "running", TAG_ATTEMPTS: str(event.attempts)})
                trial.pending.status = None
                trial.pending.reopen = trial.run_id is not None
        elif isinstance(event, InfoEvent):
            tags = {INFO_TAGS[key]: _tag_value(value) for key, value in event.info.items() if key in INFO_TAGS}
            self._trial(event.trial_id).pending.tags.update(tags)
        elif isinstance(event, TrialEndEvent):
            trial = self._trial(event.trial_id)
            trial.pending.tags.update(
                {
                    TAG_STATUS: event.status,
                    TAG_OUTCOME: _outcome(event.status, event.rung, event.epochs, event.reason),
                    TAG_EPOCHS: str(event.epochs),
                    TAG_ATTEMPTS: str(event.attempts),
                    **({TAG_RUNG: str(event.rung)} if event.rung is not None else {}),
                    **({TAG_REASON: event.reason[:_MAX_TAG_LENGTH]} if event.reason else {}),
                }
            )
            trial.pending.status = (
                _RUN_STATUS.get(event.status, "FINISHED"),
                int(event.ended_at * 1000),
            )
        elif isinstance(event, ProgressEvent):
            self._apply_progress(event)

    def _apply_progress(self, event: ProgressEvent) -> None:
        now = int(time.time() * 1000)
        name = _metric_key(f"best_{self.spec.metric.name}")
        point = (event.ended, event.best)
        if event.best is not None and is_number(event.best) and point != self._last_best:
            self._parent.metrics.append((name, event.best, now, event.ended))
            self._last_best = point
        if event.best_trial:
            self._parent.tags[TAG_BEST_TRIAL] = event.best_trial
        if not event.final:
            return
        budget = self.spec.budget
        summary = {
            **{
                f"trials_{status}": float(event.counts.get(status, 0))
                for status in ("completed", "pruned", "stopped", "failed")
            },
            "epochs_spent": float(event.epochs_spent),
            "epochs_full_budget": float(budget.num_samples * budget.max_epochs),
            "wall_seconds": round(event.wall_seconds, 3),
        }
        self._parent.metrics.extend((key, value, now, 0) for key, value in summary.items())
        self._parent.status = ("KILLED" if event.interrupted else "FINISHED", now)
        self._model_trial = event.best_trial

    def _trial(self, trial_id: str) -> _TrialRun:
        trial = self._trials.get(trial_id)
        if trial is None:
            trial = self._trials[trial_id] = _TrialRun(trial_id)
            trial.pending.tags.update({TAG_TRIAL_ID: trial_id, TAG_ROLE: "trial", **environment_tags()})
            if self._children is not None:  # resumed: MLflow may hold this trial already
                trial.run_id = self._children.get(trial_id)
                trial.steps = None if trial.run_id else set()
        return trial

    # -------------------------------------------------------------------- sync

    def _sync(self) -> None:
        """Sends everything pending. Idempotent: a failed call leaves its work pending."""
        if self._parent_id is None:
            self._open_parent()
        for trial in self._trials.values():
            if not trial.pending.empty():
                self._sync_trial(trial)
        self._sync_parent()

    def _open_parent(self) -> None:
        from mlflow.exceptions import MlflowException

        client = self._require_client()
        name = self.spec.tracking.experiment or self.spec.name
        experiment = client.get_experiment_by_name(name)
        if experiment is None:
            try:
                self._experiment_id = client.create_experiment(name, tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND})
            except MlflowException as error:  # created meanwhile by another search
                if error.error_code != "RESOURCE_ALREADY_EXISTS":
                    raise
                experiment = client.get_experiment_by_name(name)
        if experiment is not None:
            if experiment.lifecycle_stage == "deleted":
                raise _Disabled(f"MLflow experiment {name!r} is deleted; restore it or set tracking.experiment")
            self._experiment_id = experiment.experiment_id
            if not experiment.tags.get(EXPERIMENT_KIND_TAG):  # a kind someone chose stays
                try:
                    client.set_experiment_tag(self._experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
                except MlflowException as error:  # only how the UI shows it: not worth the search's tracking
                    logger.info(
                        "tunekit: could not tag MLflow experiment %r as model training: %s", name, _brief(error)
                    )
        assert self._experiment_id is not None
        directory = str(self.experiment_dir)
        parents = [
            run
            for run in self._search(f"tags.`{TAG_ROLE}` = 'experiment'")
            if run.data.tags.get(TAG_EXPERIMENT_DIR) == directory
        ]
        if parents:
            run = parents[0]
            self._parent_id = run.info.run_id
            self._children = {
                child.data.tags[TAG_TRIAL_ID]: child.info.run_id
                for child in self._search(f"tags.`{PARENT_RUN_TAG}` = '{self._parent_id}'")
                if TAG_TRIAL_ID in child.data.tags
            }
            for trial in self._trials.values():  # events that came before the lookup
                if trial.run_id is None and trial.trial_id in self._children:
                    trial.run_id, trial.steps = self._children[trial.trial_id], None
            if run.info.status != "RUNNING":
                client.update_run(self._parent_id, status="RUNNING")
        else:
            run = client.create_run(
                self._experiment_id,
                start_time=int(self._started * 1000),
                run_name=self.experiment_dir.name,
                tags={TAG_ROLE: "experiment", TAG_EXPERIMENT_DIR: directory, **environment_tags()},
            )
            self._parent_id = run.info.run_id
        self._parent.params.update(spec_params(self.spec))
        self._spec_pending = (self.experiment_dir / SPEC_FILE).is_file()
        self._write_tracking_file(name)

    def _write_tracking_file(self, name: str) -> None:
        record = {
            "tracking_uri": self.uri,
            "experiment_name": name,
            "experiment_id": self._experiment_id,
            "parent_run_id": self._parent_id,
        }
        link = ui_url(self.uri, self._experiment_id or "")
        if link:
            record["ui_url"] = link
        with contextlib.suppress(OSError):
            (self.experiment_dir / TRACKING_FILE).write_text(json.dumps(record, indent=2) + "\n")

    def _search(self, filter_string: str) -> Iterator[Any]:
        from mlflow.entities import ViewType

        client = self._require_client()
        assert self._experiment_id is not None
        token = None
        while True:
            page = client.search_runs(
                [self._experiment_id],
                filter_string,
                ViewType.ACTIVE_ONLY,
                max_results=1000,
                page_token=token,
            )
            yield from page
            token = page.token
            if not token:
                return

    def _sync_trial(self, trial: _TrialRun) -> None:
        client = self._require_client()
        pending = trial.pending
        assert self._experiment_id is not None and self._parent_id is not None
        if trial.run_id is None:
            name = f"trial-{trial.number}" if trial.number is not None else f"trial-{trial.trial_id}"
            run = client.create_run(
                self._experiment_id,
                start_time=int(trial.started_at * 1000),
                run_name=name,
                tags={PARENT_RUN_TAG: self._parent_id, **pending.tags},
            )
            trial.run_id = run.info.run_id
            pending.tags.clear()
            pending.reopen = False
        if pending.reopen:
            client.update_run(trial.run_id, status="RUNNING")
            pending.reopen = False
        if pending.params or pending.tags:
            self._send(trial.run_id, params=pending.params, tags=pending.tags)
            pending.params.clear()
            pending.tags.clear()
        if pending.metrics:
            if trial.steps is None:  # reattached on resume: which epochs does MLflow hold?
                history = client.get_metric_history(trial.run_id, _metric_key(self.spec.metric.name))
                trial.steps = {point.step for point in history}
            fresh = [m for m in pending.metrics if m[3] not in trial.steps]
            self._send_metrics(trial.run_id, fresh)
            trial.steps.update(m[3] for m in fresh)
            pending.metrics.clear()
        if pending.status is not None:
            status, end_ms = pending.status
            client.set_terminated(trial.run_id, status=status, end_time=end_ms)
            pending.status = None

    def _sync_parent(self) -> None:
        client = self._require_client()
        assert self._parent_id is not None
        pending = self._parent
        if pending.params or pending.tags:
            self._send(self._parent_id, params=pending.params, tags=pending.tags)
            pending.params.clear()
            pending.tags.clear()
        if self._spec_pending:
            self._log_spec(self.experiment_dir / SPEC_FILE)
            self._spec_pending = False
        if pending.metrics:
            self._send_metrics(self._parent_id, pending.metrics)
            pending.metrics.clear()
        if pending.status is not None:
            self._retire_lost_trials()
            if self._model_trial is not None:
                self._log_best_model(self._model_trial)
                self._model_trial = None
            status, end_ms = pending.status
            client.set_terminated(self._parent_id, status=status, end_time=end_ms)
            pending.status = None

    def _retire_lost_trials(self) -> None:
        """Moves the runs of trials a killed driver started but Ray never saved to deleted runs.

        Ray resumes from its last experiment checkpoint: a trial started after it is not
        resumed, does not count toward ``num_samples`` and its Optuna trial is closed as
        FAIL. Its run, tagged ``lost`` and KILLED, goes to MLflow's deleted runs (restorable
        there), so the experiment keeps one active run per trial of ``trials.csv``.
        """
        if not self._children:
            return  # a fresh search: every run is one of this session's trials
        client = self._require_client()
        for trial_id, run_id in list(self._children.items()):
            if trial_id in self._trials:
                continue
            client.set_tag(run_id, TAG_STATUS, "lost")
            client.set_tag(run_id, TAG_REASON, _LOST_REASON)
            client.set_terminated(run_id, status="KILLED")
            client.delete_run(run_id)
            del self._children[trial_id]  # a retry after an error goes on with the rest

    def _log_spec(self, path: Path) -> None:
        """The resolved spec; user:password in its tracking URI never leaves the machine."""
        client = self._require_client()
        assert self._parent_id is not None
        raw_uri = self.spec.tracking.uri
        text = path.read_text()
        if raw_uri and redact_uri(raw_uri) != raw_uri:
            with tempfile.TemporaryDirectory() as scratch:
                copy = Path(scratch) / SPEC_FILE
                copy.write_text(text.replace(raw_uri, redact_uri(raw_uri)))
                client.log_artifact(self._parent_id, str(copy))
        else:
            client.log_artifact(self._parent_id, str(path))

    def _log_best_model(self, trial_id: str) -> None:
        """The best trial's final model on its child run, and in the registry when asked.

        The model is ``model.keras``, or ``model.weights.h5`` when Keras could not save it
        whole; weights alone are attached but not registered (a registered model must
        load on its own), with one warning.
        """
        client = self._require_client()
        trial = self._trials.get(trial_id)
        run_id = trial.run_id if trial else (self._children or {}).get(trial_id)
        model = final_model_path(self.experiment_dir, trial_id)
        if run_id is None or model is None:
            return
        logged = {item.path for item in client.list_artifacts(run_id, MODEL_ARTIFACT_DIR)}
        if f"{MODEL_ARTIFACT_DIR}/{model.name}" not in logged:
            client.log_artifact(run_id, str(model), MODEL_ARTIFACT_DIR)
        name = self.spec.tracking.registered_model
        if not name:
            return
        if model.name != FINAL_MODEL:
            logger.warning(
                "tunekit: not registering %r: the best trial %s saved weights only (%s, Keras could not "
                "save the model whole); they are attached to its run",
                name,
                trial_id,
                model.name,
            )
            return
        self._register(name, run_id)

    def _register(self, name: str, run_id: str) -> None:
        from mlflow.exceptions import MlflowException

        client = self._require_client()
        try:
            client.create_registered_model(name)
        except MlflowException as error:
            if error.error_code not in ("RESOURCE_ALREADY_EXISTS", "ALREADY_EXISTS"):
                raise
        if client.search_model_versions(f"name = '{name}' and run_id = '{run_id}'"):
            return  # registered by an earlier session of this experiment
        source = f"{client.get_run(run_id).info.artifact_uri}/{MODEL_ARTIFACT_DIR}"
        client.create_model_version(
            name,
            source,
            run_id=run_id,
            description=f"best trial of tunekit experiment {self.experiment_dir.name}",
        )

    def _send(self, run_id: str, *, params: dict[str, str], tags: dict[str, str]) -> None:
        from mlflow.entities import Param, RunTag

        param_items, tag_items = list(params.items()), list(tags.items())
        for start in range(0, max(len(param_items), len(tag_items)), _MAX_PARAMS_PER_BATCH):
            chunk_params = [Param(k, v) for k, v in param_items[start : start + _MAX_PARAMS_PER_BATCH]]
            chunk_tags = [RunTag(k, v) for k, v in tag_items[start : start + _MAX_TAGS_PER_BATCH]]
            self._log_batch(run_id, params=chunk_params, tags=chunk_tags)

    def _send_metrics(self, run_id: str, metrics: list[tuple[str, float, int, int]]) -> None:
        from mlflow.entities import Metric

        entities = [Metric(key, value, timestamp, step) for key, value, timestamp, step in metrics]
        for start in range(0, len(entities), _MAX_METRICS_PER_BATCH):
            self._log_batch(run_id, metrics=entities[start : start + _MAX_METRICS_PER_BATCH])

    def _log_batch(self, run_id: str, **entities: Any) -> None:
        from mlflow.exceptions import MlflowException

        try:
            self._require_client().log_batch(run_id, **entities)
        except MlflowException as error:
            if error.error_code in _AUTH_ERRORS:
                raise _Disabled(
                    f"MLflow at {self.uri} refused tunekit's credentials ({_brief(error)}); "
                    "the search goes on without tracking"
                ) from error
            if error.error_code not in _DATA_ERRORS:
                raise
            # Sending it again cannot succeed (e.g. a param changed value on resume): drop it.
            logger.warning("tunekit: MLflow rejected values for run %s: %s", run_id, _brief(error))

    def _require_client(self) -> MlflowClient:
        if self._client is None:
            raise _Disabled("no MLflow client")
        return self._client


# ---------------------------------------------------------------------- helpers


def _probe(uri: str) -> None:
    """One quick request: an unreachable server is known at once, not after MLflow's retries."""
    import requests

    try:
        requests.get(uri.rstrip("/") + "/health", timeout=PROBE_TIMEOUT_S)
    except requests.RequestException as error:
        raise ConnectionError(f"no answer from {redact_uri(uri)} ({type(error).__name__})") from None


def _outcome(status: str, rung: int | None, epochs: int, reason: str = "") -> str:
    """The status in words, for the runs table: "completed: stopped by the model at epoch 7"."""
    if status == "pruned":
        return f"pruned at rung {rung} (epoch {epochs})" if rung is not None else f"pruned at epoch {epochs}"
    lines = reason.strip().splitlines()
    brief = lines[0][:_MAX_OUTCOME_REASON] if lines else ""
    if not brief:
        return f"{status} after {epochs} epochs"
    if status == "failed":  # the reason is an error message: say when it struck
        return f"failed after {epochs} epochs: {brief}"
    return f"{status}: {brief}"


def _metric_key(name: str) -> str:
    return _INVALID_NAME_CHARS.sub("_", name)[:250]


def _param_key(name: str) -> str:
    return _INVALID_NAME_CHARS.sub("_", str(name))[:250]


def _param_value(value: Any) -> str:
    return str(value)[:_MAX_PARAM_LENGTH]


def _tag_value(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ";".join(str(v) for v in value)  # as trials.csv writes lists
    return str(value)[:_MAX_TAG_LENGTH]


def _brief(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    first = text[0] if text else ""
    return (f"{type(error).__name__}: {first}" if first else type(error).__name__)[:300]


def spec_params(spec: ExperimentSpec) -> dict[str, str]:
    """The parent run's params: the settings that define the search (not tracking, not storage)."""
    raw = spec.raw
    params: dict[str, str] = {"name": spec.name, "trainable": str(raw["trainable"])}
    for section in ("metric", "search", "scheduler", "budget", "resources", "training"):
        for key, value in raw[section].items():
            if section == "search" and key == "warm_start":
                params["search.warm_start"] = str(len(value))
                continue
            params[f"{section}.{key}"] = _param_value(value)
    for name, definition in raw["space"].items():
        params[_param_key(f"space.{name}")] = _param_value(json.dumps(definition, sort_keys=True))
    return params
