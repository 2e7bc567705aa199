"""Where a trial is inside a long epoch, and on which worker, for the console and ``tunekit status``.

A trial reports to Ray only at an epoch's end, so during a long epoch the driver knows
nothing of it. The worker writes its step to a small file in the trial's folder (on the
storage every node shares) at most every few seconds; the console reads the files of the
running trials when it redraws. It also writes one as the trial starts, before its data and
model are built (``announce``): ``tunekit status`` shows a running trial's node and pid from
then on, not only from its first report.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from tunekit.layout import HEARTBEAT_FILE

WRITE_EVERY_S = 5.0  # the console refreshes every 10 s at least: half that keeps it current
STALE_AFTER_S = 60.0  # a heartbeat older than this is a worker that stopped, not a slow one


STARTING = "start"  # the phase of the beat a worker writes as a trial starts in it (epoch 0)


@dataclass(frozen=True)
class Heartbeat:
    epoch: int  # the epoch in progress, counted from 1; 0 while the trial starts
    phase: str  # "train", "validate", or STARTING
    step: int  # the batches done in this phase, counted from 1
    steps: int | None  # the phase's length when known
    at: float  # wall-clock seconds when it was written
    node_id: str = ""  # the worker's Ray node: `tunekit status` shows it before the first report
    pid: int | None = None

    def describe(self) -> str:
        if self.phase == STARTING:
            return "starting (data, model)"
        of = f"/{self.steps}" if self.steps else ""
        doing = "step" if self.phase == "train" else "validation step"
        return f"epoch {self.epoch} {doing} {self.step}{of}"


class HeartbeatWriter:
    """Called on every batch's start; writes only when the last write is WRITE_EVERY_S old."""

    def __init__(self, trial_dir: Path, node_id: str = "") -> None:
        self._path = trial_dir / HEARTBEAT_FILE
        self._node_id = node_id
        self._written = time.monotonic()  # a short epoch never writes at all

    def batch_began(self, epoch: int, phase: str, step: int, steps: int | None) -> None:
        now = time.monotonic()
        if now - self._written < WRITE_EVERY_S:
            return
        self._written = now
        _write(self._path, Heartbeat(epoch, phase, step, steps, time.time(), self._node_id, os.getpid()))

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            self._path.unlink(missing_ok=True)


def announce(trial_dir: Path) -> None:
    """Says, as a trial starts in this worker, where it runs: before the data, the model and
    (in a new worker) TensorFlow's import, which take seconds to minutes before any report.
    A killed worker's beat left in the folder is replaced by the next attempt's at its start."""
    from tunekit.worker.devices import node_id

    _write(trial_dir / HEARTBEAT_FILE, Heartbeat(0, STARTING, 0, None, time.time(), node_id(), os.getpid()))


def _write(path: Path, beat: Heartbeat) -> None:
    temporary = path.with_suffix(".tmp")
    with contextlib.suppress(OSError):  # progress is a courtesy: never fail the trial for it
        temporary.write_text(json.dumps(asdict(beat)))
        os.replace(temporary, path)


def read_heartbeat(
    trial_dir: Path, now: float | None = None, max_age: float | None = STALE_AFTER_S
) -> Heartbeat | None:
    """The trial's last heartbeat, or None when there is none or it is older than ``max_age``
    (None: any age, as for where a running trial's worker is)."""
    try:
        beat = Heartbeat(**json.loads((trial_dir / HEARTBEAT_FILE).read_text()))
    except (OSError, ValueError, TypeError):
        return None
    return beat if max_age is None or (now or time.time()) - beat.at <= max_age else None
