"""The end-to-end suite's invariant: every experiment a test made agrees with itself.

After each test, every experiment directory written during it (under pytest's temporary
folders, whichever fixture or command made it) goes through ``tunekit check``: trials.csv,
epochs.csv, spans.csv, the study, the checkpoints, ledger.json and, when it was tracked
and its tracking store still answers, MLflow. So each feature is tested in combination
with the others (ASHA, PBT, grid and FIFO; fresh, interrupted and resumed, grown, warm
started; tracked and not), not only alone. A disagreement fails the test with both values.

A test that leaves an experiment inconsistent on purpose (a driver killed and never
resumed) names it with ``@pytest.mark.inconsistent_on_purpose("why")``.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tunekit.layout import SPEC_FILE, TRACKING_FILE, TRIALS_FILE


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "inconsistent_on_purpose(why): the test leaves its experiments disagreeing; tunekit check skips them"
    )


@pytest.fixture(autouse=True)
def experiments_agree(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    began = time.time()
    yield
    if request.node.get_closest_marker("inconsistent_on_purpose"):
        return
    from tunekit.results.check import check_experiment

    for directory in experiments_written_since(tmp_path_factory.getbasetemp(), began):
        report = check_experiment(directory, mlflow=_tracking_answers(directory))
        assert report.ok, report.describe()


def experiments_written_since(root: Path, began: float) -> list[Path]:
    """Experiment directories (spec.yaml and trials.csv) whose trials.csv changed since ``began``.

    Probe scratch searches (``.probes``) are the probe's own business and are removed with it.
    """
    found = []
    for trials in root.rglob(TRIALS_FILE):
        directory = trials.parent
        if (directory / SPEC_FILE).is_file() and trials.stat().st_mtime >= began and ".probes" not in directory.parts:
            found.append(directory)
    return sorted(found)


def _tracking_answers(directory: Path) -> bool:
    """Whether the experiment's MLflow store can still be asked (a test may have stopped its server)."""
    record = directory / TRACKING_FILE
    if not record.is_file():
        return False
    uri = str(json.loads(record.read_text()).get("tracking_uri") or "")
    if not uri.startswith("http"):
        return True
    try:
        with urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=3) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False
