"""The on-disk vocabulary: trial statuses, the finite-number check, stdlib only."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest

from tunekit.layout import ENDED_STATUSES, SEARCH_STATUSES, TrialStatus, finite, unstarted_by_time_budget


def test_statuses_are_their_plain_strings() -> None:
    assert [str(s) for s in TrialStatus] == ["running", "completed", "pruned", "stopped", "failed", "lost"]
    assert TrialStatus("pruned") is TrialStatus.PRUNED
    assert TrialStatus.FAILED == "failed"
    assert json.dumps({"status": TrialStatus.STOPPED}) == '{"status": "stopped"}'
    assert f"{TrialStatus.COMPLETED}" == "completed"


def test_only_running_is_unfinished() -> None:
    assert [s for s in TrialStatus if not s.is_finished()] == [TrialStatus.RUNNING]
    assert set(SEARCH_STATUSES) == {TrialStatus.RUNNING, *ENDED_STATUSES}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1, 1.0),
        (0.25, 0.25),
        (-3, -3.0),
        (Decimal("1.5"), None),
        (math.nan, None),
        (math.inf, None),
        (-math.inf, None),
        (None, None),
        ("0.5", None),
        (True, None),
        ([1.0], None),
    ],
)
def test_finite_keeps_finite_real_numbers_only(value: Any, expected: float | None) -> None:
    assert finite(value) == expected


def test_finite_takes_numpy_scalars() -> None:
    numpy = pytest.importorskip("numpy")
    assert finite(numpy.float32(0.5)) == 0.5
    assert finite(numpy.int64(3)) == 3.0
    assert finite(numpy.float64("nan")) is None


def test_layout_and_errors_are_stdlib_only(imported_after: Callable[[str], list[str]]) -> None:
    assert imported_after("import tunekit.layout, tunekit.errors, tunekit.compat") == []


def test_only_a_time_budget_that_stopped_a_trial_leaves_trials_unstarted() -> None:
    budget = ("stopped", "the search's time budget of 14 s ran out")
    signal = ("stopped", "the search was stopped")
    assert unstarted_by_time_budget(12, [("completed", ""), budget]) == 10
    assert unstarted_by_time_budget(12, [("completed", ""), signal]) == 0  # a signal: still to start
    assert unstarted_by_time_budget(2, [("completed", ""), budget]) == 0  # every trial started
    assert unstarted_by_time_budget(3, [("completed", None), ("failed", None)]) == 0
