"""The Ray Tune run of a spec: a new Tuner, or the experiment's restored one, with its recorder,
its listeners (console, MLflow, TensorBoard, the nodes' watch) and the trainable its trials run.

``tunekit.driver.runner`` runs what this builds; ``tunekit.driver.restore`` mends what a restore
brings back.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tunekit.compat.ray_tune import (
    bound_experiment_state_saves,
    no_trailing_averages,
    retry_a_trial_whose_reused_worker_died,
    whole_file_state_uploads,
)
from tunekit.compat.ray_workers import trial_actors_in_their_runtime_env
from tunekit.config.spec import ExperimentSpec
from tunekit.driver.restore import restored_tuner
from tunekit.driver.session import (
    SAVE_STATE_AT_MOST_EVERY_S,
    SAVE_STATE_EVERY_S,
    SAVE_STATE_SHARE,
    SAVE_STATE_TO_A_BUCKET_EVERY_S,
)
from tunekit.storage.buckets import bucket_of, location_of, push_ray_state


def tuner_for(spec: ExperimentSpec, experiment_dir: Path, console: Any, *, restore: bool) -> tuple[Any, Any, Any]:
    """A new Tuner, or the experiment's restored one with this process's listeners attached.

    See ``tunekit.driver.restore`` for what a restore mends before ``fit``.
    """
    # In a bucket each save is an upload of Ray's whole state: every few seconds, not every second.
    every_s = SAVE_STATE_TO_A_BUCKET_EVERY_S if bucket_of(experiment_dir) else SAVE_STATE_EVERY_S
    bound_experiment_state_saves(every_s, SAVE_STATE_AT_MOST_EVERY_S, SAVE_STATE_SHARE)
    whole_file_state_uploads()
    retry_a_trial_whose_reused_worker_died()
    no_trailing_averages()
    trial_actors_in_their_runtime_env()
    listeners = _listeners(spec, experiment_dir, console)
    if not restore:
        return _build_tuner(spec, experiment_dir, listeners)
    restored = restored_tuner(spec, experiment_dir, listeners, _trainable(spec, experiment_dir))
    push_ray_state(experiment_dir)  # a bucket's: the state as the resume mended it, before Ray reads it
    return restored


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
    # A search started over (its last driver died in start-up, before Ray saved anything, having
    # asked the study for trials): those trials never ran, and never will.
    searcher.close_orphans()
    scheduler = build_scheduler(spec, experiment_dir, searcher.trial_number)
    guard = FailureGuard(spec.training.max_consecutive_failures)
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
    from tunekit.driver.session import on_the_runtime
    from tunekit.worker.trial import run_trial

    trial = _BENCHMARK_SEAM[0] if _BENCHMARK_SEAM else run_trial
    # The warm runtime's workers started in its own folder; the command's is the trials' (data paths).
    folder = {"launch_dir": str(Path.cwd())} if on_the_runtime() else {}
    return tune.with_resources(
        # A bucket experiment's workers write their trial files to the bucket, not to this cache.
        tune.with_parameters(trial, spec=spec, experiment_dir=location_of(experiment_dir), **folder),
        trial_resources(spec.resources),
    )
