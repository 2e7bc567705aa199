"""Resident memory of one reused worker across 30 trials (keras-tuner#395, #873; tensorflow#62854).

tunekit runs the digits search one trial at a time (``max_concurrent: 1``), so every
trial lands in the same reused Ray worker. The trainable reports the worker's resident
set size (RSS) after every epoch as ``memory_mb`` in ``epochs.csv``; this benchmark reads
it back and reports how much it grew after the first trial.

The spec's trainable is this module: ``build_data``/``build_model`` call
``trainables.digits_mlp``'s and note the worker's process id in the trial directory, so
the benchmark can say how many worker processes the trials really used.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import common

NAME = "memory"
TITLE = "resident memory of one reused worker across trials"
PID_DIR_ENV = "TUNEKIT_BENCH_PID_DIR"  # set in the driver; Ray workers inherit it
TARGET_GROWTH = 0.10

MODES: dict[str, dict[str, int]] = {
    "smoke": {"num_samples": 3, "max_epochs": 1},
    "quick": {"num_samples": 30, "max_epochs": 1},
    "full": {"num_samples": 30, "max_epochs": 2},
}

DEFINITIONS = {
    "memory of a trial": "memory_mb (the worker's RSS, psutil) reported at the trial's last epoch",
    "baseline": "memory of the first trial (the worker has imported TensorFlow and trained once)",
    "growth after the first trial": "(memory of the last trial - baseline) / baseline",
    "peak growth": "(highest memory of any later trial - baseline) / baseline",
    "slope": "least-squares MB per trial over the trials after the first",
}


def build_data(config: dict[str, Any], ctx: Any) -> tuple[Any, Any]:
    from trainables import digits_mlp

    # ctx.workdir is scratch in Ray's session folder; write where the driver will look.
    trial_id = Path(ctx.workdir).name  # tunekit names trial directories after the trial id
    Path(os.environ[PID_DIR_ENV], f"{trial_id}.json").write_text(json.dumps({"pid": os.getpid()}))
    return digits_mlp.build_data(config, ctx)


def build_model(config: dict[str, Any], ctx: Any) -> Any:
    from trainables import digits_mlp

    return digits_mlp.build_model(config, ctx)


def _run_search(settings: dict[str, int], workdir: Path) -> dict[str, Any]:
    import tunekit

    pid_dir = workdir / "pids"
    pid_dir.mkdir(parents=True, exist_ok=True)
    os.environ[PID_DIR_ENV] = str(pid_dir)
    spec = tunekit.load_spec(
        common.digits_spec(
            trainable="benchmarks.memory",
            budget={"num_samples": settings["num_samples"], "max_epochs": settings["max_epochs"], "max_concurrent": 1},
            scheduler={"type": "fifo"},
            tracking={"enabled": False},
        )
    )
    started = time.time()
    results = tunekit.run(spec, name="memory", storage=workdir, progress=False)
    wall = time.time() - started
    trials = results.trials.sort_values("number")
    epochs = results.epochs
    rows = []
    for _, trial in trials.iterrows():
        trial_id = str(trial["trial_id"])
        mine = epochs[epochs["trial_id"] == trial_id]
        pid_path = pid_dir / f"{trial_id}.json"
        rows.append(
            {
                "number": int(trial["number"]),
                "trial_id": trial_id,
                "status": str(trial["status"]),
                "epochs": int(trial["epochs"]),
                "memory_mb": None if mine.empty else float(mine["memory_mb"].iloc[-1]),
                "memory_mb_by_epoch": [float(x) for x in mine["memory_mb"]],
                "pid": json.loads(pid_path.read_text())["pid"] if pid_path.is_file() else None,
                "params": {k[len("params.") :]: trial[k] for k in trials.columns if k.startswith("params.")},
            }
        )
    return {"wall_s": wall, "trials": rows}


def analyse(run: dict[str, Any]) -> dict[str, Any]:
    memory = [t["memory_mb"] for t in run["trials"] if t["memory_mb"] is not None]
    pids = {t["pid"] for t in run["trials"] if t["pid"] is not None}
    baseline = memory[0] if memory else None
    later = memory[1:]
    growth = common.ratio(memory[-1] - baseline, baseline) if baseline and later else None
    peak = common.ratio(max(later) - baseline, baseline) if baseline and later else None
    slope = _slope(later)
    figures = [
        common.figure("trials measured", len(memory)),
        common.figure("worker processes used", len(pids), note="1 means every trial reused one worker"),
        common.figure("RSS after the first trial", baseline, "MB"),
        common.figure("RSS after the last trial", memory[-1] if memory else None, "MB"),
        common.figure(
            "growth after the first trial",
            None if growth is None else 100 * growth,
            "%",
            f"<= {TARGET_GROWTH:.0%}",
            None if growth is None else growth <= TARGET_GROWTH,
        ),
        common.figure("peak growth after the first trial", None if peak is None else 100 * peak, "%"),
        common.figure("slope after the first trial", slope, "MB/trial"),
    ]
    ratios = [
        f"RSS last / first trial: {common.fmt(common.ratio(memory[-1], baseline) if memory else None)}x "
        f"over {len(memory)} trials in {len(pids)} worker process(es)"
    ]
    return {"figures": figures, "ratios": ratios}


def _slope(values: list[float]) -> float | None:
    if len(values) < 2:
        return None
    n = len(values)
    mean_x, mean_y = (n - 1) / 2, sum(values) / n
    num = sum((i - mean_x) * (y - mean_y) for i, y in enumerate(values))
    den = sum((i - mean_x) ** 2 for i in range(n))
    return num / den


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = common.parser(NAME, __doc__.splitlines()[0])
    p.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    settings = MODES[args.mode]
    if args.result:
        common.write_json(args.result, common.clean(_run_search(settings, args.workdir)))
        return 0

    report = common.Report(NAME, TITLE, args.mode, args.out)
    with common.Workdir(NAME, args.keep) as workdir:
        print(
            f"[{NAME}] {settings['num_samples']} trials of {settings['max_epochs']} epoch(s), one at a time ...",
            flush=True,
        )
        run = common.run_child(f"benchmarks.{NAME}", [f"--{args.mode}", "--workdir", str(workdir)], workdir, NAME)
    analysis = analyse(run)
    setup = {
        "search": "search_spaces/digits_mlp.yaml (TPE seed 0), FIFO scheduler, tracking off",
        "trials": settings["num_samples"],
        "epochs_per_trial": settings["max_epochs"],
        "concurrency": "1 trial at a time, 1 CPU, reused worker (tunekit's default reuse_actors)",
    }
    notes = [
        "Trials sample different units and batch sizes, so part of the variation is the model's own "
        "size, not a leak; the slope shows a steady trend if there is one."
    ]
    return report.finish(analysis["figures"], analysis["ratios"], DEFINITIONS, setup, notes, {"run": run})


if __name__ == "__main__":
    sys.exit(main())
