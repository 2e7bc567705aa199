"""The recorder's trial records and epoch rows as Ray saves them with its experiment state.

Ray pickles the recorder's state at every save of its experiment state (every second; every
30 s once a save takes long), and every record and epoch row went with it: the pickle grew
with the search, 1.7 ms of the driver's CPU per trial in the last 1,000 of 10,000 trials
(``benchmarks/scale.py``). An ended trial's record and rows no longer change, so each ended
trial is pickled once, by the first save that finds it ended; later saves copy its bytes,
which the pickler writes without looking inside, and pickle only the running trials.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tunekit.driver.records import EpochRow, TrialRecord
from tunekit.layout import TrialStatus

T = TypeVar("T")

# A trial's record and its epoch rows, each with its place in the recorder's list of rows.
Entry = tuple[TrialRecord, list[tuple[int, EpochRow]]]


@dataclass
class SavedRecords:
    """Ended trials' entries, pickled once each."""

    ended: dict[str, bytes] = field(default_factory=dict)

    def state(
        self, trials: Mapping[str, TrialRecord], rows: Mapping[str, Mapping[int, int]], epochs: Sequence[EpochRow]
    ) -> dict[str, Any]:
        """What Ray saves: ``rows`` is {trial id: {epoch: its row's place in ``epochs``}}."""
        running: list[Entry] = []
        for trial_id, record in trials.items():
            if trial_id in self.ended:
                continue
            entry = (record, [(place, epochs[place]) for place in rows.get(trial_id, {}).values()])
            if record.status.is_finished():
                self.ended[trial_id] = pickle.dumps(entry, protocol=pickle.HIGHEST_PROTOCOL)
            else:
                running.append(entry)
        return {"order": list(trials), "ended": list(self.ended.values()), "running": running}

    def changed(self, trial_id: str) -> None:
        """A record changed after it ended (not expected of Ray's events): the next save pickles it again."""
        self.ended.pop(trial_id, None)


def records_of(state: Mapping[str, Any]) -> tuple[dict[str, TrialRecord], list[EpochRow]]:
    """The records and rows, in the recorder's order, of a state ``SavedRecords.state`` made,
    or of an earlier tunekit's (``trials`` and ``epochs`` lists, of records or of dicts)."""
    if "trials" in state:
        trials = [revived(TrialRecord)(item) for item in state["trials"]]
        return _kept_last(trials), [revived(EpochRow)(item) for item in state["epochs"]]
    entries: list[Entry] = [pickle.loads(data) for data in state["ended"]] + list(state["running"])
    by_id = {record.trial_id: record for record, _ in entries}
    placed = sorted((place_and_row for _, rows in entries for place_and_row in rows), key=lambda pair: pair[0])
    return _kept_last([by_id[trial_id] for trial_id in state["order"]]), [row for _, row in placed]


def _kept_last(records: list[TrialRecord]) -> dict[str, TrialRecord]:
    """Completed trials of a tunekit before ``training.keep`` kept their last epoch: say so."""
    for record in records:
        if record.status == TrialStatus.COMPLETED and record.kept_epoch is None:
            record.kept_epoch = record.epochs
    return {record.trial_id: record for record in records}


def revived(kind: Callable[..., T]) -> Callable[[Any], T]:
    """An earlier tunekit saved the records themselves, or before that, dicts of them."""
    return lambda item: kind(**item) if isinstance(item, dict) else item
