"""Building the Ray Tune run for a spec, running it, and resuming it.

The driver never imports TensorFlow: trials configure their own devices in their
worker processes (see ``tunekit.worker.devices``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, TextIO

from tunekit.config.growth import grow_hint, resumed_spec
from tunekit.config.spec import ExperimentSpec, load_spec
from tunekit.contract import Trainable, builders_from
from tunekit.driver.connect import (
    CONNECT_TIMEOUT_S,
    JoinedCluster,
    Target,
    check_fits,
    join,
    keep_ray_log,
    resume_target,
    run_target,
)
from tunekit.driver.fit import fit_saying_why
from tunekit.driver.folders import create_experiment_dir, discard_if_never_started
from tunekit.driver.outages import check_writable
from tunekit.driver.resumable import check_resumable, stand_in_for_rotated_checkpoints
from tunekit.driver.session import (
    reuses_ray,
)
from tunekit.driver.signals import StopSignals, exit_when_lost
from tunekit.errors import NoResultError, NotAnExperimentError
from tunekit.layout import (
    SPEC_FILE,
    TRIALS_FILE,
    unstarted_by_time_budget,
)
from tunekit.results.completion import no_result_reason, search_complete
from tunekit.results.load import ExperimentResults, load
from tunekit.search.forecast import attach_prediction
from tunekit.storage.buckets import (
    Bucket,
    bucket_of,
    check_bucket,
    is_uri,
    local_path,
    mirror_cache,
    redacted,
    shown,
)
from tunekit.storage.clock import SearchClock
from tunekit.storage.lease import DriverLease
from tunekit.storage.store import table_rows, write_text
from tunekit.tracking.preflight import check_reachable, complete_record


def run(
    spec: str | Path | Mapping[str, Any] | ExperimentSpec,
    *,
    overrides: Sequence[str] = (),
    name: str | None = None,
    storage: str | Path | None = None,
    address: str | None = None,
    connect_timeout: float = CONNECT_TIMEOUT_S,
    progress: TextIO | bool | None = True,
    trainable: ModuleType | None = None,
    build_data: Callable[..., Any] | None = None,
    build_model: Callable[..., Any] | None = None,
    fit_options: Callable[..., Any] | None = None,
    **sections: Any,
) -> ExperimentResults:
    """Runs a search and returns its results.

    Args:
        spec: a spec file path, a parsed mapping, or a loaded ``ExperimentSpec``.
        overrides: ``key.path=value`` strings, as ``tunekit run --set``.
        name: the experiment directory's name (default: the spec's name and a timestamp).
        storage: where experiment directories live (default: the spec's ``storage.path``).
        address: a Ray cluster to join (default: ``RAY_ADDRESS``, else a private local Ray;
            ``auto``: the cluster ``ray start`` recorded on this machine).
        connect_timeout: seconds joining the cluster may take (a bounded probe, before anything
            is written).
        progress: a stream for live progress and the closing lines (the best, its config, the
            times: as `tunekit run` prints them), True for stdout, False for silence.
        trainable: the trainable as a module object (from a notebook); the spec's
            ``trainable`` is then ignored and may be omitted.
        build_data: ``build_data`` as a function, with ``build_model`` (and optionally
            ``fit_options``) instead of a module; functions travel to the workers by Ray's
            serialisation.
        build_model: ``build_model`` as a function (with ``build_data``).
        fit_options: ``fit_options`` as a function (optional).
        **sections: spec sections deep-merged over the spec, e.g. ``budget={"num_samples": 4}``.

    Raises:
        SpecError: the spec is invalid; nothing was written.
        SearchAborted: a trial error every trial would hit stopped the search.
        NoResultError: no trial reported the metric (all failed, or the time budget ended first).
        ClusterError: the cluster could not be joined (nothing listens, token, versions, time).
        ResourceError: no node of the cluster can ever give a trial its CPUs or GPUs.
        StorageError: the storage is not shared by every node of the cluster.
        SearchInterrupted: SIGINT or SIGTERM stopped the search; ``tunekit.resume`` continues it.

    Each error but SpecError and ClusterError carries ``experiment_dir``, whose results
    stay loadable; it is None when the search stopped before Ray Tune started it, whose
    directory is removed (nothing ran, nothing is left behind).
    """
    launched_at = time.time()  # the zero of a filed prediction's wall time
    python_trainable = builders_from(trainable, build_data, build_model, fit_options)
    if not isinstance(spec, ExperimentSpec):
        spec = load_spec(spec, overrides, sections, python_trainable)
    elif python_trainable is not None:
        spec = dataclasses.replace(spec, trainable=python_trainable)
    check_reachable(spec)  # tracking.required: refuse before anything is written or started
    target = run_target(address)
    joined = _join(spec, target, connect_timeout, None)  # a cluster first: nothing is written if it fails
    experiment_dir = create_experiment_dir(spec, name, storage)
    lease = DriverLease(experiment_dir, "run")
    lease.outage_s = spec.storage.outage_s  # writes wait for its confirmation as long as for the storage
    lease.acquire()  # a new folder: no other driver can hold it, but one may try from now on
    exit_when_lost(lease)
    try:
        if joined is not None:
            keep_ray_log(experiment_dir, joined.ray_log)
        # A `tunekit plan --probe` of this spec under the same storage: its prediction goes with the experiment.
        no_prediction = attach_prediction(spec, experiment_dir, target.address, launched_at)
        stream = sys.stdout if progress is True else (progress or None)
        if no_prediction and stream is not None:
            print(f"tunekit: {no_prediction}", file=stream, flush=True)
        fit_saying_why(spec, experiment_dir, target, stream, restore=False)
    except BaseException as error:
        lease.release()
        discard_if_never_started(experiment_dir, error)
        raise
    finally:
        lease.release()
    return _closed(experiment_dir, stream, python_trainable)


def _closed(experiment_dir: Path, stream: TextIO | None, builders: Trainable | None) -> ExperimentResults:
    """The search's results, holding the builders passed from Python for their rebuilds; its closing
    lines written to the progress stream first."""
    from tunekit.results.closing import closing_text

    results = dataclasses.replace(load(experiment_dir), builders=builders)
    if stream is not None:
        stream.write(closing_text(results))
        stream.flush()
    return results


def _join(spec: ExperimentSpec, target: Target, timeout_s: float, experiment_dir: Path | None) -> JoinedCluster | None:
    """Joins ``target``'s cluster with a bound, and checks a trial fits, before Ray starts here.

    A signal meanwhile ends the start-up (``StopSignals``): nothing was started, and a new
    search has nothing written yet.
    """
    if reuses_ray(target.address):
        return None  # the caller's Ray, or the one kept from an earlier run: checked in the session
    with StopSignals(experiment_dir):
        resuming = experiment_dir is not None
        joined = None if target.address is None else join(target.address, timeout_s, resuming=resuming)
        check_fits(spec, joined)
    return joined


def resume(
    experiment_dir: str | Path,
    *,
    overrides: Sequence[str] = (),
    address: str | None = None,
    local: bool = False,
    connect_timeout: float = CONNECT_TIMEOUT_S,
    progress: TextIO | bool | None = True,
    trainable: ModuleType | None = None,
    build_data: Callable[..., Any] | None = None,
    build_model: Callable[..., Any] | None = None,
    fit_options: Callable[..., Any] | None = None,
) -> ExperimentResults:
    """Finishes an interrupted search from its directory, or grows a finished one.

    A search whose builders were passed from Python needs them passed again here. It runs
    where it ran: the cluster recorded in ``cluster.json`` is joined again.

    Args:
        address: another cluster to run on (the console says so).
        local: run on a private local Ray although the search ran on a cluster.
        overrides: ``key.path=value`` strings, as ``tunekit resume --set``: only
            ``budget.num_samples`` (at least the trials already run), ``budget.max_concurrent``
            and ``budget.time_budget_s`` may change. The study's history, ASHA's rungs and
            the MLflow runs carry on; spec.yaml records the new budget, and a new time
            budget counts from this resume.

    Raises:
        SpecError: an override changes anything else, or asks for fewer trials than ran.

    Other errors are ``run``'s; so are the trainable's arguments. ``experiment_dir`` may be a
    bucket experiment's URI (``s3://bucket/prefix/name``), resumed from any machine.
    """
    python_trainable = builders_from(trainable, build_data, build_model, fit_options)
    stream = sys.stdout if progress is True else (progress or None)
    location = str(experiment_dir)
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
        # A bucket's: this machine's cache of it, pulled afresh (the bucket is the source of truth).
        directory = Path(location) if bucket is None else bucket.pull(mirror_cache(bucket, "driver", fresh=True))
        return _resume(directory, overrides, address, local, connect_timeout, stream, python_trainable, lease)


def _resume(
    directory: Path,
    overrides: Sequence[str],
    address: str | None,
    local: bool,
    connect_timeout: float,
    stream: TextIO | None,
    python_trainable: Any,
    lease: DriverLease,
) -> ExperimentResults:
    """``resume``'s work, with the experiment's lease held."""
    spec, grown = resumed_spec(directory, overrides, python_trainable)
    lease.outage_s = spec.storage.outage_s  # writes wait for its confirmation as long as for the storage
    # Before anything is read as whole, and before Ray starts: every record the resume continues
    # from is (the journal's torn tail is cut back here, and said); a complete search's too.
    for mended in check_resumable(directory):
        if stream is not None:
            stream.write(f"tunekit: {mended}\n")
    from tunekit.driver.study_catch_up import caught_up

    caught_up(directory, spec, stream)  # a study behind its tables takes their endings: before anything reads it
    rows = table_rows(directory / TRIALS_FILE)
    if not grown and search_complete(directory, spec.name, spec.budget.num_samples, rows):
        if stream is not None:  # no Ray, no session: the search's figures stay as they are
            said = f"nothing to resume{grow_hint(shown(directory), spec.scheduler.type, python_trainable is not None)}"
            endings = [(row.get("status"), row.get("reason")) for row in rows]
            if unstarted_by_time_budget(spec.budget.num_samples, endings):
                said = (
                    f"its time budget of {spec.budget.time_budget_s or 0:g} s ran out (`tunekit resume "
                    f"{shown(directory)} --set budget.time_budget_s=N` runs the rest for up to N seconds)"
                )
            stream.write(f"the search is complete: {said}\n")
        if (done := complete_record(spec, directory)) is not None and stream is not None:
            stream.write(done + "\n")
        results = load(directory)
        # A complete search with no result fails as its run did (exit 1), resumed or not.
        clock = SearchClock.read(directory)
        trials = list(results.trials.itertuples())  # trials.csv's rows, read as the run's records are
        reason = no_result_reason(spec, directory, trials, clock.active_seconds if clock else 0.0)
        if reason:
            raise NoResultError(reason, directory)
        return _closed(directory, stream, python_trainable)
    check_writable(spec, directory)  # a read-only folder or a full disk: one line, before Ray starts
    check_reachable(spec)
    target = resume_target(directory, address, local=local)
    joined = _join(spec, target, connect_timeout, directory)
    if joined is not None:
        keep_ray_log(directory, joined.ray_log)
    if grown:
        write_text(directory / SPEC_FILE, spec.to_yaml())
    # A bucket's checkpoints are objects: Ray finds the rotated ones missing there, not here.
    stand_ins = stand_in_for_rotated_checkpoints(directory) if bucket_of(directory) is None else []
    try:
        fit_saying_why(spec, directory, target, stream, restore=True)
    finally:
        for stand_in in stand_ins:
            with contextlib.suppress(OSError):  # Ray's own rotation may have removed it
                stand_in.rmdir()
    return _closed(directory, stream, python_trainable)
