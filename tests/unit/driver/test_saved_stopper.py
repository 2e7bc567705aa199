"""A resume runs with its own stopper: Ray's saved one goes, its time budget's seconds left and
its failure guard's counts stay."""

from __future__ import annotations

import json
from pathlib import Path

from ray.tune.stopper import CombinedStopper, TimeoutStopper
from ray.tune.utils.serialization import TuneFunctionEncoder

from tunekit.compat.ray_saved_state import SavedStopper, forget_saved_concurrency, forget_saved_stopper
from tunekit.driver.guard import REPEATED_FAILURE_LIMIT
from tunekit.driver.stopper import FailureGuard
from tunekit.layout import FAILURE_KEY


def _save(experiment_dir: Path, stopper: object) -> Path:
    """A saved controller state as Ray 2.60 writes it (``runner_data`` through its encoder)."""
    path = experiment_dir / "experiment_state-2026-11-28_05-00-00.json"
    runner_data = {"_stopper": stopper, "_max_pending_trials": 2, "_iteration": 7}
    path.write_text(json.dumps({"runner_data": runner_data, "trial_data": []}, cls=TuneFunctionEncoder))
    return path


def _guard_that_stopped_the_search() -> FailureGuard:
    guard = FailureGuard()
    for index in range(REPEATED_FAILURE_LIMIT):
        guard(f"t{index}", {FAILURE_KEY: "RuntimeError: the data folder is missing"})
    assert guard.stop_all()
    return guard


def test_the_saved_stopper_goes_and_its_time_budget_s_seconds_left_come_back(tmp_path: Path) -> None:
    budget = TimeoutStopper(600)
    budget._budget = 41.5  # what the first session left
    path = _save(tmp_path, CombinedStopper(_guard_that_stopped_the_search(), budget))
    saved = forget_saved_stopper(tmp_path)
    assert saved.time_left_s == 41.5
    [guard] = saved.others
    assert isinstance(guard, FailureGuard) and guard.stop_all()  # as saved: the resume reads its counts
    runner_data = json.loads(path.read_text())["runner_data"]
    assert "_stopper" not in runner_data  # Ray's resume keeps this run's stopper
    assert runner_data["_max_pending_trials"] == 2 and runner_data["_iteration"] == 7
    assert forget_saved_stopper(tmp_path) == SavedStopper()  # nothing saved any more


def test_a_saved_guard_without_a_time_budget_leaves_none(tmp_path: Path) -> None:
    path = _save(tmp_path, _guard_that_stopped_the_search())
    saved = forget_saved_stopper(tmp_path)
    assert saved.time_left_s is None and len(saved.others) == 1
    assert "_stopper" not in json.loads(path.read_text())["runner_data"]


def test_a_grown_search_forgets_the_concurrency_too(tmp_path: Path) -> None:
    path = _save(tmp_path, TimeoutStopper(60))
    forget_saved_stopper(tmp_path)
    forget_saved_concurrency(tmp_path)
    assert json.loads(path.read_text())["runner_data"] == {"_iteration": 7}


def test_no_saved_state_no_stopper(tmp_path: Path) -> None:
    assert forget_saved_stopper(tmp_path) == SavedStopper()
