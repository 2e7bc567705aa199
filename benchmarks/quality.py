"""Search quality against KerasTuner: best-so-far validation accuracy over the same wall-clock budget.

Three searches over the same space, the same data, the same maximum epochs per trial and
the same wall-clock budget, each in its own fresh process, one after the other:

* tunekit: TPE + ASHA (the shipped digits spec's search), 2 trials at a time on 1 CPU each;
* random + ASHA: the same tunekit run with ``search.algorithm: random``;
* KerasTuner Hyperband (``keras_tuner.Hyperband``, factor 3), which runs its trials one
  after the other in one process, TensorFlow using every core.

Two tasks, so quality is not tuned to one data set: the digits MLP (the default search's
space) and a held-out tabular task scikit-learn ships, breast cancer (30 standardised
features, 2 classes), with a small MLP of the same shape (its builders are in this module).
Each task has its own threshold for "time to accuracy".

Neither side tracks: tunekit runs with ``tracking.enabled: false`` and
``tracking.tensorboard: false``; KerasTuner gets no TensorBoard callback. Each keeps its own
records on disk (tunekit's trials.csv, epochs.csv and checkpoints; KerasTuner's trial files
and checkpoints).

The clock starts when the parent launches the child process, so every side pays its own
imports, Ray start-up and TensorFlow start-up inside the budget. Every validation
accuracy a side reports (any trial, any epoch) before the budget runs out goes into its
best-so-far curve. Medians are taken over several search seeds.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import common

NAME = "quality"
TITLE = "search quality vs KerasTuner Hyperband and random search + ASHA, on digits and breast cancer"
METHODS = ("tunekit", "random", "kerastuner")
LABELS = {"tunekit": "tunekit (TPE + ASHA)", "random": "random + ASHA (tunekit)", "kerastuner": "KerasTuner Hyperband"}
THRESHOLD = 0.95  # digits
SLOTS = 2

# The held-out task's space: the digits MLP's, with smaller layers for 30 features.
CANCER_SPACE: dict[str, dict[str, Any]] = {
    "learning_rate": {"type": "loguniform", "low": 1.0e-4, "high": 1.0e-2},
    "units": {"type": "choice", "values": [16, 32, 64, 128]},
    "dropout": {"type": "uniform", "low": 0.0, "high": 0.5},
    "batch_size": {"type": "choice", "values": [16, 32, 64]},
}
# name -> the trainable module tunekit imports, its threshold, and what the setup states.
TASKS: dict[str, dict[str, Any]] = {
    "digits": {
        "trainable": "trainables.digits_mlp",
        "threshold": THRESHOLD,
        "data": "scikit-learn digits, 1437 train / 360 validation, 10 classes",
        "space": "learning_rate loguniform(1e-4, 1e-2), units {32,64,128,256}, dropout uniform(0, 0.5), "
        "batch_size {16,32,64}; Dense(units) Dropout Dense(units/2) Dense(10)",
    },
    "breast_cancer": {
        "trainable": "benchmarks.quality",
        # 111 of 114 right: logistic regression reaches 0.982 on this split, so the level is
        # reachable in 20 epochs, and not every configuration reaches it.
        "threshold": 0.97,
        "data": "scikit-learn breast cancer, 455 train / 114 validation (stratified, seed 0), 30 features "
        "standardised on the training split, 2 classes",
        "space": "learning_rate loguniform(1e-4, 1e-2), units {16,32,64,128}, dropout uniform(0, 0.5), "
        "batch_size {16,32,64}; Dense(units) Dropout Dense(units/2) Dense(2)",
    },
}

MODES: dict[str, dict[str, Any]] = {
    "smoke": {"seeds": [0], "budget_s": 30.0, "max_epochs": 4, "grace_period": 1},
    "quick": {"seeds": [0, 1, 2], "budget_s": 45.0, "max_epochs": 20, "grace_period": 2},
    "full": {"seeds": [0, 1, 2, 3, 4], "budget_s": 300.0, "max_epochs": 20, "grace_period": 2},
}

DEFINITIONS = {
    "clock": "seconds since the parent launched the side's process (imports, Ray and TensorFlow start-up included)",
    "best-so-far curve": (
        "best(t) = highest val_accuracy reported by any trial at any epoch up to t (0 before the first)"
    ),
    "area": "integral of best(t) over [0, budget] divided by the budget (1.0 = perfect from t=0)",
    "time to accuracy": "first t with best(t) >= the task's threshold ("
    + ", ".join(f"{name} {task['threshold']}" for name, task in TASKS.items())
    + "); 'n/a' when not reached within the budget",
    "time to first full model": "first t at which a trial finished its last (max_epochs-th) epoch",
    "time to accuracy after the first report": (
        "time to accuracy minus the time of the side's first reported epoch: how fast the search itself "
        "gets there once training has started (start-up taken out)"
    ),
    "area from the first report": (
        "integral of best(t) over [t0, t0 + W] divided by W, t0 the run's first report and W the budget less "
        "the latest first report of the task's runs: the search alone, start-up taken out, on a window every "
        "run has"
    ),
    "median": "over the seeds; a target never reached counts as worse than any time reached",
}


# ------------------------------------------------------- the held-out task's trainable


@functools.cache  # a reused worker loads, splits and scales them once
def cancer_arrays() -> tuple[Any, Any, Any, Any]:
    """Breast cancer split 80/20 (stratified, seed 0), standardised by the training split's statistics."""
    from sklearn.datasets import load_breast_cancer
    from sklearn.model_selection import train_test_split

    data = load_breast_cancer()
    x_train, x_val, y_train, y_val = train_test_split(
        data.data, data.target, test_size=0.2, random_state=0, stratify=data.target
    )
    mean, std = x_train.mean(axis=0), x_train.std(axis=0)
    return (
        ((x_train - mean) / std).astype("float32"),
        ((x_val - mean) / std).astype("float32"),
        y_train.astype("int32"),
        y_val.astype("int32"),
    )


def build_data(config: dict[str, Any], ctx: Any) -> tuple[Any, Any]:
    """The breast cancer task's data (the spec's trainable is this module for that task)."""
    from tunekit.data import from_arrays

    x_train, x_val, y_train, y_val = cancer_arrays()
    return from_arrays(x_train, y_train, ctx, training=True), from_arrays(x_val, y_val, ctx, training=False)


def build_model(config: dict[str, Any], ctx: Any) -> Any:
    """The digits MLP's shape on 30 features and 2 classes; uncompiled (tunekit compiles it)."""
    import keras

    units = int(config.get("units", 32))
    inputs = keras.Input(shape=(30,), name="features")
    x = keras.layers.Dense(units, activation="relu")(inputs)
    x = keras.layers.Dropout(float(config.get("dropout", 0.1)), seed=ctx.seed)(x)
    x = keras.layers.Dense(max(units // 2, 1), activation="relu")(x)
    outputs = keras.layers.Dense(2, activation="softmax", dtype="float32", name="diagnosis")(x)
    return keras.Model(inputs, outputs, name="breast_cancer_mlp")


def task_spec(task: str, **sections: Any) -> dict[str, Any]:
    """The shipped digits spec, for ``task`` (its trainable and space), with sections over it."""
    if task == "digits":
        return common.digits_spec(**sections)
    return common.digits_spec(
        name="breast-cancer-mlp", trainable=TASKS[task]["trainable"], space=CANCER_SPACE, **sections
    )


def task_space(task: str) -> dict[str, Any]:
    return common.digits_spec()["space"] if task == "digits" else CANCER_SPACE


# ------------------------------------------------------------------------ tunekit sides


def _run_tunekit(
    method: str, task: str, seed: int, settings: dict[str, Any], t0: float, workdir: Path
) -> dict[str, Any]:
    import tunekit

    remaining = max(5.0, settings["budget_s"] - (time.time() - t0))
    spec = tunekit.load_spec(
        task_spec(
            task,
            budget={
                "num_samples": 10_000,
                "max_epochs": settings["max_epochs"],
                "max_concurrent": SLOTS,
                "time_budget_s": remaining,
            },
            search={"algorithm": "tpe" if method == "tunekit" else "random", "seed": seed},
            scheduler={"type": "asha", "grace_period": settings["grace_period"], "reduction_factor": 3},
            training={"seed": seed},
            # Neither side tracks: KerasTuner gets no TensorBoard callback either.
            tracking={"enabled": False, "tensorboard": False},
        )
    )
    results = tunekit.run(spec, name=f"{method}-{task}-{seed}", storage=workdir, progress=False)
    started = results.started_at
    epochs = results.epochs
    points = []
    if started is not None and not epochs.empty:
        for _, row in epochs.iterrows():
            points.append(
                {
                    "t": started + float(row["time"]) - t0,
                    "val_accuracy": float(row["val_accuracy"]),
                    "epoch": int(row["epoch"]),
                    "trial": str(row["trial_id"]),
                }
            )
    return {
        "method": method,
        "task": task,
        "seed": seed,
        "points": points,
        "trials": len(results.trials),
        "ended_s": time.time() - t0,
    }


# ------------------------------------------------------------------- KerasTuner side


def _run_kerastuner(task: str, seed: int, settings: dict[str, Any], t0: float, workdir: Path) -> dict[str, Any]:
    import keras
    import keras_tuner

    from trainables import digits_mlp
    from tunekit.contract import TrialContext

    keras.utils.set_random_seed(seed)
    space = task_space(task)
    builders = digits_mlp if task == "digits" else sys.modules[__name__]
    deadline = t0 + settings["budget_s"]
    max_epochs = settings["max_epochs"]
    cpus = os.cpu_count() or 1
    points: list[dict[str, Any]] = []
    runs = [0]

    def context(batch_size: int) -> TrialContext:
        return TrialContext(
            batch_size=batch_size,
            per_replica_batch_size=batch_size,
            replicas=1,
            precision="float32",
            seed=seed,
            workdir=str(workdir),
            cpus=cpus,
            max_epochs=max_epochs,
            jit_compile=False,
            data={},
        )

    class Record(keras.callbacks.Callback):
        def __init__(self, run: int) -> None:
            super().__init__()
            self.run = run

        def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
            if time.time() > deadline:
                self.model.stop_training = True  # the budget is spent: stop mid-epoch

        def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            value = (logs or {}).get("val_accuracy")
            if value is not None:
                points.append(
                    {"t": time.time() - t0, "val_accuracy": float(value), "epoch": epoch + 1, "trial": f"run{self.run}"}
                )

    class TaskHyperModel(keras_tuner.HyperModel):
        def build(self, hp: Any) -> Any:
            config = {name: _kt_param(hp, name, param) for name, param in space.items()}
            model = builders.build_model(config, context(int(config["batch_size"])))
            model.compile(
                optimizer=keras.optimizers.Adam(learning_rate=float(config["learning_rate"])),
                loss="sparse_categorical_crossentropy",
                metrics=["accuracy"],
            )
            return model

        def fit(self, hp: Any, model: Any, *args: Any, **kwargs: Any) -> Any:
            runs[0] += 1
            train_ds, val_ds = builders.build_data({}, context(int(hp.get("batch_size"))))
            callbacks = [*kwargs.pop("callbacks", []), Record(runs[0])]
            kwargs["verbose"] = 0
            return model.fit(train_ds, validation_data=val_ds, callbacks=callbacks, **kwargs)

    # keras-tuner imports tensorboard's HParams plugin on every trial: tensorboard is in the stack.
    tuner = keras_tuner.Hyperband(
        TaskHyperModel(),
        objective="val_accuracy",
        max_epochs=max_epochs,
        factor=3,
        hyperband_iterations=10_000,  # keep going until the budget runs out, like the other sides
        seed=seed,
        directory=str(workdir),
        project_name=f"kerastuner-{task}-{seed}",
        overwrite=True,
    )
    create_trial = tuner.oracle.create_trial

    def create_or_stop(tuner_id: str) -> Any:
        if time.time() > deadline:
            from keras_tuner.engine import trial as trial_module

            return trial_module.Trial(
                tuner.oracle.get_space(), trial_id="budget-spent", status=trial_module.TrialStatus.STOPPED
            )
        return create_trial(tuner_id)

    tuner.oracle.create_trial = create_or_stop
    tuner.search(verbose=0)
    return {
        "method": "kerastuner",
        "task": task,
        "seed": seed,
        "points": points,
        "trials": runs[0],
        "ended_s": time.time() - t0,
    }


def _kt_param(hp: Any, name: str, param: dict[str, Any]) -> Any:
    kind = param["type"]
    if kind == "loguniform":
        return hp.Float(name, float(param["low"]), float(param["high"]), sampling="log")
    if kind == "uniform":
        return hp.Float(name, float(param["low"]), float(param["high"]))
    if kind == "choice":
        return hp.Choice(name, list(param["values"]))
    raise ValueError(f"space.{name}: no KerasTuner translation for {kind}")  # pragma: no cover


# -------------------------------------------------------------------------- analysis


def curve_metrics(
    points: list[dict[str, Any]], budget: float, max_epochs: int, threshold: float = THRESHOLD
) -> dict[str, Any]:
    inside = sorted((p for p in points if p["t"] <= budget), key=lambda p: p["t"])
    best = 0.0
    curve: list[list[float]] = []
    reached: float | None = None
    for p in inside:
        if p["val_accuracy"] > best:
            best = p["val_accuracy"]
            curve.append([round(p["t"], 2), round(best, 4)])
        if reached is None and best >= threshold:
            reached = p["t"]
    full = [p["t"] for p in inside if p["epoch"] >= max_epochs]
    return {
        "area": _mean_best(inside, 0.0, budget),
        "time_to_accuracy_s": reached,
        "time_to_first_full_model_s": min(full) if full else None,
        "best_at_budget": best if inside else None,
        "epochs_reported": len(inside),
        "trials_reporting": len({p["trial"] for p in inside}),
        "first_report_s": inside[0]["t"] if inside else None,
        # the search alone: start-up (imports, Ray, first tracing) taken out
        "time_to_accuracy_after_first_report_s": None if reached is None else reached - inside[0]["t"],
        "curve": curve,
    }


def area_from_first_report(points: list[dict[str, Any]], budget: float, window: float) -> float | None:
    """The area under the best-so-far curve over ``window`` seconds from the run's own first report,
    over the window: the search alone, start-up taken out, on a window every run of the task has."""
    inside = sorted((p for p in points if p["t"] <= budget), key=lambda p: p["t"])
    if not inside or window <= 0:
        return None
    return _mean_best(inside, inside[0]["t"], inside[0]["t"] + window)


def _mean_best(inside: list[dict[str, Any]], start: float, end: float) -> float:
    """The mean over [start, end] of the best-so-far curve of ``inside`` (time-sorted points; 0
    before the first): the area of both the budget and the window from the first report."""
    area, best, last_t = 0.0, 0.0, start
    for p in inside:
        if p["t"] > end:
            break
        area += best * (p["t"] - last_t)
        last_t, best = p["t"], max(best, p["val_accuracy"])
    return (area + best * (end - last_t)) / (end - start)


def analyse(runs: list[dict[str, Any]], settings: dict[str, Any], task: str = "digits") -> dict[str, Any]:
    """One task's figures, medians over seeds per method, and tunekit's targets against the others."""
    budget, max_epochs, threshold = settings["budget_s"], settings["max_epochs"], TASKS[task]["threshold"]
    methods = [m for m in METHODS if any(r["method"] == m for r in runs)]
    per_method: dict[str, list[dict[str, Any]]] = {m: [] for m in methods}
    measured = [(run, curve_metrics(run["points"], budget, max_epochs, threshold)) for run in runs]
    # the window from each run's first report that every run of the task has inside the budget
    window = budget - max((m["first_report_s"] for _, m in measured if m["first_report_s"] is not None), default=budget)
    for run, metrics in measured:
        metrics["seed"] = run["seed"]
        metrics["area_after_first_report"] = area_from_first_report(run["points"], budget, window)
        per_method[run["method"]].append(metrics)
    med: dict[str, dict[str, Any]] = {}
    for method, items in per_method.items():
        med[method] = {
            "area": common.median(-m["area"] for m in items),
            "time_to_accuracy_s": common.median(m["time_to_accuracy_s"] for m in items),
            "time_to_first_full_model_s": common.median(m["time_to_first_full_model_s"] for m in items),
            "first_report_s": common.median(m["first_report_s"] for m in items),
            "time_to_accuracy_after_first_report_s": common.median(
                m["time_to_accuracy_after_first_report_s"] for m in items
            ),
            "area_after_first_report": common.median(
                None if m["area_after_first_report"] is None else -m["area_after_first_report"] for m in items
            ),
            "best_at_budget": common.median(
                None if m["best_at_budget"] is None else -m["best_at_budget"] for m in items
            ),
            "reached": sum(m["time_to_accuracy_s"] is not None for m in items),
            "seeds": len(items),
        }
        # medians of negated values keep "None is worst" for higher-is-better figures
        for key in ("area", "area_after_first_report", "best_at_budget"):
            med[method][key] = None if med[method][key] is None else -med[method][key]
    others = [m for m in methods if m != "tunekit"]
    tk = med.get("tunekit")
    figures: list[dict[str, Any]] = []
    ratios: list[str] = []
    if tk is None:
        return {"figures": figures, "ratios": ratios, "medians": med, "per_seed": per_method}
    versus = " and ".join(LABELS[m] for m in others)
    area_better = all(_at_least_high(tk["area"], med[m]["area"]) for m in others)
    tta_better = all(_at_most_low(tk["time_to_accuracy_s"], med[m]["time_to_accuracy_s"]) for m in others)
    prefix = f"{task}, {budget:.0f} s: "
    for method in methods:
        label, m, own = LABELS[method], med[method], method == "tunekit"
        figures += [
            common.figure(
                f"{prefix}{label}: area under best-so-far curve (median)",
                m["area"],
                "",
                f"at least {versus}'s" if own else None,
                area_better if own else None,
            ),
            common.figure(
                f"{prefix}{label}: time to val_accuracy {threshold} (median)",
                m["time_to_accuracy_s"],
                "s",
                f"no later than {versus}" if own else None,
                tta_better if own else None,
                note=f"reached in {m['reached']}/{m['seeds']} seeds",
            ),
            common.figure(
                f"{prefix}{label}: time to first full-length model (median)", m["time_to_first_full_model_s"], "s"
            ),
            common.figure(
                f"{prefix}{label}: time to its first reported epoch (median)",
                m["first_report_s"],
                "s",
                note="start-up: imports, Ray and workers, first epoch",
            ),
            common.figure(
                f"{prefix}{label}: time to val_accuracy {threshold} after its first report (median)",
                m["time_to_accuracy_after_first_report_s"],
                "s",
                note="the search alone, start-up taken out",
            ),
            common.figure(
                f"{prefix}{label}: area from its first report over {window:.1f} s (median)",
                m["area_after_first_report"],
                "",
                note="the search alone, start-up taken out: the window every run has after its first report",
            ),
            common.figure(f"{prefix}{label}: best val_accuracy at the budget (median)", m["best_at_budget"]),
        ]
    after = "time_to_accuracy_after_first_report_s"
    for other in others:
        o = med[other]
        ratios += [
            f"{prefix}area: tunekit {common.fmt(tk['area'])} vs {LABELS[other]} {common.fmt(o['area'])} "
            f"-> {common.fmt(common.ratio(tk['area'], o['area']))}x",
            f"{prefix}time to {threshold}: tunekit {common.fmt(tk['time_to_accuracy_s'])} s vs {LABELS[other]} "
            f"{common.fmt(o['time_to_accuracy_s'])} s -> "
            f"{common.fmt(common.ratio(o['time_to_accuracy_s'], tk['time_to_accuracy_s']))}x sooner",
            f"{prefix}time to {threshold} after the first report (start-up taken out): tunekit "
            f"{common.fmt(tk[after])} s vs {LABELS[other]} {common.fmt(o[after])} s -> "
            f"{common.fmt(common.ratio(o[after], tk[after]))}x sooner",
            f"{prefix}area from each run's first report (start-up taken out): tunekit "
            f"{common.fmt(tk['area_after_first_report'])} vs {LABELS[other]} "
            f"{common.fmt(o['area_after_first_report'])} -> "
            f"{common.fmt(common.ratio(tk['area_after_first_report'], o['area_after_first_report']))}x",
            f"{prefix}first reported epoch: tunekit {common.fmt(tk['first_report_s'])} s vs {LABELS[other]} "
            f"{common.fmt(o['first_report_s'])} s",
        ]
    return {"figures": figures, "ratios": ratios, "medians": med, "per_seed": per_method}


def _at_least_high(a: float | None, b: float | None) -> bool:
    return a is not None and (b is None or a >= b)


def _at_most_low(a: float | None, b: float | None) -> bool:
    return a is not None and (b is None or a <= b)


# ------------------------------------------------------------------------------ main


def _names(text: str | None, valid: tuple[str, ...], flag: str) -> list[str]:
    if not text:
        return list(valid)
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in valid]
    if unknown:
        raise SystemExit(f"{flag}: unknown {', '.join(unknown)}; valid: {', '.join(valid)}")
    return [n for n in valid if n in names]


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = common.parser(NAME, __doc__.splitlines()[0])
    p.add_argument("--tasks", help=f"comma-separated, of {', '.join(TASKS)} (default: all)")
    p.add_argument("--methods", help=f"comma-separated, of {', '.join(METHODS)} (default: all)")
    p.add_argument("--seeds", help="comma-separated search seeds (default: by mode)")
    p.add_argument("--side", choices=METHODS, help=argparse.SUPPRESS)
    p.add_argument("--task", choices=tuple(TASKS), default="digits", help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--t0", type=float, help=argparse.SUPPRESS)
    p.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    settings = dict(MODES[args.mode])
    if args.seeds:
        settings["seeds"] = [int(s) for s in args.seeds.split(",")]
    if args.side:
        t0 = args.t0 if args.t0 is not None else time.time()
        if args.side == "kerastuner":
            run = _run_kerastuner(args.task, args.seed, settings, t0, args.workdir)
        else:
            run = _run_tunekit(args.side, args.task, args.seed, settings, t0, args.workdir)
        common.write_json(args.result, common.clean(run))
        return 0

    tasks = _names(args.tasks, tuple(TASKS), "--tasks")
    methods = tuple(_names(args.methods, METHODS, "--methods"))
    report = common.Report(NAME, TITLE, args.mode, args.out)
    runs = []
    with common.Workdir(NAME, args.keep) as workdir:
        for index, seed in enumerate(settings["seeds"]):
            for task in tasks:
                shift = index % len(methods)
                for method in methods[shift:] + methods[:shift]:  # rotate: no side always first
                    print(
                        f"[{NAME}] {task}, seed {seed}: {LABELS[method]}, budget {settings['budget_s']:.0f} s ...",
                        flush=True,
                    )
                    label = f"{method}-{task}-{seed}"
                    load = os.getloadavg()
                    side = ["--side", method, "--task", task, "--seed", str(seed), "--workdir", str(workdir / label)]
                    run = common.run_child(
                        f"benchmarks.{NAME}",
                        [f"--{args.mode}", *side, "--t0", repr(time.time())],
                        workdir / label,
                        label,
                        timeout=settings["budget_s"] + 300,
                    )
                    run["load_before"] = list(load)
                    runs.append(run)
    figures: list[dict[str, Any]] = []
    ratios: list[str] = []
    per_task: dict[str, Any] = {}
    for task in tasks:
        analysis = analyse([r for r in runs if r["task"] == task], settings, task)
        figures += analysis["figures"]
        ratios += analysis["ratios"]
        per_task[task] = {
            "threshold": TASKS[task]["threshold"],
            "medians": analysis["medians"],
            "per_seed": analysis["per_seed"],
        }
    setup = {
        "tasks": {task: f"{TASKS[task]['data']}; space: {TASKS[task]['space']}" for task in tasks},
        "thresholds": {task: TASKS[task]["threshold"] for task in tasks},
        "max_epochs_per_trial": settings["max_epochs"],
        "budget_s": settings["budget_s"],
        "seeds": settings["seeds"],
        "methods": [LABELS[m] for m in methods],
        "tunekit": f"TPE (8 random start-up trials) + ASHA grace {settings['grace_period']} rf 3, "
        f"{SLOTS} trials at a time, 1 CPU each; tracking.enabled: false, tracking.tensorboard: false",
        "random": "as tunekit, with search.algorithm: random",
        "kerastuner": "Hyperband(max_epochs, factor=3), sequential trials in one process; no TensorBoard "
        "callback, no tracking",
    }
    notes = [
        "KerasTuner runs its trials one after the other in one process (TensorFlow may use every core "
        f"inside one trial); tunekit runs {SLOTS} trials at a time on the {os.cpu_count()} cores, 1 CPU "
        "each. Running trials in parallel is tunekit's advantage, and it is part of what is compared.",
        "Every side pays its own start-up inside the budget (Ray and worker start for tunekit, "
        "TensorFlow import for all).",
        "Tracking is off on both sides (no MLflow, no TensorBoard); each keeps its own records on disk.",
        "Other processes may share the CPU; see load_before/load_after and each run's load_before. Sides ran "
        "one after the other, in an order rotated per seed.",
    ]
    details = {
        "tasks": per_task,
        "trials_started": [
            {k: r.get(k) for k in ("method", "task", "seed", "trials", "ended_s", "load_before")} for r in runs
        ],
        # every reported point, so the curves can be read again with another threshold
        "points": [{k: r[k] for k in ("method", "task", "seed", "points")} for r in runs],
    }
    return report.finish(figures, ratios, DEFINITIONS, setup, notes, details)


if __name__ == "__main__":
    sys.exit(main())
