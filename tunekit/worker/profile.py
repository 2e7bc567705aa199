"""Where a trial's own time goes, piece by piece: the profile the overhead benchmark publishes.

Off unless the benchmark (benchmarks/overhead.py) sets PROFILE_DIR_ENV in its driver's
environment, which local Ray workers inherit; then each trial writes
``<dir>/<trial_id>.json``: for every named piece, the seconds of each time it ran. No
spec key or CLI flag turns it on. Off, a piece costs a truth test.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

PROFILE_DIR_ENV = "TUNEKIT_PROFILE_DIR"
# Where each worker of the warm runtime's Ray (tunekit.runtime.daemon) records that its imports
# ended (tunekit.worker.preload): the runtime counts its ready workers by these records.
PRELOADED_DIR_ENV = "TUNEKIT_PRELOADED_DIR"


class TrialProfile:
    def __init__(self, path: Path | None = None) -> None:
        self._path = path  # None: recording nothing
        self.pieces: dict[str, list[float]] = {}

    @classmethod
    def for_trial(cls, trial_id: str) -> TrialProfile:
        directory = os.environ.get(PROFILE_DIR_ENV)
        return cls(Path(directory, f"{trial_id}.json") if directory else None)

    @property
    def enabled(self) -> bool:
        return self._path is not None

    @contextlib.contextmanager
    def piece(self, name: str) -> Iterator[None]:
        if self._path is None:
            yield
            return
        started = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - started)

    def add(self, name: str, seconds: float) -> None:
        if self._path is not None:
            self.pieces.setdefault(name, []).append(seconds)

    def write(self) -> None:
        if self._path is not None:
            self._path.write_text(json.dumps(self.pieces))
