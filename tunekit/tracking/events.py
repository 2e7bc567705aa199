"""What the tracker queues for its writer thread: one typed union, handled with ``match``.

The tracker (Ray's driver loop) builds these; the writer (its own thread) consumes them.
Both import this module; neither imports the other for an event, so there is no circle.
Every event is a frozen dataclass holding copies, never the recorder's live objects.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass

from tunekit.layout import TrialStatus


@dataclass(frozen=True)
class TrialEvent:
    """A trial started (``running``), or an ended trial replayed on resume (not ``running``)."""

    trial_id: str
    number: int | None
    params: dict[str, object]
    started_at: float
    attempts: int
    running: bool


@dataclass(frozen=True)
class EpochEvent:
    """One reported epoch: its finite numeric metrics, at ``step`` = the epoch."""

    trial_id: str
    step: int
    metrics: dict[str, float]
    timestamp_ms: int


@dataclass(frozen=True)
class InfoEvent:
    """What the trial ran on (devices, precision, replicas), as the trainable reported it."""

    trial_id: str
    info: dict[str, object]


@dataclass(frozen=True)
class TrialEndEvent:
    """A trial ended: its status, reason, ASHA rung and epochs."""

    trial_id: str
    status: TrialStatus
    reason: str
    rung: int | None
    epochs: int
    attempts: int
    ended_at: float
    wall_seconds: float  # the seconds it ran, over all its spans (active time, tunekit.storage.clock)
    kept_epoch: int | None = None  # the epoch its model and figure come from (training.keep)


@dataclass(frozen=True)
class ExploitEvent:
    """PBT moved a trial onto another's checkpoint: the steps so far, each in words."""

    trial_id: str
    steps: tuple[str, ...]


@dataclass(frozen=True)
class ProgressEvent:
    """The best value after ``ended`` trials; the summary when ``final``.

    ``at`` is when it happened (epoch seconds); None means now. ``tunekit sync`` sets it
    from the records, so a second sync sends the same points at the same times.
    """

    ended: int
    best: float | None
    best_trial: str | None
    counts: Mapping[str, int]  # trials by status (TrialStatus keys)
    epochs_spent: int
    wall_seconds: float
    final: bool
    interrupted: bool
    at: float | None = None
    # The search's sessions, [start, end] wall-clock (tunekit.storage.clock), on the final summary:
    # load_from_mlflow turns MLflow's timestamps into active seconds with them.
    sessions: tuple[tuple[float, float], ...] = ()


@dataclass(frozen=True)
class Flush:
    """Asks the writer to set ``done`` once everything queued before it was sent (or given up)."""

    done: threading.Event


@dataclass(frozen=True)
class Stop:
    """The search ended: send what is left, within the flush timeout, then end the thread."""


STOP = Stop()

# What the writer records on runs, and everything the tracker queues.
RunEvent = TrialEvent | EpochEvent | InfoEvent | TrialEndEvent | ExploitEvent | ProgressEvent
TrackerEvent = RunEvent | Flush | Stop
