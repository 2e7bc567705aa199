"""The search's clock: active seconds, never the time a search was stopped.

A search runs in sessions: ``tunekit run``, then each ``tunekit resume``. Every time
figure tunekit reports (an epoch's ``time``, a trial's ``wall_seconds``, the ledger's
slot-hours, time to best, the MLflow parent's ``wall_seconds``) counts seconds on this
clock, which stands still between a stop and the next resume. The gaps are reported on
their own as downtime.

``started.json`` keeps the sessions as wall-clock ``[start, end]`` pairs; the driver moves
the current session's end forward as it writes its tables, so a driver killed without
warning still leaves its session's end within seconds of the truth. Stdlib only: the
driver writes it, ``tunekit.results`` reads it.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tunekit.layout import STARTED_FILE, STARTED_KEY, finite
from tunekit.storage.store import read_json, write_json

SESSIONS_KEY = "sessions"
# Whether the last session was still running when the file was written: false once the
# driver ended it (an exit, a signal); a killed driver leaves true behind.
RUNNING_KEY = "running"
# The process that writes the file, {"host", "pid"}: a reader on the same host can tell a
# killed driver at once instead of waiting for its session's end to go stale.
DRIVER_KEY = "driver"


@dataclass
class SearchClock:
    """Wall-clock sessions of one search, and the active seconds they add up to.

    Attributes:
        started_at: wall-clock seconds when the first session began.
        sessions: ``[start, end]`` wall-clock pairs, oldest first. While this process runs
            a session (``begin`` without ``end``), the last pair's end follows the wall clock.
    """

    started_at: float
    sessions: list[list[float]] = field(default_factory=list)
    running: bool = False

    @classmethod
    def new(cls, now: float | None = None) -> SearchClock:
        start = time.time() if now is None else now
        return cls(start, [])

    def begin(self, now: float | None = None) -> None:
        """Starts this process's session (a fresh search, or a resume)."""
        start = time.time() if now is None else now
        if not self.sessions:
            self.started_at = start
        self.sessions.append([start, start])
        self.running = True

    def touch(self, now: float | None = None) -> None:
        """Moves the running session's end to ``now`` (what a killed driver leaves on disk)."""
        if self.running and self.sessions:
            self.sessions[-1][1] = max(self.sessions[-1][0], time.time() if now is None else now)

    def end(self, now: float | None = None) -> None:
        self.touch(now)
        self.running = False

    def active_at(self, wall: float) -> float:
        """Active seconds from the search's start until the wall-clock time ``wall``.

        Sessions count in the order they ran, not by their wall times: a resume on a host whose
        clock runs behind starts its session before the last one's recorded end, and its moments
        still come after every earlier session's seconds (walking by wall time gave them 0 s, and
        a trial's new span began before its last one ended). ``wall`` falls in the latest session
        that holds it, else at the end of the latest one that started before it.
        """
        before = list(itertools.accumulate((end - start for start, end in self.sessions), initial=0.0))
        last = len(self.sessions) - 1
        for index in range(last, -1, -1):
            start, end = self.sessions[index]
            if start <= wall <= end or (self.running and index == last and wall >= start):
                return before[index] + wall - start
        for index in range(last, -1, -1):
            if wall >= self.sessions[index][0]:
                return before[index + 1]
        return 0.0

    def wall_at(self, active: float) -> float:
        """The wall-clock time at which the search had run ``active`` seconds (MLflow's timestamps)."""
        elapsed = 0.0
        for start, end in self.sessions:
            if active <= elapsed + (end - start) or (start, end) == tuple(self.sessions[-1]):
                return start + (active - elapsed)
            elapsed += end - start
        return self.started_at + active

    def now(self) -> float:
        """Active seconds so far."""
        return self.active_at(time.time())

    @property
    def active_seconds(self) -> float:
        """Active seconds of every session, as recorded (the running one up to its last touch)."""
        return sum(end - start for start, end in self.sessions)

    @property
    def downtime_seconds(self) -> float:
        """Seconds between sessions: the search was stopped, and nothing ran."""
        return sum(max(0.0, later[0] - earlier[1]) for earlier, later in itertools.pairwise(self.sessions))

    # ------------------------------------------------------------------- started.json

    def write(self, experiment_dir: Path) -> None:
        record = {
            STARTED_KEY: self.started_at,
            SESSIONS_KEY: self.sessions,
            RUNNING_KEY: self.running,
            DRIVER_KEY: {"host": socket.gethostname(), "pid": os.getpid()},
        }
        write_json(experiment_dir / STARTED_FILE, record)

    @classmethod
    def read(cls, experiment_dir: Path) -> SearchClock | None:
        """The experiment's recorded clock; None when it has none (not started).

        Raises:
            DamagedFileError: ``started.json`` does not parse (readers read no clock around it).
        """
        record = read_json(experiment_dir / STARTED_FILE)
        if not isinstance(record, dict):
            return None
        started = finite(record.get(STARTED_KEY))
        if started is None:
            return None
        sessions = [
            [float(pair[0]), float(pair[1])]
            for pair in record.get(SESSIONS_KEY) or []
            if isinstance(pair, list) and len(pair) == 2 and all(finite(v) is not None for v in pair)
        ]
        return cls(started, sessions)


def ended_by_its_driver(experiment_dir: Path) -> bool:
    """Whether the last session's driver ended it (an exit, a signal): ``started.json`` says
    so. A killed driver never does; a tunekit before this flag neither."""
    return _started_record(experiment_dir).get(RUNNING_KEY) is False


def session_running(experiment_dir: Path) -> bool | None:
    """Whether the last session still runs, as far as ``started.json`` tells; None when it
    cannot (not started, or written by a tunekit before it kept the flag). A killed driver
    leaves the flag true: on this host its process is looked for; on another, readers also
    ask how recently the session's end moved."""
    record = _started_record(experiment_dir)
    value = record.get(RUNNING_KEY)
    if not isinstance(value, bool):
        return None
    driver = record.get(DRIVER_KEY)
    if value and isinstance(driver, dict) and driver.get("host") == socket.gethostname():
        return _alive(driver.get("pid"))
    return value


def died_mid_session(experiment_dir: Path) -> bool:
    """The last session's driver died without ending it (SIGKILL, a second signal's forced
    exit) and no driver runs it now, as far as this host can tell."""
    return session_running(experiment_dir) is False and not ended_by_its_driver(experiment_dir)


def _started_record(experiment_dir: Path) -> dict[str, Any]:
    try:
        record = json.loads((experiment_dir / STARTED_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return True  # cannot tell: the session's word stands
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """A process that died and that its parent has not reaped yet (a driver killed with
    ``kill -9`` stays one for a second or two): ``os.kill(pid, 0)`` still finds it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # no /proc (macOS), or gone since
        return False
    # "pid (command) state ...": the command may hold spaces and parentheses.
    return stat.rpartition(")")[2].split()[:1] == ["Z"]


def duration(seconds: float | None) -> str:
    """``1h 02m``, ``3m 05s``, ``-`` for no value: how every report, status and plan writes a
    span of active time, rounded to the second (``tunekit status`` cut it, and said 0m 46s
    where the report said 0m 47s)."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m {secs:02d}s"
