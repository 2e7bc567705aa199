"""One writer at a time: the driver's lease on an experiment.

A driver (``run``, ``resume``, ``sync``) takes the lease before it writes anything and
before Ray starts; readers (``report``, ``status``, ``check``, ``load``) never need it. The
lease is a small JSON file in the experiment, ``driver.lease``, naming its holder (host,
pid, the process's start, the command) and a heartbeat its holder rewrites every
``BEAT_S`` seconds.

Taking it:

* no lease: created with ``O_EXCL``, so of two drivers starting together exactly one wins;
* a live holder: refused at once with one line naming it and since when. On the same host a
  live holder is a live pid with the recorded start (pids are reused); on another host, a
  heartbeat that moves while we watch (at most ``BEAT_S`` and a little);
* a dead holder: taken over. On the same host, a pid that is gone is dead at once (a
  ``kill -9``ed driver, a second signal's forced exit); on another host, a heartbeat that
  has not moved for ``STALE_S`` seconds (a killed pod, a lost node): a Kubernetes RayJob's
  retry waits at most that long. The take-over renames the stale file aside first, so of
  two drivers taking over together one wins and the other sees a live holder.

On a bucket, where there is no ``O_EXCL`` or rename, the same protocol rests on a
conditional write (``If-None-Match: *`` to create, the object's ETag to replace).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tunekit.errors import LeaseHeldError
from tunekit.layout import LEASE_FILE
from tunekit.store import write_text

# Leases this process holds, by file, with how many holders: a driver's own steps that need it
# again (the search's closing sync to MLflow) share it.
_HELD: dict[str, int] = {}

BEAT_S = 2.0  # the holder rewrites its heartbeat this often
STALE_S = 20.0  # a heartbeat this old (on another host) is a dead driver's


@dataclass(frozen=True)
class Holder:
    """Who holds a lease: written in ``driver.lease``."""

    host: str
    pid: int
    process_started: float  # the process's start (psutil), to tell a reused pid apart
    command: str  # "run", "resume", "sync"
    since: float  # when it took the lease (wall clock)
    beat: float  # its last heartbeat (wall clock)
    token: str  # this lease's identity

    def describe(self) -> str:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.since))
        return f"`tunekit {self.command}` (pid {self.pid} on {self.host}) holds it since {since}"


def _own_process_started() -> float:
    import psutil

    return float(psutil.Process().create_time())


def _alive_here(holder: Holder) -> bool:
    """Whether the holder's process runs on this host (the same pid with the same start)."""
    import psutil

    try:
        return abs(psutil.Process(holder.pid).create_time() - holder.process_started) < 1.0
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return False


class DriverLease:
    """The lease of one driver on one experiment; a context manager that takes and releases it.

    ``took_over`` says whose stale lease was taken (None: there was none), for the console.
    ``lost`` is set when another driver took the lease while this one held it (its heartbeat
    stalled past ``STALE_S``, say a suspended process): this driver must stop writing.
    """

    def __init__(self, experiment: Path | str, command: str) -> None:
        self.file = lease_file(experiment)
        self.command = command
        self.took_over: Holder | None = None
        self.lost: Holder | None = None
        self._holder: Holder | None = None
        self._stop = threading.Event()
        self._beating: threading.Thread | None = None
        self._nested = False

    def __enter__(self) -> DriverLease:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    # ------------------------------------------------------------------ taking it

    def acquire(self, *, stale_s: float = STALE_S) -> None:
        """Takes the lease, or raises ``LeaseHeldError`` naming its live holder."""
        if self.file.key in _HELD:  # this process holds it already: shared
            _HELD[self.file.key] += 1
            self._nested = True
            return
        now = time.time()
        mine = Holder(
            host=socket.gethostname(),
            pid=os.getpid(),
            process_started=_own_process_started(),
            command=self.command,
            since=now,
            beat=now,
            token=uuid.uuid4().hex,
        )
        for _ in range(20):  # each pass ends in a win, a refusal, or a race lost to another taker
            if self._create(mine):
                self._holder = mine
                _HELD[self.file.key] = 1
                self._start_beating()
                return
            holder = self._read()
            if holder is None:
                continue  # released meanwhile, or torn: _read removed a torn one
            if not self._dead(holder, stale_s):
                raise LeaseHeldError(
                    f"{self.file.where}: another driver is writing this experiment: {holder.describe()} "
                    f"(last heartbeat {time.time() - holder.beat:.0f} s ago); one writer at a time, "
                    f"readers (`tunekit status`, `report`, `check`) need no lease"
                )
            if self._set_aside(holder):
                self.took_over = holder
        raise LeaseHeldError(f"{self.file.where}: could not take the driver's lease; try again")

    def _create(self, holder: Holder) -> bool:
        return self.file.create(json.dumps(asdict(holder)))

    def _read(self) -> Holder | None:
        read = self.file.read()
        if read is None:
            return None
        text, age_s = read
        try:
            return Holder(**json.loads(text))
        except (ValueError, TypeError):
            # A lease torn by a crash as it was created: written by no live driver once it is
            # older than a heartbeat (a live holder rewrites it whole).
            if age_s > BEAT_S * 3:
                self.file.remove()
            return None

    def _dead(self, holder: Holder, stale_s: float) -> bool:
        if holder.host == socket.gethostname():
            return not _alive_here(holder)
        # Another host: watch its heartbeat. It moves within a beat when the holder lives.
        deadline = time.monotonic() + max(0.0, stale_s - (time.time() - holder.beat))
        while time.monotonic() < deadline:
            time.sleep(min(BEAT_S / 2, max(0.0, deadline - time.monotonic())))
            now = self._read()
            if now is None or now.token != holder.token or now.beat != holder.beat:
                return False  # alive, or another driver took it meanwhile: look again as live
        return True

    def _set_aside(self, stale: Holder) -> bool:
        """Removes a dead holder's lease, if it is still the one read (one taker wins)."""
        return self.file.set_aside(stale.token)

    # ------------------------------------------------------------ holding and release

    def _start_beating(self) -> None:
        self._stop.clear()
        self._beating = threading.Thread(target=self._beat_until_released, name="tunekit-lease", daemon=True)
        self._beating.start()

    def _beat_until_released(self) -> None:
        while not self._stop.wait(BEAT_S):
            self.beat()

    def beat(self) -> None:
        """Rewrites the heartbeat, unless another driver has taken the lease."""
        holder = self._holder
        if holder is None or self.lost is not None:
            return
        current = self._read()
        if current is not None and current.token != holder.token:
            self.lost = current
            return
        self._holder = holder = Holder(**{**asdict(holder), "beat": time.time()})
        with contextlib.suppress(OSError):  # a full disk: the heartbeat goes stale, the search ends on its own error
            self.file.replace(json.dumps(asdict(holder)))

    def release(self) -> None:
        """Stops the heartbeat and removes the lease, if it is still this driver's."""
        if self._nested:
            self._nested = False
            _HELD[self.file.key] -= 1
            return
        self._stop.set()
        if self._beating is not None:
            self._beating.join()
            self._beating = None
        holder, self._holder = self._holder, None
        if holder is None:
            return
        _HELD.pop(self.file.key, None)
        current = self._read()
        if current is not None and current.token == holder.token:
            self.file.remove()


@contextlib.contextmanager
def driver_lease(experiment_dir: Path, command: str) -> Iterator[DriverLease]:
    """Holds the experiment's lease for the block (see ``DriverLease``)."""
    with DriverLease(experiment_dir, command) as lease:
        yield lease


# ------------------------------------------------------------------- where the lease lives


class LocalLeaseFile:
    """``driver.lease`` in a local or shared folder: ``O_EXCL`` to create, a rename to set aside."""

    def __init__(self, experiment_dir: Path) -> None:
        self.path = Path(experiment_dir) / LEASE_FILE
        self.key = str(self.path)
        self.where = str(experiment_dir)

    def create(self, text: str) -> bool:
        try:
            descriptor = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(descriptor, "w") as handle:
            handle.write(text)
        return True

    def read(self) -> tuple[str, float] | None:
        """The lease's text and its age in seconds, or None when there is none."""
        try:
            return self.path.read_text(), time.time() - self.path.stat().st_mtime
        except FileNotFoundError:
            return None

    def replace(self, text: str) -> None:
        write_text(self.path, text)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)

    def set_aside(self, token: str) -> bool:
        aside = self.path.with_name(f"{self.path.name}.{uuid.uuid4().hex[:8]}.stale")
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return False  # another driver took it first
        try:
            moved = json.loads(aside.read_text()).get("token")
        except (OSError, ValueError, AttributeError):
            moved = None
        if moved is not None and moved != token:
            # Between our read and the rename another driver took it over: give it back.
            with contextlib.suppress(OSError):
                os.link(aside, self.path)
            aside.unlink(missing_ok=True)
            return False
        aside.unlink(missing_ok=True)
        return True


class BucketLeaseFile:
    """``driver.lease`` as an object of a bucket experiment.

    Object stores have no ``O_EXCL`` or rename; S3's conditional writes (``If-None-Match: *``)
    are not reachable through pyarrow. A creation writes the lease, waits ``SETTLE_S`` and
    reads it back: of two drivers that wrote it together, the one whose lease is read back
    wins and the other sees a live holder (a last-writer-wins store settles on one object).
    """

    SETTLE_S = 0.5

    def __init__(self, bucket: Any) -> None:
        self.bucket = bucket
        self.key = f"{bucket.uri}#{LEASE_FILE}"
        self.where = bucket.uri

    def create(self, text: str) -> bool:
        if self.read() is not None:
            return False
        self.replace(text)
        time.sleep(self.SETTLE_S)
        read = self.read()
        return read is not None and read[0] == text

    def read(self) -> tuple[str, float] | None:
        from pyarrow import fs

        filesystem, path = self.bucket.filesystem()
        info = filesystem.get_file_info(f"{path}/{LEASE_FILE}")
        if info.type != fs.FileType.File:
            return None
        try:
            with filesystem.open_input_stream(f"{path}/{LEASE_FILE}") as stream:
                text = stream.read().decode("utf-8", "replace")
        except (FileNotFoundError, OSError):
            return None
        age = time.time() - info.mtime.timestamp() if info.mtime is not None else 0.0
        return text, age

    def replace(self, text: str) -> None:
        filesystem, path = self.bucket.filesystem()
        with filesystem.open_output_stream(f"{path}/{LEASE_FILE}") as stream:
            stream.write(text.encode("utf-8"))

    def remove(self) -> None:
        self.bucket.delete(LEASE_FILE)

    def set_aside(self, token: str) -> bool:
        read = self.read()
        if read is None:
            return False
        try:
            current = json.loads(read[0]).get("token")
        except (ValueError, AttributeError):
            current = None
        if current not in (token, None):
            return False
        self.remove()
        return True


def lease_file(experiment: Path | str) -> LocalLeaseFile | BucketLeaseFile:
    """Where an experiment's lease lives: beside a local one, in the bucket of a bucket's
    (given as its URI, or as this machine's cache of it)."""
    from tunekit.storage import Bucket, bucket_of, is_uri

    if is_uri(str(experiment)):
        return BucketLeaseFile(Bucket(str(experiment)))
    bucket = bucket_of(Path(experiment))
    return BucketLeaseFile(bucket) if bucket is not None else LocalLeaseFile(Path(experiment))
