"""Retraining a trial's configuration after the search: ``ExperimentResults.retrain``, ``tunekit retrain``.

The usual last step of a search: train the best configuration (or trial N's) again, by
default on the trainable's train plus validation data, for as many epochs as the trial's
model had (its kept epoch under ``training.keep: best``, else all it trained). It runs in
this process (no Ray), and trains as the trial did: the same
``TrialContext`` (one replica), the same seed set the same way before anything is built, the
trial's precision, the trainable's own compile or tunekit's from the config, and its
``fit_options``. On ``data="train"`` it is the trial again, and scores on the validation data
what the trial reported.

Each retrain leaves a record beside the experiment's: ``retrain/<n>-trial-<number>/`` with
the model (``model.keras``, or ``model.weights.h5`` when Keras cannot save it whole) and
``retrain.json``; and, when the search was tracked, an MLflow run that is a child of the
experiment's parent run, tagged ``tunekit.role=retrain`` so that it is never taken for a
trial. Imports TensorFlow and the trainable when it trains, never at import.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from tunekit.errors import TunekitError
from tunekit.layout import (
    FINAL_MODEL,
    FINAL_WEIGHTS,
    INFO_PREFIX,
    RETRAIN_DIR,
    RETRAIN_FILE,
    TrialStatus,
    finite,
    retrain_folder,
)
from tunekit.results.models import config_of, runnable_spec
from tunekit.storage.buckets import shown

if TYPE_CHECKING:
    import pandas as pd

    from tunekit.config.spec import ExperimentSpec
    from tunekit.contract import Trainable
    from tunekit.results.best import BestTrial

logger = logging.getLogger(__name__)

TRAIN = "train"
TRAIN_AND_VALIDATION = "train+validation"
GIVEN = "given"  # the data's name in the record when the caller passed the datasets
DATA_CHOICES = (TRAIN_AND_VALIDATION, TRAIN)
# A model file larger than this is not copied into MLflow's artifacts (its path is in the run's tags).
ARTIFACT_LIMIT_BYTES = 200 * 1024 * 1024

EpochListener = Callable[[int, int, dict[str, float]], None]


class ExperimentResults(Protocol):
    """What a retrain reads of an ``ExperimentResults`` (named so, this module does not import
    the results loader that imports it)."""

    @property
    def experiment_dir(self) -> Path: ...

    @property
    def spec(self) -> ExperimentSpec: ...

    @property
    def trials(self) -> pd.DataFrame: ...

    @property
    def best(self) -> BestTrial | None: ...

    @property
    def metric(self) -> str: ...

    @property
    def builders(self) -> Trainable | None: ...


class RetrainError(TunekitError, ValueError):
    """A retrain asked for what the experiment cannot give: no such trial, a failed one, bad arguments."""


@dataclass(frozen=True)
class Retrained:
    """What a retrain made.

    Attributes:
        model: the trained Keras model.
        path: its folder, ``<experiment>/retrain/<n>-trial-<number>/``.
        trial_id: the trial whose configuration was trained.
        number: its Optuna trial number (None for a trial without one).
        config: the configuration trained (the trial's final one, after PBT's exploit steps).
        epochs: the epochs trained.
        data: ``train+validation``, ``train`` or ``given``.
        metrics: the last epoch's metrics as Keras logged them (``loss``, ``accuracy``, and
            ``val_*`` when there was validation data).
        history: every epoch's metrics, in order.
        seconds: the training's wall time.
        model_file: the exported file's name, or None when nothing could be saved.
        export_note: why the export is weights only (or nothing), else "".
        run_id: the MLflow run, or None when the search was not tracked or MLflow failed.
    """

    model: Any
    path: Path
    trial_id: str
    number: int | None
    config: dict[str, Any]
    epochs: int
    data: str
    metrics: dict[str, float]
    history: list[dict[str, float]] = field(default_factory=list)
    seconds: float = 0.0
    model_file: str | None = None
    export_note: str = ""
    run_id: str | None = None

    def record(self) -> dict[str, Any]:
        """``retrain.json``'s content."""
        return {
            "trial_id": self.trial_id,
            "number": self.number,
            "config": self.config,
            "epochs": self.epochs,
            "data": self.data,
            "metrics": self.metrics,
            "history": self.history,
            "seconds": round(self.seconds, 3),
            "model": self.model_file,
            "export_note": self.export_note,
            "mlflow_run_id": self.run_id,
        }


@dataclass(frozen=True)
class RetrainPlan:
    """Which trial, configuration, epochs and data a retrain will use (checked before TensorFlow loads)."""

    trial_id: str
    number: int | None
    config: dict[str, Any]
    epochs: int
    data: str
    precision: str
    seed: int


def plan_retrain(
    results: ExperimentResults,
    trial: int | str | None = None,
    *,
    data: object = TRAIN_AND_VALIDATION,
    epochs: object = None,
) -> RetrainPlan:
    """The retrain's plan, every argument checked.

    Raises:
        RetrainError: no such trial, a failed one, no best trial, ``data`` or ``epochs`` invalid.
    """
    where = results.experiment_dir
    data_name = _data_name(data)
    row = _trial_row(results, trial)
    trial_id = str(row["trial_id"])
    number = None if finite(row.get("number")) is None else int(row["number"])
    label = f"trial {number}" if number is not None else f"trial {trial_id}"
    if str(row["status"]) == TrialStatus.FAILED:
        reason = row.get("reason")
        why = f" ({reason})" if isinstance(reason, str) and reason else ""
        raise RetrainError(f"{where}: {label} failed{why}; retrain a trial that trained, e.g. the best (no --trial)")
    best = results.best
    # The best trial's model was trained under its final configuration (after PBT's exploits).
    config = dict(best.config) if best is not None and best.trial_id == trial_id else config_of(row)
    # The epochs behind the trial's model and figure: its kept epoch (training.keep), else all it trained.
    trained = int(finite(row.get("kept_epoch")) or finite(row.get("epochs")) or 0)
    if epochs is None:
        if trained < 1:
            raise RetrainError(f"{where}: {label} trained 0 epochs; give the epochs to train (epochs=N, --epochs N)")
        count = trained
    elif isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise RetrainError(f"epochs: must be a whole number of at least 1, got {epochs!r}")
    else:
        count = epochs
    spec = results.spec
    precision = str(row.get(f"{INFO_PREFIX}precision") or config.get("precision", spec.training.precision))
    if precision == "auto":  # a trial that never reported what it ran in: as on a CPU
        precision = "float32"
    seed = int(config.get("seed", spec.training.seed))
    return RetrainPlan(trial_id, number, config, count, data_name, precision, seed)


def _data_name(data: object) -> str:
    if isinstance(data, str):
        if data not in DATA_CHOICES:
            raise RetrainError(
                f"data: must be one of {', '.join(DATA_CHOICES)} or a (train, validation) pair, got {data!r}"
            )
        return data
    if isinstance(data, tuple | list) and len(data) == 2 and data[0] is not None:
        return GIVEN
    raise RetrainError(
        f"data: must be one of {', '.join(DATA_CHOICES)} or a (train, validation) pair of datasets "
        f"(validation may be None), got {type(data).__name__}"
    )


def _trial_row(results: ExperimentResults, trial: int | str | None) -> dict[str, Any]:
    where = results.experiment_dir
    rows = [] if results.trials.empty else results.trials.to_dict("records")
    if trial is None:
        if results.best is None:
            raise RetrainError(f"{where}: no best trial (no trial reported {results.metric}); name one with --trial N")
        wanted = results.best.trial_id
        return next(r for r in rows if str(r["trial_id"]) == wanted)
    if isinstance(trial, bool):
        raise RetrainError(f"trial: must be a trial number or a trial id, got {trial!r}")
    text = str(trial).strip()
    for row in rows:
        number = finite(row.get("number"))
        if str(row["trial_id"]) == text or (
            number is not None and re.fullmatch(r"\d+", text) and int(number) == int(text)
        ):
            return row
    known = ", ".join(
        str(int(n)) if (n := finite(r.get("number"))) is not None else str(r["trial_id"]) for r in rows[:20]
    )
    raise RetrainError(f"{where}: no trial {text}; trials: {known or 'none'}{', ...' if len(rows) > 20 else ''}")


def next_folder(experiment_dir: Path, trial: int | str) -> Path:
    """A new folder for a retrain of ``trial``: ``retrain/<n>-trial-<trial>``, ``n`` one past the highest so far."""
    root = experiment_dir / RETRAIN_DIR
    taken = [int(m.group(1)) for p in (root.iterdir() if root.is_dir() else []) if (m := re.match(r"(\d+)-", p.name))]
    index = max(taken, default=0) + 1
    while True:
        folder = root / retrain_folder(index, trial)
        try:
            folder.mkdir(parents=True)
            return folder
        except FileExistsError:  # another retrain took it meanwhile
            index += 1


def retrain(
    results: ExperimentResults,
    trial: int | str | None = None,
    *,
    data: object = TRAIN_AND_VALIDATION,
    epochs: int | None = None,
    track: bool = True,
    on_epoch: EpochListener | None = None,
) -> Retrained:
    """Trains a trial's configuration again, in this process, and exports it beside the experiment.

    Args:
        results: the experiment (``tunekit.load(DIR)``).
        trial: a trial number or id; the best trial when None.
        data: ``"train+validation"`` (the trainable's two datasets concatenated, no validation),
            ``"train"`` (the trial again: validated on the validation data), or a
            ``(train_ds, val_ds)`` pair of your own (``val_ds`` may be None).
        epochs: how many epochs; when None, those behind the trial's model (its ``kept_epoch``).
        track: log an MLflow run, a child of the search's parent run, when the search was tracked.
        on_epoch: called after each epoch with (epoch, epochs, metrics).

    Returns:
        A ``Retrained``: the model, its folder, its metrics and its MLflow run.

    Raises:
        RetrainError: no such trial, a failed one, invalid ``data`` or ``epochs``.
    """
    plan = plan_retrain(results, trial, data=data, epochs=epochs)
    spec = runnable_spec(results.experiment_dir, results.builders)
    folder = next_folder(results.experiment_dir, plan.number if plan.number is not None else plan.trial_id)
    started = time.time()
    model, history = _train(spec, plan, folder, data, on_epoch)
    seconds = time.time() - started
    from tunekit.worker.checkpoints import export_model

    note = export_model(folder, model)
    saved = next((name for name in (FINAL_MODEL, FINAL_WEIGHTS) if (folder / name).is_file()), None)
    done = Retrained(
        model=model,
        path=folder,
        trial_id=plan.trial_id,
        number=plan.number,
        config=plan.config,
        epochs=len(history),
        data=plan.data,
        metrics=history[-1] if history else {},
        history=history,
        seconds=seconds,
        model_file=saved,
        export_note=note,
    )
    if track:
        from dataclasses import replace

        done = replace(done, run_id=_log_run(results.experiment_dir, done, started))
    _write_record(done, results.experiment_dir)
    return done


def _write_record(done: Retrained, experiment_dir: Path) -> None:
    """``retrain.json`` beside the model; a bucket experiment's reader writes into its local
    copy, so the folder then goes to the bucket too, where the experiment is."""
    from tunekit.storage.buckets import bucket_of
    from tunekit.storage.store import write_json

    write_json(done.path / RETRAIN_FILE, done.record(), indent=2)
    if (bucket := bucket_of(experiment_dir)) is not None:
        files = sorted(path for path in done.path.rglob("*") if path.is_file())
        bucket.push(experiment_dir, [path.relative_to(experiment_dir).as_posix() for path in files])


def _train(
    spec: ExperimentSpec, plan: RetrainPlan, folder: Path, data: object, on_epoch: EpochListener | None
) -> tuple[Any, list[dict[str, float]]]:
    """Builds and trains as a trial does (``tunekit.worker.trial._train``), on one device."""
    import keras

    from tunekit.compat.tf_keras import build_training_state, drop_custom_gradients
    from tunekit.contract import TrialContext, load_builders
    from tunekit.worker.autocompile import compile_from_config
    from tunekit.worker.checks import check_model_takes_data, checked_data, checked_fit_options, checked_model
    from tunekit.worker.precision import with_float32_outputs

    # The trial's start: a clean session, its policy, its seed, before anything is built.
    drop_custom_gradients()
    keras.backend.clear_session(free_memory=True)
    keras.mixed_precision.set_global_policy(plan.precision)
    keras.utils.set_random_seed(plan.seed)
    try:
        batch = int(plan.config.get("batch_size", spec.training.batch_size))
        ctx = TrialContext(
            batch_size=batch,
            per_replica_batch_size=batch,
            replicas=1,
            precision=plan.precision,
            seed=plan.seed,
            workdir=str(folder),
            cpus=max(1, math.floor(spec.resources.cpu)),
            max_epochs=plan.epochs,
            jit_compile=bool(plan.config.get("jit_compile", spec.training.jit_compile)),
            data=spec.data,
            spec_dir=spec.spec_dir,
            trial_dir=str(folder),
            trial_number=plan.number,
        )
        builders = load_builders(spec.trainable)
        if isinstance(data, tuple | list):
            train_ds, val_ds = data[0], data[1]
        else:
            train_ds, val_ds = checked_data(builders.build_data(plan.config, ctx))
        model = checked_model(builders.build_model(plan.config, ctx))
        probe = val_ds if val_ds is not None else train_ds
        model = with_float32_outputs(model, plan.precision, lambda: _first_inputs(probe), probe.element_spec[0])
        if not model.compiled:
            compile_from_config(model, plan.config, ctx)
        model.jit_compile = ctx.jit_compile
        check_model_takes_data(model, train_ds, "train")
        if val_ds is not None:
            check_model_takes_data(model, val_ds, "validation")
        options = checked_fit_options(builders, model, plan.config, ctx)
        build_training_state(model, train_ds.element_spec)
        if plan.data == TRAIN_AND_VALIDATION:
            train_ds, val_ds = train_ds.concatenate(val_ds), None
        history: list[dict[str, float]] = []
        listener = _listener(keras, history, plan.epochs, on_epoch)
        model.fit(
            train_ds,
            validation_data=val_ds,
            epochs=plan.epochs,
            verbose=0,
            **{"shuffle": False, **options, "callbacks": [*options.get("callbacks", []), listener]},
        )
        return model, history
    finally:
        keras.mixed_precision.set_global_policy("float32")


def _listener(keras: Any, history: list[dict[str, float]], epochs: int, on_epoch: EpochListener | None) -> Any:
    class EpochRecorder(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch: int, logs: Mapping[str, Any] | None = None) -> None:
            self._began = time.perf_counter()

        def on_epoch_end(self, epoch: int, logs: Mapping[str, Any] | None = None) -> None:
            metrics = {str(k): float(v) for k, v in (logs or {}).items() if finite(_scalar(v)) is not None}
            metrics["epoch_seconds"] = time.perf_counter() - self._began
            history.append(metrics)
            if on_epoch is not None:
                on_epoch(epoch + 1, epochs, metrics)

    return EpochRecorder()


def _scalar(value: Any) -> Any:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _first_inputs(dataset: Any) -> Any:
    for batch in dataset.take(1):
        return batch[0]
    raise RetrainError("the data to train on is empty")


# ------------------------------------------------------------------ MLflow


def _log_run(experiment_dir: Path, done: Retrained, started: float) -> str | None:
    """The retrain's MLflow run, a child of the search's parent; None when the search was not
    tracked. MLflow failing costs the run, never the retrained model: it warns and goes on."""
    from tunekit.tracking.record import TrackingRecord

    record = TrackingRecord.read(experiment_dir)
    if record is None:
        return None
    from tunekit.tracking.client import MlflowError, MlflowRunClient
    from tunekit.tracking.tags import (
        PARENT_RUN_TAG,
        RETRAIN_ROLE,
        TAG_EPOCHS,
        TAG_EXPERIMENT_DIR,
        TAG_RETRAIN_DATA,
        TAG_RETRAIN_FOLDER,
        TAG_RETRAIN_TRIAL_ID,
        TAG_RETRAIN_TRIAL_NUMBER,
        TAG_ROLE,
        TAG_WALL_SECONDS,
    )
    from tunekit.tracking.writer import answers, quick_http_retries

    tags = {
        PARENT_RUN_TAG: record.parent_run_id,
        TAG_ROLE: RETRAIN_ROLE,
        TAG_EXPERIMENT_DIR: shown(experiment_dir),
        TAG_RETRAIN_TRIAL_ID: done.trial_id,
        TAG_RETRAIN_DATA: done.data,
        TAG_EPOCHS: str(done.epochs),
        TAG_WALL_SECONDS: f"{done.seconds:.3f}",
        TAG_RETRAIN_FOLDER: str(done.path),
    }
    if done.number is not None:
        tags[TAG_RETRAIN_TRIAL_NUMBER] = str(done.number)
    if (why := answers(record.tracking_uri)) is not None:
        logger.warning("tunekit: retrain's MLflow run not recorded: %s", why)
        return None
    run_id = None
    try:
        with quick_http_retries():  # a failing server known in seconds; no "View run" lines on stdout
            client = MlflowRunClient(record.tracking_uri)
            start_ms = int(started * 1000)
            run_id = client.create_run(
                record.experiment_id, start_ms=start_ms, name=f"retrain-{done.path.name}", tags=tags
            )
            _fill_run(client, run_id, done)
    except (MlflowError, OSError) as error:
        logger.warning("tunekit: retrain's MLflow run at %s not recorded whole: %s", record.tracking_uri, error)
    return run_id


def _fill_run(client: Any, run_id: str, done: Retrained) -> None:
    """Params (the configuration, epochs, data), every epoch's metrics, the model if not huge; then ends the run."""
    from tunekit.tracking.client import MetricPoint
    from tunekit.tracking.tags import MODEL_ARTIFACT_DIR

    params = [(str(k), str(v)[:6000]) for k, v in done.config.items()]
    params += [("retrain.epochs", str(done.epochs)), ("retrain.data", done.data)]
    for i in range(0, len(params), 100):  # MLflow takes at most 100 params a batch
        client.log_batch(run_id, params=params[i : i + 100])
    now = int(time.time() * 1000)
    points = [
        MetricPoint(key, value, now, step)
        for step, metrics in enumerate(done.history, start=1)
        for key, value in metrics.items()
    ]
    for i in range(0, len(points), 1000):  # and at most 1000 metrics
        client.log_batch(run_id, metrics=points[i : i + 1000])
    if done.model_file is not None and (done.path / done.model_file).stat().st_size <= ARTIFACT_LIMIT_BYTES:
        client.log_artifact(run_id, str(done.path / done.model_file), MODEL_ARTIFACT_DIR)
    client.set_terminated(run_id, "FINISHED", int(time.time() * 1000))


def epoch_line(epoch: int, epochs: int, metrics: Mapping[str, float]) -> str:
    """One epoch as ``tunekit retrain`` prints it: ``epoch 3/10  loss 0.1234  accuracy 0.9700  (0.4 s)``."""
    shown = "  ".join(f"{key} {value:.4f}" for key, value in metrics.items() if key != "epoch_seconds")
    seconds = metrics.get("epoch_seconds")
    return f"epoch {epoch}/{epochs}  {shown}" + (f"  ({seconds:.1f} s)" if seconds is not None else "")


def closing_line(done: Retrained) -> str:
    """``tunekit retrain``'s last line: what was trained, on what, and where it is."""
    label = f"trial {done.number}" if done.number is not None else f"trial {done.trial_id}"
    saved = done.model_file or f"no model ({done.export_note})"
    run = f"; MLflow run {done.run_id}" if done.run_id else ""
    return (
        f"retrained {label} for {done.epochs} epochs on {done.data} in {done.seconds:.1f} s: {done.path / saved}{run}"
    )
