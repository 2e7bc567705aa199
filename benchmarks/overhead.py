"""tunekit against plain Ray Tune on the default digits search: wall time and per-trial overhead.

The same search is written twice:

* with tunekit: ``tunekit.run`` on ``search_spaces/digits_mlp.yaml`` (TPE seed 0, ASHA
  grace 2 rf 3, 2 trials at a time, 1 CPU each), tracking to MLflow on SQLite;
* by hand, the way a user would with plain Ray Tune defaults: a function trainable that
  builds the same model with the same trainable code (``trainables.digits_mlp``), compiles
  it, fits it with a per-epoch Keras callback that saves the weights and calls
  ``ray.tune.report`` with a ``tune.Checkpoint``; ``OptunaSearch(seed=0)`` over the same
  space in ``tune.loguniform/choice/uniform``; ``ASHAScheduler(grace 2, rf 3)``;
  ``TuneConfig(max_concurrent_trials=2)``; ``MLflowLoggerCallback`` to SQLite in a temp dir.

Equal terms: the headline pair tracks on both sides (each to its own fresh SQLite file, its
schema and experiment created before the clock, MLflow imported before it); a second pair
runs both sides untracked (tunekit ``tracking.enabled: false``, plain Ray Tune without the
callback). The four searches run A B A B: tracked tunekit, tracked plain, untracked tunekit,
untracked plain; then plain Keras alone, the machine's yardstick; then the whole-process row,
``tunekit run`` against a plain Ray Tune script, each timed from its command line to its exit
(``benchmarks.whole_process``).

Each side runs in its own child process with its own ``ray.init``, one after the other.
Both sides time the same work inside each trial (see DEFINITIONS), so the comparison of
what happens around the training is like for like.

When tunekit runs, the spec's trainable is this module: its ``build_data`` and
``build_model`` call ``trainables.digits_mlp``'s and only note the time build started and
ended in the trial's directory (tunekit has no per-trial build timer of its own).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import common, whole_process

NAME = "overhead"
TITLE = "tunekit vs plain Ray Tune on the default digits search"
TIMING_DIR_ENV = "TUNEKIT_BENCH_TIMING_DIR"  # set in the tunekit side's driver; Ray workers inherit it
SLOTS = 2

MODES: dict[str, dict[str, int]] = {
    "smoke": {"num_samples": 3, "max_epochs": 2, "grace_period": 1},
    "quick": {"num_samples": 12, "max_epochs": 20, "grace_period": 2},
    "full": {"num_samples": 24, "max_epochs": 20, "grace_period": 2},  # the shipped default search
}
REDUCTION_FACTOR = 3
SEED = 0

DEFINITIONS = {
    "time inside training": (
        "per trial, measured inside the trial's process: the seconds from the start of build_data "
        "to the return of build_model (data loading, tf.data pipeline, model construction), plus, for "
        "every epoch, the seconds from Keras' on_epoch_begin to on_epoch_end (training steps and "
        "validation). It excludes process start, TensorFlow import, device set-up, compile, and the "
        "per-epoch checkpoint and report. tunekit's epoch times are epochs.csv's epoch_seconds; the "
        "plain side's callback measures the same two points."
    ),
    "wall time": (
        "seconds from just before ray.init (imports already done; tunekit.run calls ray.init "
        "itself) to after ray.shutdown, in the side's own process"
    ),
    "slot time": "wall time x 2 slots (2 trials at a time, 1 CPU each)",
    "per-trial overhead": "(slot time - total time inside training) / trials",
    "share of slot time training": "total time inside training / slot time",
    "best val_accuracy": "highest final val_accuracy among trials that trained every epoch",
    "start-up": "seconds from the search's start to the first trial's build_data (Ray start, worker start, "
    "TensorFlow import)",
    "time between epochs": (
        "for consecutive epochs of a trial: (time between their ends) - (the later epoch's time inside "
        "training); the per-epoch checkpoint, report and wait for the driver. Epoch ends are the driver's "
        "receipt of the report for tunekit (epochs.csv time) and the callback's clock for the plain side; "
        "the difference of consecutive ends measures one full cycle either way"
    ),
}


# ------------------------------------------------------- the tunekit side's trainable

_build_started: dict[str, float] = {}


def build_data(config: dict[str, Any], ctx: Any) -> tuple[Any, Any]:
    """trainables.digits_mlp.build_data, noting when the trial's build started."""
    _build_started[ctx.workdir] = time.time()
    from trainables import digits_mlp

    return digits_mlp.build_data(config, ctx)


def build_model(config: dict[str, Any], ctx: Any) -> Any:
    """trainables.digits_mlp.build_model (uncompiled: tunekit compiles it), noting when build ended."""
    from trainables import digits_mlp

    model = digits_mlp.build_model(config, ctx)
    ended = time.time()
    started = _build_started.pop(ctx.workdir, ended)
    # ctx.workdir is the trial's scratch directory in Ray's session folder (its files do not
    # reach the experiment directory), so the timings go to a folder the driver names.
    trial_id = Path(ctx.workdir).name  # tunekit names trial directories after the trial id
    import psutil

    record = {"trial_id": trial_id, "build_started": started, "build_ended": ended, "pid": os.getpid()}
    record["process_started"] = psutil.Process().create_time()  # the worker's start (benchmarks.cold_start)
    Path(os.environ[TIMING_DIR_ENV], f"{trial_id}.json").write_text(json.dumps(record))
    return model


# ------------------------------------------------------------- the plain Ray Tune side


def plain_trainable(config: dict[str, Any], timing_dir: str, max_epochs: int, record_timing: bool = True) -> None:
    """What a user writes for Ray Tune by hand around the same trainable code (``record_timing``:
    the benchmark's own timing files, which the whole-process row's script leaves out)."""
    import keras
    from ray import tune

    from trainables import digits_mlp
    from tunekit.contract import TrialContext

    keras.utils.set_random_seed(SEED)
    context = tune.get_context()
    trial_id = context.get_trial_id()
    record: dict[str, Any] = {
        "trial_id": trial_id,
        "pid": os.getpid(),
        "build_started": time.time(),
        "epochs": [],
        "config": dict(config),
    }
    batch_size = int(config["batch_size"])
    ctx = TrialContext(
        batch_size=batch_size,
        per_replica_batch_size=batch_size,
        replicas=1,
        precision="float32",
        seed=SEED,
        workdir=context.get_trial_dir(),
        cpus=1,
        max_epochs=max_epochs,
        jit_compile=False,
        data={},
    )
    train_ds, val_ds = digits_mlp.build_data(config, ctx)
    model = digits_mlp.build_model(config, ctx)
    record["build_ended"] = time.time()
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=float(config["learning_rate"])),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    timing_path = Path(timing_dir) / f"{trial_id}.json"
    checkpoint_root = Path(timing_dir) / "checkpoints"
    checkpoint_root.mkdir(parents=True, exist_ok=True)

    class ReportEachEpoch(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            self.began = time.perf_counter()
            self.validating = self.began

        def on_test_begin(self, logs: dict[str, Any] | None = None) -> None:
            self.validating = time.perf_counter()

        def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            ended = time.perf_counter()
            seconds = ended - self.began
            metrics = {key: float(value) for key, value in (logs or {}).items()}
            record["epochs"].append(
                {
                    "epoch": epoch + 1,
                    "seconds": seconds,
                    "ended": time.time(),
                    "val_accuracy": metrics.get("val_accuracy"),
                }
            )
            # The same pieces tunekit's profile names (tunekit.worker.profile), for the breakdown.
            pieces = record.setdefault("pieces", {})
            pieces.setdefault("epoch.train", []).append(self.validating - self.began)
            pieces.setdefault("epoch.validate", []).append(ended - self.validating)
            if record_timing:
                timing_path.write_text(json.dumps(record))
            directory = Path(tempfile.mkdtemp(dir=checkpoint_root))
            saving = time.perf_counter()
            self.model.save_weights(str(directory / "model.weights.h5"))
            reporting = time.perf_counter()
            pieces.setdefault("epoch.checkpoint", []).append(reporting - saving)
            tune.report({**metrics, "epoch": epoch + 1}, checkpoint=tune.Checkpoint.from_directory(str(directory)))
            pieces.setdefault("epoch.report", []).append(time.perf_counter() - reporting)
            if record_timing:
                timing_path.write_text(json.dumps(record))
            shutil.rmtree(directory, ignore_errors=True)

    model.fit(train_ds, validation_data=val_ds, epochs=max_epochs, callbacks=[ReportEachEpoch()], verbose=0)


def ray_tune_space(spec_space: dict[str, Any]) -> dict[str, Any]:
    """The spec's space in Ray Tune's own sampling functions."""
    from ray import tune

    space: dict[str, Any] = {}
    for name, param in spec_space.items():
        kind = param["type"]
        if kind == "loguniform":
            space[name] = tune.loguniform(param["low"], param["high"])
        elif kind == "uniform":
            space[name] = tune.uniform(param["low"], param["high"])
        elif kind == "choice":
            space[name] = tune.choice(list(param["values"]))
        else:  # pragma: no cover - the digits space uses only these three
            raise ValueError(f"space.{name}: no Ray Tune translation for {kind}")
    return space


def prepare_mlflow(workdir: Path, experiment: str) -> str:
    """A fresh SQLite store in ``workdir`` with its schema and ``experiment`` made, as a user's
    database already is; both sides call it before their clock starts. Returns the URI."""
    import mlflow

    tracking_uri = f"sqlite:///{workdir / 'mlflow.db'}"
    mlflow.set_tracking_uri(tracking_uri)
    mlflow.set_experiment(experiment)
    return tracking_uri


def _run_plain(
    settings: dict[str, int], workdir: Path, tracked: bool = True, record_timing: bool = True
) -> dict[str, Any]:
    import ray
    from ray import tune
    from ray.air.integrations.mlflow import MLflowLoggerCallback
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search.optuna import OptunaSearch

    spec = common.digits_spec()
    timing_dir = workdir / "plain-timing"
    timing_dir.mkdir(parents=True, exist_ok=True)
    callbacks: list[tune.Callback] = []
    if tracked:
        # A user's MLflow database already exists; creating its schema is not part of a search.
        tracking_uri = prepare_mlflow(workdir, "plain-ray-tune")
        callbacks.append(MLflowLoggerCallback(tracking_uri=tracking_uri, experiment_name="plain-ray-tune"))

    started = time.time()
    ray.init()
    trainable = tune.with_resources(
        tune.with_parameters(
            plain_trainable,
            timing_dir=str(timing_dir),
            max_epochs=settings["max_epochs"],
            record_timing=record_timing,
        ),
        {"cpu": 1},
    )
    tuner = tune.Tuner(
        trainable,
        param_space=ray_tune_space(spec["space"]),
        tune_config=tune.TuneConfig(
            metric="val_accuracy",
            mode="max",
            search_alg=OptunaSearch(seed=SEED),
            scheduler=ASHAScheduler(
                max_t=settings["max_epochs"], grace_period=settings["grace_period"], reduction_factor=REDUCTION_FACTOR
            ),
            num_samples=settings["num_samples"],
            max_concurrent_trials=SLOTS,
        ),
        run_config=tune.RunConfig(
            name="plain-ray-tune",
            storage_path=str(workdir / "ray_results"),
            callbacks=callbacks,
        ),
    )
    grid = tuner.fit()
    ray.shutdown()
    wall = time.time() - started

    trials = []
    for record in common.read_json_files(timing_dir, "*.json"):
        epochs = record["epochs"]
        trials.append(
            {
                "trial_id": record["trial_id"],
                "pid": record["pid"],
                "build_started": record["build_started"],
                "build_s": record["build_ended"] - record["build_started"],
                "epoch_s": [e["seconds"] for e in epochs],
                "epoch_end": [e["ended"] for e in epochs],
                "epochs": len(epochs),
                "final_val_accuracy": epochs[-1]["val_accuracy"] if epochs else None,
                "best_val_accuracy": max((e["val_accuracy"] for e in epochs), default=None),
                "pieces": record.get("pieces", {}),
            }
        )
    errors = grid.num_errors
    return {
        "side": "plain Ray Tune",
        "tracked": tracked,
        "started": started,
        "wall_s": wall,
        "trials": trials,
        "trials_reported": len(grid),
        "epochs_trained": sum(int((grid[index].metrics or {}).get("epoch") or 0) for index in range(len(grid))),
        "errors": errors,
    }


def _prepare_whole_process_store(workdir: Path) -> dict[str, Any]:
    """The whole-process row's store, made before either side's clock (benchmarks.whole_process)."""
    prepare_mlflow(workdir, "plain-ray-tune")
    return {"tracking_uri": prepare_mlflow(workdir, whole_process.EXPERIMENT)}


def _run_tunekit(settings: dict[str, int], workdir: Path, tracked: bool = True) -> dict[str, Any]:
    import ray.tune  # noqa: F401 - imported before the clock, as on the plain side

    import tunekit
    import tunekit.driver.recorder
    import tunekit.driver.runner
    from tunekit.worker.profile import PROFILE_DIR_ENV

    timing_dir = workdir / "tunekit-timing"
    timing_dir.mkdir(parents=True, exist_ok=True)
    os.environ[TIMING_DIR_ENV] = str(timing_dir)
    profile_dir = workdir / "tunekit-profile"
    profile_dir.mkdir(parents=True, exist_ok=True)
    os.environ[PROFILE_DIR_ENV] = str(profile_dir)
    # As on the plain side: a store whose schema exists, MLflow imported before the clock.
    tracking = {"uri": prepare_mlflow(workdir, "tunekit"), "experiment": "tunekit"} if tracked else {"enabled": False}
    spec = tunekit.load_spec(
        common.digits_spec(
            trainable="benchmarks.overhead",
            budget={
                "num_samples": settings["num_samples"],
                "max_epochs": settings["max_epochs"],
                "max_concurrent": SLOTS,
            },
            scheduler={"type": "asha", "grace_period": settings["grace_period"], "reduction_factor": REDUCTION_FACTOR},
            tracking=tracking,
        )
    )
    started = time.time()
    results = tunekit.run(spec, name="tunekit", storage=workdir, progress=False)
    wall = time.time() - started

    timings = {t["trial_id"]: t for t in common.read_json_files(timing_dir, "*.json")}
    profiles = {path.stem: json.loads(path.read_text()) for path in profile_dir.glob("*.json")}
    epochs = results.epochs
    recorder_started = results.started_at or started
    trials = []
    for _, row in results.trials.iterrows():
        trial_id = str(row["trial_id"])
        timing = timings.get(trial_id)
        rows = epochs[epochs["trial_id"] == trial_id] if not epochs.empty else epochs
        trials.append(
            {
                "trial_id": trial_id,
                "pid": None if timing is None else timing["pid"],
                "build_started": None if timing is None else timing["build_started"],
                "build_s": 0.0 if timing is None else timing["build_ended"] - timing["build_started"],
                "epoch_s": [float(x) for x in rows["epoch_seconds"]] if len(rows) else [],
                # when the driver received each epoch's report (after its checkpoint)
                "epoch_end": [recorder_started + float(x) for x in rows["time"]] if len(rows) else [],
                "epochs": int(row["epochs"]),
                "status": str(row["status"]),
                "final_val_accuracy": None if rows.empty else float(rows["val_accuracy"].iloc[-1]),
                "best_val_accuracy": None if rows.empty else float(rows["val_accuracy"].max()),
                "pieces": profiles.get(trial_id, {}),
            }
        )
    missing = sum(t["pid"] is None for t in trials)
    return {
        "side": "tunekit",
        "tracked": tracked,
        "started": started,
        "wall_s": wall,
        "trials": trials,
        "trials_reported": len(trials),
        "trials_without_build_timing": missing,
    }


KERAS_CONFIGS = [  # plain Keras fits of the digits MLP, alone on one core as a trial would be
    {"units": 64, "dropout": 0.1, "learning_rate": 1e-3, "batch_size": 32},
    {"units": 128, "dropout": 0.2, "learning_rate": 1e-3, "batch_size": 64},
    {"units": 256, "dropout": 0.3, "learning_rate": 3e-3, "batch_size": 16},
]
KERAS_EPOCHS = 5


def _run_keras(settings: dict[str, int], workdir: Path) -> dict[str, Any]:
    """model.fit alone, no Ray and no tunekit: the model's own train and validation times."""
    import keras
    import tensorflow as tf

    from trainables import digits_mlp
    from tunekit.contract import TrialContext
    from tunekit.worker.autocompile import AUTO_STEPS_PER_EXECUTION

    # As a tunekit trial of 1 CPU sets them (tunekit.worker.devices).
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)

    class Pieces(keras.callbacks.Callback):
        """Keras's own epoch: train, validate, and the gap to the next (its callbacks, the iterator)."""

        def __init__(self, pieces: dict[str, list[float]]) -> None:
            super().__init__()
            self.pieces = pieces
            self.ended = 0.0

        def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            self.began = time.perf_counter()
            if self.ended:
                self.pieces.setdefault("epoch.between", []).append(self.began - self.ended)

        def on_test_begin(self, logs: dict[str, Any] | None = None) -> None:
            self.validating = time.perf_counter()

        def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            self.ended = time.perf_counter()
            self.pieces.setdefault("epoch.train", []).append(self.validating - self.began)
            self.pieces.setdefault("epoch.validate", []).append(self.ended - self.validating)

    trials = []
    for number, config in enumerate(KERAS_CONFIGS):
        keras.backend.clear_session()
        keras.utils.set_random_seed(SEED)
        batch = int(config["batch_size"])
        ctx = TrialContext(
            batch_size=batch, per_replica_batch_size=batch, replicas=1, precision="float32", seed=SEED,
            workdir=str(workdir), cpus=1, max_epochs=KERAS_EPOCHS, jit_compile=False, data={},
        )  # fmt: skip
        train_ds, val_ds = digits_mlp.build_data(config, ctx)
        model = digits_mlp.build_model(config, ctx)
        model.compile(
            optimizer=keras.optimizers.Adam(learning_rate=float(config["learning_rate"])),
            loss="sparse_categorical_crossentropy",
            metrics=["accuracy"],
            # As tunekit compiles this model (training.steps_per_execution: auto), so the
            # later-epoch overhead compares like with like.
            steps_per_execution=AUTO_STEPS_PER_EXECUTION,
        )
        pieces: dict[str, list[float]] = {}
        model.fit(train_ds, validation_data=val_ds, epochs=KERAS_EPOCHS, callbacks=[Pieces(pieces)], verbose=0)
        trials.append({"trial_id": f"keras-{number}", "config": config, "pieces": pieces})
    return {"side": "plain Keras", "trials": trials}


# -------------------------------------------------------------------------- analysis

EPOCH_WORK = ("epoch.memory", "epoch.measures", "epoch.checks", "epoch.checkpoint", "epoch.report")
MODEL_STEPS = ("epoch.train", "epoch.validate")


def breakdown(side: dict[str, Any]) -> dict[str, Any]:
    """Milliseconds per piece: per later epoch (the first is the one that traces), per trial, and tracing.

    The model's steps' per-epoch figure is the median of their occurrences after each trial's
    first epoch (the one that traces). The work at an epoch's end is amortised: a piece's
    total in a trial over the trial's epochs (a checkpoint is not taken every epoch, see
    ``tunekit.worker.checkpoints.CheckpointPolicy``), then the median over trials. A per-trial
    piece's figure is the median over trials. ``model_s`` is the model's own train and
    validation time over every epoch, the time plain Keras fit would spend.
    """
    per_epoch: dict[str, list[float]] = {}
    per_trial: dict[str, list[float]] = {}
    first_epoch: list[float] = []
    model_s = 0.0
    for trial in side["trials"]:
        pieces: dict[str, list[float]] = trial.get("pieces") or {}
        epochs = len(pieces.get("epoch.train", []))
        for name, values in pieces.items():
            if name in MODEL_STEPS:
                per_epoch.setdefault(name, []).extend(values[1:])
            elif name in EPOCH_WORK:
                per_epoch.setdefault(name, []).append(sum(values) / (epochs or len(values)))
            elif name.startswith("epoch."):
                per_epoch.setdefault(name, []).extend(values)
            else:
                per_trial.setdefault(name, []).append(sum(values))
        steps = [pieces.get(name, []) for name in MODEL_STEPS]
        model_s += sum(sum(values) for values in steps)
        if all(steps):
            first_epoch.append(sum(values[0] for values in steps))
    ms = {name: 1000 * (common.median(values) or 0.0) for name, values in sorted(per_epoch.items()) if values}
    later_model = sum(ms.get(name, 0.0) for name in MODEL_STEPS)
    work = sum(ms.get(name, 0.0) for name in EPOCH_WORK)
    tracing = 1000 * (common.median(first_epoch) or 0.0) - later_model if first_epoch else None
    return {
        "per_epoch_ms": ms,
        "per_trial_ms": {name: 1000 * (common.median(v) or 0.0) for name, v in sorted(per_trial.items())},
        "tracing_ms": tracing,
        "model_s": model_s,
        "epoch_work_ms": work,
        "later_epoch_overhead": work / later_model if later_model else None,
    }


def breakdown_figures(
    tk: dict[str, Any], plain: dict[str, Any], keras_side: dict[str, Any], slot_s: float
) -> list[dict[str, Any]]:
    """The per-epoch and per-trial pieces of the three sides, and the targets they answer to."""
    a, b, k = breakdown(tk), breakdown(plain), breakdown(keras_side)
    share = a["model_s"] / slot_s if slot_s else None
    overhead = a["later_epoch_overhead"]
    figures = [
        common.figure(
            "tunekit share of slot time in the model's own train and validation steps",
            _pct(share), "%", ">= 75%", None if share is None else share >= 0.75,
        ),
        common.figure(
            "tunekit later-epoch work over the model's own epoch (memory, checks, checkpoint, report)",
            _pct(overhead), "%", "< 10%", None if overhead is None else overhead < 0.10,
        ),
        common.figure("tunekit tracing per trial (first epoch minus a later one)", a["tracing_ms"], "ms"),
        common.figure("plain Ray Tune tracing per trial", b["tracing_ms"], "ms"),
        common.figure("plain Keras tracing per fit", k["tracing_ms"], "ms"),
    ]  # fmt: skip
    for name in sorted({*a["per_epoch_ms"], *b["per_epoch_ms"], *k["per_epoch_ms"]}):
        for label, side in (("tunekit", a), ("plain Ray Tune", b), ("plain Keras", k)):
            if name in side["per_epoch_ms"]:
                figures.append(common.figure(f"{label} {name} per later epoch", side["per_epoch_ms"][name], "ms"))
    for name, value in a["per_trial_ms"].items():
        figures.append(common.figure(f"tunekit {name} per trial", value, "ms"))
    return figures


def summarise(side: dict[str, Any], max_epochs: int) -> dict[str, Any]:
    trials = side["trials"]
    training = sum(t["build_s"] + sum(t["epoch_s"]) for t in trials)
    slot = side["wall_s"] * SLOTS
    count = max(1, len(trials))
    completed = [
        t["final_val_accuracy"] for t in trials if t["epochs"] >= max_epochs and t["final_val_accuracy"] is not None
    ]
    epochs = sum(t["epochs"] for t in trials)
    gaps = [
        t["epoch_end"][k] - t["epoch_end"][k - 1] - t["epoch_s"][k]
        for t in trials
        for k in range(1, min(len(t["epoch_end"]), len(t["epoch_s"])))
    ]
    builds = [t["build_started"] for t in trials if t.get("build_started") is not None]
    startup = min(builds) - side["started"] if builds and side.get("started") else None
    return {
        "startup_s": startup,
        "between_epochs_median_s": common.median(gaps) if gaps else None,
        "between_epochs_total_s": sum(gaps),
        "between_epochs_share": sum(gaps) / slot if slot else None,
        "wall_s": side["wall_s"],
        "trials": len(trials),
        "epochs_trained": epochs,
        "training_s": training,
        "build_s": sum(t["build_s"] for t in trials),
        "slot_s": slot,
        "overhead_per_trial_s": (slot - training) / count,
        "training_share": training / slot if slot else None,
        "wall_per_epoch_s": side["wall_s"] / epochs if epochs else None,
        "best_val_accuracy": max(completed, default=None),
        "best_val_accuracy_any_epoch": max(
            (t["best_val_accuracy"] for t in trials if t["best_val_accuracy"] is not None), default=None
        ),
        "trials_trained_to_end": len(completed),
        "worker_processes": len({t["pid"] for t in trials if t.get("pid") is not None}),
    }


# The side runs, in the order they run (A B A B: no pair straddles the other's), and the rows.
SIDES = ("tunekit", "plain", "tunekit-untracked", "plain-untracked", "keras")
ROWS = {"tracked": ("tunekit", "plain"), "untracked": ("tunekit-untracked", "plain-untracked")}
# The in-window sides each --rows choice runs (the whole-process row's are benchmarks.whole_process's).
IN_WINDOW_SIDES: dict[str, tuple[str, ...]] = {"all": SIDES, "tracked": ("tunekit", "plain", "keras"), "whole": ()}
TRACKING_OF_ROW = {
    "tracked": "both sides track to MLflow (SQLite, schema made before the clock)",
    "untracked": "both sides untracked (tunekit tracking.enabled: false; plain Ray Tune without MLflowLoggerCallback)",
}


def side_tracking(side: dict[str, Any]) -> str:
    """What a side did about tracking, in the words every published ratio carries."""
    if side.get("tracked") is None:
        return "tracking unknown"
    return "tracked" if side["tracked"] else "untracked"


def check_row(tk: dict[str, Any], plain: dict[str, Any], row: str) -> None:
    """A ratio only between sides that did the same about tracking: refuses a mixed pair."""
    want = row == "tracked"
    if tk.get("tracked") is not want or plain.get("tracked") is not want:
        raise ValueError(
            f"the {row} row pairs tunekit {side_tracking(tk)} with plain Ray Tune {side_tracking(plain)}: "
            "not equal terms"
        )


def row_figures(a: dict[str, Any], b: dict[str, Any], row: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The untracked row's wall ratios (the headline's are in ``analyse``)."""
    speedup = common.ratio(b["wall_s"], a["wall_s"])
    per_epoch = common.ratio(b["wall_per_epoch_s"], a["wall_per_epoch_s"])
    figures = [
        common.figure(f"{row}: wall-time ratio (plain Ray Tune / tunekit), {TRACKING_OF_ROW[row]}", speedup, "x"),
        common.figure(f"{row}: tunekit wall time", a["wall_s"], "s"),
        common.figure(f"{row}: plain Ray Tune wall time", b["wall_s"], "s"),
        common.figure(f"{row}: wall time per trained epoch ratio (plain / tunekit)", per_epoch, "x"),
        common.figure(f"{row}: tunekit epochs trained", a["epochs_trained"]),
        common.figure(f"{row}: plain Ray Tune epochs trained", b["epochs_trained"]),
        common.figure(f"{row}: tunekit start-up (search start to first build_data)", a["startup_s"], "s"),
        common.figure(f"{row}: plain Ray Tune start-up", b["startup_s"], "s"),
        common.figure(f"{row}: tunekit per-trial overhead", a["overhead_per_trial_s"], "s"),
        common.figure(f"{row}: plain Ray Tune per-trial overhead", b["overhead_per_trial_s"], "s"),
    ]
    ratios = [
        f"{row} ({TRACKING_OF_ROW[row]}): tunekit {common.fmt(a['wall_s'])} s vs plain Ray Tune "
        f"{common.fmt(b['wall_s'])} s -> {common.fmt(speedup)}x; per trained epoch {common.fmt(per_epoch)}x "
        f"({a['epochs_trained']} vs {b['epochs_trained']} epochs)"
    ]
    return figures, ratios


def tracking_cost(on: dict[str, Any], off: dict[str, Any]) -> dict[str, Any]:
    """One side's tracked wall over its untracked wall, raw and per trained epoch (the two runs
    of a side may train different epochs when ASHA's decisions fall differently)."""
    raw = common.ratio(on["wall_s"], off["wall_s"])
    per_epoch = common.ratio(on["wall_per_epoch_s"], off["wall_per_epoch_s"])
    return {
        "wall_ratio": raw,
        "per_epoch_ratio": per_epoch,
        "same_epochs": on["epochs_trained"] == off["epochs_trained"],
        "epochs": (on["epochs_trained"], off["epochs_trained"]),
    }


def analyse(
    tk: dict[str, Any],
    plain: dict[str, Any],
    keras_side: dict[str, Any],
    settings: dict[str, int],
    tk_off: dict[str, Any] | None = None,
    plain_off: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The headline (tracked on both sides), the untracked row when its sides ran, tracking's cost."""
    check_row(tk, plain, "tracked")
    a, b = summarise(tk, settings["max_epochs"]), summarise(plain, settings["max_epochs"])
    speedup = common.ratio(b["wall_s"], a["wall_s"])
    overhead_ratio = common.ratio(b["overhead_per_trial_s"], a["overhead_per_trial_s"])
    per_epoch = common.ratio(b["wall_per_epoch_s"], a["wall_per_epoch_s"])
    figures = [
        common.figure(
            "wall-time ratio, both sides tracking to MLflow (plain Ray Tune / tunekit)",
            speedup,
            "x",
            ">= 3x (stretch 4x)",
            None if speedup is None else speedup >= 3,
        ),
        common.figure("tunekit wall time", a["wall_s"], "s"),
        common.figure("plain Ray Tune wall time", b["wall_s"], "s"),
        common.figure("tunekit per-trial overhead", a["overhead_per_trial_s"], "s"),
        common.figure("plain Ray Tune per-trial overhead", b["overhead_per_trial_s"], "s"),
        common.figure("per-trial overhead ratio (plain / tunekit)", overhead_ratio, "x"),
        common.figure(
            "tunekit share of slot time training",
            _pct(a["training_share"]),
            "%",
            ">= 85%",
            None if a["training_share"] is None else a["training_share"] >= 0.85,
        ),
        common.figure("plain Ray Tune share of slot time training", _pct(b["training_share"]), "%"),
        common.figure("tunekit epochs trained", a["epochs_trained"]),
        common.figure("plain Ray Tune epochs trained", b["epochs_trained"]),
        common.figure(
            "wall time per trained epoch ratio (plain / tunekit)",
            per_epoch,
            "x",
            note="corrects for the two searches training different numbers of epochs",
        ),
        common.figure("tunekit start-up (search start to first build_data)", a["startup_s"], "s"),
        common.figure("plain Ray Tune start-up (search start to first build_data)", b["startup_s"], "s"),
        common.figure("tunekit median time between epochs (report + checkpoint)", a["between_epochs_median_s"], "s"),
        common.figure(
            "plain Ray Tune median time between epochs (report + checkpoint)", b["between_epochs_median_s"], "s"
        ),
        common.figure("tunekit share of slot time between epochs", _pct(a["between_epochs_share"]), "%"),
        common.figure("plain Ray Tune share of slot time between epochs", _pct(b["between_epochs_share"]), "%"),
        common.figure("tunekit best val_accuracy", a["best_val_accuracy"]),
        common.figure("plain Ray Tune best val_accuracy", b["best_val_accuracy"]),
        common.figure("tunekit worker processes", a["worker_processes"]),
        common.figure("plain Ray Tune worker processes", b["worker_processes"]),
        *breakdown_figures(tk, plain, keras_side, a["slot_s"]),
    ]
    ratios = [
        f"wall time: tunekit {common.fmt(a['wall_s'])} s vs plain Ray Tune {common.fmt(b['wall_s'])} s "
        f"-> tunekit {common.fmt(speedup)}x faster",
        f"per-trial overhead: tunekit {common.fmt(a['overhead_per_trial_s'])} s vs plain "
        f"{common.fmt(b['overhead_per_trial_s'])} s -> {common.fmt(overhead_ratio)}x less",
        f"share of slot time training: tunekit {common.fmt(_pct(a['training_share']))}% vs plain "
        f"{common.fmt(_pct(b['training_share']))}%",
        f"wall time per trained epoch: tunekit {common.fmt(a['wall_per_epoch_s'])} s vs plain "
        f"{common.fmt(b['wall_per_epoch_s'])} s -> {common.fmt(per_epoch)}x",
        f"best val_accuracy: tunekit {common.fmt(a['best_val_accuracy'])} vs plain "
        f"{common.fmt(b['best_val_accuracy'])}",
    ]
    ratios[0] = f"tracked, {TRACKING_OF_ROW['tracked']}: " + ratios[0] + side_loads(tk, plain)
    pieces = {"tunekit": breakdown(tk), "plain_ray_tune": breakdown(plain), "plain_keras": breakdown(keras_side)}
    result: dict[str, Any] = {
        "figures": figures,
        "ratios": ratios,
        "summary": {"tunekit": a, "plain_ray_tune": b},
        "breakdown": pieces,
        "tracking": "on",
    }
    if tk_off is not None and plain_off is not None:
        check_row(tk_off, plain_off, "untracked")
        c, d = summarise(tk_off, settings["max_epochs"]), summarise(plain_off, settings["max_epochs"])
        row, row_ratios = row_figures(c, d, "untracked")
        costs = {"tunekit": tracking_cost(a, c), "plain_ray_tune": tracking_cost(b, d)}
        for label, cost in (("tunekit", costs["tunekit"]), ("plain Ray Tune", costs["plain_ray_tune"])):
            row.append(
                common.figure(
                    f"{label} tracked wall / untracked wall",
                    cost["wall_ratio"],
                    "x",
                    "<= 1.05x" if label == "tunekit" else None,
                    None if label != "tunekit" or cost["wall_ratio"] is None else cost["wall_ratio"] <= 1.05,
                    note=f"epochs trained {cost['epochs'][0]} tracked, {cost['epochs'][1]} untracked",
                )
            )
            row.append(
                common.figure(f"{label} tracked / untracked wall per trained epoch", cost["per_epoch_ratio"], "x")
            )
        result["figures"] = figures + row
        result["ratios"] = (
            ratios
            + row_ratios
            + [
                f"tracking's cost: tunekit tracked / untracked wall {common.fmt(costs['tunekit']['wall_ratio'])}x, "
                f"plain Ray Tune {common.fmt(costs['plain_ray_tune']['wall_ratio'])}x"
            ]
        )
        result["untracked"] = {
            "summary": {"tunekit": c, "plain_ray_tune": d},
            "breakdown": {"tunekit": breakdown(tk_off), "plain_ray_tune": breakdown(plain_off)},
        }
        result["tracking_cost"] = costs
    return result


def side_loads(tk: dict[str, Any], plain: dict[str, Any]) -> str:
    """The 1-minute load before and after each side, when the run noted them."""
    if "load_before" not in tk or "load_before" not in plain:
        return ""
    return (
        f" (load: tunekit {tk['load_before'][0]:.1f} -> {tk['load_after'][0]:.1f}, "
        f"plain {plain['load_before'][0]:.1f} -> {plain['load_after'][0]:.1f})"
    )


def _pct(share: float | None) -> float | None:
    return None if share is None else 100 * share


# ------------------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = common.parser(NAME, __doc__.splitlines()[0])
    p.add_argument("--side", choices=(*SIDES, *whole_process.SIDES, "prepare-mlflow"), help=argparse.SUPPRESS)
    p.add_argument(
        "--rows",
        choices=tuple(IN_WINDOW_SIDES),
        default="all",
        help="all: the tracked headline, the untracked row and the whole-process row (default); tracked: the "
        "headline only; whole: the whole-process row only (each side's command timed from launch to exit)",
    )
    p.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    settings = MODES[args.mode]
    if args.side:
        runners = {
            "tunekit": lambda: _run_tunekit(settings, args.workdir, tracked=True),
            "plain": lambda: _run_plain(settings, args.workdir, tracked=True),
            "tunekit-untracked": lambda: _run_tunekit(settings, args.workdir, tracked=False),
            "plain-untracked": lambda: _run_plain(settings, args.workdir, tracked=False),
            "keras": lambda: _run_keras(settings, args.workdir),
            "plain-process": lambda: _run_plain(settings, args.workdir, tracked=True, record_timing=False),
            "prepare-mlflow": lambda: _prepare_whole_process_store(args.workdir),
        }
        common.write_json(args.result, common.clean(runners[args.side]()))
        return 0

    report = common.Report(NAME, TITLE, args.mode, args.out)
    sides: dict[str, Any] = {}
    whole: dict[str, Any] = {}
    with common.Workdir(NAME, args.keep) as workdir:
        for side in IN_WINDOW_SIDES[args.rows]:  # one after the other, never at the same time
            print(f"[{NAME}] running the {side} side ({args.mode}) ...", flush=True)
            side_dir = workdir / side
            load = os.getloadavg()
            sides[side] = common.run_child(
                f"benchmarks.{NAME}",
                [f"--{args.mode}", "--side", side, "--workdir", str(side_dir)],
                side_dir,
                side,
            )
            # Each side's own load: a load spike during one side moves the ratio, not the other side.
            sides[side]["load_before"], sides[side]["load_after"] = list(load), list(os.getloadavg())
        if args.rows in ("all", "whole"):
            for side in whole_process.SIDES:
                print(f"[{NAME}] running the {side} side, launch to exit ({args.mode}) ...", flush=True)
                whole[side] = whole_process.run_side(side, args.mode, settings, workdir / side)
    setup = {
        "search": "search_spaces/digits_mlp.yaml: learning_rate, units, dropout, batch_size",
        "trials": settings["num_samples"],
        "max_epochs": settings["max_epochs"],
        "concurrency": f"{SLOTS} trials at a time, 1 CPU each",
        "searcher": f"TPE seed {SEED} (tunekit: its Optuna study; plain: OptunaSearch(seed={SEED}) defaults)",
        "scheduler": f"ASHA grace {settings['grace_period']}, rf {REDUCTION_FACTOR}, max_t {settings['max_epochs']}",
        "tracking": "headline: both sides track to MLflow on SQLite (tunekit's tracker; plain Ray Tune's "
        "MLflowLoggerCallback), each to a fresh file whose schema and experiment exist before the clock; "
        "second row: both untracked; whole-process row: both tracked, as the headline",
        "data": "scikit-learn digits, 1437 train / 360 validation",
    }
    notes = [
        "The two searchers are both TPE seeded 0 but not identical (tunekit: 8 random start-up trials, "
        "constant liar, multivariate, PRUNED bookkeeping; OptunaSearch: Optuna's defaults), so the trials "
        "and epochs trained differ; per-trial overhead and wall time per trained epoch correct for that.",
        "Plain Ray Tune defaults: a new worker process per trial (reuse_actors=False, so TensorFlow is "
        "imported in every trial), Ray's JSON/CSV/TensorBoard loggers, TensorFlow's default thread pools "
        "(every core, in each of the 2 concurrent trials). tunekit reuses workers and caps threads at the "
        "trial's CPU share.",
        "Equal terms: the headline's two sides both log every trial to MLflow on SQLite; the untracked row's "
        "two sides log to neither. Plain Ray Tune keeps Ray's own JSON/CSV/TensorBoard loggers in both rows "
        "(its defaults); tunekit writes its trials.csv and epochs.csv in both. Runs before 2026-11-28's "
        "equal-terms change compared tunekit untracked with plain Ray Tune tracked (4.40-4.80x full): not "
        "equal terms.",
        "Other processes shared the CPU during this run; see load_before/load_after. Ratios are measured "
        "side by side in one run, one side after the other.",
        "The whole-process row times what a user waits for: `tunekit run` against a plain Ray Tune script, "
        "each from its command line to its exit (imports, Ray's start and shutdown, the interpreter's exit); "
        "the other rows time from just before ray.init to after ray.shutdown in the side's process. The plain "
        "script calls ray.shutdown itself, sparing it the 0.5 s Ray's exit hook sleeps when a script does not.",
    ]
    figures: list[dict[str, Any]] = []
    ratios: list[str] = []
    details: dict[str, Any] = {}
    if sides:
        analysis = analyse(
            sides["tunekit"],
            sides["plain"],
            sides["keras"],
            settings,
            sides.get("tunekit-untracked"),
            sides.get("plain-untracked"),
        )
        figures, ratios = analysis["figures"], analysis["ratios"]
        details = {
            "sides": sides,
            "summary": analysis["summary"],
            "breakdown": analysis["breakdown"],
            "tracking": analysis["tracking"],
        }
        for key in ("untracked", "tracking_cost"):
            if key in analysis:
                details[key] = analysis[key]
    if whole:
        row_figures, row_ratios = whole_process.row(whole["tunekit-process"], whole["plain-process"])
        figures, ratios = figures + row_figures, ratios + row_ratios
        details["whole_process"] = whole
    definitions = {**DEFINITIONS, **whole_process.DEFINITIONS}
    return report.finish(figures, ratios, definitions, setup, notes, details)


if __name__ == "__main__":
    sys.exit(main())
