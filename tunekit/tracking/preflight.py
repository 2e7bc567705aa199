"""``tracking.required: true``: refuse to search untracked, and say so when MLflow missed records.

Without it an unreachable server costs one warning and the search goes on untracked (the
tracker's contract). With it:

* at start-up, before Ray starts, MLflow must answer: ``check_reachable`` raises one
  ``TunekitError`` naming the URI and the fix, and nothing is written;
* a server that goes away mid-search does not stop training: the writer keeps what it
  has not sent and retries, as always; but if MLflow still lacks records when the search
  ends (after the flush timeout), ``check_complete`` fails the search, pointing to
  ``tunekit sync``, which sends the rest from the experiment's records.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

from tunekit.config.spec import ExperimentSpec
from tunekit.environment import redact_uri
from tunekit.errors import TunekitError
from tunekit.storage.buckets import shown
from tunekit.tracking.record import TrackingRecord
from tunekit.tracking.tracker import MlflowTracker
from tunekit.tracking.values import brief, logger
from tunekit.tracking.writer import probe, quick_http_retries

_UNTRACKED = "or set tracking.required: false to search without it and send the runs later with `tunekit sync DIR`"


class TrackingIncomplete(TunekitError):
    """``tracking.required`` is set and MLflow does not hold the whole search; ``tunekit sync`` sends the rest.

    ``experiment_dir`` is the experiment directory, complete on disk.
    """

    def __init__(self, message: str, experiment_dir: Path) -> None:
        super().__init__(message)
        self.experiment_dir = experiment_dir


def check_reachable(spec: ExperimentSpec) -> None:
    """With ``tracking.required``, raises unless MLflow at the spec's URI answers; else does nothing.

    Reads only (the experiment is looked up, not created): a refused check leaves no trace.

    Raises:
        TunekitError: one line with the URI and the fix.
    """
    if not (spec.tracking.enabled and spec.tracking.required):
        return
    from tunekit.tracking.client import MlflowRunClient, default_tracking_uri

    raw_uri = spec.tracking.uri or default_tracking_uri()
    uri = redact_uri(raw_uri)
    http = urlsplit(raw_uri).scheme in ("http", "https")
    try:
        if http:
            probe(raw_uri)
        with quick_http_retries():
            MlflowRunClient(raw_uri).get_experiment(spec.tracking.experiment or spec.name)
    except ConnectionError:
        raise TunekitError(
            f"tracking.required: no answer from MLflow at {uri}; start the tracking server or fix tracking.uri, "
            + _UNTRACKED
        ) from None
    except Exception as error:  # credentials, a store it cannot open: all mean "not usable"
        raise TunekitError(
            f"tracking.required: cannot use MLflow at {uri} ({brief(error)}); fix tracking.uri or the server, "
            + _UNTRACKED
        ) from None


def check_complete(spec: ExperimentSpec, experiment_dir: Path, listeners: Sequence[object]) -> None:
    """After the search: when MLflow lacks some of its records, says so last, with the
    ``tunekit sync`` command that sends the rest; with ``tracking.required``, raises instead.

    The warning the writer gave when the server first failed came mid-search and said it
    would retry; without this line a search whose server never came back ended with exit 0
    and nothing said about the 28 runs MLflow lacked.

    Raises:
        TrackingIncomplete: with why, and the ``tunekit sync`` command that sends the rest.
    """
    for listener in listeners:
        if isinstance(listener, MlflowTracker) and (shortfall := listener.shortfall()):
            complete = f"the experiment is complete on disk: `tunekit sync {shown(experiment_dir)}` sends the rest"
            message = f"{shortfall}; {complete}"
            if spec.tracking.required:
                raise TrackingIncomplete(f"tracking.required: {message}", experiment_dir)
            logger.warning("tunekit: MLflow lacks some of this search's records: %s", message)


def complete_record(spec: ExperimentSpec, experiment_dir: Path) -> str | None:
    """``tunekit resume`` of a finished search: sends MLflow what its last session's writer did not.

    A driver killed during the search's final flush leaves every file written and MLflow
    short of the last records (``tracking.json`` says so: ``TrackingRecord.holds_everything``).
    The resume has nothing to run, so it sends them, as ``tunekit sync`` does.

    Returns:
        What was sent, in one line; None when MLflow held everything (nothing is sent), tracking
        is off, or MLflow did not take them (a warning says so, with the ``tunekit sync`` command).

    Raises:
        TrackingIncomplete: ``tracking.required`` is set and MLflow did not take them.
    """
    from tunekit.tracking.backfill import sync

    if not spec.tracking.enabled:
        return None
    record = TrackingRecord.read(experiment_dir)
    if record is not None and record.holds_everything:
        return None
    # Where the search sent its runs: the spec's URI (with any credentials), else the default
    # MLflow resolved then, which tracking.json recorded (not the current directory's default).
    uri = spec.tracking.uri or (record.tracking_uri if record is not None else None)
    try:
        result = sync(experiment_dir, tracking_uri=uri)
    except TunekitError as error:
        message = f"{error}; `tunekit sync {shown(experiment_dir)}` sends the rest"
        if spec.tracking.required:
            raise TrackingIncomplete(f"tracking.required: {message}", experiment_dir) from None
        logger.warning("tunekit: MLflow lacks some of this search's records: %s", message)
        return None
    return f"MLflow lacked some of this search's records: sent them to {result.tracking_uri}"
