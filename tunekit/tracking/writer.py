"""The background half of ``tunekit.tracking.tracker``: turns queued events into MLflow calls.

Runs in one daemon thread of the Ray driver (see ``tunekit.tracking.tracker`` for the design).
This module is the thread's loop: connect, take bursts of events, hand them to the run
bookkeeping (``tunekit.tracking.runs``), sync (trials' runs over ``runs.SEND_LANES``
connections at once), and on failure retry on a backoff schedule while training goes on.
What is sent and how lives in ``runs``, ``batches`` (request batching, the lanes and error
sorting), ``artifacts`` and ``client`` (the only door to MLflow).
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from urllib.parse import urlsplit

from tunekit.config.spec import ExperimentSpec
from tunekit.environment import redact_uri
from tunekit.storage.fences import check_fences
from tunekit.tracking.batches import BatchSender, Disabled
from tunekit.tracking.client import MlflowRunClient, RunClient, absent_platforms_skipped, default_tracking_uri
from tunekit.tracking.events import Flush, Stop, TrackerEvent
from tunekit.tracking.prepare import quiet_store_logs
from tunekit.tracking.prepare import wait as wait_for_the_store
from tunekit.tracking.runs import RunBook
from tunekit.tracking.store_log import store_logs_to
from tunekit.tracking.values import brief, logger

PROBE_TIMEOUT_S = 5.0
PREPARE_WAIT_S = 60.0  # a preparation stuck longer (a store on a hung disk) is left behind
RETRY_BACKOFF_S = (1.0, 2.0, 5.0, 10.0, 30.0)
# Gather a burst of events for this long into one sync. A trial whose start, epochs and end
# fall in one sync costs MLflow 3 requests (create, one batch, end); at 0.2 s, trials of the
# scale benchmark were split across syncs: 3.44 requests per trial against 3.11 at 1 s (a
# fake client with a local server's 13 ms per request, 10 trials a second). MLflow shows a
# search at most this much late; a flush and the search's end do not wait for it.
LINGER_S = 1.0
# MLflow's REST client retries a refused connection 7 times with exponential backoff
# (minutes); the tracker retries on its own schedule instead, so it learns quickly.
HTTP_ENV_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",
    # set_terminated prints two "View run ... at" lines per run to stdout (and fetches the
    # run to do it): they would interleave with tunekit's progress lines.
    "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true",
}


class MlflowWriter:
    """Owns the MLflow client and every run id; only its own thread calls it (``run``).

    ``disabled``, ``uri`` and ``problem`` are read by the tracker's callbacks on the driver
    thread (plain attribute reads); ``warn_once`` may be called from either thread.
    ``problem`` says, once the loop ended, why MLflow does not hold everything (None: it does).

    Args:
        spec: the experiment's spec (``tracking`` section).
        experiment_dir: the experiment directory.
        events: the tracker's queue.
        flush_timeout: how long after ``Stop`` the writer keeps trying to send what is left.
        started: when the search started (epoch seconds).
        client_factory: builds the client from the raw tracking URI (default: MLflow's).
        clock: monotonic seconds, for retry and flush deadlines.
        wait: waits up to the given seconds (None: forever) for the next event on an empty
            queue, and returns it, or None when the time passed; by default the queue's own wait.
        backoff: seconds between retries after the 1st, 2nd... failure (the last repeats).
        tracking_uri: where to send (default: the spec's ``tracking.uri``, else MLflow's default).
        fill_only: a parent metric goes only to a step MLflow lacks (``tunekit sync``; see ``runs``).
        warn: shows a warning (default: tracking's logger); ``tunekit sync`` reports ``problem`` instead.
    """

    def __init__(
        self,
        spec: ExperimentSpec,
        experiment_dir: Path,
        events: queue.SimpleQueue[TrackerEvent],
        flush_timeout: float,
        started: float,
        *,
        client_factory: Callable[[str], RunClient] = MlflowRunClient,
        clock: Callable[[], float] = time.monotonic,
        wait: Callable[[float | None], TrackerEvent | None] | None = None,
        backoff: Sequence[float] = RETRY_BACKOFF_S,
        tracking_uri: str | None = None,
        fill_only: bool = False,
        warn: Callable[[str], None] | None = None,
    ) -> None:
        self.spec = spec
        self.experiment_dir = experiment_dir
        self.flush_timeout = flush_timeout
        self.disabled = False  # read by the listener's callbacks: they stop queueing
        self.uri = ""
        self.problem: str | None = None
        self._queue = events
        self._client_factory = client_factory
        self._clock = clock
        self._wait = wait or self._wait_on_queue
        self._backoff = tuple(backoff)
        self._warned = False
        self._warn = warn or _log_warning
        self._tracking_uri = tracking_uri
        self._runs = RunBook(spec, experiment_dir, started, fill_only=fill_only)
        self._failed_syncs = 0  # over the whole search: the end's line says how many
        self._store_log: Path | None = None  # where MLflow's own lines go while this writer sends
        # Process-wide settings for the MLflow client while this writer sends, undone at its end.
        self._client_settings = contextlib.ExitStack()

    @property
    def runs(self) -> RunBook:
        """The runs and what they still have to send; read it only once ``run`` returned."""
        return self._runs

    def warn_once(self, message: str) -> None:
        if not self._warned:
            self._warned = True
            self._warn(message)

    def run(self) -> None:
        """The thread's body: connect, then apply and send events until ``Stop`` (or give up)."""
        stop_at: float | None = None
        failures = 0
        retry_at = 0.0
        waiters: list[threading.Event] = []
        try:
            self._connect()
        except Exception as error:  # anything at all: tracking must not stop training
            self._disable(f"cannot use MLflow at {self.uri or self._raw_uri()}: {brief(error)}")
        while True:
            block = stop_at is None and not failures
            for event in self._take(None if block else max(0.0, retry_at - self._clock())):
                match event:
                    case Stop():
                        stop_at = self._clock() + self.flush_timeout
                    case Flush(done=done):
                        waiters.append(done)
                    case _ if not self.disabled:
                        self._runs.apply(event)
            if self.disabled:
                _release(waiters)
                if stop_at is not None:
                    break
                continue
            if self._clock() >= retry_at or stop_at is not None:
                try:
                    check_fences()  # a driver that lost its lease sends nothing more (tunekit.storage.lease)
                    self._runs.sync()
                except Disabled as error:
                    self._disable(str(error))
                    continue
                except Exception as error:  # a server that went away: keep the data, retry later
                    failures += 1
                    self._failed_syncs += 1
                    if failures == 1:
                        self.warn_once(
                            f"logging to MLflow at {self.uri} failed ({brief(error)}); training "
                            f"goes on, and tracking keeps what it has not sent and retries{self._said_where()}"
                        )
                    retry_at = self._clock() + self._backoff[min(failures, len(self._backoff)) - 1]
                    if stop_at is not None and retry_at >= stop_at:
                        break
                    continue
                if failures:
                    logger.info(
                        "tunekit: MLflow at %s is reachable again after %d failed attempts; tracking caught up",
                        self.uri,
                        self._failed_syncs,
                    )
                failures, retry_at = 0, 0.0
                _release(waiters)
            if stop_at is not None and not failures:
                break
        if not self.disabled and not failures:
            self._runs.record_holds_everything()
        if not self.disabled and failures:
            left = self._runs.unsent_metrics()
            self.problem = (
                f"MLflow at {self.uri} stayed unreachable ({self._failed_syncs} failed attempts{self._said_where()}); "
                f"{left} metric values were not logged"
            )
            self.warn_once(self.problem)
        _release(waiters)
        self._client_settings.close()

    def _take(self, timeout: float | None) -> list[TrackerEvent]:
        """The next burst of events: waits up to ``timeout`` for the first (None: forever), then a moment more."""
        first = self._next(timeout)
        if first is None:
            return []
        events = [first]
        deadline = self._clock() + LINGER_S
        while not isinstance(events[-1], Stop | Flush):
            event = self._next(deadline - self._clock())
            if event is None:
                break
            events.append(event)
        return events

    def _next(self, timeout: float | None) -> TrackerEvent | None:
        try:
            return self._queue.get_nowait()
        except queue.Empty:
            if timeout is not None and timeout <= 0:
                return None
        return self._wait(timeout)

    def _wait_on_queue(self, timeout: float | None) -> TrackerEvent | None:
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return None

    def _said_where(self) -> str:
        """Where MLflow's own lines of the failures are, for a warning: "" when it wrote none."""
        written = self._store_log is not None and self._store_log.is_file()
        return f"; MLflow's messages are in {self._store_log}" if written else ""

    def _disable(self, message: str) -> None:
        self.disabled = True
        self.problem = message
        self._runs.forget_trials()
        self.warn_once(f"{message}; the search goes on without tracking")

    def _connect(self) -> None:
        """Resolves the URI, checks the server answers, and opens experiment and parent run."""
        # The store opened while Ray started (tunekit.tracking.prepare), when it was: not twice at once.
        wait_for_the_store(PREPARE_WAIT_S)
        self._store_log = self._client_settings.enter_context(store_logs_to(self.experiment_dir))
        raw_uri = self._raw_uri() or default_tracking_uri()
        self.uri = redact_uri(raw_uri)
        self._client_settings.enter_context(absent_platforms_skipped())
        if urlsplit(raw_uri).scheme in ("http", "https"):
            self._client_settings.enter_context(quick_http_retries())
            probe(raw_uri)
        quiet_store_logs()
        self._runs.sender = BatchSender(self._client_factory(raw_uri), self.uri)
        self._runs.open_parent()

    def _raw_uri(self) -> str | None:
        return self._tracking_uri or self.spec.tracking.uri


def _log_warning(message: str) -> None:
    # Worded as the console's own warnings, so one search's warnings read and grep alike.
    logger.warning("tunekit: warning: %s", message)


def _release(waiters: list[threading.Event]) -> None:
    for waiter in waiters:
        waiter.set()
    waiters.clear()


@contextlib.contextmanager
def quick_http_retries() -> Iterator[None]:
    """The writer's HTTP settings (``HTTP_ENV_DEFAULTS``) for one short use outside the writer
    (a preflight, ``tunekit check``): a failing server is known in seconds, not minutes. A
    setting the user made stays theirs."""
    added = [key for key in HTTP_ENV_DEFAULTS if key not in os.environ]
    os.environ.update({key: HTTP_ENV_DEFAULTS[key] for key in added})
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)


def answers(uri: str) -> str | None:
    """None when MLflow at ``uri`` answers (a local store always does), else why not, in a few words."""
    if urlsplit(uri).scheme not in ("http", "https"):
        return None
    try:
        probe(uri)
    except ConnectionError as error:
        return str(error)
    return None


def probe(uri: str) -> None:
    """One quick request: an unreachable server is known at once, not after MLflow's retries."""
    import requests

    try:
        requests.get(uri.rstrip("/") + "/health", timeout=PROBE_TIMEOUT_S)
    except requests.RequestException as error:
        raise ConnectionError(f"no answer from {redact_uri(uri)} ({type(error).__name__})") from None
