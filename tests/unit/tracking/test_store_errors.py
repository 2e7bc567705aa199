"""MLflow's SQLite store on a full disk: one warning with the first error, the count at the end,
and MLflow's own tracebacks in the experiment's mlflow.log, none on the console.

Real MLflow, a real SQLite store on a small tmpfs that fills up once the search's runs exist.
"""

from __future__ import annotations

import errno
import os
import queue
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tunekit.config.spec import load_spec
from tunekit.layout import MLFLOW_LOG_FILE
from tunekit.tracking.client import MetricPoint, MlflowRunClient
from tunekit.tracking.events import STOP, TrackerEvent
from tunekit.tracking.writer import MlflowWriter

from .test_writer_retry import Clock, trial_events

REPO = Path(__file__).resolve().parents[3]


def _fill(folder: Path) -> None:
    """Writes one file in ``folder`` until its file system is full."""
    with (folder / "filler").open("wb") as out:
        try:
            while True:
                out.write(b"\0" * 65536)
                out.flush()
        except OSError as error:
            assert error.errno == errno.ENOSPC


class FillsTheDiskFirst(MlflowRunClient):
    """MLflow's client; the store's disk fills up just before the first batch of values."""

    def __init__(self, tracking_uri: str, folder: Path) -> None:
        super().__init__(tracking_uri)
        self._folder = folder

    def log_batch(
        self,
        run_id: str,
        *,
        metrics: Sequence[MetricPoint] = (),
        params: Sequence[tuple[str, str]] = (),
        tags: Sequence[tuple[str, str]] = (),
    ) -> None:
        if not (self._folder / "filler").exists():
            _fill(self._folder)
        super().log_batch(run_id, metrics=metrics, params=params, tags=tags)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    where = tmp_path / "small"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(where)], check=True)
    yield where
    subprocess.run(["umount", "-l", str(where)], check=True)


def test_a_full_store_is_said_once_and_counted_and_mlflow_s_tracebacks_go_to_a_file(
    small_disk: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    uri = f"sqlite:///{small_disk / 'mlflow.db'}"
    spec = load_spec(REPO / "search_spaces" / "digits_mlp.yaml", [f"tracking.uri={uri}"])
    experiment = tmp_path / "experiment"
    experiment.mkdir()
    inbox: queue.SimpleQueue[TrackerEvent] = queue.SimpleQueue()
    for event in [*trial_events(epochs=5, metrics_per_epoch=4), STOP]:
        inbox.put(event)
    clock, warnings = Clock(), list[str]()
    writer = MlflowWriter(
        spec,
        experiment,
        inbox,
        30.0,
        0.0,
        client_factory=lambda raw: FillsTheDiskFirst(raw, small_disk),
        clock=clock,
        wait=clock.wait,
        warn=warnings.append,
    )
    writer.run()
    log = experiment / MLFLOW_LOG_FILE
    assert warnings == [
        f"logging to MLflow at {uri} failed (MlflowException: (sqlite3.OperationalError) database or disk is "
        f"full); training goes on, and tracking keeps what it has not sent and retries; MLflow's messages are in {log}"
    ]
    attempts = len(clock.waits) + 1  # a wait after each failure but the last, which meets the flush deadline
    assert writer.problem == (
        f"MLflow at {uri} stayed unreachable ({attempts} failed attempts; MLflow's messages are in {log}); "
        "20 metric values were not logged"
    )
    written = log.read_text()
    assert written.count("database or disk is full") >= attempts and "Traceback" in written
    stderr = capfd.readouterr().err
    assert "Traceback" not in stderr and "SQLAlchemy" not in stderr, stderr[:2000]
