"""Building the Ray Tune run for a spec, running it, and resuming it.

The driver never imports TensorFlow: trials configure their own devices in their
worker processes (see ``tunekit.worker.devices``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, TextIO

from tunekit.compat.ray_tune import (
    before_cleanup_after_a_crash,
    one_registry_read_per_trainable,
    restored_tune_config,
)
from tunekit.config.growth import grow_hint, resumed_spec
from tunekit.config.objectives import headline_metric
from tunekit.config.spec import ExperimentSpec, load_spec
from tunekit.contract import Trainable, builders_from
from tunekit.driver.connect import (
    CONNECT_TIMEOUT_S,
    JoinedCluster,
    Target,
    check_fits,
    join,
    keep_ray_log,
    record_address,
    resume_target,
    run_target,
)
from tunekit.driver.folders import create_experiment_dir, discard_if_never_started, has_tune_state
from tunekit.driver.outages import check_writable, held_if_writable, storage_watched
from tunekit.driver.resumable import check_resumable, remove_stand_ins, stand_in_for_rotated_checkpoints
from tunekit.driver.session import (
    callers_ray,
    check_cluster_fits,
    check_storage_shared,
    driver_env,
    joined_address,
    keep_workers_warm,
    kill_owned_local_ray,
    ray_session,
    reuses_ray,
    wait_for_released_resources,
    wait_for_warm_workers,
)
from tunekit.driver.signals import StopSignals, exit_when_lost, quiet_trial_tracebacks
from tunekit.errors import NoResultError, NotAnExperimentError, SearchAborted, SearchInterrupted
from tunekit.layout import (
    DRIVER_LOG_FILE,
    ERROR_FILE,
    SPEC_FILE,
    TRIALS_FILE,
    TrialStatus,
    finite,
    unstarted_by_time_budget,
)
from tunekit.results.completion import search_complete, space_ran_out
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
from tunekit.storage.journal import JournalSealer
from tunekit.storage.lease import DriverLease
from tunekit.storage.store import table_rows, write_text
from tunekit.tracking.preflight import check_complete, check_reachable, complete_record


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
        _fit_saying_why(spec, experiment_dir, target, stream, restore=False)
    except BaseException as error:
        lease.release()
        discard_if_never_started(experiment_dir, error)
        raise
    finally:
        lease.release()
    return _closed(experiment_dir, stream, python_trainable)


def _fit_saying_why(
    spec: ExperimentSpec, experiment_dir: Path, target: Target, stream: TextIO | None, *, restore: bool
) -> None:
    """``_fit``, with a full disk anywhere in the driver or a trial (``ENOSPC`` in a table, the
    journal, Ray's saved state, a checkpoint) or a bucket's outage past ``storage.outage_s``
    ended by one line (``storage_watched``). Its running trials are held for the resume, as
    after any crash (``_fit``)."""
    with storage_watched(spec, experiment_dir, stream):
        _fit(spec, experiment_dir, target, stream, restore=restore)


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
    stand_ins = stand_in_for_rotated_checkpoints(directory)
    try:
        _fit_saying_why(spec, directory, target, stream, restore=True)
    finally:
        remove_stand_ins(directory, stand_ins)
    return _closed(directory, stream, python_trainable)


# What _fit imports once Ray is up: imported while Ray starts (session.ray_session), not before
# it, where Ray Tune's, Optuna's and pandas's imports (0.7 s of CPU, quiet) delayed Ray's start and
# so the first trials' workers.
AFTER_RAY_STARTS = ("ray.tune", "tunekit.driver.tune_run", "tunekit.driver.recorder", "tunekit.search.history")


def _fit(
    spec: ExperimentSpec,
    experiment_dir: Path,
    target: Target,
    stream: TextIO | None,
    *,
    restore: bool,
) -> None:
    from tunekit.driver.progress import ConsoleProgress

    session_began = time.time()  # the active clock's session starts here, with the console's
    console = ConsoleProgress(spec, stream) if stream else None
    if console:
        console.header(experiment_dir, _tracking_uri(spec))
        if target.note:
            console.phase(target.note)
    # A new search interrupted before fit has nothing to keep: the command removes it as it exits.
    discard = None if restore else experiment_dir
    with (
        StopSignals(experiment_dir, kill_owned_local_ray, discard=discard) as signals,
        ray_session(target.address, spec, console, signals, experiment_dir / DRIVER_LOG_FILE, AFTER_RAY_STARTS),
        # After Ray's start: it imports Ray Tune (in the background, with AFTER_RAY_STARTS).
        driver_env(),
    ):
        # A session that cannot place a trial ran nowhere: cluster.json keeps the last one's.
        check_cluster_fits(spec, experiment_dir)
        # Where this session ran, for the next resume (a local Ray records null).
        record_address(
            experiment_dir, joined_address() if target.address is not None else None, callers_ray=callers_ray()
        )
        if bucket_of(experiment_dir) is None:  # a bucket is every node's by its nature
            check_storage_shared(experiment_dir)
        if restore and not has_tune_state(experiment_dir):
            restore = False  # stopped during start-up, before Ray Tune saved anything: start afresh
        if console:
            console.phase("preparing the study and the Tuner")
        from tunekit.driver.guard import FailureRules
        from tunekit.driver.tune_run import tuner_for
        from tunekit.search.history import HistorySummary

        tuner, recorder, guard = tuner_for(spec, experiment_dir, console, restore=restore)
        recorder.session_began = session_began
        if console and spec.budget.time_budget_s:
            # A plain resume goes on with the seconds left; a grown search's budget starts again.
            left = restored_tune_config(tuner).time_budget_s if restore else spec.budget.time_budget_s
            left = left.total_seconds() if isinstance(left, dt.timedelta) else float(left or 0.0)
            console.session_time_budget(left)
            console.phase(f"time budget: {left:.0f} s left of {spec.budget.time_budget_s:g} s")
        signals.on_stop.append(recorder.searcher.hold_endings)
        if console:
            signals.on_stop.append(console.search_stopping)
        # Told to the study at once, from a thread (not the signal handler, which may have cut a
        # study write short): a second signal exits before the search's end would record it,
        # and `tunekit check` then took the held trials for a bug.
        signals.on_stop.append(
            lambda: threading.Thread(
                target=held_if_writable, args=(recorder.searcher,), name="tunekit-held", daemon=True
            ).start()
        )
        if console and not restore and (history := HistorySummary.recorded(experiment_dir)):
            console.phase(history.describe())
        if console:
            console.phase("waiting for the first trial workers (each imports TensorFlow)")
        with (
            signals.fitting(),
            quiet_trial_tracebacks(),
            one_registry_read_per_trainable(),
            before_cleanup_after_a_crash(recorder.searcher.hold_endings),
        ):
            # Inside fitting(): a signal meanwhile stops the search as one during fit does.
            wait_for_warm_workers(lambda: signals.received is not None)
            try:
                tuner.fit()
            except BaseException:
                # A crash is not a verdict: its running trials are the resume's to continue,
                # as a signal's are (the cleanup held their endings), whatever the error.
                with contextlib.suppress(Exception):  # the journal may be what failed
                    recorder.searcher.mark_held(True)
                with contextlib.suppress(Exception):
                    recorder.end_session()
                raise
            recorder.end_session()
        if signals.received is None:
            recorder.settle_study()
        else:  # a signal's stopped trials are the resume's to continue
            recorder.searcher.mark_held(True)
        JournalSealer(experiment_dir).seal()  # the study's last writes, after the tables' last seal
        wait_for_released_resources()
        if signals.received is None:
            keep_workers_warm(spec)  # for this process's next search
    if console and (exhausted := space_ran_out(experiment_dir, spec.name)):
        console.phase(f"the search ended early: {exhausted}")
    # A signal after the search ended by itself (``late``) stopped nothing, but ends the command as one.
    if (number := signals.received if signals.received is not None else signals.late) is not None:
        raise SearchInterrupted(
            f"interrupted by {signal.Signals(number).name}; "
            f"`tunekit resume {shown(experiment_dir)}` continues the search",
            experiment_dir,
            number,
        )
    if isinstance(guard, FailureRules) and guard.abort_reason:
        message = guard.abort_message(recorder.searcher.trial_number)
        raise SearchAborted(f"search stopped: {message}", experiment_dir)
    reason = no_result_reason(spec, experiment_dir, list(recorder.trials.values()), recorder.clock.now())
    if reason:
        raise NoResultError(reason, experiment_dir)
    check_complete(spec, experiment_dir, recorder.listeners)


def no_result_reason(spec: ExperimentSpec, experiment_dir: Path, records: Sequence[Any], elapsed: float) -> str:
    """Why no trial reported the metric, in one line, or "" when one did.

    Args:
        spec: the experiment's spec (metric name, time budget).
        experiment_dir: where each trial's ``error.txt`` lives.
        records: the recorder's ``TrialRecord``s, or ``trials.csv``'s rows (NaN where empty).
        elapsed: active seconds the search ran.
    """
    if any(finite(r.final_metric) is not None or finite(r.best_metric) is not None for r in records):
        return ""
    name = headline_metric(spec).name
    failed = [r for r in records if r.status == TrialStatus.FAILED]
    budget = spec.budget.time_budget_s
    if failed:
        first = min(failed, key=lambda r: r.ended_at or r.started_at)
        text = f"no trial reported {name}: {len(failed)} failed (first: {first.reason or 'no reason recorded'})"
        error_file = experiment_dir / first.trial_id / ERROR_FILE
        return text + (f", see {error_file}" if error_file.is_file() else "")
    if budget is not None and elapsed >= budget * 0.95:
        trained = any(r.epochs for r in records)
        what = "before any trial reported it" if trained else "before any trial finished an epoch"
        return f"no trial reported {name}: the time budget of {budget:g} s ran out {what}"
    if not records:
        return f"no trial reported {name}: no trial started"
    return f"no trial reported {name}: {len(records)} trials ended without reporting it"


def _tracking_uri(spec: ExperimentSpec) -> str | None:
    """The MLflow tracking URI the search will use (credentials removed), without importing MLflow."""
    if not spec.tracking.enabled:
        return None
    from tunekit.environment import redact_uri

    mlflow = sys.modules.get("mlflow")  # set_tracking_uri in this process counts, when MLflow is loaded
    uri = spec.tracking.uri or (mlflow.get_tracking_uri() if mlflow else None)
    uri = str(uri or os.environ.get("MLFLOW_TRACKING_URI") or "sqlite:///mlflow.db")
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        # MLflow's default store is relative to the working directory: say which file.
        uri = f"sqlite:///{Path.cwd() / uri.removeprefix('sqlite:///')}"
    return redact_uri(uri)


# --------------------------------------------------------------------------- signals
