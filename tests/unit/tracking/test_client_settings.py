"""While the writer sends, MLflow's per-request imports of platforms that are not installed fail at once.

MLflow's REST client imports Databricks' runtime and Spark around every request to see
whether it runs there; each failed import searched sys.path again (8 per request, a
quarter of the writer's CPU per trial against a local server).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import ClassVar

import pytest

from tunekit.config.spec import ExperimentSpec
from tunekit.tracking.client import PLATFORM_MODULES, absent_platforms_skipped

from .test_writer_retry import FakeClient, run_writer, spec, trial_events

__all__ = ["spec"]  # the fixture, shared with the writer's tests


class CountingFinder(importlib.abc.MetaPathFinder):
    """First on sys.meta_path: counts the searches for a module, finds nothing itself."""

    def __init__(self) -> None:
        self.searched: list[str] = []

    def find_spec(self, name: str, path: object, target: object = None) -> None:
        self.searched.append(name)
        return None


@pytest.fixture
def finder() -> Iterator[CountingFinder]:
    counting = CountingFinder()
    sys.meta_path.insert(0, counting)
    try:
        yield counting
    finally:
        sys.meta_path.remove(counting)


def _import(name: str) -> None:
    with pytest.raises(ImportError):
        __import__(name)


def test_a_missing_platform_fails_without_a_search_and_only_while_the_block_is_open(finder: CountingFinder) -> None:
    assert all(importlib.util.find_spec(name) is None for name in PLATFORM_MODULES), "a platform is installed here"
    with absent_platforms_skipped():
        finder.searched.clear()  # the block's own look for them
        for _ in range(3):
            _import("dbruntime.databricks_repl_context")
            _import("pyspark.sql")
        assert finder.searched == []
    assert not any(name in sys.modules for name in PLATFORM_MODULES)
    _import("pyspark")
    assert finder.searched == ["pyspark"]


class ModulesSeenClient(FakeClient):
    """Notes what ``sys.modules`` held for the platforms when the writer created a run."""

    seen: ClassVar[dict[str, object]] = {}

    def create_run(self, experiment_id: str, *, start_ms: int, name: str, tags: Mapping[str, str]) -> str:
        ModulesSeenClient.seen = {name: sys.modules.get(name, "not there") for name in PLATFORM_MODULES}
        return super().create_run(experiment_id, start_ms=start_ms, name=name, tags=tags)


def test_the_writer_skips_them_while_it_sends_and_leaves_sys_modules_as_it_found_it(
    spec: ExperimentSpec, tmp_path: Path
) -> None:
    client = ModulesSeenClient()
    run_writer(spec, tmp_path, client, trial_events())
    assert client.runs, "the writer sent nothing"
    assert ModulesSeenClient.seen == dict.fromkeys(PLATFORM_MODULES)
    assert not any(name in sys.modules for name in PLATFORM_MODULES)
