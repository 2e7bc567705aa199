"""The failure guard: stops a search whose trials all hit the same error, or a fatal one.

The rules (``FailureRules``) are plain Python, driven by the results the trials report,
so they are tested without Ray; ``tunekit.driver.stopper.FailureGuard`` is the Ray
``Stopper`` that applies them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tunekit.errors import NoSpaceError, StorageError, failure_fingerprint
from tunekit.layout import FAILURE_KEY, FAILURE_KIND_KEY, NO_SPACE_FAILURE, STORAGE_FAILURE

# How many trials may fail with one identical error, before any succeeds, before the
# search is stopped as hopeless (the error is in the trainable, not in the configs).
REPEATED_FAILURE_LIMIT = 3
# The spec's limit on failures in a row, which replaces that rule where it is set.
CONSECUTIVE_RULE = "training.max_consecutive_failures"


class FailureRules:
    """Decides, result by result, whether a trial stops and whether the whole search does.

    A result carrying ``FAILURE_KEY`` stops its trial. The search stops on a fatal
    failure (``FAILURE_KIND_KEY == "fatal"``), or once ``REPEATED_FAILURE_LIMIT`` trials
    have failed with the same error (same ``failure_fingerprint``) before any trial
    reported an epoch. Where ``consecutive_limit`` is set (``training.max_consecutive_failures``,
    KerasTuner's ``max_consecutive_failed_trials``), it replaces that rule: the search stops once
    so many trials in a row failed as they ended. ``abort_reason`` says why. Ray asks
    ``stop_all`` after each result, so the search stops at that trial: trials still running end
    as stopped.
    """

    # Class defaults: a guard Ray saved before they existed has them too.
    consecutive_limit: int | None = None
    _in_a_row = 0  # the trials that failed since the last that ended otherwise

    def __init__(self, consecutive_limit: int | None = None) -> None:
        self.consecutive_limit = consecutive_limit
        self.abort_reason: str | None = None
        self.abort_trial: str | None = None  # the trial whose failure the reason follows, if one
        self._any_success = False
        # The trials that failed with each error, by fingerprint: a set, so the limit counts
        # trials, however many of a trial's results carry its failure.
        self._failed_trials: dict[str, set[str]] = {}

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        reason = result.get(FAILURE_KEY)
        if not reason:
            self._any_success = True
            return False
        if result.get(FAILURE_KIND_KEY) == NO_SPACE_FAILURE:
            # The storage, not the trial: the search ends as a full disk in the driver does
            # (raised out of Ray's loop, its running trials held for the resume), and the
            # trial is no failure of its own.
            raise NoSpaceError(f"trial {trial_id}: {reason}")
        if result.get(FAILURE_KIND_KEY) == STORAGE_FAILURE:  # read-only, no permission: as a full one
            raise StorageError(f"trial {trial_id}: {reason}")
        if self.abort_reason is None:
            self.abort_reason = self._abort_reason(trial_id, str(reason), str(result.get(FAILURE_KIND_KEY)))
        return True

    def resumed(self, previous: FailureRules | None) -> None:
        """A resume decides afresh, with ``previous`` session's counts (the guard as Ray saved
        it): the user may have fixed the trainable since the guard stopped the search, and if
        not, the same error once more stops the resumed search at once; another error needs
        ``REPEATED_FAILURE_LIMIT`` trials of its own."""
        if previous is not None:
            self._any_success = previous._any_success
            self._failed_trials = {key: set(trials) for key, trials in previous._failed_trials.items()}
            self._in_a_row = previous._in_a_row
        self.abort_reason = None
        self.abort_trial = None

    def worker_failed(self, trial_id: str, reason: str) -> None:
        """A trial whose worker failed without reporting it (it could not start, import the
        trainable or report: Ray's trial error, its retries spent): it counts as a failed
        result does. Ray asks ``stop_all`` at every step, so the search stops at the next."""
        if self.abort_reason is None:
            self.abort_reason = self._abort_reason(trial_id, reason, "")

    def count_ending(self, trial_id: str, failed: bool, reason: str) -> None:
        """A trial ended (completed, pruned or failed; not stopped by the search): a failure adds
        to the failures in a row, any other end starts them again, as KerasTuner counts them."""
        self._in_a_row = self._in_a_row + 1 if failed else 0
        limit = self.consecutive_limit
        if failed and limit is not None and self._in_a_row >= limit and self.abort_reason is None:
            self.abort_trial = trial_id
            self.abort_reason = f"made {self._in_a_row} failed trials in a row ({CONSECUTIVE_RULE}: {limit}): {reason}"

    def abort_message(self, number_of: Callable[[str], int | None]) -> str | None:
        """Why the search stopped, naming the trial as the console does: by number, then id."""
        if self.abort_reason is None or self.abort_trial is None:
            return self.abort_reason
        number = number_of(self.abort_trial)
        who = f"trial {self.abort_trial}" if number is None else f"trial {number} ({self.abort_trial})"
        return f"{who} {self.abort_reason}"

    def stop_all(self) -> bool:
        return self.abort_reason is not None

    def _abort_reason(self, trial_id: str, reason: str, kind: str) -> str | None:
        if kind == "fatal":
            self.abort_trial = trial_id
            return f"failed with an error every trial would hit: {reason}"
        if self._any_success or self.consecutive_limit is not None:
            return None
        trials = self._failed_trials.setdefault(failure_fingerprint(reason), set())
        trials.add(trial_id)
        if len(trials) < REPEATED_FAILURE_LIMIT:
            return None
        return (
            f"{REPEATED_FAILURE_LIMIT} trials failed with the same error before any trial finished an epoch, "
            f"so the trainable is broken, not the configs: {reason}"
        )
