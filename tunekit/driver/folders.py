"""A search's experiment folder: created under a local storage or a bucket, removed when
nothing started in it (``tunekit.driver.runner`` creates and discards; ``tunekit.storage``
knows buckets)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from tunekit.config.spec import ExperimentSpec
from tunekit.errors import SpecError, StorageError
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
from tunekit.storage.store import write_text


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
