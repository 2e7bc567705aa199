"""Search quality against KerasTuner: best-so-far validation accuracy over the same wall-clock budget.

Three searches over the same space (the digits MLP: learning_rate, units, dropout,
batch_size), the same data, the same maximum epochs per trial and the same wall-clock
budget, each in its own fresh process, one after the other:

* tunekit: TPE + ASHA (the shipped digits spec), 2 trials at a time on 1 CPU each;
* random + ASHA: the same tunekit run with ``search.algorithm: random``;
* KerasTuner Hyperband (``keras_tuner.Hyperband``, factor 3), which runs its trials one
  after the other in one process, TensorFlow using every core.

The clock starts when the parent launches the child process, so every side pays its own
imports, Ray start-up and TensorFlow start-up inside the budget. Every validation
accuracy a side reports (any trial, any epoch) before the budget runs out goes into its
best-so-far curve. Medians are taken over several search seeds.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import common

NAME = "quality"
TITLE = "search quality vs KerasTuner Hyperband and random search + ASHA"
METHODS = ("tunekit", "random", "kerastuner")
LABELS = {"tunekit": "tunekit (TPE + ASHA)", "random": "random + ASHA (tunekit)", "kerastuner": "KerasTuner Hyperband"}
THRESHOLD = 0.95
SLOTS = 2

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
    "time to accuracy": f"first t with best(t) >= {THRESHOLD}; 'n/a' when not reached within the budget",
    "time to first full model": "first t at which a trial finished its last (max_epochs-th) epoch",
    "time to accuracy after the first report": (
        "time to accuracy minus the time of the side's first reported epoch: how fast the search itself "
        "gets there once training has started (start-up taken out)"
    ),
    "median": "over the seeds; a target never reached counts as worse than any time reached",
}


# ------------------------------------------------------------------------ tunekit sides


def _run_tunekit(method: str, seed: int, settings: dict[str, Any], t0: float, workdir: Path) -> dict[str, Any]:
    import tunekit

    remaining = max(5.0, settings["budget_s"] - (time.time() - t0))
    spec = tunekit.load_spec(
        common.digits_spec(
            budget={
                "num_samples": 10_000,
                "max_epochs": settings["max_epochs"],
                "max_concurrent": SLOTS,
                "time_budget_s": remaining,
            },
            search={"algorithm": "tpe" if method == "tunekit" else "random", "seed": seed},
            scheduler={"type": "asha", "grace_period": settings["grace_period"], "reduction_factor": 3},
            training={"seed": seed},
            tracking={"enabled": False},
        )
    )
    results = tunekit.run(spec, name=f"{method}-{seed}", storage=workdir, progress=False)
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
        "seed": seed,
        "points": points,
        "trials": len(results.trials),
        "ended_s": time.time() - t0,
    }


# ------------------------------------------------------------------- KerasTuner side


def _run_kerastuner(seed: int, settings: dict[str, Any], t0: float, workdir: Path) -> dict[str, Any]:
    import keras
    import keras_tuner

    from trainables import digits_mlp
    from tunekit.contract import TrialContext

    keras.utils.set_random_seed(seed)
    space = common.digits_spec()["space"]
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

    class DigitsHyperModel(keras_tuner.HyperModel):
        def build(self, hp: Any) -> Any:
            config = {name: _kt_param(hp, name, param) for name, param in space.items()}
            model = digits_mlp.build_model(config, context(int(config["batch_size"])))
            model.compile(
                optimizer=keras.optimizers.Adam(learning_rate=float(config["learning_rate"])),
                loss="sparse_categorical_crossentropy",
                metrics=["accuracy"],
            )
            return model

        def fit(self, hp: Any, model: Any, *args: Any, **kwargs: Any) -> Any:
            runs[0] += 1
            train_ds, val_ds = digits_mlp.build_data({}, context(int(hp.get("batch_size"))))
            callbacks = [*kwargs.pop("callbacks", []), Record(runs[0])]
            kwargs["verbose"] = 0
            return model.fit(train_ds, validation_data=val_ds, callbacks=callbacks, **kwargs)

    # keras-tuner imports tensorboard's HParams plugin on every trial: tensorboard is in the stack.
    tuner = keras_tuner.Hyperband(
        DigitsHyperModel(),
        objective="val_accuracy",
        max_epochs=max_epochs,
        factor=3,
        hyperband_iterations=10_000,  # keep going until the budget runs out, like the other sides
        seed=seed,
        directory=str(workdir),
        project_name=f"kerastuner-{seed}",
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
    return {"method": "kerastuner", "seed": seed, "points": points, "trials": runs[0], "ended_s": time.time() - t0}


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


def curve_metrics(points: list[dict[str, Any]], budget: float, max_epochs: int) -> dict[str, Any]:
    inside = sorted((p for p in points if p["t"] <= budget), key=lambda p: p["t"])
    area, best, last_t = 0.0, 0.0, 0.0
    curve: list[list[float]] = []
    reached: float | None = None
    for p in inside:
        area += best * (p["t"] - last_t)
        last_t = p["t"]
        if p["val_accuracy"] > best:
            best = p["val_accuracy"]
            curve.append([round(p["t"], 2), round(best, 4)])
        if reached is None and best >= THRESHOLD:
            reached = p["t"]
    area += best * (budget - last_t)
    full = [p["t"] for p in inside if p["epoch"] >= max_epochs]
    return {
        "area": area / budget,
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


def analyse(runs: list[dict[str, Any]], settings: dict[str, Any]) -> dict[str, Any]:
    budget, max_epochs = settings["budget_s"], settings["max_epochs"]
    per_method: dict[str, list[dict[str, Any]]] = {m: [] for m in METHODS}
    for run in runs:
        metrics = curve_metrics(run["points"], budget, max_epochs)
        metrics["seed"] = run["seed"]
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
            "best_at_budget": common.median(
                None if m["best_at_budget"] is None else -m["best_at_budget"] for m in items
            ),
            "reached": sum(m["time_to_accuracy_s"] is not None for m in items),
            "seeds": len(items),
        }
        # medians of negated values keep "None is worst" for higher-is-better figures
        for key in ("area", "best_at_budget"):
            med[method][key] = None if med[method][key] is None else -med[method][key]
    tk = med["tunekit"]
    others = [m for m in METHODS if m != "tunekit"]
    area_better = all(_better_high(tk["area"], med[m]["area"]) for m in others)
    tta_better = all(_better_low(tk["time_to_accuracy_s"], med[m]["time_to_accuracy_s"]) for m in others)
    figures: list[dict[str, Any]] = []
    for method in METHODS:
        label = LABELS[method]
        m = med[method]
        figures += [
            common.figure(
                f"{label}: area under best-so-far curve (median)",
                m["area"],
                "",
                "tunekit higher than both" if method == "tunekit" else None,
                area_better if method == "tunekit" else None,
            ),
            common.figure(
                f"{label}: time to val_accuracy {THRESHOLD} (median)",
                m["time_to_accuracy_s"],
                "s",
                "tunekit sooner than both" if method == "tunekit" else None,
                tta_better if method == "tunekit" else None,
                note=f"reached in {m['reached']}/{m['seeds']} seeds",
            ),
            common.figure(f"{label}: time to first full-length model (median)", m["time_to_first_full_model_s"], "s"),
            common.figure(
                f"{label}: time to its first reported epoch (median)",
                m["first_report_s"],
                "s",
                note="start-up: imports, Ray and workers, first epoch",
            ),
            common.figure(
                f"{label}: time to val_accuracy {THRESHOLD} after its first report (median)",
                m["time_to_accuracy_after_first_report_s"],
                "s",
                note="the search alone, start-up taken out",
            ),
            common.figure(f"{label}: best val_accuracy at the budget (median)", m["best_at_budget"]),
        ]
    ratios = []
    for other in others:
        full_ratio = common.ratio(med[other]["time_to_first_full_model_s"], tk["time_to_first_full_model_s"])
        ratios.append(
            f"area: tunekit {common.fmt(tk['area'])} vs {LABELS[other]} {common.fmt(med[other]['area'])} "
            f"-> {common.fmt(common.ratio(tk['area'], med[other]['area']))}x"
        )
        ratios.append(
            f"time to {THRESHOLD}: tunekit {common.fmt(tk['time_to_accuracy_s'])} s vs {LABELS[other]} "
            f"{common.fmt(med[other]['time_to_accuracy_s'])} s -> "
            f"{common.fmt(common.ratio(med[other]['time_to_accuracy_s'], tk['time_to_accuracy_s']))}x sooner"
        )
        after = common.ratio(
            med[other]["time_to_accuracy_after_first_report_s"], tk["time_to_accuracy_after_first_report_s"]
        )
        ratios.append(
            f"time to {THRESHOLD} after the first report (start-up taken out): tunekit "
            f"{common.fmt(tk['time_to_accuracy_after_first_report_s'])} s vs {LABELS[other]} "
            f"{common.fmt(med[other]['time_to_accuracy_after_first_report_s'])} s -> {common.fmt(after)}x sooner"
        )
        ratios.append(
            f"time to first full model: tunekit {common.fmt(tk['time_to_first_full_model_s'])} s vs "
            f"{LABELS[other]} {common.fmt(med[other]['time_to_first_full_model_s'])} s -> "
            f"{common.fmt(full_ratio)}x sooner"
        )
    return {"figures": figures, "ratios": ratios, "medians": med, "per_seed": per_method}


def _better_high(a: float | None, b: float | None) -> bool:
    return a is not None and (b is None or a > b)


def _better_low(a: float | None, b: float | None) -> bool:
    return a is not None and (b is None or a < b)


# ------------------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = common.parser(NAME, __doc__.splitlines()[0])
    p.add_argument("--side", choices=METHODS, help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--t0", type=float, help=argparse.SUPPRESS)
    p.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    settings = MODES[args.mode]
    if args.side:
        t0 = args.t0 if args.t0 is not None else time.time()
        if args.side == "kerastuner":
            run = _run_kerastuner(args.seed, settings, t0, args.workdir)
        else:
            run = _run_tunekit(args.side, args.seed, settings, t0, args.workdir)
        common.write_json(args.result, common.clean(run))
        return 0

    report = common.Report(NAME, TITLE, args.mode, args.out)
    runs = []
    with common.Workdir(NAME, args.keep) as workdir:
        for index, seed in enumerate(settings["seeds"]):
            order = METHODS[index % len(METHODS) :] + METHODS[: index % len(METHODS)]  # rotate: no side always first
            for method in order:
                print(f"[{NAME}] seed {seed}: {LABELS[method]}, budget {settings['budget_s']:.0f} s ...", flush=True)
                label = f"{method}-{seed}"
                runs.append(
                    common.run_child(
                        f"benchmarks.{NAME}",
                        [
                            f"--{args.mode}",
                            "--side",
                            method,
                            "--seed",
                            str(seed),
                            "--t0",
                            repr(time.time()),
                            "--workdir",
                            str(workdir / label),
                        ],
                        workdir / label,
                        label,
                        timeout=settings["budget_s"] + 300,
                    )
                )
    analysis = analyse(runs, settings)
    setup = {
        "space": "digits MLP: learning_rate loguniform(1e-4, 1e-2), units {32,64,128,256}, "
        "dropout uniform(0, 0.5), batch_size {16,32,64}",
        "data": "scikit-learn digits, 1437 train / 360 validation",
        "max_epochs_per_trial": settings["max_epochs"],
        "budget_s": settings["budget_s"],
        "seeds": settings["seeds"],
        "tunekit": f"TPE (8 random start-up trials) + ASHA grace {settings['grace_period']} rf 3, "
        f"{SLOTS} trials at a time, 1 CPU each, tracking off",
        "random": "as tunekit, with search.algorithm: random",
        "kerastuner": "Hyperband(max_epochs, factor=3), sequential trials in one process",
    }
    notes = [
        "KerasTuner runs its trials one after the other in one process (TensorFlow may use every core "
        f"inside one trial); tunekit runs {SLOTS} trials at a time on the {os.cpu_count()} cores, 1 CPU "
        "each. Running trials in parallel is tunekit's advantage, and it is part of what is compared.",
        "Every side pays its own start-up inside the budget (Ray and worker start for tunekit, "
        "TensorFlow import for all).",
        "Other processes shared the CPU during this run; see load_before/load_after. Sides ran one after "
        "the other, in an order rotated per seed.",
    ]
    details = {
        "medians": analysis["medians"],
        "per_seed": analysis["per_seed"],
        "trials_started": [{k: r[k] for k in ("method", "seed", "trials", "ended_s")} for r in runs],
    }
    return report.finish(analysis["figures"], analysis["ratios"], DEFINITIONS, setup, notes, details)


if __name__ == "__main__":
    sys.exit(main())
