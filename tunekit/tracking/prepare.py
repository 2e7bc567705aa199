"""Tracking's slow first steps, taken in the background while Ray starts.

Before the writer (``tunekit.tracking.writer``) sends anything, MLflow must be imported (about
1 s of CPU), its SQL store's modules too (0.8 s) and, for a SQLite store, the store opened:
MLflow then loads its 69 schema revision scripts to check the schema (0.7 s) and, for a new
store, makes the schema (``client.new_sqlite_store``). Done when the search's loop starts,
that is 2.5 CPU seconds in the driver competing with the first trials' TensorFlow imports on
the search's cores, and with Ray Tune's loop for the driver's interpreter. ``ray.init`` mostly
waits for Ray's daemons, so these steps run beside it instead (``prepare_in_background``,
called by the Ray session before it starts Ray), and the writer waits for them (``wait``)
before it connects: MLflow keeps one store per tracking URI, so the writer finds it open.

Nothing here is required: any failure is left for the writer to meet and report as it always
did, and nothing is logged or created beyond the store the writer would create anyway.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from urllib.parse import urlsplit

from tunekit.config.spec import ExperimentSpec

_thread: threading.Thread | None = None
_lock = threading.Lock()


def prepare_in_background(spec: ExperimentSpec) -> None:
    """Starts the preparation for ``spec``'s tracking in a daemon thread (nothing when tracking is off)."""
    global _thread
    if not spec.tracking.enabled:
        return
    with _lock:
        if _thread is not None and _thread.is_alive():
            return
        _thread = threading.Thread(
            target=_prepare, args=(spec.tracking.uri,), name="tunekit-mlflow-prepare", daemon=True
        )
        _thread.start()


def wait(timeout: float) -> None:
    """Waits (at most ``timeout`` seconds) for a preparation still running; returns at once otherwise."""
    thread = _thread
    if thread is not None and thread is not threading.current_thread():
        thread.join(timeout)


def quiet_store_logs() -> None:
    """A new SQLite store announces its table migrations at INFO, mid-way through the search's
    progress lines; unless the user configured that logger, keep it quiet."""
    migrations = logging.getLogger("mlflow.store.db.utils")
    if migrations.level == logging.NOTSET:
        migrations.setLevel(logging.WARNING)


def _prepare(uri: str | None) -> None:
    with contextlib.suppress(Exception):  # the writer meets any failure itself, and reports it
        from tunekit.tracking.client import MlflowRunClient, absent_platforms_skipped, default_tracking_uri

        raw_uri = uri or default_tracking_uri()  # imports MLflow
        if urlsplit(raw_uri).scheme in ("http", "https", "databricks"):
            return  # a server: nothing to open here, and no request before the writer's probe
        quiet_store_logs()
        with absent_platforms_skipped():
            # Makes a new SQLite store, then opens the store as the writer will (MLflow keeps it).
            MlflowRunClient(raw_uri).get_experiment("tunekit: opening the store")
