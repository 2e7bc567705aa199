"""One writer at a time: the driver's lease on an experiment, and its fencing.

A driver (``run``, ``resume``, ``sync``) takes the lease before it writes anything and
before Ray starts; readers (``report``, ``status``, ``check``, ``load``) never need it. The
lease is a small JSON record in the experiment, ``driver.lease``, naming its holder (host,
pid, the process's start, the command, a token) and a heartbeat its holder rewrites every
``BEAT_S`` seconds. Where it lives and how each storage makes its writes atomic is
``tunekit.storage.lease_files``.

Taking it:

* no lease: created (``O_EXCL``, or S3's ``If-None-Match: *``): of two drivers starting
  together exactly one wins;
* a live holder: refused at once with one line naming it. On the same host a live holder is
  a live pid with the recorded start (pids are reused); on another host, a heartbeat that
  moves while we watch;
* a dead holder: taken over. On the same host, a pid that is gone is dead at once; on
  another host, a heartbeat that has not changed for ``STALE_S`` seconds. *Liveness never
  trusts a clock of another host*: the heartbeat is watched on this process's monotonic
  clock, and the only ages compared are two times stamped by the storage itself (the lease's
  and a probe's, ``storage_age``), so a host whose clock runs minutes ahead cannot steal a
  live lease, nor one minutes behind wait minutes for a dead one. Timestamps written by the
  holder are shown, never compared.

Holding it (fencing): every driver-side write goes through ``tunekit.storage.store``, which first
calls ``ensure_held``. A write needs a confirmation of the lease (the lease read back with this
driver's token) at most ``FENCE_S`` old on the monotonic clock, which keeps going while a process
is paused; an older one is confirmed (and renewed) first, synchronously. So a driver that was
paused (SIGSTOP, a frozen VM) past the stale window and replaced meanwhile finds out before its
first write after it wakes, and so does one whose lease was deleted. It then stops at once:
``on_lost`` (the command's forced exit, ``tunekit.driver.fencing``), else ``LeaseLostError``.
A storage error is no verdict: a renewal the storage refuses (a full disk) leaves the lease
confirmed by its reads; a storage that cannot even be read lets writes go on while the last
confirmation is younger than the stale window (a taker must watch that long), then makes them
wait for it to answer, for at most ``outage_s``.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from tunekit.errors import LeaseHeldError, LeaseLostError, StorageError
from tunekit.storage.fences import add_fence, remove_fence
from tunekit.storage.lease_files import LeaseFile, lease_file, token_of

# Leases this process holds, by file: a driver's own steps that need it again (the search's
# closing sync to MLflow) share it.
_HELD: dict[str, DriverLease] = {}

BEAT_S = 2.0  # the holder renews its heartbeat this often
# A heartbeat unchanged this long (watched from another host) is a dead driver's: how long a
# Kubernetes RayJob's retry waits, at most. ``TUNEKIT_LEASE_STALE_S`` sets it (a slow shared store
# wants more, a test less); the holder's fencing does not depend on it.
STALE_S = float(os.environ.get("TUNEKIT_LEASE_STALE_S") or 20.0)
FENCE_S = 1.5 * BEAT_S  # a write needs a confirmation of the lease at most this old
WATCH_AT_LEAST_S = 2.5 * BEAT_S  # a taker sees the heartbeat stand still this long, whatever its age
OUTAGE_S = 300.0  # how long writes wait for a storage that cannot confirm the lease


@dataclass(frozen=True)
class Holder:
    """Who holds a lease: written in ``driver.lease``."""

    host: str
    pid: int
    process_started: float  # the process's start (psutil), to tell a reused pid apart
    command: str  # "run", "resume", "sync"
    since: float  # when it took the lease (its own wall clock: shown, never compared)
    beat: float  # its last heartbeat (its own wall clock: shown, never compared)
    token: str  # this lease's identity

    def describe(self) -> str:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.since))
        return f"`tunekit {self.command}` (pid {self.pid} on {self.host}) holds it since {since} by its clock"


def _parsed(text: str | None) -> Holder | None:
    try:
        return Holder(**json.loads(text or ""))
    except (ValueError, TypeError):
        return None


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
    ``lost`` says why this driver no longer holds it, once it does not. ``on_lost``, when set,
    is called once with the ``LeaseLostError`` from the thread that found the loss (the
    command's forced exit); without it the writes that follow raise the error.
    """

    def __init__(self, experiment: Path | str, command: str, *, stale_s: float = STALE_S) -> None:
        self.file: LeaseFile = lease_file(experiment)
        self.command = command
        self.stale_s = stale_s
        self.outage_s = OUTAGE_S
        self.took_over: Holder | None = None
        self.lost: LeaseLostError | None = None
        self.on_lost: Callable[[LeaseLostError], None] | None = None
        self._holder: Holder | None = None
        self._confirmed = 0.0  # monotonic: when the lease was last read back as this driver's
        self._renewing = threading.Lock()
        self._stop = threading.Event()
        self._beating: threading.Thread | None = None
        self._shared_with: DriverLease | None = None

    def __enter__(self) -> DriverLease:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    @property
    def token(self) -> str | None:
        """This lease's identity while it is held (a shared hold's, its holder's); None otherwise."""
        holder = (self._shared_with or self)._holder
        return None if holder is None else holder.token

    # ------------------------------------------------------------------ taking it

    def acquire(self) -> None:
        """Takes the lease, or raises ``LeaseHeldError`` naming its live holder."""
        if (holding := _HELD.get(self.file.key)) is not None:  # this process holds it already: shared
            self._shared_with = holding
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
            began = time.monotonic()
            if self.file.create(json.dumps(asdict(mine))):
                self._hold(mine, began)
                return
            text = self.file.read()
            holder = _parsed(text)
            if holder is None:
                self._remove_if_torn(text)
                continue
            if not self._dead(holder):
                raise LeaseHeldError(
                    f"{self.file.where}: another driver is writing this experiment: {holder.describe()}"
                    f"{self._heard()}; one writer at a time, readers (`tunekit status`, `report`, `check`) "
                    "need no lease"
                )
            began = time.monotonic()
            if self.file.take_over(holder.token, json.dumps(asdict(mine))):
                self.took_over = holder
                self._hold(mine, began)
                return
        raise LeaseHeldError(f"{self.file.where}: could not take the driver's lease; try again")

    def _hold(self, mine: Holder, began: float) -> None:
        self._holder, self._confirmed = mine, began
        _HELD[self.file.key] = self
        add_fence(id(self), self.ensure_held)
        self._stop.clear()
        self._beating = threading.Thread(target=self._beat_until_released, name="tunekit-lease", daemon=True)
        self._beating.start()

    def _heard(self) -> str:
        age = self.file.storage_age()
        return "" if age is None else f" (its heartbeat written {age:.0f} s ago by the storage's clock)"

    def _remove_if_torn(self, text: str | None) -> None:
        """A lease torn by a crash as it was created is written by no live driver once it has
        not changed for a few heartbeats (a live holder rewrites it whole)."""
        if text is None:
            return  # released meanwhile
        age = self.file.storage_age()
        if age is not None and age > BEAT_S * 3:
            self.file.remove()
        else:
            time.sleep(BEAT_S / 2)

    def _dead(self, holder: Holder) -> bool:
        if holder.host == socket.gethostname():
            return not _alive_here(holder)
        # Another host: watch its heartbeat on this process's own clock. How long: the stale
        # window less the age the storage itself gives the lease, and a few heartbeats at least.
        age = self.file.storage_age() or 0.0
        watch = max(min(WATCH_AT_LEAST_S, self.stale_s), self.stale_s - age)
        deadline = time.monotonic() + watch
        while (left := deadline - time.monotonic()) > 0:
            time.sleep(min(BEAT_S / 2, left))
            now = _parsed(self.file.read())
            if now is None or now.token != holder.token or now.beat != holder.beat:
                return False  # alive, or another driver took it meanwhile: look again as live
        return True

    # ------------------------------------------------------------ holding it (fencing)

    def ensure_held(self) -> None:
        """Returns while this driver may write; raises ``LeaseLostError`` once it may not.

        Cheap while the last confirmation is recent (every write calls it); renews first when
        it is not (a process that was paused). Waits while the storage cannot confirm it and
        the last confirmation is older than the stale window, for at most ``outage_s``.
        """
        if self._shared_with is not None:
            self._shared_with.ensure_held()
            return
        if self.lost is not None:
            self._stop_writing(self.lost)
        if self._holder is None or time.monotonic() - self._confirmed <= FENCE_S:
            return
        self.beat()
        while self.lost is None and time.monotonic() - self._confirmed > self.stale_s:
            if time.monotonic() - self._confirmed > self.outage_s:
                raise StorageError(
                    f"{self.file.where}: the storage has not confirmed this driver's lease for "
                    f"{self.outage_s:g} s; `tunekit resume {self.file.where}` continues the search once it answers"
                )
            time.sleep(BEAT_S / 2)
            self.beat()
        if self.lost is not None:
            self._stop_writing(self.lost)

    def beat(self) -> None:
        """Renews the heartbeat if the lease is still this driver's; notes a loss otherwise.

        A storage error is no verdict (the heartbeat tries again); a lease that another driver
        holds now, or that is gone, is lost.
        """
        holder = self._holder
        if holder is None or self.lost is not None:
            return
        with self._renewing:
            began = time.monotonic()
            try:
                text = self.file.read()
                if token_of(text) == holder.token:
                    # Read back as ours: no other driver holds it now. Renewing is what keeps
                    # others from taking it; a full disk that refuses the renewal is no loss.
                    self._confirmed = began
                    renewed = Holder(**{**asdict(holder), "beat": time.time()})
                    if self.file.renew(json.dumps(asdict(renewed))):
                        self._holder = renewed
                        return
                    text = self.file.read()  # replaced between our read and our renewal
            except Exception:  # the storage's trouble (full, read-only, away): try again next beat
                return
        with contextlib.suppress(LeaseLostError):  # the heartbeat's thread: ensure_held raises it to writers
            self._lose(_parsed(text))

    def _lose(self, now: Holder | None) -> None:
        if self.lost is None:
            who = f"{now.describe()} now" if now is not None else "its lease file was removed"
            self.lost = LeaseLostError(
                f"{self.file.where}: this driver lost the experiment's lease: {who}; it stopped writing and "
                "leaves its trials to the driver that holds it",
                now,
            )
        self._stop_writing(self.lost)

    def _stop_writing(self, lost: LeaseLostError) -> None:
        """``on_lost`` (which may end the process), else ``LeaseLostError``; in every thread that
        finds the loss, so that none goes on to write while another reports it."""
        if self.on_lost is not None:
            self.on_lost(lost)
        raise lost

    def _beat_until_released(self) -> None:
        while not self._stop.wait(BEAT_S):
            self.beat()

    def release(self) -> None:
        """Stops the heartbeat and removes the lease, if it is still this driver's."""
        if self._shared_with is not None:
            self._shared_with = None
            return
        self._stop.set()
        if self._beating is not None:
            self._beating.join()
            self._beating = None
        remove_fence(id(self))
        holder, self._holder = self._holder, None
        if holder is None:
            return
        _HELD.pop(self.file.key, None)
        if self.lost is None:
            with contextlib.suppress(Exception):  # a storage away now: the lease goes stale, as a kill's does
                if token_of(self.file.read()) == holder.token:
                    self.file.remove()
