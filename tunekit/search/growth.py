"""The search algorithm of a resumed search: Ray's restored state, this run's budget and place.

Ray restores a search's ``SearchGenerator`` and ``ConcurrencyLimiter`` as the first run
saved them, with its ``num_samples`` and ``max_concurrent``, and has no public way to
change them (``Tuner.restore`` keeps the first ``TuneConfig``). ``RestoredSearch`` lets Ray
restore everything, then sets the budget (a grown search's), and the directory its new
trials are created in; tunekit's searcher, the study and the trials stay as they were.
Imported only where Ray already is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ray.tune.search import ConcurrencyLimiter, Searcher, SearchGenerator

from tunekit.compat.ray_tune import forget_live_trials, new_trials_in, set_search_generator_budget


class RestoredSearch(SearchGenerator):
    """A ``SearchGenerator`` over a ``ConcurrencyLimiter`` that keeps this run's budget and
    directory on restore.

    Args:
        searcher: tunekit's searcher (restored from the first run's ``tuner.pkl``).
        num_samples: trials in all, those already run included.
        max_concurrent: trials at once from now on.
        experiment_dir: where the experiment is resumed from: it may have been copied or moved.
        finished: trials Ray saved as ended (``compat.finished_trials``): the limiter
            may have saved them as live, and they will not run again to end.
    """

    def __init__(
        self,
        searcher: Searcher,
        num_samples: int,
        max_concurrent: int,
        experiment_dir: Path,
        finished: set[str] | None = None,
    ) -> None:
        super().__init__(ConcurrencyLimiter(searcher, max_concurrent=max_concurrent))
        self.num_samples = num_samples
        self.max_concurrent = max_concurrent
        self.experiment_dir = experiment_dir
        self.finished = finished or set()

    def set_state(self, state: dict[str, Any]) -> None:
        # Ray calls this last in restore_from_dir, after the limiter took its saved state.
        super().set_state(state)
        set_search_generator_budget(self, self.num_samples)
        new_trials_in(self, self.experiment_dir)
        limiter = self.searcher
        if isinstance(limiter, ConcurrencyLimiter):
            limiter.set_max_concurrency(self.max_concurrent)
            forget_live_trials(limiter, self.finished)
