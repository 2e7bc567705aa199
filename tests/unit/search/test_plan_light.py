"""The budget planner and best-trial rule: plain Python over a parsed spec."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tunekit.config.spec import load_spec
from tunekit.layout import TrialStatus
from tunekit.search.plan import pick_best, spec_milestones

REPO = Path(__file__).resolve().parents[3]


def test_the_digits_specs_rungs() -> None:
    assert spec_milestones(load_spec(REPO / "search_spaces" / "digits_mlp.yaml")) == [2, 6, 18]


def test_completed_trials_win_and_failed_or_non_finite_never() -> None:
    candidates = [
        (TrialStatus.PRUNED, 0.99, "pruned"),
        (TrialStatus.COMPLETED, 0.8, "completed"),
        (TrialStatus.FAILED, 1.0, "failed"),
        (TrialStatus.COMPLETED, float("nan"), "nan"),
    ]
    assert pick_best(candidates, "max") == "completed"
    assert pick_best(candidates[:1], "min") == "pruned"
    assert pick_best([("failed", 1.0, "x"), ("completed", None, "y")], "max") is None


def test_planning_imports_nothing_heavy(imported_after: Callable[[str], list[str]]) -> None:
    code = (
        "import tunekit; from tunekit.search.plan import plan_budget; "
        "plan_budget(tunekit.load_spec('search_spaces/digits_mlp.yaml'))"
    )
    assert imported_after(code) == []
