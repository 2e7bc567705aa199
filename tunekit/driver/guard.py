"""The failure guard: stops a search whose trials all hit the same error, or a fatal one.

The rules (``FailureRules``) are plain Python, driven by the results the trials report,
so they are tested without Ray; ``tunekit.driver.stopper.FailureGuard`` is the Ray
``Stopper`` that applies them.
"""

from __future__ import annotations

from typing import Any

from tunekit.layout import (
    FAILURE_KEY,
    FAILURE_KIND_KEY,
)

# How many trials may fail with one identical error, before any succeeds, before the
# search is stopped as hopeless (the error is in the trainable, not in the configs).
REPEATED_FAILURE_LIMIT = 3


class FailureRules:
    """Decides, result by result, whether a trial stops and whether the whole search does.

    A result carrying ``FAILURE_KEY`` stops its trial. The search stops on a fatal
    failure (``FAILURE_KIND_KEY == "fatal"``), or when the first trials all failed with
    one identical error before any trial reported a result; ``abort_reason`` says which.
    """

    def __init__(self) -> None:
        self.abort_reason: str | None = None
        self._any_success = False
        self._failures: list[str] = []

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        reason = result.get(FAILURE_KEY)
        if not reason:
            self._any_success = True
            return False
        if result.get(FAILURE_KIND_KEY) == "fatal" and self.abort_reason is None:
            self.abort_reason = f"trial {trial_id} failed with an error every trial would hit: {reason}"
        self._failures.append(str(reason))
        recent = self._failures[-REPEATED_FAILURE_LIMIT:]
        if (
            not self._any_success
            and len(recent) == REPEATED_FAILURE_LIMIT
            and len(set(recent)) == 1
            and self.abort_reason is None
        ):
            self.abort_reason = (
                f"the first {REPEATED_FAILURE_LIMIT} trials all failed with the same error, "
                f"so the trainable is broken, not the configs: {reason}"
            )
        return True

    def stop_all(self) -> bool:
        return self.abort_reason is not None
