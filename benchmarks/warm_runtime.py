"""The warm runtime (``tunekit up``): the first epoch of a ``tunekit run`` command, from its launch.

Each search is a fresh ``tunekit`` process as a user types it, the thin client of a runtime the
benchmark starts (``tunekit up``, in a private runtime folder) and stops (``tunekit down``). The
searches alternate: one after a pause (the runtime idle, its pool refilled), then one launched
the moment the previous process exited. Each search's first epoch is the moment its console's
``first epoch reported`` line reaches the parent, from the launch of its process; the exit after
its last line is timed as in benchmarks/whole_process.py. Tracked to MLflow (a store the first,
uncounted, search made), as a user's default search is.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks import common

NAME = "warm_runtime"
TITLE = "tunekit run on the warm runtime (tunekit up): its first epoch from the command's launch"
FIRST_EPOCH_TARGET_S = 1.5  # issue 52: on a warm runtime, first search and one right after another
EXIT_TARGET_S = 0.5
PAUSE_S = 20.0  # the runtime idle before an "after a pause" search: its pool refilled
FIRST_EPOCH_LINE = "first epoch reported"

MODES: dict[str, dict[str, int]] = {
    "smoke": {"num_samples": 2, "max_epochs": 1, "pairs": 1},
    "quick": {"num_samples": 4, "max_epochs": 2, "pairs": 5},
    "full": {"num_samples": 8, "max_epochs": 4, "pairs": 10},
}

DEFINITIONS = {
    "first epoch": f"seconds from launching the `tunekit run` process to its console's '{FIRST_EPOCH_LINE}' line",
    "after a pause": f"a search launched {PAUSE_S:g} s after the previous one exited (the runtime idle)",
    "right after": "a search launched the moment the previous search's process exited",
    "first on the new runtime": "the search launched right after `tunekit up` returned; it also makes the "
    "MLflow store, which a user's tracking URI usually holds already",
    "exit after the last line": "seconds from the last non-empty line the command printed to its exit",
}


def timed_search(command: list[str], cwd: Path, env: dict[str, str]) -> dict[str, Any]:
    """Runs one search command; its first epoch, last line and exit, in seconds from its launch."""
    launched = time.time()
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    exited: list[float] = []

    def wait() -> None:  # the exit itself, even if a process it left holds its output open
        process.wait()
        exited.append(time.time())

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    first_epoch = last_line = None
    lines = []
    for line in process.stdout or ():
        now = time.time() - launched
        lines.append(line)
        if line.strip():
            last_line = now
        if first_epoch is None and FIRST_EPOCH_LINE in line:
            first_epoch = now
    waiter.join()
    output = "".join(lines)
    if process.returncode != 0 or "on the warm runtime" not in output:
        raise common.ChildFailed(f"{' '.join(command[:3])} exited {process.returncode} or ran cold:\n{output[-3000:]}")
    wall = exited[0] - launched
    return {
        "first_epoch_s": first_epoch,
        "wall_s": wall,
        "exit_after_last_line_s": None if last_line is None else wall - last_line,
        "load": os.getloadavg()[0],
    }


def measure(settings: dict[str, int], workdir: Path) -> dict[str, Any]:
    runtime = Path(tempfile.mkdtemp(prefix="tk-rt-"))  # short: a Unix socket's path has 108 bytes
    env = {**common.child_env(), "TUNEKIT_RUNTIME_DIR": str(runtime)}
    env.pop("TUNEKIT_RUNTIME", None)
    tunekit = str(Path(sys.executable).parent / "tunekit")
    sets = {
        "budget.num_samples": settings["num_samples"],
        "budget.max_epochs": settings["max_epochs"],
        "scheduler.type": "fifo",
    }
    search = [tunekit, "run", str(common.DIGITS_SPEC), "--storage", str(workdir), "--tracking-uri"]
    search += [f"sqlite:///{workdir / 'mlflow.db'}"]
    search += [arg for key, value in sets.items() for arg in ("--set", f"{key}={value}")]
    load_before_up = os.getloadavg()
    up = subprocess.run([tunekit, "up"], env=env, capture_output=True, text=True, check=False)
    if up.returncode != 0:
        raise common.ChildFailed(f"tunekit up exited {up.returncode}: {up.stdout}{up.stderr}")
    runs: list[dict[str, Any]] = []
    try:
        # The runtime's first search also makes the MLflow store (a user's exists already): apart.
        runs.append({"kind": "first on the new runtime", **timed_search(search, workdir, env)})
        for _ in range(settings["pairs"]):
            time.sleep(PAUSE_S)
            runs.append({"kind": "after a pause", **timed_search(search, workdir, env)})
            runs.append({"kind": "right after", **timed_search(search, workdir, env)})
    finally:
        subprocess.run([tunekit, "down"], env=env, capture_output=True, check=False)
        shutil.rmtree(runtime, ignore_errors=True)
    return {"up": up.stdout.strip(), "load_before_up": list(load_before_up), "runs": runs}


def analyse(result: dict[str, Any]) -> dict[str, Any]:
    figures = []
    ratios = []
    for kind in ("after a pause", "right after"):
        runs = [r for r in result["runs"] if r["kind"] == kind]
        first = common.median(r["first_epoch_s"] for r in runs)
        gap = common.median(r["exit_after_last_line_s"] for r in runs)
        each = ", ".join(common.fmt(r["first_epoch_s"]) for r in runs)
        loads = ", ".join(f"{r['load']:.1f}" for r in runs)
        met = None if first is None else first <= FIRST_EPOCH_TARGET_S
        figures += [
            common.figure(
                f"{kind}: first epoch from the launch (median of {len(runs)})",
                first,
                "s",
                f"<= {FIRST_EPOCH_TARGET_S:g} s",
                met,
                f"each: {each}; load: {loads}",
            ),
            common.figure(f"{kind}: wall time (median)", common.median(r["wall_s"] for r in runs), "s"),
            common.figure(
                f"{kind}: exit after the last line (median)",
                gap,
                "s",
                f"<= {EXIT_TARGET_S:g} s",
                None if gap is None else gap <= EXIT_TARGET_S,
            ),
        ]
        ratios.append(f"{kind}: first epoch {common.fmt(first)} s from the command's launch (each: {each})")
    opening = next(r for r in result["runs"] if r["kind"] == "first on the new runtime")
    figures.append(
        common.figure(
            "the runtime's first search (it also made the MLflow store): first epoch from the launch",
            opening["first_epoch_s"],
            "s",
            note=f"load {opening['load']:.1f}",
        )
    )
    return {"figures": figures, "ratios": ratios}


def main(argv: list[str] | None = None) -> int:
    p = common.parser(NAME, __doc__.splitlines()[0])
    p.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    settings = MODES[args.mode]
    report = common.Report(NAME, TITLE, args.mode, args.out)
    with common.Workdir(NAME, args.keep) as workdir:
        print(f"[{NAME}] tunekit up, then {settings['pairs']} pair(s) of searches ...", flush=True)
        result = measure(settings, workdir)
    analysis = analyse(result)
    setup = {
        "search": "search_spaces/digits_mlp.yaml (TPE seed 0), FIFO scheduler, 2 trials at a time, tracked to SQLite",
        "trials": settings["num_samples"],
        "epochs_per_trial": settings["max_epochs"],
        "runtime": result["up"],
        "process": "each search a fresh `tunekit run` process, the thin client of the runtime",
    }
    notes = [
        "The runtime keeps Ray, Ray Tune, Optuna, MLflow and tunekit's run path imported, and twice the "
        "machine's CPUs of idle workers with TensorFlow imported; each search takes workers that never ran a "
        "trial, and the pool refills one worker at a time from 10 s into a search and 2 s after one ends."
    ]
    return report.finish(analysis["figures"], analysis["ratios"], DEFINITIONS, setup, notes, {"result": result})


if __name__ == "__main__":
    sys.exit(main())
