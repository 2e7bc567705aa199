"""The folder stage of a search: its experiment folder, held by this driver's lease (``Experiment``).

A new search's folder is created under a local storage or a bucket, and removed when nothing
started in it; a resume opens a stopped search's folder (a bucket's: this machine's cache of
it, pulled afresh). ``tunekit.driver.runner`` runs the stages; ``tunekit.storage`` knows
buckets and the lease.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from tunekit.config.spec import ExperimentSpec
from tunekit.driver.signals import exit_when_lost
from tunekit.errors import NotAnExperimentError, SpecError, StorageError
from tunekit.layout import SPEC_FILE, TRIALS_FILE
from tunekit.storage.buckets import (
    Bucket,
    bucket_of,
    check_bucket,
    is_uri,
    join_uri,
    local_path,
    mirror_cache,
    redacted,
)
from tunekit.storage.faults import permanent_problem
from tunekit.storage.lease import DriverLease
from tunekit.storage.mirror import send_unsent
from tunekit.storage.store import write_text


@dataclass(frozen=True)
class Experiment:
    """What the folder stage hands on: the experiment's folder (a bucket's: this machine's cache of
    it), the lease that makes this driver its one writer, and whether the search is restored
    from Ray Tune's saved state (a resume) or new."""

    directory: Path
    lease: DriverLease
    restore: bool


def new_experiment(spec: ExperimentSpec, name: str | None, storage: str | Path | None) -> Experiment:
    """A new search's folder with its spec (``create_experiment_dir``), its lease taken; the caller
    releases it."""
    directory = create_experiment_dir(spec, name, storage)
    lease = DriverLease(directory, "run")
    lease.outage_s = spec.storage.outage_s  # writes wait for its confirmation as long as for the storage
    lease.acquire()  # a new folder: no other driver can hold it, but one may try from now on
    exit_when_lost(lease)
    return Experiment(directory, lease, restore=False)


@contextlib.contextmanager
def opened_experiment(location: str | Path, stream: TextIO | None) -> Iterator[Experiment]:
    """A stopped search's folder, its lease held while the block runs (taken over from a driver
    that is gone, said on ``stream``); a bucket's is pulled afresh into this machine's cache.

    Raises:
        NotAnExperimentError: ``location`` holds no spec (a bucket's: nothing), before the lease.
    """
    location = str(location)
    bucket = Bucket(location) if is_uri(location) else None
    if bucket is not None:
        check_bucket(location)  # one line before anything: the scheme, credentials, the bucket, the endpoint
        if not bucket.exists():
            raise NotAnExperimentError(redacted(location), SPEC_FILE)
    else:
        location = str(local_path(location))
        if not (Path(location) / SPEC_FILE).is_file():
            raise NotAnExperimentError(location, SPEC_FILE)
    with DriverLease(location, "resume") as lease:
        exit_when_lost(lease)
        if lease.took_over is not None and stream is not None:
            stream.write(f"tunekit: took over the lease of a driver that is gone: {lease.took_over.describe()}\n")
        # A bucket's: this machine's cache of it, pulled afresh (the bucket is the source of truth),
        # once the records a driver here stopped by an outage could not send have gone to it.
        taken = lease.took_over.token if lease.took_over is not None else None
        sent = send_unsent(bucket, taken) if bucket is not None else 0
        if sent and stream is not None:
            stream.write(
                f"tunekit: sent {sent} files of records the last driver on this machine could not (the storage "
                "was away when it stopped): the trials it ended stay ended\n"
            )
        directory = Path(location) if bucket is None else bucket.pull(mirror_cache(bucket, "driver", fresh=True))
        yield Experiment(directory, lease, restore=True)


def create_experiment_dir(spec: ExperimentSpec, name: str | None, storage: str | Path | None) -> Path:
    """The new experiment's folder with its spec: under a local storage, or, under a bucket,
    this machine's cache of it (``tunekit.storage``), the bucket checked usable first."""
    location = str(storage or spec.storage.path)
    name = name or f"{spec.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    if is_uri(location):
        return _create_in_bucket(spec, location, name)
    directory = local_path(location) / name
    if directory.exists():
        raise StorageError(f"{directory} already exists; pick another --name or `tunekit resume` it")
    try:
        directory.mkdir(parents=True)
    except OSError as error:
        problem = permanent_problem(error, directory.parent)
        raise StorageError(problem or f"cannot create {directory}: {error.strerror}") from None
    write_text(directory / SPEC_FILE, spec.to_yaml())
    return directory


def _create_in_bucket(spec: ExperimentSpec, location: str, name: str) -> Path:
    if spec.scheduler.type == "pbt":  # its exploits copy checkpoints on the driver's file system
        raise SpecError("scheduler.type", f"pbt needs a shared folder as storage, not a bucket ({redacted(location)})")
    check_bucket(location)  # one line and nothing written: a scheme, credentials, the bucket, the endpoint
    bucket = Bucket(join_uri(location, name))
    if bucket.exists():
        raise StorageError(f"{redacted(bucket.uri)} already exists; pick another --name or `tunekit resume` it")
    directory = mirror_cache(bucket, "driver", fresh=True)
    write_text(directory / SPEC_FILE, spec.to_yaml())
    bucket.push(directory, [SPEC_FILE])
    return directory


def discard_if_never_started(experiment_dir: Path, error: BaseException) -> None:
    """A new search stopped before Ray Tune started it (no trial, no saved state) leaves nothing behind.

    Its directory holds only what start-up wrote (the spec, the study, driver.log): removed,
    and the error no longer points to it.
    """
    if has_tune_state(experiment_dir) or (experiment_dir / TRIALS_FILE).exists():
        return
    if (bucket := bucket_of(experiment_dir)) is not None:  # its spec (and lease) in the bucket too
        for relative in bucket.listing():
            bucket.delete(relative)
    shutil.rmtree(experiment_dir, ignore_errors=True)
    if getattr(error, "experiment_dir", None) is not None:
        error.experiment_dir = None  # type: ignore[attr-defined]


def has_tune_state(experiment_dir: Path) -> bool:
    return any(experiment_dir.glob("experiment_state-*.json"))
