"""Several objectives: tunekit's MO-TPE + MO-ASHA against MO-TPE without pruning and against
random search + single-objective ASHA with a filter afterwards, on the digits MLP.

The objectives are val_accuracy (max) and model_params (min). Three searches of the same
space, number of trials, epochs and concurrency, each in its own process, one after the other:

* ``moasha``: tunekit as shipped (``search_spaces/digits_mlp_pareto.yaml`` without its
  constraint): TPE over both objectives, MO-ASHA stopping trials at each rung.
* ``motpe``: the same study (TPE over both objectives, same seed) with FIFO: every trial
  trains to the end, as Optuna users do today (Optuna has no multi-objective pruning).
* ``random_asha``: what Ray Tune users do: random search, ASHA on val_accuracy alone, then
  the non-dominated trials among those that finished, their size counted afterwards.

The front's quality is its hypervolume (accuracy against parameters scaled by
``PARAMS_SCALE``, reference point accuracy 0 and the scale): the area the front dominates,
in [0, 1]. Each search's hypervolume is followed against the epochs it spent, trial by
trial as trials end, so "the same hypervolume in at most half the epochs" is read off the
curves: the epochs MO-ASHA spent before its front first reached MO-TPE's final hypervolume.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import common

NAME = "pareto"
TITLE = "MO-TPE + MO-ASHA vs MO-TPE without pruning vs random + ASHA + filter (accuracy against size)"
PARAMS_SCALE = 60000.0  # above the largest digits MLP of the space (256 units: 50,826 parameters)
TARGET_EPOCH_SHARE = 0.5  # MO-ASHA reaches MO-TPE's hypervolume in at most half its epochs
ARMS = ("moasha", "motpe", "random_asha")

MODES: dict[str, dict[str, int]] = {
    "smoke": {"num_samples": 4, "max_epochs": 4, "grace_period": 1},
    "quick": {"num_samples": 16, "max_epochs": 12, "grace_period": 2},
    "full": {"num_samples": 24, "max_epochs": 20, "grace_period": 2},
}

DEFINITIONS = {
    "hypervolume": "area dominated by the front of trials that trained to the end, accuracy 0..1 against "
    f"parameters / {PARAMS_SCALE:,.0f}, reference point (accuracy 0, {PARAMS_SCALE:,.0f} parameters)",
    "epochs": "epochs trained by all trials of the search (pruned trials' included)",
    "wall time": "seconds from calling tunekit.run to its return, Ray's start included",
    "epochs to MO-TPE's hypervolume": "epochs MO-ASHA had spent when its front first reached MO-TPE's final "
    "hypervolume (trials counted as they ended); none when it never did",
}


def _spec(arm: str, settings: dict[str, int]) -> dict[str, Any]:
    multi = arm != "random_asha"
    return common.digits_spec(
        name=f"pareto-{arm}",
        metric=[{"name": "val_accuracy", "mode": "max"}, {"name": "model_params", "mode": "min"}]
        if multi
        else {"name": "val_accuracy", "mode": "max"},
        budget={"num_samples": settings["num_samples"], "max_epochs": settings["max_epochs"], "max_concurrent": 2},
        search={"algorithm": "tpe" if multi else "random", "seed": 0, "n_startup_trials": 4},
        scheduler={"type": "fifo"}
        if arm == "motpe"
        else {"type": "asha", "grace_period": settings["grace_period"], "reduction_factor": 3},
        tracking={"enabled": False},
    )


def _run_arm(arm: str, settings: dict[str, int], workdir: Path) -> dict[str, Any]:
    """One search in this process: each trial's status, epochs, end, accuracy and size."""
    import tunekit

    started = time.time()
    results = tunekit.run(tunekit.load_spec(_spec(arm, settings)), name=arm, storage=workdir, progress=False)
    wall = time.time() - started
    trials = []
    for _, row in results.trials.iterrows():
        params = row.get("final.model_params")
        trials.append(
            {
                "status": str(row["status"]),
                "epochs": int(row["epochs"]),
                "ended_at": float(row["ended_at"]),
                "val_accuracy": float(row["final_metric"]),
                # The single-objective arm never measured size: counted afterwards, as its users would.
                "model_params": float(params) if params == params and params is not None else _size(row),
            }
        )
    return {"arm": arm, "wall_s": wall, "trials": trials}


def _size(row: Any) -> float:
    import keras

    from trainables.digits_mlp import build_model
    from tunekit.contract import TrialContext

    config = {key[len("params.") :]: row[key] for key in row.index if str(key).startswith("params.")}
    ctx = TrialContext(
        batch_size=32,
        per_replica_batch_size=32,
        replicas=1,
        precision="float32",
        seed=0,
        workdir="",
        cpus=1,
        max_epochs=1,
        jit_compile=False,
        data={},
        spec_dir="",
        trial_dir="",
    )
    model = build_model(config, ctx)
    return float(sum(int(keras.ops.size(w)) for w in model.trainable_weights))


def hypervolume_curve(trials: list[dict[str, Any]]) -> list[tuple[int, float]]:
    """(epochs spent, hypervolume of the completed trials' front) after each trial ended."""
    from tunekit.search.pareto import hypervolume_2d

    points: list[tuple[float, float]] = []
    curve, spent = [], 0
    for trial in sorted(trials, key=lambda t: t["ended_at"]):
        spent += trial["epochs"]
        if trial["status"] == "completed":
            points.append((-trial["val_accuracy"], trial["model_params"] / PARAMS_SCALE))
        curve.append((spent, hypervolume_2d(points, (0.0, 1.0))))
    return curve


def epochs_to_reach(curve: list[tuple[int, float]], level: float) -> int | None:
    return next((epochs for epochs, volume in curve if volume >= level - 1e-12), None)


def analyse(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    curves = {arm: hypervolume_curve(run["trials"]) for arm, run in runs.items()}
    final = {arm: curve[-1][1] if curve else 0.0 for arm, curve in curves.items()}
    epochs = {arm: sum(t["epochs"] for t in run["trials"]) for arm, run in runs.items()}
    wall = {arm: run["wall_s"] for arm, run in runs.items()}
    reached = epochs_to_reach(curves["moasha"], final["motpe"])
    share = common.ratio(reached, epochs["motpe"])
    figures = [
        *(common.figure(f"{arm} hypervolume", final[arm]) for arm in ARMS),
        *(common.figure(f"{arm} epochs", epochs[arm]) for arm in ARMS),
        *(common.figure(f"{arm} wall time", wall[arm], "s") for arm in ARMS),
        common.figure(
            "MO-ASHA epochs to MO-TPE's final hypervolume / MO-TPE's epochs",
            None if share is None else 100 * share,
            "%",
            f"<= {TARGET_EPOCH_SHARE:.0%}",
            share is not None and share <= TARGET_EPOCH_SHARE,
            "" if reached is not None else "MO-ASHA's front never reached MO-TPE's hypervolume",
        ),
    ]
    ratios = [
        f"hypervolume MO-ASHA / MO-TPE: {common.fmt(common.ratio(final['moasha'], final['motpe']))}; "
        f"random+ASHA+filter / MO-TPE: {common.fmt(common.ratio(final['random_asha'], final['motpe']))}",
        f"epochs MO-ASHA / MO-TPE: {common.fmt(common.ratio(epochs['moasha'], epochs['motpe']))}; "
        f"random+ASHA / MO-TPE: {common.fmt(common.ratio(epochs['random_asha'], epochs['motpe']))}",
        f"wall time MO-ASHA / MO-TPE: {common.fmt(common.ratio(wall['moasha'], wall['motpe']))}; "
        f"random+ASHA / MO-TPE: {common.fmt(common.ratio(wall['random_asha'], wall['motpe']))}",
        f"epochs MO-ASHA needed for MO-TPE's final hypervolume / MO-TPE's epochs: {common.fmt(share)}",
    ]
    return {"figures": figures, "ratios": ratios, "curves": curves}


def main(argv: list[str] | None = None) -> int:
    p = common.parser(NAME, __doc__.splitlines()[0])
    p.add_argument("--arm", choices=ARMS, help=argparse.SUPPRESS)
    p.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    settings = MODES[args.mode]
    if args.result:
        common.write_json(args.result, common.clean(_run_arm(args.arm, settings, args.workdir)))
        return 0

    report = common.Report(NAME, TITLE, args.mode, args.out)
    runs = {}
    with common.Workdir(NAME, args.keep) as workdir:
        for arm in ARMS:
            print(
                f"[{NAME}] {arm}: {settings['num_samples']} trials x up to {settings['max_epochs']} epochs ...",
                flush=True,
            )
            runs[arm] = common.run_child(
                f"benchmarks.{NAME}", [f"--{args.mode}", "--arm", arm, "--workdir", str(workdir / arm)], workdir, arm
            )
    analysis = analyse(runs)
    setup = {
        "space": "search_spaces/digits_mlp.yaml's (learning_rate, units, dropout, batch_size)",
        "objectives": "val_accuracy (max), model_params (min)",
        "trials": settings["num_samples"],
        "max_epochs": settings["max_epochs"],
        "asha": f"grace {settings['grace_period']}, reduction factor 3 (MO-ASHA and random + ASHA)",
        "concurrency": "2 trials at a time, 1 CPU each; one seed (0)",
    }
    notes = [
        "One seed on a shared 2-core machine: hypervolume differences of a few hundredths are within "
        "what another seed moves. The random + ASHA arm prunes by accuracy alone, so its survivors are "
        "the most accurate trials whatever their size."
    ]
    return report.finish(
        analysis["figures"], analysis["ratios"], DEFINITIONS, setup, notes, {"runs": runs, "curves": analysis["curves"]}
    )


if __name__ == "__main__":
    sys.exit(main())
