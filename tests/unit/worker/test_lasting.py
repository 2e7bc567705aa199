"""A worker's imports run without the garbage collector, and what they made is frozen after."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from tunekit.worker.lasting import lasting_imports


class _Node:
    """A cycle's member, as an import's module, class and function objects refer to each other."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def unfrozen() -> Iterator[None]:
    yield
    gc.unfreeze()  # the rest of the suite's objects back in the collector's sight


def test_no_collection_runs_inside_and_what_it_made_is_frozen_after(unfrozen: None) -> None:
    assert gc.isenabled()
    full_before = gc.get_stats()[2]["collections"]
    frozen_before = gc.get_freeze_count()
    with lasting_imports():
        made = [_Node() for _ in range(50_000)]  # far past every generation's threshold
        assert not gc.isenabled()
    assert gc.isenabled()
    assert gc.get_stats()[2]["collections"] == full_before
    assert gc.get_freeze_count() >= frozen_before + len(made)


def test_a_collector_turned_off_before_stays_off(unfrozen: None) -> None:
    gc.disable()
    try:
        with lasting_imports():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
