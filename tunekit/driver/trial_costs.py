"""What a search's trials cost so far, as the console's time left prices the rest of it.

From the epochs' reports, in active seconds: each trial's own later epoch (the gaps between
its consecutive reports), a model of that cost by configuration (``tunekit.search.costs``,
fitted to the trials measured so far), a trial's fixed part (its slot time less its epochs:
building, tracing, the end), and the pace at which new trials start.

Why per configuration: a CNN whose epoch took 5 s at 16 filters and 17 s at 48 had its time
left priced at the search-wide median epoch, and the console stayed optimistic throughout
while TPE moved to the costly corner. A running trial is now priced at its own epochs (or,
before its second report, at what the model says its configuration costs), and a trial to
come at the mean cost of the configurations measured lately, each weighing once however
many epochs it ran.
"""

from __future__ import annotations

import statistics
from collections import deque
from typing import TYPE_CHECKING

from tunekit.search.costs import CostModel, fit

if TYPE_CHECKING:
    from tunekit.config.space import SearchSpace
    from tunekit.driver.recorder import EpochRow, TrialRecord

# A search of many short trials can be bound by how fast its driver starts them, not by its
# slots' work: the trials to come then start at the pace of the last this-many new trials,
# and the time left is at least that (once that many started, so a small search's first,
# bunched starts never set it). A 10,000-trial search of 10-ms epochs said "about 51 s left"
# with 156 s to go: its slots were idle between trials, waiting for the driver.
START_PACE_TRIALS = 64
RECENT_CONFIGURATIONS = 64  # the configurations a trial to come is priced by: the sampler's latest picks
MODEL_AFTER = 3  # measured configurations before the cost model prices a trial not measured yet


class TrialCosts:
    """What a trial of this search costs so far (the module's docstring).

    A worker's first trial also imports TensorFlow: its fixed part counts only until a reused
    worker's trial ended. The README's search said "about 7 s left" with 24 s to go: its
    epochs took 50 ms and its trials 2 s each, so the wall time per epoch of its first, long
    trials priced the short ones to come at a third of their cost.
    """

    def __init__(self, space: SearchSpace | None = None) -> None:
        self.slots = 0  # the most trials seen running at once
        self._space = space
        self._last: dict[str, tuple[int, float]] = {}  # trial -> (its last epoch, reported at)
        self._reused: dict[str, bool] = {}  # trial -> its worker had run a trial before
        self._pids: set[object] = set()
        self._epochs: deque[float] = deque(maxlen=256)
        self._own: dict[str, tuple[float, int]] = {}  # trial -> (its epochs' gaps summed, their count)
        self._measured: dict[str, tuple[dict[str, object], float]] = {}  # trial -> (config, own epoch s)
        self._updates = 0  # measured costs changed this often: the model is refitted when it grew
        self._model: tuple[int, CostModel | None] = (-1, None)  # (updates fitted, the model)
        self._records: dict[bool, deque[tuple[float, int, float | None]]] = {
            True: deque(maxlen=64),
            False: deque(maxlen=64),
        }
        self._starts: deque[float] = deque(maxlen=START_PACE_TRIALS)  # the latest new trials' starts

    def started(self, record: TrialRecord) -> None:
        # A new trial: its first span of its first attempt (not a retry, a resume or PBT's unpause).
        if record.attempts == 1 and len(record.spans) == 1 and record.spans[0][0] is not None:
            self._starts.append(record.spans[0][0])

    def start_pace_s(self) -> float | None:
        """Seconds between new trials' starts, over the last ``START_PACE_TRIALS``; None until that many started."""
        if len(self._starts) < START_PACE_TRIALS:
            return None
        return (self._starts[-1] - self._starts[0]) / (len(self._starts) - 1)

    def epoch(self, record: TrialRecord, row: EpochRow) -> None:
        last = self._last.get(record.trial_id)
        if last is not None and row.epoch == last[0] + 1:
            gap = row.at - last[1]
            self._epochs.append(gap)
            total, count = self._own.get(record.trial_id, (0.0, 0))
            self._own[record.trial_id] = (total + gap, count + 1)
            self._measured.pop(record.trial_id, None)  # re-inserted last: the latest measured configurations
            self._measured[record.trial_id] = (dict(record.params), (total + gap) / (count + 1))
            self._updates += 1
            while len(self._measured) > RECENT_CONFIGURATIONS:
                self._measured.pop(next(iter(self._measured)))
        if record.trial_id not in self._reused:
            pid = record.span_workers[-1].get("pid") if record.span_workers else None
            self._reused[record.trial_id] = pid is not None and pid in self._pids
            self._pids.add(pid)
        self._last[record.trial_id] = (row.epoch, row.at)

    def ended(self, record: TrialRecord) -> None:
        self._last.pop(record.trial_id, None)
        reused = self._reused.pop(record.trial_id, False)
        own = self._own.pop(record.trial_id, None)
        if record.epochs and record.spans and record.spans[-1][1] is not None:
            slot_seconds = sum((end or 0.0) - (start or 0.0) for start, end in record.spans)
            self._records[reused].append((slot_seconds, record.epochs, own[0] / own[1] if own else None))

    def epoch_s(self) -> float | None:
        """A later epoch, search-wide: the median of the recent epochs' gaps."""
        return statistics.median(self._epochs) if self._epochs else None

    def trial_epoch_s(self, record: TrialRecord) -> float | None:
        """A later epoch of this trial: its own so far, else its configuration's by the cost
        model (once ``MODEL_AFTER`` configurations are measured), else the search-wide one."""
        own = self._own.get(record.trial_id)
        if own is not None:
            return own[0] / own[1]
        model = self._cost_model()
        return model.epoch_s(record.params) if model is not None else self.epoch_s()

    def future_epoch_s(self) -> float | None:
        """A later epoch of a trial to come: the mean of the latest measured configurations' own."""
        if not self._measured:
            return self.epoch_s()
        return statistics.fmean(seconds for _, seconds in self._measured.values())

    def fixed_s(self) -> float | None:
        epoch_s = self.epoch_s()
        ended = self._records[True] or self._records[False]  # reused workers' trials once there are any
        if epoch_s is None or not ended:
            return None
        return statistics.median(
            max(0.0, seconds - epochs * (own if own is not None else epoch_s)) for seconds, epochs, own in ended
        )

    def _cost_model(self) -> CostModel | None:
        if self._space is None or len(self._measured) < MODEL_AFTER:
            return None
        if self._model[0] != self._updates:  # at most once per estimate: the console asks once a second
            self._model = (self._updates, fit(self._space, list(self._measured.values())))
        return self._model[1]
