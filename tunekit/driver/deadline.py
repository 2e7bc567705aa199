"""The per-trial deadline: a running trial that reports nothing for too long is ended, its worker killed.

Ray Tune hears from a trial only when it reports; a trial whose epoch never ends (a stuck
data reader, a deadlocked collective, an infinite loop in a callback) held its slot until
the whole search's time budget ran out, and the trials behind it never started. Here the
driver watches, on its own monotonic clock, how long each running trial has been silent:

- ``training.trial_timeout_s: N``: N seconds from the attempt's last epoch; its first epoch
  may take ``START_UP_S`` from the attempt's start if that is more, since it holds the
  start-up (a worker's process, TensorFlow's import, ``build_data``, ``build_model``, tracing),
  which a loaded machine stretches: 20 s were too few on 2 shared cores;
- ``auto`` (the default): no deadline before the attempt's first epoch (start-up can take
  any time), then ``AUTO_EPOCHS`` times its longest epoch so far, at least ``AUTO_FLOOR_S``.

A trial past its deadline is ended as failed, with a reason naming the deadline and the
epoch it was in; its worker is killed (not asked to stop, which a stuck worker never
answers) and Ray frees its slot, so the next trial starts. It is not retried: an epoch that
hung once hangs again from the same checkpoint.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from ray.tune import Callback
from ray.tune.experiment import Trial

from tunekit.compat.ray_tune import checkpoint_epoch, kill_trial_without_retry
from tunekit.layout import EPOCH_KEY, FAILURE_KEY

START_UP_S = 300.0  # a number: the least an attempt's first epoch may take from its start
AUTO_EPOCHS = 10.0  # ``auto``: the deadline in the trial's longest epochs so far
AUTO_FLOOR_S = 300.0  # ``auto``: never shorter, so checkpoints and validation passes of short epochs fit
# A driver loop step this late means the driver itself was away (paused, swapped out, a long
# write): the trials' silence over that gap is not theirs, so their clocks start again.
DRIVER_AWAY_S = 30.0


@dataclass
class _Watch:
    """One running attempt of a trial, as the deadline sees it."""

    trial: Trial
    since: float  # its start or its last epoch, on the driver's monotonic clock
    epoch: int  # the last epoch it finished (its checkpoint's, before it reports)
    longest_s: float = 0.0  # its longest gap between two epochs this attempt
    reported: bool = False  # it reported an epoch in this attempt


class TrialDeadline(Callback):
    """Ends running trials that reported nothing for longer than their deadline (see the module).

    The reason goes into the trial's record in ``recorder`` (``tunekit.driver.recorder.Recorder``)
    before its worker is killed, so the record keeps it when Ray's error for the kill arrives.
    """

    def __init__(
        self, timeout_s: float | Literal["auto"], recorder: Any, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.timeout_s = timeout_s
        self.recorder = recorder
        self._clock = clock
        self._watched: dict[str, _Watch] = {}
        self._last_step: float | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Ray pickles its callbacks with the run config; times on this process's clock mean
        # nothing to another, and the resume builds its own deadline (restore.py).
        return {**self.__dict__, "recorder": None, "_clock": time.monotonic, "_watched": {}, "_last_step": None}

    def on_trial_start(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        self._watched[trial.trial_id] = _Watch(trial, self._clock(), checkpoint_epoch(trial, EPOCH_KEY))

    def on_trial_result(
        self, iteration: int, trials: list[Trial], trial: Trial, result: dict[str, Any], **info: Any
    ) -> None:
        watch = self._watched.get(trial.trial_id)
        if watch is None or result.get(FAILURE_KEY) or EPOCH_KEY not in result:
            return
        now = self._clock()
        if watch.reported:  # the first gap holds the start-up, no epoch's length
            watch.longest_s = max(watch.longest_s, now - watch.since)
        watch.since, watch.epoch, watch.reported = now, int(result[EPOCH_KEY]), True

    def on_trial_complete(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        self._watched.pop(trial.trial_id, None)

    def on_trial_error(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        self._watched.pop(trial.trial_id, None)

    def on_step_begin(self, iteration: int, trials: list[Trial], **info: Any) -> None:
        now = self._clock()
        if self._last_step is not None and now - self._last_step > DRIVER_AWAY_S:
            for watch in self._watched.values():
                watch.since += now - self._last_step
        self._last_step = now
        for trial_id, watch in list(self._watched.items()):  # the running ones: not every trial, each step
            reason = self.overdue(watch, now)
            record = self.recorder.trials.get(trial_id)
            if reason is None or record is None or watch.trial.status != Trial.RUNNING:
                continue
            record.reason = reason
            if kill_trial_without_retry(watch.trial):  # else it has no worker yet, or Ray is stopping it
                del self._watched[trial_id]

    def deadline_s(self, watch: _Watch) -> float | None:
        """Seconds of silence ``watch``'s trial is allowed now; None: no deadline yet."""
        if self.timeout_s != "auto":
            return self.timeout_s if watch.reported else max(self.timeout_s, START_UP_S)
        if not watch.reported:
            return None
        return max(AUTO_FLOOR_S, AUTO_EPOCHS * watch.longest_s)

    def overdue(self, watch: _Watch, now: float) -> str | None:
        """The reason ``watch``'s trial ends, when it is past its deadline; None otherwise."""
        deadline = self.deadline_s(watch)
        if deadline is None or now - watch.since <= deadline:
            return None
        if self.timeout_s == "auto":
            rule = f"training.trial_timeout_s: auto, {AUTO_EPOCHS:g} times its longest epoch, >= {AUTO_FLOOR_S:g} s"
        elif deadline > self.timeout_s:
            rule = f"training.trial_timeout_s: {self.timeout_s:g}, a start may take {START_UP_S:g} s"
        else:
            rule = f"training.trial_timeout_s: {deadline:g}"
        since = f"the end of epoch {watch.epoch}" if watch.reported else "its start"
        return f"epoch {watch.epoch + 1} did not end within {deadline:g} s of {since} ({rule}); its worker was killed"
