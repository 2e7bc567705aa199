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
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, TextIO

from tunekit.clock import SearchClock
from tunekit.compat.ray_tune import (
    before_cleanup_after_a_crash,
    bound_experiment_state_saves,
    no_trailing_averages,
    one_registry_read_per_trainable,
    restored_tune_config,
    whole_file_state_uploads,
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
from tunekit.driver.restore import restored_tuner
from tunekit.driver.resumable import check_resumable, stand_in_for_rotated_checkpoints
from tunekit.driver.session import (
    SAVE_STATE_AT_MOST_EVERY_S,
    SAVE_STATE_EVERY_S,
    SAVE_STATE_SHARE,
    SAVE_STATE_TO_A_BUCKET_EVERY_S,
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
from tunekit.driver.study_catch_up import caught_up
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
from tunekit.lease import DriverLease
from tunekit.results.completion import search_complete, space_ran_out
from tunekit.results.load import ExperimentResults, load
from tunekit.search.forecast import attach_prediction
from tunekit.storage import (
    Bucket,
    bucket_of,
    check_bucket,
    is_uri,
    local_path,
    location_of,
    mirror_cache,
    mirrored,
    push_ray_state,
    redacted,
    shown,
)
from tunekit.store import no_space_error, no_space_in, table_rows, write_text
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
    journal, Ray's saved state, a checkpoint) ended by one line: ``NoSpaceError`` naming the
    storage and the space the search needs. Its running trials are held for the resume, as
    after any crash (``_fit``)."""
    try:
        with mirrored(experiment_dir):  # a bucket's cache: uploaded as it changes, and at every stop
            _fit(spec, experiment_dir, target, stream, restore=restore)
    except Exception as error:
        if (full := no_space_in(error)) is None:
            raise
        raise no_space_error(experiment_dir, full, checkpoints=2 * spec.budget.max_concurrent) from error


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
        return _resume(directory, overrides, address, local, connect_timeout, stream, python_trainable)


def _resume(
    directory: Path,
    overrides: Sequence[str],
    address: str | None,
    local: bool,
    connect_timeout: float,
    stream: TextIO | None,
    python_trainable: Any,
) -> ExperimentResults:
    """``resume``'s work, with the experiment's lease held."""
    spec, grown = resumed_spec(directory, overrides, python_trainable)
    caught_up(directory, spec, stream)  # a bucket's journal may be behind its tables: before anything reads it
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
    # Before Ray starts: every record the resume continues from is whole (the journal's torn
    # tail is cut back here, and said).
    for mended in check_resumable(directory):
        if stream is not None:
            stream.write(f"tunekit: {mended}\n")
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
        _fit_saying_why(spec, directory, target, stream, restore=True)
    finally:
        for stand_in in stand_ins:
            with contextlib.suppress(OSError):  # Ray's own rotation may have removed it
                stand_in.rmdir()
    return _closed(directory, stream, python_trainable)


def _fit(
    spec: ExperimentSpec,
    experiment_dir: Path,
    target: Target,
    stream: TextIO | None,
    *,
    restore: bool,
) -> None:
    from tunekit.driver.progress import ConsoleProgress
    from tunekit.search.history import HistorySummary

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
        driver_env(),
        ray_session(target.address, spec, console, signals, experiment_dir / DRIVER_LOG_FILE),
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

        tuner, recorder, guard = _tuner_for(spec, experiment_dir, console, restore=restore)
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
                target=recorder.searcher.mark_held, args=(True,), name="tunekit-held", daemon=True
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
        wait_for_released_resources()
        if signals.received is None:
            keep_workers_warm(spec)  # for this process's next search
    if console and (exhausted := space_ran_out(experiment_dir, spec.name)):
        console.phase(f"the search ended early: {exhausted}")
    if signals.received is not None:
        raise SearchInterrupted(
            f"interrupted by {signal.Signals(signals.received).name}; "
            f"`tunekit resume {shown(experiment_dir)}` continues the search",
            experiment_dir,
            signals.received,
        )
    if isinstance(guard, FailureRules) and guard.abort_reason:
        message = guard.abort_message(recorder.searcher.trial_number)
        raise SearchAborted(f"search stopped: {message}", experiment_dir)
    reason = no_result_reason(spec, experiment_dir, list(recorder.trials.values()), recorder.clock.now())
    if reason:
        raise NoResultError(reason, experiment_dir)
    check_complete(spec, experiment_dir, recorder.listeners)


def _tuner_for(spec: ExperimentSpec, experiment_dir: Path, console: Any, *, restore: bool) -> tuple[Any, Any, Any]:
    """A new Tuner, or the experiment's restored one with this process's listeners attached.

    See ``tunekit.driver.restore`` for what a restore mends before ``fit``.
    """
    # In a bucket each save is an upload of Ray's whole state: every few seconds, not every second.
    every_s = SAVE_STATE_TO_A_BUCKET_EVERY_S if bucket_of(experiment_dir) else SAVE_STATE_EVERY_S
    bound_experiment_state_saves(every_s, SAVE_STATE_AT_MOST_EVERY_S, SAVE_STATE_SHARE)
    whole_file_state_uploads()
    no_trailing_averages()
    listeners = _listeners(spec, experiment_dir, console)
    if not restore:
        return _build_tuner(spec, experiment_dir, listeners)
    restored = restored_tuner(spec, experiment_dir, listeners, _trainable(spec, experiment_dir))
    push_ray_state(experiment_dir)  # a bucket's: the state as the resume mended it, before Ray reads it
    return restored


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


# The benchmarks' seam (benchmarks/scale.py), and nothing else's: a trial function in place of
# tunekit's Keras trial and listeners that watch the driver. No spec key or CLI flag reaches it.
_BENCHMARK_SEAM: tuple[Callable[..., None], tuple[Any, ...]] | None = None


@contextlib.contextmanager
def synthetic_trials_for_benchmarks(trial_function: Callable[..., None], *listeners: Any) -> Iterator[None]:
    """Within this block, searches run ``trial_function(config, spec, experiment_dir)`` as every
    trial, and ``listeners`` hear the recorder as the console does; everything else is as ever."""
    global _BENCHMARK_SEAM
    _BENCHMARK_SEAM = (trial_function, listeners)
    try:
        yield
    finally:
        _BENCHMARK_SEAM = None


def _listeners(spec: ExperimentSpec, experiment_dir: Path, console: Any) -> list[Any]:
    """Who hears about the search as it goes: the console, the cluster's nodes and, when enabled, MLflow
    and TensorBoard."""
    from tunekit.driver.nodes import NodeWatch
    from tunekit.results.summary import LedgerFile

    # The ledger file first: the MLflow tracker logs it to the parent run at the search's end.
    listeners: list[Any] = [*([console] if console else []), LedgerFile(experiment_dir)]
    listeners.append(NodeWatch())
    if spec.tracking.enabled:
        from tunekit.tracking.tracker import MlflowTracker

        listeners.append(MlflowTracker(spec, experiment_dir))
    if spec.tracking.tensorboard:
        from tunekit.tracking.tensorboard import TensorBoardLogger

        listeners.append(TensorBoardLogger(spec, experiment_dir))
    return [*listeners, *(_BENCHMARK_SEAM[1] if _BENCHMARK_SEAM else ())]


def _build_tuner(spec: ExperimentSpec, experiment_dir: Path, listeners: list[Any]) -> tuple[Any, Any, Any]:
    from ray import tune

    from tunekit.driver.deadline import TrialDeadline
    from tunekit.driver.fencing import fenced
    from tunekit.driver.recorder import Recorder
    from tunekit.driver.stopper import FailureGuard
    from tunekit.search.schedulers import build_scheduler, checkpoints_to_keep
    from tunekit.search.searcher import OptunaStudySearcher
    from tunekit.search.trial_names import name_trials_by, ray_trial_name

    searcher = OptunaStudySearcher(spec, experiment_dir)
    name_trials_by(searcher.trial_number)
    searcher.study  # noqa: B018 - create the study (and enqueue warm starts) before any trial
    scheduler = build_scheduler(spec, experiment_dir, searcher.trial_number)
    guard = FailureGuard()
    recorder = Recorder(spec, experiment_dir, searcher, scheduler, [*listeners, guard])
    tuner = tune.Tuner(
        _trainable(spec, experiment_dir),
        tune_config=tune.TuneConfig(
            search_alg=searcher,
            scheduler=scheduler,
            num_samples=spec.budget.num_samples,
            # Ray keeps one pending trial for custom searchers unless a limit is set.
            max_concurrent_trials=spec.budget.max_concurrent,
            time_budget_s=spec.budget.time_budget_s,
            # Reused workers pay TensorFlow's import and device set-up once, not per trial.
            reuse_actors=True,
            trial_dirname_creator=trial_dir_name,
            trial_name_creator=ray_trial_name,
        ),
        run_config=tune.RunConfig(
            name=experiment_dir.name,
            storage_path=bucket.parent_uri if (bucket := bucket_of(experiment_dir)) else str(experiment_dir.parent),
            callbacks=fenced([recorder, TrialDeadline(spec.training.trial_timeout_s, recorder)]),
            stop=guard,
            verbose=0,
            failure_config=tune.FailureConfig(max_failures=spec.training.max_failures),
            checkpoint_config=tune.CheckpointConfig(num_to_keep=checkpoints_to_keep(spec)),
            # A bucket's trials keep their output.log and error.txt in Ray's working directory,
            # which Ray uploads beside their checkpoints (tunekit.worker.trial._trial_dir).
            sync_config=tune.SyncConfig(sync_artifacts=bucket is not None),
        ),
    )
    return tuner, recorder, guard


def trial_dir_name(trial: Any) -> str:
    """A trial's folder in the experiment: its id. A module function, not a lambda: Ray keeps
    it in every trial's saved state, where a lambda is pickled whole (1.2 KB a trial, 12 MB
    of each save at 10,000 trials) and a function by its name."""
    return str(trial.trial_id)


def _trainable(spec: ExperimentSpec, experiment_dir: Path) -> Any:
    from ray import tune

    from tunekit.config.resources import trial_resources
    from tunekit.worker.trial import run_trial

    trial = _BENCHMARK_SEAM[0] if _BENCHMARK_SEAM else run_trial
    return tune.with_resources(
        # A bucket experiment's workers write their trial files to the bucket, not to this cache.
        tune.with_parameters(trial, spec=spec, experiment_dir=location_of(experiment_dir)),
        trial_resources(spec.resources),
    )


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
