"""A grown search's restored search algorithm: this run's budget, and no trial kept live that will never end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ray.tune.search import ConcurrencyLimiter, Searcher, SearchGenerator

from tunekit.compat.ray_saved_state import finished_trials, saved_trials
from tunekit.search.growth import RestoredSearch


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

    finished = finished_trials(saved_trials(tmp_path))
    grown = RestoredSearch(Counting(), num_samples=4, max_concurrent=2, experiment_dir=tmp_path, finished=finished)
    grown.restore_from_dir(str(tmp_path))
    assert grown.searcher.live_trials == set()  # type: ignore[attr-defined]
    assert not grown.is_finished()
    assert grown.searcher.suggest("d") == {"x": 1}


def _trainable(config: dict[str, Any]) -> None:
    pass


def test_a_search_resumed_from_a_copied_experiment_creates_its_new_trials_in_the_copy(tmp_path: Path) -> None:
    from ray.tune.experiment import Experiment

    first = SearchGenerator(ConcurrencyLimiter(Counting(), max_concurrent=2))
    first.add_configurations([Experiment("search", _trainable, storage_path=str(tmp_path / "ran"))])
    made = first.next_trial()
    assert made is not None and made.storage.experiment_fs_path == (tmp_path / "ran" / "search").as_posix()
    first.save_to_dir(str(tmp_path), session_str="first")

    copy = tmp_path / "copied" / "search"
    resumed = RestoredSearch(Counting(), num_samples=4, max_concurrent=2, experiment_dir=copy)
    resumed.restore_from_dir(str(tmp_path))
    trial = resumed.next_trial()
    assert trial is not None and trial.storage.experiment_fs_path == copy.as_posix()
    assert made.storage.experiment_fs_path != trial.storage.experiment_fs_path
