"""PBT against TPE + ASHA at equal compute: the same epochs spent on the default digits trainable.

Two tunekit searches over the digits MLP, each in its own fresh process (each pays its own
Ray and TensorFlow start-up), one after the other:

* PBT: ``search_spaces/digits_mlp_pbt.yaml`` (4 trials that all train ``max_epochs``,
  learning rate and dropout mutating every 2 epochs);
* TPE + ASHA: ``search_spaces/digits_mlp.yaml`` with ``max_epochs`` the same and as many
  trials as ASHA's plan needs to spend the epochs PBT spends (``tunekit plan``'s count).

The epochs each side really trained are reported next to the planned ones, so "equal
compute" can be checked. Figures: the best trial's final validation accuracy (the model a
user would keep), the epochs spent, and the wall time; medians over the seeds.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import common

NAME = "pbt"
TITLE = "PBT vs TPE + ASHA at equal compute (epochs) on the digits MLP"
PBT_SPEC = common.REPO / "search_spaces" / "digits_mlp_pbt.yaml"
POPULATION = 4

MODES: dict[str, dict[str, Any]] = {
    "smoke": {"seeds": [0], "max_epochs": 4, "interval": 2},
    "quick": {"seeds": [0], "max_epochs": 20, "interval": 2},
    "full": {"seeds": [0, 1, 2], "max_epochs": 20, "interval": 2},
}

DEFINITIONS = {
    "equal compute": "TPE + ASHA gets the smallest num_samples whose planned epochs reach PBT's "
    f"{POPULATION} x max_epochs",
    "best final val_accuracy": "the final val_accuracy of the best trial that trained every epoch (ASHA: a "
    "completed trial; PBT: every trial completes)",
    "epochs spent": "epochs the trials really trained (epochs.csv rows)",
    "best within PBT's epochs": "the highest val_accuracy any trial reported in the side's first "
    f"{POPULATION} x max_epochs trained epochs (epochs.csv in time order): the same compute for both sides "
    "even when asynchronous ASHA trains more epochs than its plan",
    "wall time": "seconds from calling tunekit.run to its return, in the side's own process (Ray's start included)",
}


def asha_samples(max_epochs: int) -> tuple[int, int]:
    """The TPE + ASHA trials whose planned epochs first reach PBT's, and those epochs."""
    import tunekit
    from tunekit.search.plan import plan_budget

    target = POPULATION * max_epochs
    for samples in range(POPULATION, 200):
        spec = tunekit.load_spec(common.digits_spec(budget={"num_samples": samples, "max_epochs": max_epochs}))
        planned = plan_budget(spec).planned_epochs
        if planned >= target:
            return samples, planned
    raise RuntimeError(f"no ASHA budget below 200 trials spends {target} epochs")


def _search(side: str, seed: int, settings: dict[str, Any], workdir: Path) -> dict[str, Any]:
    import tunekit

    epochs = settings["max_epochs"]
    common_sections: dict[str, Any] = {"tracking": {"enabled": False}}
    if side == "pbt":
        spec: Any = PBT_SPEC
        sections = {
            **common_sections,
            "budget": {"max_epochs": epochs},
            "search": {"seed": seed},
            "scheduler": {"perturbation_interval": settings["interval"]},
        }
    else:
        samples, _ = asha_samples(epochs)
        spec = common.digits_spec(budget={"num_samples": samples, "max_epochs": epochs}, search={"seed": seed})
        sections = common_sections
    started = time.time()
    results = tunekit.run(spec, name=f"{side}-{seed}", storage=workdir, progress=False, **sections)
    first = results.epochs.sort_values("time").head(POPULATION * epochs)
    return {
        "best_within_equal_epochs": float(first["val_accuracy"].max()),
        "side": side,
        "seed": seed,
        "wall_s": time.time() - started,
        "trials": len(results.trials),
        "epochs_spent": len(results.epochs),
        "best": results.best_metric,
        "exploits": len(results.exploits),
    }


def analyse(runs: list[dict[str, Any]], settings: dict[str, Any]) -> dict[str, Any]:
    by_side = {side: [r for r in runs if r["side"] == side] for side in ("pbt", "asha")}
    best = {side: common.median(r["best"] for r in rows) for side, rows in by_side.items()}
    epochs = {side: common.median(r["epochs_spent"] for r in rows) for side, rows in by_side.items()}
    wall = {side: common.median(r["wall_s"] for r in rows) for side, rows in by_side.items()}
    equal = {side: common.median(r["best_within_equal_epochs"] for r in rows) for side, rows in by_side.items()}
    samples, planned = asha_samples(settings["max_epochs"])
    figures = [
        common.figure("PBT best final val_accuracy (median)", best["pbt"]),
        common.figure("TPE + ASHA best final val_accuracy (median)", best["asha"]),
        common.figure("PBT best val_accuracy within PBT's epochs", equal["pbt"]),
        common.figure("TPE + ASHA best val_accuracy within PBT's epochs", equal["asha"]),
        common.figure("PBT epochs spent", epochs["pbt"]),
        common.figure("TPE + ASHA epochs spent", epochs["asha"], note=f"{samples} trials, {planned} planned"),
        common.figure("PBT wall time", wall["pbt"], "s"),
        common.figure("TPE + ASHA wall time", wall["asha"], "s"),
        common.figure("PBT exploit steps", common.median(r["exploits"] for r in by_side["pbt"])),
    ]
    gap = None if best["pbt"] is None or best["asha"] is None else 100 * (best["pbt"] - best["asha"])
    ratios = [
        f"best val_accuracy PBT - TPE + ASHA: {common.fmt(gap)} points "
        f"({common.fmt(best['pbt'])} against {common.fmt(best['asha'])})",
        f"best val_accuracy within the same {POPULATION * settings['max_epochs']} trained epochs, PBT against "
        f"TPE + ASHA: {common.fmt(equal['pbt'])} against {common.fmt(equal['asha'])}",
        f"epochs PBT / TPE + ASHA: {common.fmt(common.ratio(epochs['pbt'], epochs['asha']))}",
        f"wall time PBT / TPE + ASHA: {common.fmt(common.ratio(wall['pbt'], wall['asha']))}",
    ]
    return {"figures": figures, "ratios": ratios}


def main(argv: list[str] | None = None) -> int:
    p = common.parser(NAME, __doc__.splitlines()[0])
    p.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--side", choices=("pbt", "asha"), help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    settings = MODES[args.mode]
    if args.result:
        common.write_json(args.result, common.clean(_search(args.side, args.seed, settings, args.workdir)))
        return 0

    report = common.Report(NAME, TITLE, args.mode, args.out)
    runs = []
    with common.Workdir(NAME, args.keep) as workdir:
        for seed in settings["seeds"]:
            for side in ("asha", "pbt"):
                print(f"[{NAME}] {side}, seed {seed}, {settings['max_epochs']} epochs per trial ...", flush=True)
                child_args = [f"--{args.mode}", "--workdir", str(workdir), "--side", side, "--seed", str(seed)]
                runs.append(common.run_child(f"benchmarks.{NAME}", child_args, workdir, f"{side}-{seed}"))
    analysis = analyse(runs, settings)
    setup = {
        "pbt": f"{PBT_SPEC.name}: {POPULATION} trials, perturbation every {settings['interval']} epochs",
        "asha": "digits_mlp.yaml: TPE seed as PBT's, ASHA grace 2, reduction factor 3",
        "max_epochs": settings["max_epochs"],
        "seeds": settings["seeds"],
        "slots": "2 trials at a time on 1 CPU each (both sides), tracking off",
    }
    notes = [
        "PBT pauses and restarts every trial at every perturbation (Ray takes turns with 4 trials on 2 slots); "
        "each restart rebuilds the model and traces its first epoch again, which its wall time includes."
    ]
    return report.finish(analysis["figures"], analysis["ratios"], DEFINITIONS, setup, notes, {"runs": runs})


if __name__ == "__main__":
    sys.exit(main())
