"""Request batching: params, tags and metrics go to MLflow in ``log_batch`` calls of its size limits.

Each chunk leaves the caller's pending collection as soon as MLflow took it, so a retry
after a failed chunk sends only what is left: nothing is sent twice. Errors are sorted
three ways: refused credentials disable tracking (``Disabled``); a request MLflow rejects
for its content is dropped with a warning (sending it again cannot succeed); anything else
(an unreachable server) propagates, and the writer retries later.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

from tunekit.tracking.client import MetricPoint, MlflowError, RunClient
from tunekit.tracking.values import brief, logger

T = TypeVar("T")

# MLflow's limits per log_batch request.
MAX_METRICS_PER_BATCH = 1000
MAX_PARAMS_PER_BATCH = 100
MAX_TAGS_PER_BATCH = 100
MAX_ENTRIES_PER_BATCH = 1000  # metrics, params and tags together
# Client errors: the request itself is wrong, so sending it again cannot help.
DATA_ERRORS = frozenset(
    {
        "INVALID_PARAMETER_VALUE",
        "RESOURCE_ALREADY_EXISTS",
        "RESOURCE_DOES_NOT_EXIST",
        "INVALID_STATE",
        "BAD_REQUEST",
    }
)
AUTH_ERRORS = frozenset({"PERMISSION_DENIED", "UNAUTHENTICATED"})


class Disabled(Exception):
    """Tracking cannot work for this search (unreachable at start, bad credentials, deleted experiment)."""


class BatchSender:
    """Sends one run's pending values in batches; the writer thread and its lanes call it, each for its own runs.

    Args:
        client: where to send.
        uri: the tracking URI without credentials, for messages.
    """

    def __init__(self, client: RunClient, uri: str) -> None:
        self.client = client
        self.uri = uri

    def send(
        self, run_id: str, params: dict[str, str], tags: dict[str, str], metrics: list[MetricPoint] | None = None
    ) -> None:
        """Sends ``params``, ``tags`` and ``metrics`` together, in as few requests as MLflow's
        limits allow (one for a trial's usual few), emptying each as MLflow takes its chunk.

        A search of short trials is bound by these requests: the writer sends one run's
        values at a time, so each request saved is throughput (benchmarks/scale.py).
        """
        metrics = metrics if metrics is not None else []
        while params or tags or metrics:
            chunk_params = list(itertools.islice(params.items(), MAX_PARAMS_PER_BATCH))
            chunk_tags = list(itertools.islice(tags.items(), MAX_TAGS_PER_BATCH))
            room = min(MAX_METRICS_PER_BATCH, MAX_ENTRIES_PER_BATCH - len(chunk_params) - len(chunk_tags))
            chunk_metrics = metrics[:room]
            self._log_batch(run_id, metrics=chunk_metrics, params=chunk_params, tags=chunk_tags)
            for key, _ in chunk_params:
                del params[key]
            for key, _ in chunk_tags:
                del tags[key]
            del metrics[: len(chunk_metrics)]

    def _log_batch(
        self,
        run_id: str,
        *,
        metrics: list[MetricPoint],
        params: list[tuple[str, str]],
        tags: list[tuple[str, str]],
    ) -> None:
        try:
            self.client.log_batch(run_id, metrics=metrics, params=params, tags=tags)
        except MlflowError as error:
            if error.code in AUTH_ERRORS:
                raise Disabled(f"MLflow at {self.uri} refused tunekit's credentials ({brief(error)})") from error
            if error.code not in DATA_ERRORS:
                raise
            if metrics and (params or tags):
                # Which part did MLflow refuse? Usually a param that changed value on resume:
                # the epochs' points must still arrive, so each part goes on its own.
                self._log_batch(run_id, metrics=[], params=params, tags=tags)
                self._log_batch(run_id, metrics=metrics, params=[], tags=[])
                return
            # Sending it again cannot succeed (e.g. a param changed value on resume): drop it.
            logger.warning("tunekit: MLflow rejected values for run %s: %s", run_id, brief(error))


def side_by_side(send: Callable[[T], None], items: Sequence[T], lanes: int) -> list[BaseException]:
    """Calls ``send`` on each item, ``lanes`` at a time (the calling thread is one lane), and
    returns the errors the calls raised.

    A lane stops at its first error and the others stop taking new items, so a server that
    went away costs one failed request per lane, not one per item. Extra lanes are
    daemon threads, like the writer's own: a request that hangs does not hold up the
    driver's exit.
    """
    waiting: queue.SimpleQueue[T] = queue.SimpleQueue()
    for item in items:
        waiting.put(item)
    errors: list[BaseException] = []
    stop = threading.Event()

    def lane() -> None:
        while not stop.is_set():
            try:
                item = waiting.get_nowait()
            except queue.Empty:
                return
            try:
                send(item)
            except BaseException as error:  # handed to the caller, which sorts the errors
                errors.append(error)  # list.append is atomic
                stop.set()

    helpers = [
        threading.Thread(target=lane, name="tunekit-mlflow-lane", daemon=True)
        for _ in range(min(lanes, len(items)) - 1)
    ]
    for helper in helpers:
        helper.start()
    lane()
    for helper in helpers:
        helper.join()
    return errors
