"""Building the Ray Tune run for a spec, running it, and resuming it.

The driver never imports TensorFlow: trials configure their own devices in their
worker processes (see ``tunekit.resources``).
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any, TextIO

from tunekit.contract import TrainableRef, builders_from
from tunekit.errors import NoResultError, ResourceError, SearchAborted, SearchInterrupted, StorageError
from tunekit.layout import ERROR_FILE, SPEC_FILE
from tunekit.results import ExperimentResults, load
from tunekit.spec import ExperimentSpec, load_spec

# Settings of the driver's Ray Tune, and why:
_DRIVER_ENV = {
    # tunekit writes its own trial and epoch tables; Ray's per-result JSON, CSV and
    # TensorBoard loggers would only slow the driver loop every trial waits on.
    "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "1",
    # A failed trial's last report has no metric; the trainable checks metric names
    # itself and fails with the list of names it did see.
    "TUNE_DISABLE_STRICT_METRIC_CHECKING": "1",
    # Save Ray's experiment state (trials, searcher and recorder state) every second,
    # so a killed driver loses at most a second of bookkeeping.
    "TUNE_GLOBAL_CHECKPOINT_S": "1",
    # verbose=0 alone still prints the new output engine's banner; tunekit shows its own progress.
    "RAY_AIR_NEW_OUTPUT": "0",
    # tunekit handles SIGINT and SIGTERM itself (_StopSignals) and stops Tune through the
    # same event Ray's Ctrl-C handler sets, so both signals stop a search the same way.
    "TUNE_DISABLE_SIGINT_HANDLER": "1",
}
# ...and of the workers:
_WORKER_ENV = {
    "TF_CPP_MIN_LOG_LEVEL": "2",
    # ASHA's STOP reaches a reused worker as SystemExit inside report(). Ray waits only
    # 2 s (read in the worker) for that thread to unwind, then fails the *next* trial
    # outright, without retry; on a busy machine Keras needs longer.
    "TUNE_FUNCTION_THREAD_TIMEOUT_S": "60",
    # Relative paths in a trainable (data folders) resolve against the launch directory.
    "RAY_CHDIR_TO_TRIAL_DIR": "0",
}


def run(
    spec: str | Path | Mapping[str, Any] | ExperimentSpec,
    *,
    overrides: Sequence[str] = (),
    name: str | None = None,
    storage: str | Path | None = None,
    address: str | None = None,
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
        trainable, build_data, build_model, fit_options: the trainable as a module object,
            or its builder functions (from a notebook); the spec's ``trainable`` is then
            ignored and may be omitted. Functions travel to the workers by Ray's
            serialisation.
        overrides: ``key.path=value`` strings, as ``tunekit run --set``.
        name: the experiment directory's name (default: the spec's name and a timestamp).
        storage: where experiment directories live (default: the spec's ``storage.path``).
        address: a Ray cluster to join (default: ``RAY_ADDRESS``, else a local Ray).
        progress: a stream for live progress, True for stdout, False for silence.
        **sections: spec sections deep-merged over the spec, e.g. ``budget={"num_samples": 4}``.

    Raises:
        SpecError: the spec is invalid; nothing was written.
        SearchAborted: a trial error every trial would hit stopped the search.
        NoResultError: no trial reported the metric (all failed, or the time budget ended first).
        ResourceError: no node of the cluster can ever give a trial its CPUs or GPUs.
        SearchInterrupted: SIGINT or SIGTERM stopped the search; ``tunekit.resume`` continues it.
        Each of these but SpecError carries ``experiment_dir``, whose results stay loadable.
    """
    python_trainable = builders_from(trainable, build_data, build_model, fit_options)
    if not isinstance(spec, ExperimentSpec):
        spec = load_spec(spec, overrides, sections, python_trainable)
    elif python_trainable is not None:
        spec = dataclasses.replace(spec, trainable=python_trainable)
    experiment_dir = create_experiment_dir(spec, name, storage)
    stream = sys.stdout if progress is True else (progress or None)
    _fit(spec, experiment_dir, address, stream, restore=False)
    return load(experiment_dir)


def resume(
    experiment_dir: str | Path,
    *,
    address: str | None = None,
    progress: TextIO | bool | None = True,
    trainable: ModuleType | None = None,
    build_data: Callable[..., Any] | None = None,
    build_model: Callable[..., Any] | None = None,
    fit_options: Callable[..., Any] | None = None,
) -> ExperimentResults:
    """Finishes an interrupted search from its directory.

    A search whose builders were passed from Python needs them passed again here.
    """
    directory = Path(experiment_dir).expanduser().resolve()
    if not (directory / SPEC_FILE).is_file():
        raise StorageError(f"{directory}: not a tunekit experiment (no {SPEC_FILE})")
    spec = load_spec(directory / SPEC_FILE, trainable=builders_from(trainable, build_data, build_model, fit_options))
    stream = sys.stdout if progress is True else (progress or None)
    links = _bridge_rotated_checkpoints(directory)
    try:
        _fit(spec, directory, address, stream, restore=True)
    finally:
        for link in links:
            link.unlink(missing_ok=True)
    return load(directory)


def _bridge_rotated_checkpoints(experiment_dir: Path) -> list[Path]:
    """Makes checkpoints that Ray's last saved state names, but rotation deleted, resolvable.

    A killed driver leaves Ray's experiment state up to a second old; meanwhile trials
    kept reporting and the oldest checkpoints were rotated away. Ray refuses to restore a
    trial whose recorded checkpoint is gone, so each missing name below a trial's oldest
    kept checkpoint becomes a link to its newest one: the trial resumes from the newest
    state it really reached (the trainable reads the epoch from the checkpoint itself).
    """
    links: list[Path] = []
    for trial_dir in (p for p in experiment_dir.iterdir() if p.is_dir()):
        kept = sorted(trial_dir.glob("checkpoint_*"))
        if not kept:
            continue
        oldest, newest = int(kept[0].name.split("_")[1]), kept[-1]
        for index in range(oldest):
            link = trial_dir / f"checkpoint_{index:06d}"
            link.symlink_to(newest.name, target_is_directory=True)
            links.append(link)
    return links


def create_experiment_dir(spec: ExperimentSpec, name: str | None, storage: str | Path | None) -> Path:
    root = Path(storage or spec.storage.path).expanduser().resolve()
    directory = root / (name or f"{spec.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    if directory.exists():
        raise StorageError(f"{directory} already exists; pick another --name or `tunekit resume` it")
    try:
        directory.mkdir(parents=True)
    except OSError as error:
        raise StorageError(f"cannot create {directory}: {error.strerror}") from None
    (directory / SPEC_FILE).write_text(spec.to_yaml())
    return directory


def _fit(
    spec: ExperimentSpec, experiment_dir: Path, address: str | None, stream: TextIO | None, *, restore: bool
) -> None:
    from tunekit.progress import ConsoleProgress
    from tunekit.searcher import exhausted_reason

    console = ConsoleProgress(spec, stream) if stream else None
    if console:
        console.header(experiment_dir, _tracking_uri(spec))
    with _StopSignals(experiment_dir) as signals, _driver_env(), _ray_session(address, spec, console, signals):
        _check_cluster_fits(spec, experiment_dir)
        check_storage_shared(experiment_dir)
        if restore and not _has_tune_state(experiment_dir):
            restore = False  # stopped during start-up, before Ray Tune saved anything: start afresh
        if console:
            console.phase("preparing the study and the Tuner")
        from tunekit.recorder import FailureGuard

        tuner, recorder, guard = _tuner_for(spec, experiment_dir, console, restore=restore)
        if console:
            console.phase("waiting for the first trial workers (each imports TensorFlow)")
        with signals.fitting(), _quiet_trial_tracebacks():
            try:
                tuner.fit()
            finally:
                recorder.write_tables()
        _wait_for_released_resources()
    if console and (exhausted := exhausted_reason(spec, experiment_dir)):
        console.phase(f"the search ended early: {exhausted}")
    if signals.received is not None:
        raise SearchInterrupted(
            f"interrupted by {signal.Signals(signals.received).name}; "
            f"`tunekit resume {experiment_dir}` continues the search",
            experiment_dir,
            signals.received,
        )
    if isinstance(guard, FailureGuard) and guard.abort_reason:
        raise SearchAborted(f"search stopped: {guard.abort_reason}", experiment_dir)
    reason = no_result_reason(spec, experiment_dir, list(recorder.trials.values()), time.time() - recorder.started)
    if reason:
        raise NoResultError(reason, experiment_dir)


def _tuner_for(spec: ExperimentSpec, experiment_dir: Path, console: Any, *, restore: bool) -> tuple[Any, Any, Any]:
    """A new Tuner, or the experiment's restored one with this process's listeners attached."""
    from ray import tune

    from tunekit.recorder import Recorder

    listeners = _listeners(spec, experiment_dir, console)
    if not restore:
        return _build_tuner(spec, experiment_dir, listeners)
    tuner = tune.Tuner.restore(
        str(experiment_dir), trainable=_trainable(spec, experiment_dir), resume_unfinished=True, resume_errored=True
    )
    # Ray restores searcher, scheduler and callbacks from its pickle; listeners
    # (console, tracker) are per process and are attached again here.
    assert tuner._local_tuner is not None  # tunekit never runs Tune through Ray Client
    run_config = tuner._local_tuner.get_run_config()
    recorder = next(c for c in run_config.callbacks or [] if isinstance(c, Recorder))
    recorder.listeners = listeners
    return tuner, recorder, run_config.stop


class _TrialTracebackFilter(logging.Filter):
    """Drops Ray Tune's log records that dump a failed trial's traceback on the console.

    A failed trial gets one line from tunekit's progress, with the path of its full
    traceback (``<trial id>/error.txt``); Ray's copy would bury the progress lines.
    """

    DROPPED = ("Trial task failed for trial", "Trials did not complete")

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.DROPPED)


@contextlib.contextmanager
def _quiet_trial_tracebacks() -> Iterator[None]:
    quiet = _TrialTracebackFilter()
    loggers = [logging.getLogger(name) for name in ("ray.tune.execution.tune_controller", "ray.tune.tune")]
    for logger in loggers:
        logger.addFilter(quiet)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(quiet)


def _has_tune_state(experiment_dir: Path) -> bool:
    return any(experiment_dir.glob("experiment_state-*.json"))


def no_result_reason(spec: ExperimentSpec, experiment_dir: Path, records: Sequence[Any], elapsed: float) -> str:
    """Why no trial reported the metric, in one line, or "" when one did.

    Args:
        spec: the experiment's spec (metric name, time budget).
        experiment_dir: where each trial's ``error.txt`` lives.
        records: the recorder's ``TrialRecord``s.
        elapsed: seconds the search ran.
    """
    if any(r.final_metric is not None or r.best_metric is not None for r in records):
        return ""
    name = spec.metric.name
    failed = [r for r in records if r.status == "failed"]
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


def _listeners(spec: ExperimentSpec, experiment_dir: Path, console: Any) -> list[Any]:
    """Who hears about the search as it goes: the console and, when enabled, MLflow."""
    listeners: list[Any] = [console] if console else []
    if spec.tracking.enabled:
        from tunekit.tracking import MlflowTracker

        listeners.append(MlflowTracker(spec, experiment_dir))
    return listeners


def _build_tuner(spec: ExperimentSpec, experiment_dir: Path, listeners: list[Any]) -> tuple[Any, Any, Any]:
    from ray import tune

    from tunekit.layout import EPOCH_KEY
    from tunekit.recorder import FailureGuard, Recorder, RecordingASHA
    from tunekit.searcher import OptunaStudySearcher

    searcher = OptunaStudySearcher(spec, experiment_dir)
    searcher.study  # noqa: B018 - create the study (and enqueue warm starts) before any trial
    if spec.scheduler.type == "asha":
        scheduler: Any = RecordingASHA(
            time_attr=EPOCH_KEY,
            metric=spec.metric.name,
            mode=spec.metric.mode,
            max_t=spec.budget.max_epochs,
            grace_period=spec.scheduler.grace_period,
            reduction_factor=spec.scheduler.reduction_factor,
        )
    else:
        scheduler = tune.schedulers.FIFOScheduler()
    recorder = Recorder(spec, experiment_dir, searcher, scheduler, listeners)
    guard = FailureGuard()
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
            trial_dirname_creator=lambda trial: trial.trial_id,
        ),
        run_config=tune.RunConfig(
            name=experiment_dir.name,
            storage_path=str(experiment_dir.parent),
            callbacks=[recorder],
            stop=guard,
            verbose=0,
            failure_config=tune.FailureConfig(max_failures=spec.training.max_failures),
            checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
        ),
    )
    return tuner, recorder, guard


def _trainable(spec: ExperimentSpec, experiment_dir: Path) -> Any:
    from ray import tune

    from tunekit.resources import trial_resources
    from tunekit.trainable import run_trial

    return tune.with_resources(
        tune.with_parameters(run_trial, spec=spec, experiment_dir=str(experiment_dir)), trial_resources(spec.resources)
    )


@contextlib.contextmanager
def _driver_env() -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in _DRIVER_ENV}
    os.environ.update(_DRIVER_ENV)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def ray_init_options(spec: ExperimentSpec | None = None, *, cluster: bool = False) -> dict[str, Any]:
    """Keyword arguments for ``ray.init`` that tunekit's workers rely on.

    Pass them when starting Ray yourself (for example with logical GPUs:
    ``ray.init("local", num_gpus=2, **ray_init_options())``) before calling ``tunekit.run``.
    On a cluster, the trainable's top-level package and tunekit itself travel to every
    node through the runtime environment, so nodes need no manual copy.
    """
    cwd = str(Path.cwd())
    python_path = os.pathsep.join(p for p in (cwd, os.environ.get("PYTHONPATH", "")) if p)
    runtime_env: dict[str, Any] = {"env_vars": {**_WORKER_ENV, "PYTHONPATH": python_path}}
    if cluster and spec is not None:
        runtime_env["py_modules"] = _code_for_nodes(spec)
    options: dict[str, Any] = {"log_to_driver": False, "logging_level": "ERROR", "runtime_env": runtime_env}
    if not cluster:
        options["include_dashboard"] = False  # only a new local Ray takes this
    return options


def _code_for_nodes(spec: ExperimentSpec) -> list[str]:
    """Directories that must exist on every node: tunekit and the trainable's package."""
    import tunekit

    modules = [str(Path(tunekit.__file__).parent)]
    trainable = spec.trainable
    if not isinstance(trainable, TrainableRef):
        return modules  # builders passed from Python travel by value, pickled by Ray
    parts = trainable.reference.split(".")
    if not trainable.is_file and len(parts) > 1:
        # trainables/digits_mlp.py for "trainables.digits_mlp": ship the whole package
        modules.append(str(trainable.source.parents[len(parts) - 2]))
    return modules


def check_storage_shared(experiment_dir: Path) -> None:
    """On a multi-node cluster, every node must be able to write the experiment directory.

    Since Ray 2.7 nothing is synced to the head node, so trial checkpoints written to a
    node-local path are lost to the driver. Each node writes a probe file; the driver must
    see them all.
    """
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = [n for n in ray.nodes() if n["Alive"]]
    if len(nodes) < 2:
        return

    @ray.remote(num_cpus=0)
    def probe(directory: str, name: str) -> str:
        try:
            Path(directory, name).write_text("tunekit storage probe")
            return ""
        except OSError as error:
            return str(error)

    names = {n["NodeID"]: f".storage-probe-{n['NodeID'][:12]}" for n in nodes}
    errors = ray.get(
        [
            probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(
                str(experiment_dir), names[n["NodeID"]]
            )
            for n in nodes
        ]
    )
    problems = []
    for node, error in zip(nodes, errors, strict=True):
        probe_file = experiment_dir / names[node["NodeID"]]
        if error or not probe_file.exists():
            problems.append(f"node {node['NodeManagerAddress']} ({error or 'its file is not visible here'})")
        probe_file.unlink(missing_ok=True)
    if problems:
        raise StorageError(
            f"storage {experiment_dir} is not shared by every node: {'; '.join(problems)}; "
            "mount one shared filesystem at the same path on every node and pass it with --storage"
        )


# ------------------------------------------------------------------ the Ray session

# The Ray tunekit started in this process and kept for later runs (notebooks call
# ``tunekit.run`` again and again; starting Ray costs seconds each time). None when
# tunekit started none, or shut it down.
_OWNED_RAY: dict[str, Any] | None = None
_ATEXIT_REGISTERED = False


def shutdown() -> None:
    """Stops the Ray that ``tunekit.run`` started in this process and kept for later runs.

    A Ray started by the caller (``ray.init`` before ``tunekit.run``) is left alone. Called
    at interpreter exit too; calling it again is harmless.
    """
    global _OWNED_RAY
    if _OWNED_RAY is None:
        return
    _OWNED_RAY = None
    import ray

    if ray.is_initialized():
        ray.shutdown()


@contextlib.contextmanager
def _ray_session(
    address: str | None, spec: ExperimentSpec, console: Any = None, signals: _StopSignals | None = None
) -> Iterator[None]:
    """Joins ``address`` (or RAY_ADDRESS) or starts a local Ray, once per process.

    A Ray the caller started is used as it is and never shut down. One tunekit started is
    kept for the next run when that run would start it the same way (same address and
    runtime environment: the workers' PYTHONPATH, which holds the working directory, and
    their environment are fixed at ``ray.init``); otherwise it is restarted, and says so.
    """
    global _OWNED_RAY, _ATEXIT_REGISTERED
    import ray

    address = address or os.environ.get("RAY_ADDRESS") or None
    if address == "local":  # Ray's own word for "start a new local instance"
        address = None
    options = ray_init_options(spec, cluster=address is not None)
    key = json.dumps({"address": address, "runtime_env": options["runtime_env"]}, sort_keys=True, default=str)
    if ray.is_initialized():
        if _OWNED_RAY is None:  # the caller's Ray
            yield
            return
        if _OWNED_RAY["key"] == key:
            if console:
                console.phase("reusing the Ray this process started")
            yield
            return
        if console:
            console.phase(f"restarting Ray: {_why_restart(_OWNED_RAY['key'], key)}")
        shutdown()
    if console:
        console.phase(f"starting Ray ({'joining ' + address if address else 'local'})")
    try:
        # "local": without an address, a new local Ray, never a cluster that happens to run here.
        ray.init(address=address or "local", **options)
    except SystemExit:
        # ray.init's own SIGTERM handler exits; turn it into tunekit's interruption.
        ray.shutdown()
        where = signals.experiment_dir if signals is not None else None
        if signals is not None:
            signals.received = signal.SIGTERM
        raise SearchInterrupted("interrupted by SIGTERM while starting Ray", where, signal.SIGTERM) from None
    except BaseException:
        ray.shutdown()  # a half-started Ray (SIGINT during start) must not outlive the process
        raise
    _OWNED_RAY = {"key": key, "local": address is None}
    if not _ATEXIT_REGISTERED:
        atexit.register(shutdown)
        _ATEXIT_REGISTERED = True
    if signals is not None:
        signals.install()  # ray.init replaced the SIGTERM handler with its own
    if console:
        resources = ray.cluster_resources()
        console.phase(
            f"Ray is up: {resources.get('CPU', 0):g} CPUs, {resources.get('GPU', 0):g} GPUs"
            f" on {len([n for n in ray.nodes() if n['Alive']])} node(s)"
        )
    yield


def _why_restart(old_key: str, new_key: str) -> str:
    old, new = json.loads(old_key), json.loads(new_key)
    if old["address"] != new["address"]:
        return f"the address changed from {old['address'] or 'local'} to {new['address'] or 'local'}"
    return "the workers' environment changed (working directory, PYTHONPATH or the code shipped to nodes)"


def _wait_for_released_resources(timeout: float = 10.0) -> None:
    """Waits until Tune's reused trial actors have released their CPUs and GPUs.

    Tune removes its cached actors when ``fit`` returns, but Ray frees their resources a
    moment later; a run started right after (a notebook) would otherwise see a busy node.
    Only for a Ray tunekit owns: in the caller's Ray other work may hold resources.
    """
    if _OWNED_RAY is None:
        return
    import ray

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        total, free = ray.cluster_resources(), ray.available_resources()
        if all(free.get(k, 0.0) >= total.get(k, 0.0) - 1e-6 for k in ("CPU", "GPU")):
            return
        time.sleep(0.1)


def _check_cluster_fits(spec: ExperimentSpec, experiment_dir: Path) -> None:
    """Refuses a trial no alive node can ever place (Ray Tune would wait forever, silently)."""
    import ray

    from tunekit.resources import trial_resources, unplaceable

    nodes = [dict(n.get("Resources") or {}) for n in ray.nodes() if n.get("Alive")]
    problem = unplaceable(trial_resources(spec.resources), nodes, ray.cluster_resources())
    if problem:
        raise ResourceError(problem, experiment_dir)


def _tracking_uri(spec: ExperimentSpec) -> str | None:
    """The MLflow tracking URI the search will use (credentials removed), without importing MLflow."""
    if not spec.tracking.enabled:
        return None
    from tunekit.tracking import redact_uri

    mlflow = sys.modules.get("mlflow")  # set_tracking_uri in this process counts, when MLflow is loaded
    uri = spec.tracking.uri or (mlflow.get_tracking_uri() if mlflow else None)
    uri = uri or os.environ.get("MLFLOW_TRACKING_URI") or "sqlite:///mlflow.db"
    return redact_uri(str(uri))


# --------------------------------------------------------------------------- signals


def _kill_local_ray() -> None:
    """Kills the local Ray this process started (its GCS, raylet, agents and workers), at once.

    For the forced exit only: without it, workers busy importing TensorFlow and Ray's
    agents outlive the driver for a minute or more.
    """
    try:
        import psutil

        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                command = " ".join(child.cmdline()[:2])
                if command.startswith("ray::") or "/ray/" in command:  # Ray's processes, no other child
                    child.kill()
    except Exception:  # best effort on the way out
        pass


class _StopSignals:
    """SIGINT and SIGTERM stop a search the way Ray Tune's Ctrl-C does, in every phase.

    Before ``Tuner.fit`` (starting Ray, building the study and the Tuner) the first signal
    raises ``SearchInterrupted`` at once. During ``fit`` it sets Tune's own stop event (Ray
    installs its handler for SIGUSR1 too, and tunekit sets ``TUNE_DISABLE_SIGINT_HANDLER``),
    so Tune ends its loop, saves the experiment state and removes its actors, including
    trials still waiting for resources; ``fit`` returns and the tables are written. A
    second signal exits at once with status 128 + signal.
    """

    _SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, experiment_dir: Path) -> None:
        self.experiment_dir = experiment_dir
        self.received: int | None = None
        self._in_fit = False
        self._saved: dict[int, Any] = {}
        self._active = threading.current_thread() is threading.main_thread()

    def __enter__(self) -> _StopSignals:
        if self._active:
            self._saved = {s: signal.getsignal(s) for s in (*self._SIGNALS, signal.SIGUSR1)}
            self.install()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._active:
            for number, handler in self._saved.items():
                signal.signal(number, handler if handler is not None else signal.SIG_DFL)

    def install(self) -> None:
        if self._active:
            for number in self._SIGNALS:
                signal.signal(number, self._handle)

    @contextlib.contextmanager
    def fitting(self) -> Iterator[None]:
        if self.received is not None:
            raise SearchInterrupted("interrupted", self.experiment_dir, self.received)
        if self._active:
            # Whatever handles SIGUSR1 once fit runs is Ray's stop handler (a stale one from
            # an earlier fit in this process would set an event nobody waits on).
            signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        self._in_fit = True
        try:
            yield
        finally:
            self._in_fit = False

    def _handle(self, number: int, frame: FrameType | None) -> None:
        if self.received is not None:
            sys.stderr.write(
                f"\ntunekit: second {signal.Signals(number).name}: exiting now; "
                f"`tunekit resume {self.experiment_dir}` continues from Ray's last saved state\n"
            )
            sys.stderr.flush()
            if _OWNED_RAY is not None and _OWNED_RAY["local"]:
                _kill_local_ray()
            os._exit(128 + number)
        self.received = number
        name = signal.Signals(number).name
        if not self._in_fit:
            raise SearchInterrupted(f"interrupted by {name} during start-up", self.experiment_dir, number)
        sys.stderr.write(f"\ntunekit: {name} received: stopping the search and saving its state (again to force)\n")
        sys.stderr.flush()
        threading.Thread(target=self._stop_tune, name="tunekit-stop", daemon=True).start()

    def _stop_tune(self) -> None:
        """Sends SIGUSR1 once Ray's handler is in place (it is set at the start of fit)."""
        while self._in_fit:
            if callable(signal.getsignal(signal.SIGUSR1)):
                os.kill(os.getpid(), signal.SIGUSR1)
                return
            time.sleep(0.05)
