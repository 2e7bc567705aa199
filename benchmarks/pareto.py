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


NEARLY = 0.99  # the same reading with a tolerance: a hypervolume a thousandth short is not "never"
SEEDS = (0, 1, 2)  # every arm runs once per seed (the searchers' seed): mean and spread, not one draw


def _spec(arm: str, settings: dict[str, int], seed: int = 0) -> dict[str, Any]:
    multi = arm != "random_asha"
    return common.digits_spec(
        name=f"pareto-{arm}",
        metric=[{"name": "val_accuracy", "mode": "max"}, {"name": "model_params", "mode": "min"}]
        if multi
        else {"name": "val_accuracy", "mode": "max"},
        budget={"num_samples": settings["num_samples"], "max_epochs": settings["max_epochs"], "max_concurrent": 2},
        search={"algorithm": "tpe" if multi else "random", "seed": seed, "n_startup_trials": 4},
        scheduler={"type": "fifo"}
        if arm == "motpe"
        else {"type": "asha", "grace_period": settings["grace_period"], "reduction_factor": 3},
        tracking={"enabled": False},
    )


def _run_arm(arm: str, settings: dict[str, int], workdir: Path, seed: int = 0) -> dict[str, Any]:
    """One search in this process: each trial's status, epochs, end, accuracy and size."""
    import tunekit

    started = time.time()
    spec = tunekit.load_spec(_spec(arm, settings, seed))
    results = tunekit.run(spec, name=f"{arm}-{seed}", storage=workdir, progress=False)
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
    return {"arm": arm, "seed": seed, "wall_s": wall, "trials": trials}


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


def analyse_seed(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One seed's three arms: final hypervolume, epochs, wall time, and MO-ASHA's epoch share."""
    curves = {arm: hypervolume_curve(run["trials"]) for arm, run in runs.items()}
    final = {arm: curve[-1][1] if curve else 0.0 for arm, curve in curves.items()}
    epochs = {arm: sum(t["epochs"] for t in run["trials"]) for arm, run in runs.items()}
    wall = {arm: run["wall_s"] for arm, run in runs.items()}
    reached = epochs_to_reach(curves["moasha"], final["motpe"])
    nearly = epochs_to_reach(curves["moasha"], NEARLY * final["motpe"])
    return {
        "hypervolume": final,
        "epochs": epochs,
        "wall_s": wall,
        "share": common.ratio(reached, epochs["motpe"]),
        "share_nearly": common.ratio(nearly, epochs["motpe"]),
        "curves": curves,
    }


def _spread(values: list[float | None]) -> tuple[float | None, str]:
    """The mean of the seeds' values (None counts as missing) and their range as text."""
    present = [v for v in values if v is not None]
    if not present:
        return None, "never"
    missing = f"; {len(values) - len(present)} seed(s) never" if len(present) < len(values) else ""
    return sum(present) / len(present), f"seeds {', '.join(common.fmt(v) for v in values)}{missing}"


def analyse(by_seed: dict[int, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    seeds = {seed: analyse_seed(runs) for seed, runs in by_seed.items()}
    figures = []
    for key, label, unit in (
        ("hypervolume", "hypervolume", ""),
        ("epochs", "epochs", ""),
        ("wall_s", "wall time", "s"),
    ):
        for arm in ARMS:
            mean, spread = _spread([float(result[key][arm]) for result in seeds.values()])
            figures.append(common.figure(f"{arm} {label} (mean of {len(seeds)} seeds)", mean, unit, note=spread))
    shares = [result["share"] for result in seeds.values()]
    mean_share, spread = _spread(shares)
    met = all(share is not None and share <= TARGET_EPOCH_SHARE for share in shares)
    figures.append(
        common.figure(
            "MO-ASHA epochs to MO-TPE's final hypervolume / MO-TPE's epochs (mean of seeds)",
            None if mean_share is None else 100 * mean_share,
            "%",
            f"<= {TARGET_EPOCH_SHARE:.0%} in every seed",
            met,
            spread,
        )
    )

    nearly = [result["share_nearly"] for result in seeds.values()]
    mean_nearly, nearly_spread = _spread(nearly)
    figures.append(
        common.figure(
            f"MO-ASHA epochs to {NEARLY:.0%} of MO-TPE's final hypervolume / MO-TPE's epochs (mean of seeds)",
            None if mean_nearly is None else 100 * mean_nearly,
            "%",
            f"<= {TARGET_EPOCH_SHARE:.0%} in every seed",
            all(share is not None and share <= TARGET_EPOCH_SHARE for share in nearly),
            nearly_spread,
        )
    )

    def mean_ratio(key: str, arm: str) -> float | None:
        return _spread([common.ratio(r[key][arm], r[key]["motpe"]) for r in seeds.values()])[0]

    ratios = [
        f"hypervolume MO-ASHA / MO-TPE: {common.fmt(mean_ratio('hypervolume', 'moasha'))}; "
        f"random+ASHA+filter / MO-TPE: {common.fmt(mean_ratio('hypervolume', 'random_asha'))} (means over seeds)",
        f"epochs MO-ASHA / MO-TPE: {common.fmt(mean_ratio('epochs', 'moasha'))}; "
        f"random+ASHA / MO-TPE: {common.fmt(mean_ratio('epochs', 'random_asha'))}",
        f"wall time MO-ASHA / MO-TPE: {common.fmt(mean_ratio('wall_s', 'moasha'))}; "
        f"random+ASHA / MO-TPE: {common.fmt(mean_ratio('wall_s', 'random_asha'))}",
        f"epochs MO-ASHA needed for MO-TPE's final hypervolume / MO-TPE's epochs: {spread}",
    ]
    return {"figures": figures, "ratios": ratios, "curves": {seed: r["curves"] for seed, r in seeds.items()}}


def main(argv: list[str] | None = None) -> int:
    p = common.parser(NAME, __doc__.splitlines()[0])
    p.add_argument("--arm", choices=ARMS, help=argparse.SUPPRESS)
    p.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--seeds", default=",".join(map(str, SEEDS)), help="comma-separated searcher seeds (default 0,1,2)")
    args = p.parse_args(argv)
    settings = MODES[args.mode]
    if args.result:
        common.write_json(args.result, common.clean(_run_arm(args.arm, settings, args.workdir, args.seed)))
        return 0

    report = common.Report(NAME, TITLE, args.mode, args.out)
    seeds = [int(seed) for seed in args.seeds.split(",")]
    by_seed: dict[int, dict[str, dict[str, Any]]] = {}
    with common.Workdir(NAME, args.keep) as workdir:
        for seed in seeds:
            for arm in ARMS:
                print(
                    f"[{NAME}] seed {seed}, {arm}: {settings['num_samples']} trials x up to "
                    f"{settings['max_epochs']} epochs ...",
                    flush=True,
                )
                where = workdir / f"{arm}-{seed}"
                by_seed.setdefault(seed, {})[arm] = common.run_child(
                    f"benchmarks.{NAME}",
                    [f"--{args.mode}", "--arm", arm, "--seed", str(seed), "--workdir", str(where)],
                    workdir,
                    f"{arm}-{seed}",
                )
    analysis = analyse(by_seed)
    setup = {
        "space": "search_spaces/digits_mlp.yaml's (learning_rate, units, dropout, batch_size)",
        "objectives": "val_accuracy (max), model_params (min)",
        "trials": settings["num_samples"],
        "max_epochs": settings["max_epochs"],
        "asha": f"grace {settings['grace_period']}, reduction factor 3 (MO-ASHA and random + ASHA)",
        "concurrency": "2 trials at a time, 1 CPU each",
        "seeds": f"searcher seeds {', '.join(map(str, seeds))}, each arm once per seed",
    }
    notes = [
        "Each figure is the mean over the seeds, with every seed's value beside it: a single draw of a "
        "16-trial search moves hypervolume by a few hundredths. The random + ASHA arm prunes by accuracy "
        "alone, so its survivors are the most accurate trials whatever their size."
    ]
    details = {"runs": by_seed, "curves": analysis["curves"]}
    return report.finish(analysis["figures"], analysis["ratios"], DEFINITIONS, setup, notes, details)


if __name__ == "__main__":
    sys.exit(main())
