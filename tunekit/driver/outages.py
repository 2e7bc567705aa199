"""The experiment's storage while a search runs, and before a resume starts Ray.

A search's storage faults each end in one line (``tunekit.storage.faults`` tells their kinds):

* a full disk anywhere, in the driver or a trial: ``NoSpaceError`` naming the storage and the
  space the search needs;
* a bucket away for longer than ``storage.outage_s``: the search is stopped as a signal stops
  it (its running trials held for the resume) and ends with ``StorageUnreachableError``;
  shorter outages are waited through, said once as they start and once as they end.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from tunekit.config.spec import ExperimentSpec
from tunekit.driver.signals import stop_search_for
from tunekit.errors import SearchInterrupted, StorageError, StorageUnreachableError
from tunekit.storage.buckets import shown
from tunekit.storage.faults import is_transient, permanent_problem
from tunekit.storage.mirror import mark_unsent, mirrored
from tunekit.storage.store import free_bytes, no_space_error, no_space_in, space_needed


@contextlib.contextmanager
def storage_watched(
    spec: ExperimentSpec, experiment_dir: Path, stream: TextIO | None, lease_token: str | None
) -> Iterator[None]:
    """Runs the block (a search's ``fit``) with its storage's faults ended in one line each, and a
    bucket's cache uploaded as it changes and at the end (``tunekit.storage.mirror``). A
    search stopped by an outage leaves its cache marked as ahead of the bucket, under the lease
    ``lease_token`` names, for the resume on this machine to send first (``send_unsent``)."""

    def say(line: str) -> None:
        if stream is not None:
            print(f"tunekit: {line}", file=stream, flush=True)

    try:
        with mirrored(experiment_dir, outage_s=spec.storage.outage_s, say=say, on_outage=stop_search_for) as mirror:
            try:
                yield
            except OSError as error:  # Ray's own reads of the bucket as fit ends (its results)
                if mirror is None or not is_transient(error):
                    raise
                mirror.gave_up = mirror.gave_up or StorageUnreachableError(
                    f"storage {shown(experiment_dir)}: unreachable ({' '.join(str(error).split())[:300]})"
                )
            except (SearchInterrupted, StorageError) as error:
                # The outage's stop, or a write that waited as long for the lease's confirmation
                # (tunekit.storage.lease): the outage says it. A user's signal, or another storage error, as it is.
                if mirror is None or not (mirror.gave_up or mirror.outage.ongoing):
                    raise
                mirror.gave_up = mirror.gave_up or mirror.outage.unreachable(error)
        if mirror is not None and mirror.gave_up is not None:
            # The search stopped for the outage, or ended while the bucket was away: its last
            # records did not reach the bucket, which the resume continues from.
            if lease_token is not None:
                mark_unsent(experiment_dir, lease_token)
            raise StorageUnreachableError(
                f"{mirror.gave_up}; the search stopped, its running trials held: "
                f"`tunekit resume {shown(experiment_dir)}` continues it once the storage is back",
                experiment_dir,
            ) from None
    except Exception as error:
        if (full := no_space_in(error)) is None:
            raise
        raise no_space_error(experiment_dir, full, checkpoints=2 * spec.budget.max_concurrent) from error


def check_writable(spec: ExperimentSpec, experiment_dir: Path) -> None:
    """Before a resume starts Ray: the experiment's folder takes a file, and its device has the
    space the search needs; else one line naming it and the fix."""
    probe = experiment_dir / f".tunekit-write-probe-{os.getpid()}"
    try:
        probe.write_bytes(b"probe\n")
        probe.unlink()
    except OSError as error:
        raise StorageError(
            permanent_problem(error, experiment_dir) or f"{experiment_dir}: not writable ({error})"
        ) from None
    checkpoints = 2 * spec.budget.max_concurrent
    if free_bytes(experiment_dir) < space_needed(experiment_dir, checkpoints):
        raise no_space_error(experiment_dir, None, checkpoints=checkpoints)


def held_if_writable(searcher: Any) -> None:
    """Marks the study's stopped trials held (``mark_held``), from the stop's own thread; in a
    storage outage the write is refused (the lease cannot be confirmed): the search's end marks
    them again, and the outage's line says how to resume."""
    with contextlib.suppress(StorageError):
        searcher.mark_held(True)
