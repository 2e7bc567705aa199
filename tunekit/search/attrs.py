"""The user attributes tunekit writes on Optuna studies and their trials: one place, so the
searcher, warm starts, resumes and ``tunekit check`` read them by the same names.

Importing this module costs nothing (no Optuna): the results side reads these too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# ------------------------------------------------------------------ on study trials

# Asked for just before the driver died and never run by Ray (closed as FAIL on resume).
LOST_ATTR = "tunekit_lost"
GRID_POINT_ATTR = "tunekit_grid_point"  # index into SearchSpace.grid_points()
REPEAT_ATTR = "tunekit_repeat"  # which pass over the grid (0 for the first)
PBT_STEPS_ATTR = "tunekit_pbt_steps"  # PBT's exploit steps of the trial: epoch, source trial number, new values
# Several objectives: the trial's last epoch and its tracked metrics there, {"epoch": n,
# "metrics": {...}}. Optuna keeps no intermediate values for them, and a resume after a
# killed driver rebuilds an ended trial's last row from this (tunekit.driver.late_endings).
FINAL_RESULT_ATTR = "tunekit_final_result"
# Several objectives: each epoch's tracked metrics, "tunekit_epoch_<n>": {...}, Optuna's
# intermediate values being one number per step. A driver killed before its tables caught up
# leaves the study the one record of those epochs, which the resume writes back.
EPOCH_RESULT_ATTR_PREFIX = "tunekit_epoch_"
# Its configuration was picked by tunekit (unseen, at random) after the sampler proposed
# only repeats: the sampler did not choose it.
UNSEEN_PICK_ATTR = "tunekit_unseen_pick"
HISTORY_ATTR = "tunekit_history_from"  # a warm start's history trial: "<source dir>#<its number there>"
# Told without training it (a repeated proposal): the number of the trial whose outcome it was
# given. No longer written (a repeated proposal takes no study trial: OptunaStudySearcher.suggest);
# the studies of experiments made before hold such trials, which check, resume and warm starts pass over.
DUPLICATE_ATTR = "tunekit_duplicate_of"

# ------------------------------------------------------------------ on the study

EXHAUSTED_ATTR = "tunekit_exhausted"  # why the search ended before num_samples trials
WARM_START_ATTR = "tunekit_warm_start"  # the warm start's HistorySummary as a mapping
# True while a signal's stop holds the study trials of the trials it stopped RUNNING for a
# resume to continue (OptunaStudySearcher.hold_endings); False once a search ended by itself.
HELD_ATTR = "tunekit_held_for_resume"


def epoch_results(user_attrs: Mapping[str, Any]) -> dict[int, dict[str, float]]:
    """Several objectives: {epoch: its tracked metrics}, as a study trial's user attributes keep them."""
    return {
        int(key[len(EPOCH_RESULT_ATTR_PREFIX) :]): {str(name): float(value) for name, value in metrics.items()}
        for key, metrics in user_attrs.items()
        if key.startswith(EPOCH_RESULT_ATTR_PREFIX) and isinstance(metrics, dict)
    }
