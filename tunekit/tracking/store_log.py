"""MLflow's own log lines, while tunekit sends to it: into a file in the experiment, not the console.

MLflow's SQL store logs every failed query at ERROR with the whole SQLAlchemy traceback, and
MLflow's loggers print to stderr. On a full disk a small search put 1,094 such lines on the
console beside tunekit's one warning; the writer retries, so every retry added more. While
the writer (``tunekit.tracking.writer``) sends, the lines of MLflow's store loggers go to
``MLFLOW_LOG_FILE`` in the experiment directory instead, and tunekit says once what failed
(its first error), and at the end how often and where the lines are.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

from tunekit.layout import MLFLOW_LOG_FILE

# MLflow's store modules log under these: mlflow.store.db.utils (a failed query, with its
# traceback), mlflow.store.tracking.sqlalchemy_store, the REST store's retries.
STORE_LOGGERS = ("mlflow.store", "mlflow.utils.rest_utils")
_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class StoreLogFile(logging.Handler):
    """Appends each record to ``path``; a file it cannot write (the same full disk) loses the
    line silently: Python's own ``handleError`` would print a traceback to stderr."""

    def __init__(self, path: Path) -> None:
        super().__init__(logging.DEBUG)
        self.path = path
        self.setFormatter(logging.Formatter(_FORMAT))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            with self.path.open("a", encoding="utf-8") as out:
                out.write(self.format(record) + "\n")
        except Exception:
            return


@contextlib.contextmanager
def store_logs_to(experiment_dir: Path) -> Iterator[Path]:
    """While open, MLflow's store loggers write to the experiment's ``MLFLOW_LOG_FILE`` (its path
    is yielded), not the console; their settings are put back after."""
    handler = StoreLogFile(experiment_dir / MLFLOW_LOG_FILE)
    saved = []
    for name in STORE_LOGGERS:
        log = logging.getLogger(name)
        saved.append((log, log.propagate))
        log.addHandler(handler)
        log.propagate = False  # MLflow's own handler, on its "mlflow" logger, prints to stderr
    try:
        yield handler.path
    finally:
        for log, propagate in saved:
            log.removeHandler(handler)
            log.propagate = propagate
