"""Ray's trial names: ``trial-<number>``, the Optuna trial number the searcher gave the trial.

Ray calls its ``trial_name_creator`` as it creates a trial, right after the searcher's
``suggest`` numbered it. The worker reads the number back from the name
(``TrialContext.trial_number``), so a trial's own callbacks can name their logs as trials.csv,
MLflow and TensorBoard name the trial.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tunekit.layout import trial_name

# The numbers of the search this process drives (its searcher's ``trial_number``). Ray keeps
# the name creator in every trial's saved state, so it is a module function reading this, not
# a bound method (which would pickle the searcher into each trial).
_numbering: list[Callable[[str], int | None]] = []


def name_trials_by(number_of: Callable[[str], int | None]) -> None:
    """The searcher of a search starting or resuming in this process numbers the trials named from now."""
    _numbering[:] = [number_of]


def ray_trial_name(trial: Any) -> str:
    """Ray's ``trial_name_creator``: ``trial-<number>`` (the Ray trial id before a searcher numbered it)."""
    return trial_name(_numbering[0](trial.trial_id) if _numbering else None, trial.trial_id)
