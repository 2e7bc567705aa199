"""Warm notebook runs: the second ``tunekit.run`` in one Python process against the first.

A notebook calls ``tunekit.run`` again and again. The first call starts Ray (and imports
Ray Tune in the driver); tunekit keeps that Ray for the next call when it would start it
the same way, so later calls pay only for the search itself, and as a search ends it starts
idle workers that import TensorFlow meanwhile (tunekit.worker.preload). This benchmark runs
the same small digits search twice in one child process, back to back, and compares the wall
times and the first epochs; then a third time after a pause, as a notebook's user makes one.
After each run it checks that nothing stayed behind: every CPU is free again and no placement
group is left. Each run's workers are listed with when they imported TensorFlow.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import common
from tunekit.layout import SPANS_FILE
from tunekit.worker.profile import PROFILE_DIR_ENV

NAME = "warm"
TITLE = "a second tunekit.run in the same process (warm Ray) vs the first"
TARGET = 0.60  # second run's wall time at most 60 % of the first's
PAUSE_S = 20.0  # before the third run: a notebook's user between two searches
FIRST_EPOCH_TARGET_S = 1.5  # the second run's first epoch, from its call (issue 44)

MODES: dict[str, dict[str, int]] = {
    "smoke": {"num_samples": 2, "max_epochs": 1},
    "quick": {"num_samples": 4, "max_epochs": 2},
    "full": {"num_samples": 8, "max_epochs": 4},
}

DEFINITIONS = {
    "wall time": "seconds from calling tunekit.run to its return (results loaded), in the same process",
    "first run": "starts Ray and imports Ray Tune in the driver, then searches",
    "second run": "the same search again, on the Ray the first run kept (and the idle workers, TensorFlow "
    "imported, that tunekit started as the first run ended)",
    "third run": f"the same search once more, {PAUSE_S:g} s after the second returned",
    "first epoch": "seconds from calling tunekit.run to the driver's receipt of the run's first epoch",
    "leftover": "CPUs still held and placement groups not removed right after a run returned",
}


def _run_twice(settings: dict[str, int], workdir: Path) -> dict[str, Any]:
    import tunekit

    profile_dir = workdir / "profile"  # each worker of tunekit's Ray notes its preload (TensorFlow's import)
    profile_dir.mkdir()
    os.environ[PROFILE_DIR_ENV] = str(profile_dir)
    spec = tunekit.load_spec(
        common.digits_spec(
            budget={"num_samples": settings["num_samples"], "max_epochs": settings["max_epochs"], "max_concurrent": 2},
            scheduler={"type": "fifo"},
            tracking={"enabled": False},
        )
    )
    runs = []
    for name in ("first", "second", "after a pause"):
        if name == "after a pause":
            time.sleep(PAUSE_S)
        started = time.time()
        results = tunekit.run(spec, name=name.replace(" ", "-"), storage=workdir, progress=False)
        wall = time.time() - started
        epochs = results.epochs
        first_epoch = None if epochs.empty else (results.started_at or started) + float(epochs["time"].min()) - started
        workers = _workers(results.experiment_dir, profile_dir, started)
        runs.append(
            {
                "name": name,
                "wall_s": wall,
                "first_epoch_s": first_epoch,
                "trials": len(results.trials),
                "workers": workers,
                **_leftovers(),
            }
        )
    tunekit.shutdown()
    return {"runs": runs}


def _workers(experiment_dir: Path, profile_dir: Path, started: float) -> list[dict[str, Any]]:
    """The run's worker processes (its trials' spans) and when each imported TensorFlow as it started
    (tunekit.worker.preload), in seconds from the run's call; None where a worker did not preload."""
    with (Path(experiment_dir) / SPANS_FILE).open() as spans:
        pids = {int(float(row["pid"])) for row in csv.DictReader(spans) if row.get("pid")}
    workers = []
    for pid in sorted(pids):
        note = profile_dir / f"preload-{pid}.json"
        times = json.loads(note.read_text()) if note.is_file() else None
        workers.append(
            {
                "pid": pid,
                "preload_started_s": None if times is None else times["started"] - started,
                "preload_ended_s": None if times is None else times["ended"] - started,
            }
        )
    return workers


def _leftovers() -> dict[str, Any]:
    import ray
    from ray.util.placement_group import placement_group_table

    total, free = ray.cluster_resources(), ray.available_resources()
    groups = [g for g in placement_group_table().values() if g.get("state") != "REMOVED"]
    return {"cpus_held": total.get("CPU", 0.0) - free.get("CPU", 0.0), "placement_groups_left": len(groups)}


def analyse(run: dict[str, Any]) -> dict[str, Any]:
    first, second, paused = run["runs"]
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
        common.figure("first run: its first epoch, from calling tunekit.run", first.get("first_epoch_s"), "s"),
        common.figure(
            "second run: its first epoch, from calling tunekit.run",
            second.get("first_epoch_s"),
            "s",
            f"<= {FIRST_EPOCH_TARGET_S:g} s",
            None if second.get("first_epoch_s") is None else second["first_epoch_s"] <= FIRST_EPOCH_TARGET_S,
        ),
        common.figure(
            f"third run, {PAUSE_S:g} s after the second returned: its first epoch, from calling tunekit.run",
            paused.get("first_epoch_s"),
            "s",
            f"<= {FIRST_EPOCH_TARGET_S:g} s",
            None if paused.get("first_epoch_s") is None else paused["first_epoch_s"] <= FIRST_EPOCH_TARGET_S,
        ),
        *(
            common.figure(
                f"{r['name']} run: its workers' TensorFlow import (started, ended), from calling tunekit.run",
                None,
                note=", ".join(_import_span(w) for w in r.get("workers", [])) or "no spans",
            )
            for r in (first, second, paused)
        ),
        common.figure("CPUs held after the second run", second["cpus_held"]),
        common.figure("placement groups left after the second run", second["placement_groups_left"]),
    ]
    ratios = [
        f"second run / first run in one process: {common.fmt(share)} "
        f"({common.fmt(second['wall_s'])} s against {common.fmt(first['wall_s'])} s)"
    ]
    return {"figures": figures, "ratios": ratios}


def _import_span(worker: dict[str, Any]) -> str:
    if worker["preload_started_s"] is None:
        return f"pid {worker['pid']}: not before the trial"
    return f"pid {worker['pid']}: {worker['preload_started_s']:.1f} to {worker['preload_ended_s']:.1f} s"


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
        "Tune removes its reused actors when a run ends, so nothing holds CPUs between runs; the second run's "
        "actors take the idle workers tunekit started as the first run ended (TensorFlow imported as they "
        "started, tunekit.worker.preload), so it saves Ray's start, the driver's imports and the workers' "
        "TensorFlow import."
    ]
    return report.finish(analysis["figures"], analysis["ratios"], DEFINITIONS, setup, notes, {"run": run})


if __name__ == "__main__":
    sys.exit(main())
