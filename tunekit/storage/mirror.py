"""A bucket experiment's driver: its cache uploaded as the search runs, and what an outage left unsent.

The driver (``run``, ``resume``) keeps its live records in this machine's cache of the bucket
(``tunekit.storage.buckets``) and ``BucketMirror`` uploads what changed every ``PUSH_EVERY_S``
seconds and at every stop, riding out outages up to ``storage.outage_s``. A search an outage
stopped leaves its cache marked as not sent (``mark_unsent``); a resume on the same machine that
takes over that driver's lease sends it first (``send_unsent``).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from tunekit.errors import LeaseLostError, StorageError, StorageUnreachableError
from tunekit.layout import JOURNAL_SEAL_FILE, LEASE_FILE, STUDY_FILE, TENSORBOARD_DIR
from tunekit.storage.buckets import NOT_PUSHED, ORIGIN_FILE, Bucket, bucket_of, is_ray_state, redacted
from tunekit.storage.faults import OUTAGE_S, Outage, is_transient, permanent_problem, retrying

PUSH_EVERY_S = 2.0
PROBE_EVERY_S = 10.0  # with nothing to upload, the mirror still reaches the bucket this often
# In a driver's cache: its records never all reached the bucket (an outage past the bound stopped
# the search), with the token of the lease that driver held. Never uploaded.
UNSENT_FILE = "unsent.json"


class BucketMirror:
    """Uploads the driver's live files from its cache to the bucket: its records and its
    TensorBoard logs, what changed, every ``PUSH_EVERY_S`` seconds from a thread, and all of it
    at ``close`` (every stop).

    A transient error (``tunekit.storage.faults``) starts an outage: the next rounds try again
    (a probe when nothing changed), ``say`` is told once that the bucket is unreachable and once
    that it is back, and an outage past ``outage_s`` is ``gave_up`` and handed to ``on_outage``
    (which stops the search). A permanent error is kept in ``problem``, and raised by ``close``.
    """

    def __init__(
        self,
        bucket: Bucket,
        cache: Path,
        *,
        outage_s: float = OUTAGE_S,
        say: Callable[[str], None] | None = None,
        on_outage: Callable[[StorageUnreachableError], None] | None = None,
    ) -> None:
        self.bucket, self.cache = bucket, cache
        self._sent: dict[str, tuple[int, int]] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.outage = Outage(f"storage {redacted(bucket.uri)}", outage_s, say)
        self._on_outage = on_outage
        self._contact = time.monotonic()  # the last round that reached the bucket
        self.problem: OSError | None = None
        self.gave_up: StorageUnreachableError | None = None

    def start(self) -> BucketMirror:
        self._thread = threading.Thread(target=self._run, name="tunekit-bucket", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(PUSH_EVERY_S):
            self.push_changed()

    def push_changed(self) -> None:
        """Uploads the cache's top-level files that changed since they were last sent; an error
        is kept (``problem``) or counted towards the outage, never raised."""
        if self.gave_up is not None:
            return
        try:
            self._push_once()
        except LeaseLostError:
            return  # no more writes: the lease's loss ends the driver (tunekit.storage.lease)
        except StorageError as error:  # the lease unconfirmed for storage.outage_s: the same outage
            self._give_up(self.outage.unreachable(error))
            return
        except OSError as error:
            if not is_transient(error):
                self.problem = error
                return
            try:
                self.outage.failed(error)
            except StorageUnreachableError as past_bound:
                self._give_up(past_bound)
            return
        self.problem = None
        self.outage.reached()

    def _give_up(self, past_bound: StorageUnreachableError) -> None:
        self.gave_up = past_bound
        if self._on_outage is not None:
            self._on_outage(past_bound)

    def _push_once(self) -> None:
        with self._lock:
            changed = []
            for relative in mirrored_files(self.cache):
                stat = (self.cache / relative).stat()
                mark = (stat.st_size, stat.st_mtime_ns)
                if self._sent.get(relative) != mark:
                    changed.append((relative, mark))
            # Nothing to send (trials wait in their uploads while the bucket is away): a probe, so
            # that an outage is noticed, and its end, without a change to carry the news.
            if not changed and (self.outage.ongoing or time.monotonic() - self._contact >= PROBE_EVERY_S):
                self.bucket.exists()
            if changed:
                self.bucket.push(self.cache, sorted((name for name, _ in changed), key=_upload_rank))
            self._sent.update(changed)
            self._contact = time.monotonic()

    def close(self) -> None:
        """Stops the thread and uploads what is left, waiting through an outage for the rest of
        its bound (none once it gave up); raises a permanent error as ``StorageError``."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.gave_up is None:
            self.push_changed()
        if self.outage.ongoing and self.gave_up is None:
            try:
                retrying(self._push_once, self.outage.what, outage_s=self.outage.left_s())
                self.outage.reached()
            except LeaseLostError:
                raise
            except StorageError as past_bound:  # the caller says it (``gave_up``); the lease's too
                self.gave_up = (
                    past_bound
                    if isinstance(past_bound, StorageUnreachableError)
                    else self.outage.unreachable(past_bound)
                )
        if self.problem is not None:
            raise StorageError(
                permanent_problem(self.problem, redacted(self.bucket.uri))
                or f"storage {redacted(self.bucket.uri)}: {self.problem}"
            )


def _upload_rank(name: str) -> int:
    """The study's journal before the tables, and its seal after both: the journal is written
    first (a trial's ending is told to the study before the tables record it), so a driver killed
    between two uploads leaves the bucket's study ahead of its tables, as a local folder's is,
    never behind them, and the seal never covers lines the bucket's journal lacks."""
    return {STUDY_FILE: 0, JOURNAL_SEAL_FILE: 2}.get(name, 1)


def mirrored_files(cache: Path) -> list[str]:
    """The files of a driver's cache the mirror uploads, relative to it: tunekit's records and
    TensorBoard logs."""
    candidates = [*cache.iterdir(), *(cache / TENSORBOARD_DIR).rglob("*")]
    return [path.relative_to(cache).as_posix() for path in candidates if _pushed(path)]


def mark_unsent(cache: Path, lease_token: str) -> None:
    """Records that the newest records of this driver's cache never reached the bucket, and
    under which lease they were written (``send_unsent``). Written past the lease's check: the
    outage that left them unsent leaves the lease unconfirmed too, and the file never leaves
    this machine (explorer seed 724138: a fenced write here ended the search with the lease's
    line instead of the outage's, and no mark)."""
    # A plain write: a torn mark reads as none, and the records then stay unsent, as before it.
    (cache / UNSENT_FILE).write_text(json.dumps({"lease_token": lease_token}))


def send_unsent(bucket: Bucket, took_over_token: str | None) -> int:
    """Uploads the records a driver on this machine could not (an outage past the bound stopped
    its search), when the lease this driver took over is that driver's: no driver wrote the
    bucket since, so the cache is ahead of it in every file. Returns how many files went.

    Without them the resume continued from the bucket's older records, and trials the stopped
    driver had ended while the bucket was away trained again (explorer seed 724138: trial 0
    pruned during the outage, pruned again after the resume). Another machine has no such
    cache: there those trials train again from their last checkpoints the bucket holds.
    """
    cache = bucket.cache("driver")
    try:
        written_under = json.loads((cache / UNSENT_FILE).read_text()).get("lease_token")
    except (OSError, ValueError, AttributeError):
        return 0
    if took_over_token is None or written_under != took_over_token:
        return 0  # another driver held the bucket since (or none was taken over): its records stand
    files = sorted(mirrored_files(cache), key=_upload_rank)
    bucket.push(cache, files)
    (cache / UNSENT_FILE).unlink()
    return len(files)


def _pushed(path: Path) -> bool:
    """Whether the mirror uploads this file of the cache: tunekit's own records only."""
    name = path.name
    return (
        path.is_file()
        and not name.endswith(NOT_PUSHED)
        and name not in (LEASE_FILE, ORIGIN_FILE, UNSENT_FILE)
        and not is_ray_state(name)
    )


@contextlib.contextmanager
def mirrored(
    experiment_dir: Path,
    *,
    outage_s: float = OUTAGE_S,
    say: Callable[[str], None] | None = None,
    on_outage: Callable[[StorageUnreachableError], None] | None = None,
) -> Iterator[BucketMirror | None]:
    """A bucket experiment's cache uploaded while the block runs and once more at its end (a
    local experiment: nothing to do); see ``BucketMirror`` for outages."""
    bucket = bucket_of(experiment_dir)
    if bucket is None:
        yield None
        return
    mirror = BucketMirror(bucket, experiment_dir, outage_s=outage_s, say=say, on_outage=on_outage).start()
    try:
        yield mirror
    finally:
        mirror.close()
