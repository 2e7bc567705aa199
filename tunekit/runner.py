"""Building the Ray Tune run for a spec, running it, and resuming it.

The driver never imports TensorFlow: trials configure their own devices in their
worker processes (see ``tunekit.resources``).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from tunekit.errors import SearchAborted, StorageError
from tunekit.layout import SPEC_FILE
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
    **sections: Any,
) -> ExperimentResults:
    """Runs a search and returns its results.

    Args:
        spec: a spec file path, a parsed mapping, or a loaded ``ExperimentSpec``.
        overrides: ``key.path=value`` strings, as ``tunekit run --set``.
        name: the experiment directory's name (default: the spec's name and a timestamp).
        storage: where experiment directories live (default: the spec's ``storage.path``).
        address: a Ray cluster to join (default: ``RAY_ADDRESS``, else a local Ray).
        progress: a stream for live progress, True for stdout, False for silence.
        **sections: spec sections deep-merged over the spec, e.g. ``budget={"num_samples": 4}``.

    Raises:
        SpecError: the spec is invalid; nothing was written.
        SearchAborted: a trial error every trial would hit stopped the search.
    """
    if not isinstance(spec, ExperimentSpec):
        spec = load_spec(spec, overrides, sections)
    experiment_dir = create_experiment_dir(spec, name, storage)
    stream = sys.stdout if progress is True else (progress or None)
    _fit(spec, experiment_dir, address, stream, restore=False)
    return load(experiment_dir)


def resume(
    experiment_dir: str | Path, *, address: str | None = None, progress: TextIO | bool | None = True
) -> ExperimentResults:
    """Finishes an interrupted search from its directory."""
    directory = Path(experiment_dir).expanduser().resolve()
    if not (directory / SPEC_FILE).is_file():
        raise StorageError(f"{directory}: not a tunekit experiment (no {SPEC_FILE})")
    spec = load_spec(directory / SPEC_FILE)
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
    from ray import tune

    from tunekit.progress import ConsoleProgress
    from tunekit.recorder import FailureGuard, Recorder

    console = ConsoleProgress(spec.metric.name, spec.budget.num_samples, stream) if stream else None
    listeners = _listeners(spec, experiment_dir, console)
    with _driver_env(), _ray_session(address, spec):
        check_storage_shared(experiment_dir)
        if restore:
            tuner = tune.Tuner.restore(
                str(experiment_dir), trainable=_trainable(spec), resume_unfinished=True, resume_errored=True
            )
            # Ray restores searcher, scheduler and callbacks from its pickle; listeners
            # (console, tracker) are per process and are attached again here.
            assert tuner._local_tuner is not None  # tunekit never runs Tune through Ray Client
            run_config = tuner._local_tuner.get_run_config()
            recorder = next(c for c in run_config.callbacks or [] if isinstance(c, Recorder))
            recorder.listeners = listeners
            guard = run_config.stop
        else:
            tuner, recorder, guard = _build_tuner(spec, experiment_dir, listeners)
        try:
            tuner.fit()
        finally:
            recorder.write_tables()
    if isinstance(guard, FailureGuard) and guard.abort_reason:
        raise SearchAborted(f"search stopped: {guard.abort_reason}")


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
        _trainable(spec),
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


def _trainable(spec: ExperimentSpec) -> Any:
    from ray import tune

    from tunekit.resources import trial_resources
    from tunekit.trainable import run_trial

    return tune.with_resources(tune.with_parameters(run_trial, spec=spec), trial_resources(spec.resources))


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
    parts = spec.trainable.reference.split(".")
    if not spec.trainable.is_file and len(parts) > 1:
        # trainables/digits_mlp.py for "trainables.digits_mlp": ship the whole package
        modules.append(str(spec.trainable.source.parents[len(parts) - 2]))
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


@contextlib.contextmanager
def _ray_session(address: str | None, spec: ExperimentSpec) -> Iterator[None]:
    """Joins ``address`` (or RAY_ADDRESS), or starts a local Ray; reuses one already started."""
    import ray

    if ray.is_initialized():
        yield
        return
    address = address or os.environ.get("RAY_ADDRESS")
    # "local": without an address, a new local Ray, never a cluster that happens to run here.
    ray.init(address=address or "local", **ray_init_options(spec, cluster=address is not None))
    try:
        yield
    finally:
        ray.shutdown()
