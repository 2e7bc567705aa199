"""What a driver does about its lease while Ray Tune runs the search.

``tunekit.storage.store`` checks the lease before every write of tunekit's own records. Ray Tune
writes too (its saved state, the checkpoints it rotates away), so the Tune loop is fenced
as well: ``LeaseFence`` checks the lease at the start of every step and before every result,
ending and saving Tune processes, which come before Ray acts on them.

A driver that lost its lease exits at once (``tunekit.driver.signals.exit_when_lost``).
"""

from __future__ import annotations

from typing import Any

from ray.tune import Callback

from tunekit.storage.fences import check_fences


class LeaseFence(Callback):
    """Checks this process's lease before Ray Tune acts on anything (first in the callbacks)."""

    def on_step_begin(self, iteration: int, trials: list[Any], **info: Any) -> None:
        check_fences()

    def on_trial_result(
        self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any], **info: Any
    ) -> None:
        check_fences()

    def on_trial_save(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        check_fences()

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        check_fences()

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        check_fences()


def fenced(callbacks: list[Any]) -> list[Any]:
    """``callbacks`` with one ``LeaseFence`` first (a restored Tuner brings its saved one)."""
    return [LeaseFence(), *(c for c in callbacks if not isinstance(c, LeaseFence))]
