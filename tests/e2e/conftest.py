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

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tunekit.layout import SPEC_FILE, TRIALS_FILE


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
        # check itself leaves out (and notes) an MLflow server a test has stopped.
        report = check_experiment(directory)
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


# ------------------------------------------------------------ one local Ray for in-process searches

SHARED_RAY = "shared_ray"
# By a test's node id: whether the next test to run is in a module that uses ``shared_ray``.
_KEEP_RAY_AFTER: dict[str, bool] = {}
_STARTED: list[bool] = []  # holds True while a Ray started by ``shared_ray`` runs


@pytest.fixture(scope="module")
def shared_ray() -> None:
    """A local Ray of 2 CPUs that ``tunekit.run`` in this process joins.

    Modules that ask for it next to each other share one: each start and stop of Ray costs
    seconds. It ends after the last test of such a run of modules (``pytest_runtest_teardown``),
    so a module that starts a Ray of its own, or whose commands start theirs, never finds it.
    """
    import ray

    from tunekit.driver.session import ray_init_options

    if not ray.is_initialized():
        ray.init("local", num_cpus=2, **ray_init_options())
        _STARTED[:] = [True]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    users = {item.nodeid.split("::")[0] for item in items if SHARED_RAY in getattr(item, "fixturenames", ())}
    next_module = None  # the module of the next test that runs (a test marked skip does not)
    for item in reversed(items):
        _KEEP_RAY_AFTER[item.nodeid] = next_module in users
        if not item.get_closest_marker("skip"):
            next_module = item.nodeid.split("::")[0]


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if _STARTED and (nextitem is None or not _KEEP_RAY_AFTER.get(item.nodeid, False)):
        import ray

        ray.shutdown()
        _STARTED.clear()
