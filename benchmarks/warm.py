"""Warm notebook runs: the second ``tunekit.run`` in one Python process against the first.

A notebook calls ``tunekit.run`` again and again. The first call starts Ray (and imports
Ray Tune in the driver); tunekit keeps that Ray for the next call when it would start it
the same way, so later calls pay only for the search itself. This benchmark runs the same
small digits search twice in one child process and compares the wall times. Between the
two runs it checks that nothing stayed behind: every CPU is free again and no placement
group is left.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import common

NAME = "warm"
TITLE = "a second tunekit.run in the same process (warm Ray) vs the first"
TARGET = 0.60  # second run's wall time at most 60 % of the first's

MODES: dict[str, dict[str, int]] = {
    "smoke": {"num_samples": 2, "max_epochs": 1},
    "quick": {"num_samples": 4, "max_epochs": 2},
    "full": {"num_samples": 8, "max_epochs": 4},
}

DEFINITIONS = {
    "wall time": "seconds from calling tunekit.run to its return (results loaded), in the same process",
    "first run": "starts Ray and imports Ray Tune in the driver, then searches",
    "second run": "the same search again, on the Ray the first run kept",
    "leftover": "CPUs still held and placement groups not removed right after a run returned",
}


def _run_twice(settings: dict[str, int], workdir: Path) -> dict[str, Any]:
    import tunekit

    spec = tunekit.load_spec(
        common.digits_spec(
            budget={"num_samples": settings["num_samples"], "max_epochs": settings["max_epochs"], "max_concurrent": 2},
            scheduler={"type": "fifo"},
            tracking={"enabled": False},
        )
    )
    runs = []
    for name in ("first", "second"):
        started = time.time()
        results = tunekit.run(spec, name=name, storage=workdir, progress=False)
        wall = time.time() - started
        runs.append({"name": name, "wall_s": wall, "trials": len(results.trials), **_leftovers()})
    tunekit.shutdown()
    return {"runs": runs}


def _leftovers() -> dict[str, Any]:
    import ray
    from ray.util.placement_group import placement_group_table

    total, free = ray.cluster_resources(), ray.available_resources()
    groups = [g for g in placement_group_table().values() if g.get("state") != "REMOVED"]
    return {"cpus_held": total.get("CPU", 0.0) - free.get("CPU", 0.0), "placement_groups_left": len(groups)}


def analyse(run: dict[str, Any]) -> dict[str, Any]:
    first, second = run["runs"]
    share = common.ratio(second["wall_s"], first["wall_s"])
    figures = [
        common.figure("first run wall time", first["wall_s"], "s"),
        common.figure("second run wall time", second["wall_s"], "s"),
        common.figure(
            "second / first wall time",
            None if share is None else 100 * share,
            "%",
            f"<= {TARGET:.0%}",
            None if share is None else share <= TARGET,
        ),
        common.figure("CPUs held after the second run", second["cpus_held"]),
        common.figure("placement groups left after the second run", second["placement_groups_left"]),
    ]
    ratios = [
        f"second run / first run in one process: {common.fmt(share)} "
        f"({common.fmt(second['wall_s'])} s against {common.fmt(first['wall_s'])} s)"
    ]
    return {"figures": figures, "ratios": ratios}


def main(argv: list[str] | None = None) -> int:
    p = common.parser(NAME, __doc__.splitlines()[0])
    p.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    settings = MODES[args.mode]
    if args.result:
        common.write_json(args.result, common.clean(_run_twice(settings, args.workdir)))
        return 0

    report = common.Report(NAME, TITLE, args.mode, args.out)
    with common.Workdir(NAME, args.keep) as workdir:
        print(
            f"[{NAME}] {settings['num_samples']} trials x {settings['max_epochs']} epoch(s), twice in one process ...",
            flush=True,
        )
        run = common.run_child(f"benchmarks.{NAME}", [f"--{args.mode}", "--workdir", str(workdir)], workdir, NAME)
    analysis = analyse(run)
    setup = {
        "search": "search_spaces/digits_mlp.yaml (TPE seed 0), FIFO scheduler, 2 trials at a time, tracking off",
        "trials": settings["num_samples"],
        "epochs_per_trial": settings["max_epochs"],
        "process": "one child Python process; tunekit starts a private local Ray in the first run",
    }
    notes = [
        "The second run still starts its trial workers (Tune removes its reused actors when a run ends, so "
        "nothing holds CPUs between runs), and each imports TensorFlow again; what it saves is Ray's start "
        "and the driver's imports."
    ]
    return report.finish(analysis["figures"], analysis["ratios"], DEFINITIONS, setup, notes, {"run": run})


if __name__ == "__main__":
    sys.exit(main())
