"""Planner, ASHA milestones and best-trial choice: pure functions, no Ray run."""

from __future__ import annotations

from pathlib import Path

import pytest
from ray.tune.schedulers.async_hyperband import _Bracket

from tunekit.config.rungs import asha_milestones
from tunekit.config.spec import load_spec
from tunekit.search.plan import pick_best, plan_budget, rung_of

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(("grace", "factor", "max_t"), [(2, 3, 20), (1, 2, 8), (1, 3, 50), (5, 4, 100), (3, 3, 3)])
def test_milestones_match_rays_asha_bracket(grace: int, factor: float, max_t: int) -> None:
    bracket = _Bracket(grace, max_t, factor, 0)
    ray_milestones = sorted(int(m) for m, _ in bracket._rungs if m < max_t)
    assert asha_milestones(grace, factor, max_t) == ray_milestones


def test_plan_of_the_default_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    plan = plan_budget(load_spec(REPO / "search_spaces" / "digits_mlp.yaml"))
    assert [(r.epoch, r.trials) for r in plan.rungs] == [(2, 24), (6, 8), (18, 3), (20, 1)]
    assert (plan.planned_epochs, plan.exhaustive_epochs) == (24 * 2 + 8 * 4 + 3 * 12 + 1 * 2, 480)
    assert plan.describe().splitlines()[-1] == "epochs: about 118 planned against 480 for every trial to the end (25%)"


def test_rung_of(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    spec = load_spec(REPO / "search_spaces" / "digits_mlp.yaml")
    assert [rung_of(e, spec) for e in (1, 2, 5, 6, 17, 18, 20)] == [None, 0, 0, 1, 1, 2, 2]


def test_pick_best_prefers_trials_trained_to_the_end() -> None:
    candidates = [("pruned", 0.99, "early"), ("completed", 0.95, "a"), ("completed", 0.97, "b"), ("failed", 1.0, "x")]
    assert pick_best(candidates, "max") == "b"
    assert pick_best(candidates, "min") == "a"
    assert pick_best([("pruned", 0.5, "p"), ("pruned", float("nan"), "n")], "max") == "p"
    assert pick_best([("failed", None, "f")], "max") is None


def test_fifo_plan_prints_no_rung_table(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    spec = load_spec(REPO / "search_spaces" / "digits_mlp.yaml", ["scheduler.type=fifo"])
    plan = plan_budget(spec)
    assert plan.rungs == ()
    assert plan.describe() == "fifo: every trial trains 20 epochs; epochs: 480"


def test_pbt_plan_says_how_often_the_population_is_ranked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    spec = load_spec(REPO / "search_spaces" / "digits_mlp_pbt.yaml", ["scheduler.perturbation_interval=3"])
    plan = plan_budget(spec)
    assert (plan.rungs, plan.perturbation_interval) == ((), 3)
    assert plan.describe() == "pbt: every trial trains 20 epochs, the population ranked every 3 epochs; epochs: 80"


def test_grid_plan_of_the_shipped_grid_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    plan = plan_budget(load_spec(REPO / "search_spaces" / "cifar_resnet_grid.yaml"))
    assert plan.describe() == "grid: 27 configurations x 1 repeat\nfifo: every trial trains 50 epochs; epochs: 1350"
