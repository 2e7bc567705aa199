"""The Ray Tune function that runs one trial: devices → data → policy → model → epochs.

Runs inside Ray worker processes. Trials reuse workers (``reuse_actors``), so the cost of
importing TensorFlow and configuring devices is paid once per worker, and each trial
starts by resetting the Keras session, dtype policy and seeds so trials never leak into
each other.

Failures are sorted here, where the exception is seen:

* ``TrialFailure`` (non-finite loss) and any other exception from the trial's own code
  end the trial as failed with a condensed reason; the search goes on.
* ``FatalTrialError`` (builders returning the wrong things, a fit setting tunekit owns)
  and import errors mark the failure fatal: the driver stops the search at once instead
  of repeating the same traceback in every trial.
* A killed worker is not caught at all: Ray retries the trial from its last checkpoint.

Whatever the trial's code prints (stdout and stderr, Python and C++ alike) goes to the
trial's ``output.log``; a failure's full traceback to its ``error.txt``.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunekit.compat.ray_storage import retry_uploads
from tunekit.compat.tf_keras import build_training_state, drop_custom_gradients
from tunekit.config.spec import ExperimentSpec
from tunekit.contract import TrialContext, load_builders, whole_trial
from tunekit.errors import FatalTrialError, StorageError, TrialFailure, describe_error
from tunekit.layout import (
    EPOCH_KEY,
    ERROR_FILE,
    FAILURE_KEY,
    FAILURE_KIND_KEY,
    NO_SPACE_FAILURE,
    OUTPUT_FILE,
    STORAGE_FAILURE,
    number_in_trial_name,
)
from tunekit.storage.buckets import Bucket, is_uri
from tunekit.storage.store import no_space_in
from tunekit.worker import heartbeat
from tunekit.worker.autocompile import compile_from_config, steps_per_execution
from tunekit.worker.checkpoints import TrialProgress, restore_checkpoint
from tunekit.worker.checks import check_model_takes_data, checked_data, checked_fit_options, checked_model
from tunekit.worker.devices import WorkerDevices, configure_worker, resolve_precision
from tunekit.worker.keep import KeptEpoch
from tunekit.worker.precision import PrecisionError, precision_failure, with_float32_outputs
from tunekit.worker.profile import TrialProfile
from tunekit.worker.reads import space_read

if TYPE_CHECKING:
    from tunekit.worker.measures import Measures

_worker: WorkerDevices | None = None


def run_trial(config: dict[str, Any], spec: ExperimentSpec, experiment_dir: str, launch_dir: str | None = None) -> None:
    """Ray Tune entry point (bound to the spec with ``tune.with_parameters``).

    ``launch_dir``: the command's folder, when the worker started in another (the warm runtime's,
    ``tunekit up``): a trainable's relative paths resolve against the command's folder, as in the
    workers of a Ray the command started itself.
    """
    from ray import tune

    if launch_dir is not None:
        os.chdir(launch_dir)

    progress = TrialProgress()
    retry_uploads(spec.storage.outage_s)  # a storage outage waited through, not a failed trial
    # The trial's folder in the experiment (shared storage on a cluster), not Ray's local
    # staging directory, which Ray never copies back.
    trial_id = tune.get_context().get_trial_id()
    trial_dir = _trial_dir(experiment_dir, trial_id)
    if is_uri(experiment_dir):
        _take_over_the_trial_folder(experiment_dir, trial_dir)
    profile = TrialProfile.for_trial(trial_id)
    with _output_to(trial_dir / OUTPUT_FILE):
        heartbeat.announce(trial_dir)  # `tunekit status` shows where it runs from now on
        try:
            _train(dict(config), spec, progress, trial_dir, profile)
        except (FatalTrialError, ImportError, SyntaxError) as error:
            _report_failure(tune, trial_dir, describe_error(error), "fatal", progress.epoch, error)
        except Exception as error:
            if (full := no_space_in(error)) is not None:
                why = f"no space left on the device of {full.filename or trial_dir} (writing its checkpoint or log)"
                _report_failure(tune, trial_dir, why, NO_SPACE_FAILURE, progress.epoch, error)
                return
            if (refused := _records_refused(error, experiment_dir, trial_dir)) is not None:
                _report_failure(tune, trial_dir, refused, STORAGE_FAILURE, progress.epoch, error)
                return
            _report_failure(tune, trial_dir, describe_error(error), "trial", progress.epoch, error)
        finally:
            _release_trial_state()
            profile.write()


def _records_refused(error: BaseException, experiment_dir: str, trial_dir: Path) -> str | None:
    """The storage's one line when it refused for good (read-only, no permission) a write of the
    experiment's records (the trial's checkpoint, its log); None for any other error, which is
    the trial's own (a data file it may not read). A read-only store once failed the running
    trials (fault explorer seeds 474354, 907796), and the resume kept them failed."""
    from tunekit.storage.faults import permanent_problem

    places = {str(trial_dir), experiment_dir.split("://", 1)[-1]}
    link: BaseException | None = error
    while link is not None:
        named = f"{getattr(link, 'filename', None) or ''} {link}"
        if isinstance(link, OSError) and any(place in named for place in places):
            return permanent_problem(link, getattr(link, "filename", None) or trial_dir)
        link = link.__cause__ or link.__context__
    return None


def _trial_dir(experiment_dir: str, trial_id: str) -> Path:
    """The trial's folder: in the experiment (a shared folder on a cluster), or, for a bucket
    experiment, Ray's working directory of the trial on this node, which Ray uploads to the
    trial's folder in the bucket (``SyncConfig(sync_artifacts=True)``, set by the runner).

    Why Ray's upload and not the trial's own: Ray ends an attempt (a stop, a failure, the last
    epoch) while the trial's function waits inside its last report, so code after that report
    never runs; Ray's upload runs in the worker's main thread whenever an attempt ends."""
    if is_uri(experiment_dir):
        from tunekit.compat.ray_workers import trial_working_directory

        return trial_working_directory()
    return Path(experiment_dir) / trial_id


# This worker's bucket trials' folders: Ray uploaded each before it handed the worker the next
# trial (``reset_config`` syncs an attempt's folder before it returns), and the last one before
# it ends the worker (``stop``), after which the worker's exit removes it.
_uploaded: list[Path] = []


@atexit.register
def _remove_uploaded() -> None:
    for folder in _uploaded:
        shutil.rmtree(folder, ignore_errors=True)


def _take_over_the_trial_folder(experiment_dir: str, trial_dir: Path) -> None:
    """Removes this worker's earlier trial folders (uploaded), and starts the trial's log from
    the bucket's copy when this node has none (an earlier attempt ran elsewhere, or before a
    resume): Ray's upload replaces the bucket's log with this folder's, which then holds every
    attempt's lines."""
    for earlier in [folder for folder in _uploaded if folder != trial_dir]:
        shutil.rmtree(earlier, ignore_errors=True)
        _uploaded.remove(earlier)
    if trial_dir not in _uploaded:
        _uploaded.append(trial_dir)
    if not (trial_dir / OUTPUT_FILE).is_file():
        with contextlib.suppress(OSError, StorageError):  # none yet: the first attempt
            Bucket(experiment_dir).fetch(trial_dir.parent, f"{trial_dir.name}/{OUTPUT_FILE}")


@contextlib.contextmanager
def _output_to(path: Path) -> Iterator[None]:
    """Sends everything the trial writes to stdout and stderr into the trial's log.

    The file descriptors themselves are redirected, so TensorFlow's C++ messages land
    there too, not only Python's prints. Reused workers run one trial at a time, so the
    redirection never mixes two trials; every start appends under its own header.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    with path.open("ab", buffering=0) as log:
        # Each start of the trial in a worker: a new attempt, a resume, or a PBT restart.
        log.write(f"--- tunekit: trial started in a worker {time.strftime('%Y-%m-%d %H:%M:%S')} ---\n".encode())
        saved = os.dup(1), os.dup(2)
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def _train(
    config: dict[str, Any], spec: ExperimentSpec, progress: TrialProgress, trial_dir: Path, profile: TrialProfile
) -> None:
    from ray import tune

    # Both import Keras, and the driver imports this module (for run_trial): never TensorFlow there.
    from tunekit.worker.executions import in_lockstep
    from tunekit.worker.reporter import EpochReporter

    with profile.piece("start.devices"):
        devices = _worker_devices(spec)
    precision = resolve_precision(str(config.get("precision", spec.training.precision)), devices)
    # A grid point's repeats carry their own seed in the config; other trials share the spec's.
    seed = int(config.get("seed", spec.training.seed))
    with profile.piece("start.reset"):
        _reset_trial_state(precision, seed)
    per_replica_batch = int(config.get("batch_size", spec.training.batch_size))
    # The trial's config stays as the search chose it (the checkpoints, the best config and
    # `tunekit check` compare it); the trainable builds and compiles from the scaled copy.
    scaled = _scaled_learning_rate(config, spec, devices.replicas)
    trial_config, config = config, config if scaled is None else {**config, "learning_rate": scaled}
    progress.scaled_learning_rate = scaled
    context = tune.get_context()
    ctx = TrialContext(
        batch_size=per_replica_batch * devices.replicas,
        per_replica_batch_size=per_replica_batch,
        replicas=devices.replicas,
        precision=precision,
        seed=seed,
        workdir=context.get_trial_dir(),
        cpus=devices.cpus,
        max_epochs=spec.budget.max_epochs,
        jit_compile=bool(config.get("jit_compile", spec.training.jit_compile)),
        data=spec.data,
        spec_dir=spec.spec_dir,
        trial_dir=str(trial_dir),
        trial_number=number_in_trial_name(context.get_trial_name()),
    )
    builders = load_builders(spec.trainable)
    if (whole := whole_trial(builders)) is not None:  # a KerasTuner tuner's run_trial (tunekit.keras_tuner)
        whole(config, ctx)
        return
    with profile.piece("start.build_data"):
        train_ds, val_ds = checked_data(builders.build_data(config, ctx))

    def built() -> tuple[Any, bool]:
        """build_model's model with float32 outputs, compiled (by tunekit when it was not)."""
        with profile.piece("start.build_model"):
            model = checked_model(builders.build_model(config, ctx))
        with profile.piece("start.precision"):
            try:
                model = with_float32_outputs(model, precision, lambda: _first_inputs(val_ds), val_ds.element_spec[0])
            except PrecisionError as error:
                raise precision_failure(error, spec, lambda p: resolve_precision(p, devices)) from None
        with profile.piece("start.compile"):
            compiled_by_tunekit = not model.compiled
            if compiled_by_tunekit:
                compile_from_config(model, config, ctx)
            model.jit_compile = ctx.jit_compile
        return model, compiled_by_tunekit

    with devices.strategy.scope():
        model, compiled_by_tunekit = built()
    with profile.piece("start.checks"):
        check_model_takes_data(model, train_ds, "train")
        check_model_takes_data(model, val_ds, "validation")
        options = checked_fit_options(builders, model, config, ctx)
    with profile.piece("start.build"), devices.strategy.scope():
        build_training_state(model, train_ds.element_spec)
        if spec.training.executions > 1:  # the configuration's other fits, trained in lockstep with this one
            model = in_lockstep(model, spec.training.executions, seed, lambda: built()[0], train_ds.element_spec)
    progress.config = trial_config
    progress.space_read = space_read(builders, config, compiled_by_tunekit=compiled_by_tunekit)
    with profile.piece("start.restore"):
        kept = KeptEpoch(spec.metric.name, spec.metric.mode) if spec.training.keep == "best" else None
        restored = restore_checkpoint(tune.get_checkpoint(), model, train_ds, trial_config, config, kept)
        progress.epoch, progress.restore_note = restored
    if progress.epoch >= spec.budget.max_epochs:
        return
    with profile.piece("start.measures"):
        steps = options.get("steps_per_epoch") or _steps_per_epoch(train_ds)
        measures = _measures(spec, val_ds)
    per_call, why = steps_per_execution(
        spec.training.steps_per_execution, compiled_by_tunekit, options.get("callbacks", []), steps, devices.replicas
    )
    if per_call is not None:
        # Read when fit makes its train and test functions, as model.jit_compile is.
        model.steps_per_execution = per_call
    print(f"tunekit: steps_per_execution {model.steps_per_execution} ({why})")  # into the trial's output.log
    reporter = EpochReporter(spec, ctx, devices, progress, steps, val_ds, measures, profile, kept)
    try:
        with _epoch_lengths_learned_quietly(options):
            model.fit(
                train_ds,
                validation_data=val_ds,
                epochs=spec.budget.max_epochs,
                initial_epoch=progress.epoch,
                verbose=0,
                # The datasets shuffle themselves; Keras would only warn that it ignores shuffle=True.
                **{"shuffle": False, **options, "callbacks": [*options.get("callbacks", []), reporter]},
            )
    finally:
        # An epoch that failed after its predecessor's report went out: the driver gets that
        # report first, and a trial it stopped meanwhile ends stopped (SystemExit), not failed.
        reporter.finish_reporting()


@contextlib.contextmanager
def _epoch_lengths_learned_quietly(options: dict[str, Any]) -> Iterator[None]:
    """Without ``steps_per_epoch``, Keras hides "Your input ran out of data ... use .repeat()".

    Keras learns a dataset of unknown length (TFRecords, ``filter``) by running it out at its
    first epoch, and warns as if batches were missing: nothing is. With ``steps_per_epoch``
    given, running out is a real shortfall, and the warning stays.
    """
    if "steps_per_epoch" in options:
        yield
        return
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Your input ran out of data", category=UserWarning)
        yield


def _scaled_learning_rate(config: dict[str, Any], spec: ExperimentSpec, replicas: int) -> float | None:
    """``learning_rate`` times the replicas under ``training.scale_lr`` (the linear scaling rule
    for a global batch that many times larger); None when nothing is scaled."""
    if not (spec.training.scale_lr and replicas > 1 and "learning_rate" in config):
        return None
    return float(config["learning_rate"]) * replicas


def _worker_devices(spec: ExperimentSpec) -> WorkerDevices:
    global _worker
    if _worker is None:
        import ray

        os.environ.pop("MLFLOW_RUN_ID", None)  # a stray run id would hijack runs (mlflow#12639)
        # Ray logs "Checkpoint successfully created" at every epoch; in the trial's output.log
        # it would bury what the trainable itself printed.
        logging.getLogger("ray.train._internal.storage").setLevel(logging.WARNING)
        _worker = configure_worker(spec.resources, [str(i) for i in ray.get_gpu_ids()])
        _freeze_imported_objects()
    return _worker


def _freeze_imported_objects() -> None:
    """Moves what the imports created out of the garbage collector's sight.

    TensorFlow and Keras leave ~420,000 tracked objects that live as long as the worker;
    every trial's ``clear_session`` runs a full collection that walks them all (0.2-0.3 s
    per trial on 2 cores). Frozen, they are skipped: the collection takes ~0.01 s and
    still frees everything a trial created.
    """
    import gc

    gc.collect()  # garbage at this point would otherwise be frozen with the rest
    gc.freeze()


def _reset_trial_state(precision: str, seed: int) -> None:
    import keras

    drop_custom_gradients()  # unpins the previous trial's traced graphs (see tunekit.compat)
    keras.backend.clear_session(free_memory=True)  # drops the previous trial's model and graphs
    keras.mixed_precision.set_global_policy(precision)
    keras.utils.set_random_seed(seed)


def _release_trial_state() -> None:
    # The next trial's clear_session frees this one's graphs and runs the garbage
    # collector; doing it here too would only repeat it.
    import keras

    keras.mixed_precision.set_global_policy("float32")


def _measures(spec: ExperimentSpec, val_ds: Any) -> Measures | None:
    """The objectives tunekit measures that the spec names (``tunekit.worker.measures``), or None."""
    from tunekit.config.objectives import MEASURED, tracked_metrics
    from tunekit.worker.measures import Measures

    named = set(tracked_metrics(spec.objectives, spec.constraints, spec.select)) & set(MEASURED)
    return Measures(named, _first_inputs(val_ds)) if named - {"peak_memory_mb"} else None


def _first_inputs(dataset: Any) -> Any:
    for batch in dataset.take(1):
        return batch[0]
    raise TrialFailure("build_data's validation set is empty")


def _steps_per_epoch(dataset: Any) -> int | None:
    import tensorflow as tf

    steps = int(tf.data.experimental.cardinality(dataset))
    return steps if steps > 0 else None


def _report_failure(tune: Any, trial_dir: Path, why: str, kind: str, epoch: int, error: BaseException) -> None:
    with contextlib.suppress(OSError):  # a full disk: the report below still reaches the driver
        trial_dir.mkdir(parents=True, exist_ok=True)
        (trial_dir / ERROR_FILE).write_text("".join(traceback.format_exception(error)))
        traceback.print_exception(error)  # into output.log too, where the trial's prints are
    tune.report({EPOCH_KEY: epoch, FAILURE_KEY: why, FAILURE_KIND_KEY: kind})
