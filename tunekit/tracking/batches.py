"""Request batching: params, tags and metrics go to MLflow in ``log_batch`` calls of its size limits.

Each chunk leaves the caller's pending collection as soon as MLflow took it, so a retry
after a failed chunk sends only what is left: nothing is sent twice. Errors are sorted
three ways: refused credentials disable tracking (``Disabled``); a request MLflow rejects
for its content is dropped with a warning (sending it again cannot succeed); anything else
(an unreachable server) propagates, and the writer retries later.
"""

from __future__ import annotations

import itertools

from tunekit.tracking.client import MetricPoint, MlflowError, RunClient
from tunekit.tracking.values import brief, logger

# MLflow's limits per log_batch request.
MAX_METRICS_PER_BATCH = 1000
MAX_PARAMS_PER_BATCH = 100
MAX_TAGS_PER_BATCH = 100
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
    """Sends pending values of one run at a time in batches; only the writer thread calls it.

    Args:
        client: where to send.
        uri: the tracking URI without credentials, for messages.
    """

    def __init__(self, client: RunClient, uri: str) -> None:
        self.client = client
        self.uri = uri

    def send(self, run_id: str, params: dict[str, str], tags: dict[str, str]) -> None:
        """Sends ``params`` and ``tags``, emptying both dicts chunk by chunk as MLflow takes them."""
        while params or tags:
            chunk_params = list(itertools.islice(params.items(), MAX_PARAMS_PER_BATCH))
            chunk_tags = list(itertools.islice(tags.items(), MAX_TAGS_PER_BATCH))
            self._log_batch(run_id, params=chunk_params, tags=chunk_tags)
            for key, _ in chunk_params:
                del params[key]
            for key, _ in chunk_tags:
                del tags[key]

    def send_metrics(self, run_id: str, metrics: list[MetricPoint]) -> None:
        """Sends ``metrics``, emptying the list chunk by chunk as MLflow takes them."""
        while metrics:
            chunk = metrics[:MAX_METRICS_PER_BATCH]
            self._log_batch(run_id, metrics=chunk)
            del metrics[: len(chunk)]

    def _log_batch(
        self,
        run_id: str,
        *,
        metrics: list[MetricPoint] | None = None,
        params: list[tuple[str, str]] | None = None,
        tags: list[tuple[str, str]] | None = None,
    ) -> None:
        try:
            self.client.log_batch(run_id, metrics=metrics or [], params=params or [], tags=tags or [])
        except MlflowError as error:
            if error.code in AUTH_ERRORS:
                raise Disabled(f"MLflow at {self.uri} refused tunekit's credentials ({brief(error)})") from error
            if error.code not in DATA_ERRORS:
                raise
            # Sending it again cannot succeed (e.g. a param changed value on resume): drop it.
            logger.warning("tunekit: MLflow rejected values for run %s: %s", run_id, brief(error))
