"""A grown search's restored search algorithm: this run's budget, and no trial kept live that will never end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ray.tune.search import ConcurrencyLimiter, Searcher, SearchGenerator

from tunekit.compat.ray_tune import finished_trials, saved_trials
from tunekit.search.growth import GrowingSearch


class Counting(Searcher):
    def __init__(self) -> None:
        super().__init__(metric="acc", mode="max")
        self.suggested = 0

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        self.suggested += 1
        return {"x": self.suggested}

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
        pass

    def save(self, checkpoint_path: str) -> None:
        Path(checkpoint_path).write_text(str(self.suggested))

    def restore(self, checkpoint_path: str) -> None:
        self.suggested = int(Path(checkpoint_path).read_text())


def test_trials_a_time_budget_stopped_leave_the_limiter_so_the_grown_search_proposes_more(tmp_path: Path) -> None:
    # The first run's time budget stopped a and b: Ray saved them TERMINATED, its limiter
    # saved them live and its generator finished.
    trial_data = [
        [json.dumps({"trial_id": t, "status": s}), json.dumps({})]
        for t, s in (("a", "TERMINATED"), ("b", "TERMINATED"), ("c", "PENDING"))
    ]
    (tmp_path / "experiment_state-2026-11-24_12-00-00.json").write_text(json.dumps({"trial_data": trial_data}))
    assert finished_trials(saved_trials(tmp_path)) == {"a", "b"}
    first = SearchGenerator(ConcurrencyLimiter(Counting(), max_concurrent=2))
    limiter = first.searcher
    assert isinstance(limiter, ConcurrencyLimiter)
    limiter.live_trials, limiter.num_unfinished_live_trials = {"a", "b"}, 2
    first.set_finished()
    first.save_to_dir(str(tmp_path), session_str="first")  # as Ray saves the search with the experiment

    grown = GrowingSearch(Counting(), num_samples=4, max_concurrent=2, finished=finished_trials(saved_trials(tmp_path)))
    grown.restore_from_dir(str(tmp_path))
    assert grown.searcher.live_trials == set()  # type: ignore[attr-defined]
    assert not grown.is_finished()
    assert grown.searcher.suggest("d") == {"x": 1}
