"""Reaches into private Ray Tune APIs: the experiment state, ASHA's rungs, a grown search,
PBT (see ``tunekit.compat``)."""

from __future__ import annotations

import contextlib
import filecmp
import fnmatch
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ray.tune import RunConfig, TuneConfig, Tuner
    from ray.tune.search import ConcurrencyLimiter, SearchGenerator


# ------------------------------------------------------------------------------ Ray


def bound_experiment_state_saves(every_s: float, at_most_s: float, share: float) -> None:
    """Ray saves its experiment state every ``every_s`` seconds, or less often when a save takes
    longer than ``share`` of that period, but at least every ``at_most_s`` seconds.

    tunekit sets ``TUNE_GLOBAL_CHECKPOINT_S`` to a second, so a killed driver loses at most
    a second of bookkeeping. A save writes every trial's state (about 13 KB each, 27 KB with
    Ray's trailing averages: see ``no_trailing_averages``), so with thousands of trials a save
    every second became most of the driver's work. Ray's own
    "auto" period has the same cost bound but never goes below 10 s, and has no ceiling: a
    save's cost grows with the trials that changed since the last one, so a longer period
    makes the next save longer, which can stretch the period without end. Checked against Ray 2.60:
    ``_ExperimentCheckpointManager._update_auto_checkpoint_time`` is called after every
    save with the seconds it took, and only acts when the period is "auto".
    """
    from ray.tune.execution.experiment_state import _ExperimentCheckpointManager

    def update(self: Any, time_taken: float) -> None:
        self._checkpoint_period = min(at_most_s, max(every_s, time_taken / share))

    _ExperimentCheckpointManager._update_auto_checkpoint_time = update  # type: ignore[method-assign]


def no_trailing_averages() -> None:
    """Ray keeps no last-5 and last-10 averages of each trial's results.

    Why: for each numeric key of a trial's results (22 in a digits trial: the model's metrics,
    tunekit's throughput and memory, Ray's counters), Ray's trial metadata keeps the last 5 and
    the last 10 values as pickled deques, written out as hex in every experiment-state save:
    12.7 of a trial's 26.8 KB there. Every save writes every trial's state, so at 10,000 trials
    they were half of each save. Only Ray's own ``ExperimentAnalysis`` scopes "last-5-avg" and
    "last-10-avg" read them; tunekit ranks trials from its own tables. A trial restored from
    an older save keeps its windows. Checked against Ray 2.60:
    ``ray.tune.trainable.metadata._TrainingRunMetadata(n_steps=(5, 10))``, built with its
    defaults in ``Trial.__init__``.
    """
    from ray.tune.trainable.metadata import _TrainingRunMetadata

    _TrainingRunMetadata.__init__.__defaults__ = ((),)


@contextlib.contextmanager
def notebook_output_kept() -> Iterator[None]:
    """Ray Tune builds no Jupyter reporter while a search runs: a plain one, silent at ``verbose=0``.

    Why: in a notebook, ``ray.tune.tune.run`` builds ``JupyterNotebookReporter`` whatever the
    verbosity, and its constructor calls ``IPython.display.clear_output(wait=True)``, which wipes
    the cell's output so far at the next print: tunekit's opening lines (experiment directory,
    tracking URI, start-up phases) vanished. tunekit prints its own progress, and at ``verbose=0``
    the plain ``CLIReporter`` prints nothing. Checked against Ray 2.60:
    ``ray.tune.progress_reporter._detect_reporter``, imported by name into ``ray.tune.tune``. The
    name is put back afterwards, so a user's own ``tune.run`` in the same kernel is untouched.
    """
    import ray.tune.tune as tune_module
    from ray.tune.progress_reporter import CLIReporter

    detect = tune_module._detect_reporter

    def plain(_trainer_api: bool = False, **kwargs: Any) -> Any:
        return CLIReporter(**kwargs)

    tune_module._detect_reporter = plain
    try:
        yield
    finally:
        tune_module._detect_reporter = detect


def checkpoint_epoch(trial: Any, epoch_key: str) -> int:
    """The epoch of the checkpoint Ray starts ``trial`` from, 0 when it has none.

    After a killed driver this is the checkpoint Ray's saved state names, which can be older
    than the last one the dead driver was told of. Checked against Ray 2.60:
    ``Trial.latest_checkpoint_result`` (a ``_TrainingResult`` with the reported metrics).
    """
    latest = getattr(trial, "latest_checkpoint_result", None)
    metrics = getattr(latest, "metrics", None) or {}
    return int(metrics.get(epoch_key) or 0)


def kill_trial_without_retry(trial: Any) -> bool:
    """Kills ``trial``'s worker so that Ray ends the trial as errored, without a retry; False
    when it has no worker.

    Why: Ray Tune has no public call that ends one running trial from outside its loop; its
    stop asks the trial's actor to stop, which a worker stuck inside an epoch never answers.
    Checked against Ray 2.60: the actor is ``Trial.temporary_state.ray_actor``; its death
    reaches ``TuneController._process_trial_failure``, which counts one more failure and
    retries while ``Trial.should_recover()`` (``run_metadata.num_failures <= max_failures``),
    so the trial's limit becomes the failures it had. A trial with no actor (it is being
    placed or already stopping) is left to Ray.
    """
    import ray

    actor = trial.temporary_state.ray_actor
    if actor is None:
        return False
    trial.max_failures = trial.run_metadata.num_failures
    ray.kill(actor, no_restart=True)
    return True


def retry_a_trial_whose_reused_worker_died() -> None:
    """A trial whose reused worker dies while Ray resets it for the trial is retried as any other
    trial whose worker died, not failed at once.

    Why: with actors reused, Ray hands a finished trial's worker to the next trial and resets it.
    A worker killed then (chaos seed 787816: SIGKILL to the process that had just run trial 1,
    when it had just become trial 3's) fails twice in Ray: the actor's failure retries the pending
    trial, and then the reset task's own failure ends it as errored (it is pending by then, and
    Ray retries only running trials), with "its worker process died without a word" and no
    retry; the trial also stayed among the resetting ones, which no actor is scheduled for.
    Checked against Ray 2.60: ``TuneController._schedule_trial_reset`` (its task's ``on_error``
    is ``_trial_task_failure``), ``_actor_failed`` (a pending trial's actor failure is retried),
    ``_maybe_reuse_cached_actor`` (``_resetting_trials``).
    """
    from ray.exceptions import RayActorError
    from ray.tune.execution.tune_controller import TuneController

    ray_s = TuneController._trial_task_failure
    if getattr(ray_s, "reset_deaths_retried", False):
        return

    def trial_task_failure(self: Any, trial: Any, exception: Exception) -> None:
        if trial in self._resetting_trials and isinstance(exception, RayActorError):
            self._resetting_trials.discard(trial)
            return  # the actor's own failure (``_actor_failed``) retries the trial, or ends it past its retries
        ray_s(self, trial, exception)

    trial_task_failure.reset_deaths_retried = True  # type: ignore[attr-defined]
    TuneController._trial_task_failure = trial_task_failure  # type: ignore[method-assign]


def checkpoint_path(trial: Any) -> Path | None:
    """The folder of the checkpoint Ray starts ``trial`` from, None when it has none (see ``checkpoint_epoch``)."""
    latest = getattr(trial, "latest_checkpoint_result", None)
    checkpoint = getattr(latest, "checkpoint", None)
    return Path(checkpoint.path) if checkpoint is not None else None


def whole_file_state_uploads() -> None:
    """Ray's uploads of its experiment state to a local experiment folder copy whole files, and
    only files its staging folder changed.

    Why: Ray saves its experiment state (``experiment_state``, ``search_gen_state``,
    ``callback-states``...) in a staging folder and copies that folder into the experiment
    folder with pyarrow's ``copy_files``, which writes each file in place:

    * a driver killed during a copy left a 0-byte ``search_gen_state``, and ``Tuner.restore``
      then logged an error and started a new search over the old one's tables;
    * on restore Ray downloads every ``.json`` and ``.pkl`` of the experiment folder into its
      staging folder, tunekit's own files among them (``started.json``, ``tracking.json``,
      ``ledger.json``), and then copied those restore-time copies back over tunekit's newer
      ones at every save of the resumed session.

    Each file is now copied to a ``.partial`` name and renamed, so a kill leaves the previous
    whole file, and only when the staging copy is newer than the experiment folder's and
    differs from it. Remote storage keeps Ray's copy. Checked against Ray 2.60:
    ``ray.train._internal.storage._FilesystemSyncer._sync_up_command``,
    ``ray.tune.execution.experiment_state._ExperimentCheckpointManager.sync_down_experiment_state``.
    """
    import pyarrow.fs
    from ray.train._internal.storage import _FilesystemSyncer

    ray_s = _FilesystemSyncer._sync_up_command
    if getattr(ray_s, "whole_files", False):
        return

    def sync_up_command(self: Any, local_path: str, uri: str, exclude: list[str] | None = None) -> Any:
        if isinstance(self.storage_filesystem, pyarrow.fs.LocalFileSystem) and Path(local_path).is_dir():
            return copy_changed_files, {"source": Path(local_path), "destination": Path(uri), "exclude": exclude or []}
        return ray_s(self, local_path, uri, exclude)

    sync_up_command.whole_files = True  # type: ignore[attr-defined]
    _FilesystemSyncer._sync_up_command = sync_up_command  # type: ignore[method-assign]


def copy_changed_files(source: Path, destination: Path, exclude: Sequence[str] = ()) -> None:
    """Copies each file under ``source`` that is newer than, and differs from, its copy under
    ``destination`` (or has none): to a ``.partial`` name first, then renamed over the old
    one. ``experiment_state-*.json``, the index of a save that restore looks for, comes last,
    after the files it goes with. ``exclude``: glob patterns of relative paths, as Ray's."""
    for path in sorted(source.rglob("*"), key=lambda p: (p.name.startswith("experiment_state-"), p)):
        relative = path.relative_to(source).as_posix()
        if not path.is_file() or any(fnmatch.fnmatch(relative, pattern) for pattern in exclude):
            continue
        target = destination / relative
        if target.is_file() and (
            target.stat().st_mtime_ns >= path.stat().st_mtime_ns or filecmp.cmp(path, target, shallow=False)
        ):
            continue
        # Read once, judged and written from that one read: Ray writes its state to the staging
        # folder in place (``json.dump``, ``pickle.dump`` into the open file) from its loop while
        # this copy runs in its sync thread, so the file may be cut short as read. A signal's
        # KeyboardInterrupt mid-dump left one so (1 stop in 28), and a save that began between a
        # check of the file and its copy did too (a cut experiment state after a search that
        # ended well). A cut one is not copied: the older whole one stays until the next save.
        data = path.read_bytes()
        if not _whole_save(path.name, data):
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f"{target.name}.partial")
        partial.write_bytes(data)
        os.replace(partial, target)


def _whole_save(name: str, data: bytes) -> bool:
    """Whether a save's file is whole as far as its format tells: a pickle (protocol 2 and up)
    ends with its STOP opcode, which a cut one lacks; an experiment state's JSON, or a ``.pkl``
    holding JSON (the searcher's ``save``), parses. Other files pass."""
    import json

    if not (name.startswith("experiment_state-") or name.endswith(".pkl")):
        return True
    if data.startswith(b"\x80"):
        return data.endswith(b".")
    try:
        json.loads(data)
    except ValueError:
        return False
    return True


@contextlib.contextmanager
def before_cleanup_after_a_crash(hook: Callable[[], None]) -> Iterator[None]:
    """While it is open, ``hook`` runs when an error ends Ray Tune's loop, before Ray stops
    the running trials.

    Why: a crash is not a verdict. An exception anywhere in the driver (a full disk under a
    table write, a bug in a callback) leaves ``tune.run``'s loop through ``except Exception:
    runner.cleanup(); raise``, and the cleanup stops every running trial as a finished
    search would; the searcher then closed them in the study as pruned, and the resume never
    trained them on ("pruned by ASHA at rung None"). A signal already holds them
    (``OptunaStudySearcher.hold_endings``); this does the same for every other ending.
    Checked against Ray 2.60: ``ray.tune.tune.run`` calls ``TuneController.cleanup`` inside
    its ``except`` block when ``step`` raises, and after the loop when it finishes.
    """
    from ray.tune.execution.tune_controller import TuneController

    ray_s = TuneController.cleanup

    def cleanup(self: Any) -> None:
        if sys.exc_info()[1] is not None and not self.is_finished():
            hook()
        ray_s(self)

    TuneController.cleanup = cleanup  # type: ignore[method-assign]
    try:
        yield
    finally:
        TuneController.cleanup = ray_s  # type: ignore[method-assign]


@contextlib.contextmanager
def one_registry_read_per_trainable() -> Iterator[None]:
    """While it is open, each trainable's name is checked against Ray's registry and its class
    read from it once, not at every new trial and every use.

    Why: each ``Trial`` Ray Tune creates checks its trainable's name in the registry
    (``validate_trainable``, a key-value read from the GCS), and Ray asks the registry for a
    trial's class at least three times per trial (``Trial.get_trainable_cls``: for its
    placement group, its default resources and its actor), each ask two key-value reads and
    an unpickling of the class. In the 10,000-trial benchmark the class reads cost the
    driver's main thread 1.9 ms per trial over the first 300 trials and 3.2 ms over the last
    300 of 3,000, as the GCS got busier; the name checks alone still cost 1.0 ms per trial in
    the first 1,000 and 1.3 ms in the last (14 s of the driver's CPU in all). Within one
    ``Tuner.fit`` the class registered under a name does not change (the Tuner registered it
    before the first trial), so this checks and reads it once per name; the cache ends with
    the block, so the next search in the process reads its own. Checked against Ray 2.60
    (``ray.tune.experiment.trial``: ``Trial.__init__`` and ``__setstate__`` call the module's
    ``validate_trainable``; ``Trial.get_trainable_cls``).
    """
    from ray.tune.experiment import trial as trial_module

    original_read = trial_module.Trial.get_trainable_cls
    original_check = trial_module.validate_trainable
    classes: dict[str, Any] = {}
    known: set[str] = set()

    def get_trainable_cls(self: Any) -> Any:
        if self.stub:
            return None
        name = self.trainable_name
        if name not in classes:
            classes[name] = original_read(self)
        return classes[name]

    def validate_trainable(trainable_name: str) -> None:
        if trainable_name not in known:
            original_check(trainable_name)  # raises for an unknown name, which is checked again next time
            known.add(trainable_name)

    trial_module.Trial.get_trainable_cls = get_trainable_cls  # type: ignore[method-assign]
    trial_module.validate_trainable = validate_trainable
    try:
        yield
    finally:
        trial_module.Trial.get_trainable_cls = original_read  # type: ignore[method-assign]
        trial_module.validate_trainable = original_check


def restored_run_config(tuner: Tuner) -> RunConfig:
    """The run config of a tuner made by ``Tuner.restore``, with the callbacks Ray unpickled.

    Why: the recorder is restored from Ray's pickle with its tables; tunekit must find that
    instance to attach the per-process listeners (console, tracker) again, and the public
    ``Tuner`` does not expose its run config. Checked against Ray 2.60.

    Raises:
        RuntimeError: the tuner runs through Ray Client (no local tuner), which tunekit
            never does.
    """
    local = tuner._local_tuner
    if local is None:
        raise RuntimeError("a Tuner restored through Ray Client has no local run config; tunekit needs a local Tuner")
    return local.get_run_config()


@contextlib.contextmanager
def ray_leaves_sigterm_alone() -> Iterator[None]:
    """While it is open, ``ray.init`` does not replace the process's SIGTERM handler.

    Why: ``ray.init`` and the local node it starts each install a SIGTERM handler that calls
    ``sys.exit`` wherever the main thread happens to be. A SIGTERM during start-up raised
    that SystemExit inside logging's at-fork hook, where Python prints "Exception ignored"
    and carries on: the signal was lost and the search ran on. tunekit's own handler
    (``tunekit.driver.signals``) records the signal before it raises, so it is never lost,
    and tunekit shuts the half-started Ray down itself. Checked against Ray 2.60
    (``ray._private.utils.set_sigterm_handler``, called from ``worker.init`` and
    ``node.Node``).
    """
    import ray._private.utils as ray_utils

    original = ray_utils.set_sigterm_handler
    ray_utils.set_sigterm_handler = lambda handler: None
    try:
        yield
    finally:
        ray_utils.set_sigterm_handler = original


@contextlib.contextmanager
def ray_processes_in_their_own_group() -> Iterator[None]:
    """While it is open, the processes of a local Ray that ``ray.init`` starts (its GCS,
    raylet, and the workers and agents the raylet starts) leave the driver's process group.

    Why: a signal sent to the driver's whole process group (``timeout`` sends its SIGTERM
    to the group it runs in, as does ``kill -TERM -PGID``) reached the local Ray's
    processes too. They died under the driver, which was stopping the search: Ray's client
    waited 60 s for its GCS, then aborted the process, and ``timeout 14 tunekit run ...``
    ended after 75 s with Ray's "Failed to connect to GCS within 60 seconds" and no saved
    stop. In their own group, only the driver gets the signal, stops the search as for any
    SIGTERM and shuts its Ray down. They still end with the driver when it is killed
    (Ray's kernel fate-sharing: each is told to die with its parent), which is why this is
    only done where Ray has it (Linux); Ray itself does the same on Windows. Checked
    against Ray 2.60 (``ray._private.services.start_ray_process`` creates every process
    through the module's ``ConsolePopen``; ``utils.detect_fate_sharing_support``).
    """
    import ray._private.services as services
    import ray._private.utils as ray_utils

    if sys.platform == "win32" or not ray_utils.detect_fate_sharing_support():
        yield
        return
    original = services.ConsolePopen

    class OwnGroupPopen(original):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("process_group", 0)
            super().__init__(*args, **kwargs)

    services.ConsolePopen = OwnGroupPopen  # type: ignore[misc]
    try:
        yield
    finally:
        services.ConsolePopen = original  # type: ignore[misc]


def send_ray_cluster_messages(log: Path | None) -> None:
    """From now on the error messages Ray's driver receives from the cluster go to ``log``;
    None gives them back to Ray's own printing.

    Why: a driver's background thread prints every cluster error message to stdout, in
    colour, ``log_to_driver=False`` or not, for as long as the driver is connected: a lost
    node's "(raylet) Raylet is terminated... Last 20 lines of the Raylet logs:", and half a
    minute later "The node ... has missed too many heartbeats". tunekit says on the console
    which trial was on the node and where it is retried; Ray's account belongs in the
    experiment's driver.log. Checked against Ray 2.60 (``ray._private.worker.listen_error_messages``
    calls the module's ``print_to_stdstream``).
    """
    from ray._private import worker

    original = worker.__dict__.setdefault("_tunekit_print_to_stdstream", worker.print_to_stdstream)
    if log is None:
        worker.print_to_stdstream = original
        return

    def to_log(data: dict[str, Any], ignore_prefix: bool) -> None:
        with log.open("a") as handle:
            worker.print_worker_logs(data, handle, ignore_prefix)

    worker.print_to_stdstream = to_log


class QuickFifoChoice:
    """Ray's FIFO choice of the next trial to run, from the controller's trials by status.

    A mixin, listed before Ray's scheduler class: ``class FIFO(QuickFifoChoice, FIFOScheduler)``.
    Why: ``FIFOScheduler.choose_trial_to_run`` (ASHA's and MO-ASHA's too) walks every trial
    of the search for the first PENDING one, then for the first PAUSED one, and Ray calls it
    on every step of its loop: 35 s of the driver's main thread in a 10,000-trial run, more
    with every trial. The controller keeps its trials by status in sets; this picks from them
    the same trial, the first in the controller's order, which it learns once per trial.
    Checked against Ray 2.60: the scheduler gets a ``TrialRunnerWrapper`` whose
    ``_tune_controller`` holds ``_pending_trials`` and ``_paused_trials``, kept by
    ``_set_trial_status`` and ``add_trial``; ``get_trials()`` is the list trials are appended to.
    """

    _positions_of: Any = None  # the controller whose trials' places _positions holds
    _positions: dict[Any, int]

    def choose_trial_to_run(self, tune_controller: Any) -> Any:
        controller = getattr(tune_controller, "_tune_controller", tune_controller)
        trials = controller.get_trials()
        # A new controller, or a shorter list (never so in Ray 2.60: trials are only appended).
        if self._positions_of is not controller or len(self._positions) > len(trials):
            self._positions_of, self._positions = controller, {}
        positions = self._positions
        for position in range(len(positions), len(trials)):
            positions[trials[position]] = position
        for waiting in (controller._pending_trials, controller._paused_trials):
            if waiting:
                return min(waiting, key=positions.__getitem__)
        return None


# ------------------------------------------------------------------ Ray: growing a search


def restored_tune_config(tuner: Tuner) -> TuneConfig:
    """The tune config a tuner made by ``Tuner.restore`` unpickled from its ``tuner.pkl``.

    Why: a grown search (``tunekit resume DIR --set budget.num_samples=N``) must run with its
    new ``num_samples``, ``max_concurrent_trials`` and ``time_budget_s``; Ray restores the
    first run's and the public ``Tuner`` neither exposes nor takes a new one. Checked
    against Ray 2.60 (``Tuner._local_tuner``, ``TunerInternal._tune_config``).
    """
    local = tuner._local_tuner
    if local is None:
        raise RuntimeError("a Tuner restored through Ray Client has no local tune config; tunekit needs a local Tuner")
    config: TuneConfig = local._tune_config
    return config


def set_search_generator_budget(generator: SearchGenerator, total_samples: int) -> None:
    """Sets how many trials a restored ``SearchGenerator`` creates in all, and un-finishes it.

    Why: the generator's saved state holds the first run's ``total_samples`` and, once its
    searcher said so, ``finished``; restored as saved, a grown search would start no new
    trial. Called after Ray restored that state. Checked against Ray 2.60
    (``SearchGenerator._total_samples``, ``_finished``, ``set_state``).
    """
    generator._total_samples = total_samples
    generator._finished = False


def new_trials_in(generator: SearchGenerator, experiment_dir: Path) -> None:
    """A restored ``SearchGenerator`` creates its new trials in ``experiment_dir``.

    Why: the generator's saved state holds the experiment it creates trials from, with the
    storage of the directory the search first ran in. Ray points its restored trials at the
    directory it is resumed from (``TuneController._restore_trials``), but not that: in an
    experiment copied or moved since, every trial the resume added wrote its checkpoints
    and final model into the old directory. Checked against Ray 2.60
    (``SearchGenerator._experiment``, ``Experiment.storage``, ``StorageContext.storage_fs_path``
    and ``experiment_dir_name``; a ``Trial`` copies its creator's storage).
    """
    from tunekit.storage.buckets import bucket_of

    storage = getattr(getattr(generator, "_experiment", None), "storage", None)
    if storage is None:
        return
    bucket = bucket_of(Path(experiment_dir))
    if bucket is not None:  # a bucket's cache: the trials' storage is the bucket (its file system's path)
        storage.storage_fs_path = bucket.filesystem()[1].rsplit("/", 1)[0]
        storage.experiment_dir_name = bucket.name
        return
    storage.storage_fs_path = Path(experiment_dir).parent.as_posix()
    storage.experiment_dir_name = Path(experiment_dir).name


def forget_live_trials(limiter: ConcurrencyLimiter, trial_ids: set[str]) -> None:
    """Removes trials that will never end again from a restored ``ConcurrencyLimiter``'s live ones.

    Why: see ``finished_trials``. Checked against Ray 2.60 (``live_trials``,
    ``num_unfinished_live_trials``, which counts the live trials outside batch mode).
    """
    limiter.live_trials -= trial_ids
    limiter.num_unfinished_live_trials = len(limiter.live_trials)


class _ControllerWithoutSearcher:
    """A scheduler's view of the tune controller in which no search algorithm is set."""

    search_alg = None

    def __init__(self, controller: Any) -> None:
        self._controller = controller

    def __getattr__(self, name: str) -> Any:
        return getattr(self._controller, name)


def pbt_add_trial_beside_searcher(scheduler: Any, controller: Any, trial: Any) -> None:
    """``PopulationBasedTraining.on_trial_add`` without its refusal of a search algorithm.

    Why: Ray's PBT refuses any searcher, because a searcher that learns from a trial's
    results would credit the first configuration with what a mutated one reached.
    tunekit's Optuna searcher only proposes the initial population and records every
    mutation on the study trial (``tunekit.search.pbt``), so the refusal does not apply;
    ``on_trial_add`` reads ``controller.search_alg`` only for that check. Checked against
    Ray 2.60 (``pbt.PopulationBasedTraining.on_trial_add``).
    """
    from ray.tune.schedulers import PopulationBasedTraining

    without_searcher: Any = _ControllerWithoutSearcher(controller)
    PopulationBasedTraining.on_trial_add(scheduler, without_searcher, trial)


def pbt_trial_state(scheduler: Any, trial: Any) -> Any:
    """PBT's record of one trial (``last_score``, ``last_perturbation_time``, ``last_checkpoint``,
    ``last_result``), or None before ``on_trial_add``.

    Why: Ray does not save scheduler state with an experiment, so a resumed PBT would
    perturb every trial at its first result; ``RecordingPBT.replay`` refills these from the
    recorded epochs. The exploit step also reads the source's checkpoint from it. Checked
    against Ray 2.60 (``_trial_state``, ``_PBTTrialState``).
    """
    return scheduler._trial_state.get(trial)


def set_trial_restore_checkpoint(trial: Any, checkpoint: Any) -> None:
    """Points the checkpoint a paused trial restarts from at ``checkpoint``, keeping its metrics.

    Why: after an exploit Ray restarts the trial from the source trial's checkpoint in the
    source's folder, which the source's checkpoint rotation may delete before the trial
    restarts (it can wait for a free slot); tunekit copies it into the trial's own folder
    and points the trial there, as PBT's ``_exploit`` itself points it at the source.
    Checked against Ray 2.60 (``_CheckpointManager._latest_checkpoint_result``).
    """
    from ray.train._internal.session import _TrainingResult

    manager = trial.run_metadata.checkpoint_manager
    latest = manager._latest_checkpoint_result
    manager._latest_checkpoint_result = _TrainingResult(checkpoint=checkpoint, metrics=latest.metrics if latest else {})
    # The run metadata caches its JSON for Ray's experiment state and only notices its own
    # attributes changing: without this, a resume could restart the trial from its own older
    # checkpoint under the new configuration (a units 64 checkpoint in a units 128 model).
    trial.run_metadata.invalidate_cache()


def pbt_next_sync(scheduler: Any) -> int:
    """The epoch at which synchronous PBT next ranks the whole population (see ``pbt_set_next_sync``)."""
    return int(scheduler._next_perturbation_sync)


def pbt_set_next_sync(scheduler: Any, epoch: int) -> None:
    """Sets the epoch at which synchronous PBT next ranks the whole population.

    Why: a resumed PBT starts with its first sync point (``perturbation_interval``) while
    the restored trials are past it; it would never pick a paused trial to run again.
    ``RecordingPBT.replay`` sets the point the population was heading for. Checked
    against Ray 2.60 (``_next_perturbation_sync``).
    """
    scheduler._next_perturbation_sync = epoch
