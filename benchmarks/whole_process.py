"""The overhead benchmark's whole-process row: each side a fresh process as a user runs it, timed
from its command line to its exit, both tracking to MLflow.

* tunekit: the ``tunekit run search_spaces/digits_mlp.yaml`` command itself (the shipped trainable,
  the benchmark's budget by ``--set``, ``--tracking-uri`` to a fresh SQLite store);
* plain Ray Tune: a script with the in-window plain side's search (``overhead.plain_trainable``
  without its timing files, ``OptunaSearch``, ``ASHAScheduler``, ``MLflowLoggerCallback``),
  ending as such a script does, with Ray's own shutdown.

Each store's schema and experiment are made by a child of their own before the clock, as a user's
database already exists. The parent reads each side's output line by line, so the row also says
how long each process ran after its last line (issue 52: nothing after the last line).
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks import common

SIDES = ("tunekit-process", "plain-process")
LABELS = {"tunekit-process": "tunekit command", "plain-process": "plain Ray Tune script"}
EXPERIMENT = "whole-process"

DEFINITIONS = {
    "whole-process wall time": "seconds from launching the side's command (a fresh Python process) to its "
    "exit, as the parent benchmark sees them: imports, Ray's start and shutdown, tracking and the "
    "interpreter's exit included",
    "exit after the last line": "seconds from the last non-empty line the side printed to its process's exit",
}


def timed_command(command: list[str], log: Path, env: dict[str, str]) -> dict[str, Any]:
    """Runs ``command`` from the repository root, its output to ``log``; its launch, last line and exit."""
    launched = time.time()
    process = subprocess.Popen(
        command, cwd=common.REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    exited: list[float] = []

    def wait() -> None:  # the exit itself, even if a process the side left holds its output open
        process.wait()
        exited.append(time.time())

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    last_line = launched
    with log.open("w") as handle:
        for line in process.stdout or ():
            handle.write(line)
            if line.strip():
                last_line = time.time()
    waiter.join()
    if process.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise common.ChildFailed(f"{' '.join(command[:4])} exited {process.returncode}; log tail:\n{tail}")
    return {
        "command": command,
        "wall_s": exited[0] - launched,
        "last_line_s": last_line - launched,
        "exit_after_last_line_s": exited[0] - last_line,
    }


def tunekit_command(settings: dict[str, int], workdir: Path, tracking_uri: str) -> list[str]:
    """``tunekit run`` on the shipped spec with the benchmark's budget, tracking to ``tracking_uri``."""
    sets = {
        "budget.num_samples": settings["num_samples"],
        "budget.max_epochs": settings["max_epochs"],
        "scheduler.grace_period": settings["grace_period"],
        "tracking.experiment": EXPERIMENT,
    }
    return [
        str(Path(sys.executable).parent / "tunekit"),
        "run",
        str(common.DIGITS_SPEC),
        "--storage",
        str(workdir),
        "--name",
        "tunekit",
        "--tracking-uri",
        tracking_uri,
        *(arg for key, value in sets.items() for arg in ("--set", f"{key}={value}")),
    ]


def epochs_trained(experiment_dir: Path) -> int:
    """The epochs in the experiment's trials table (read as text: no pandas in the parent)."""
    from tunekit.layout import TRIALS_FILE

    with (experiment_dir / TRIALS_FILE).open() as handle:
        return sum(int(row["epochs"] or 0) for row in csv.DictReader(handle))


def run_side(side: str, mode: str, settings: dict[str, int], workdir: Path) -> dict[str, Any]:
    """One side, a fresh process; its store prepared by a child first, its load noted around it."""
    workdir.mkdir(parents=True, exist_ok=True)
    prepared = common.run_child(
        "benchmarks.overhead", [f"--{mode}", "--side", "prepare-mlflow", "--workdir", str(workdir)], workdir, "prepare"
    )
    if side == "tunekit-process":
        command = tunekit_command(settings, workdir, prepared["tracking_uri"])
    else:
        result = workdir / "plain.result.json"
        command = [sys.executable, "-m", "benchmarks.overhead", f"--{mode}", "--side", side]
        command += ["--workdir", str(workdir), "--result", str(result)]
    load = os.getloadavg()
    timed = timed_command(command, workdir / f"{side}.log", common.child_env())
    timed["load_before"], timed["load_after"] = list(load), list(os.getloadavg())
    if side == "tunekit-process":
        timed["epochs_trained"] = epochs_trained(workdir / "tunekit")
    else:
        timed["epochs_trained"] = json.loads(result.read_text())["epochs_trained"]
    timed["side"], timed["tracked"] = LABELS[side], True
    return timed


def row(tk: dict[str, Any], plain: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """The whole-process row's figures and its ratio line, with each side's load."""
    speedup = common.ratio(plain["wall_s"], tk["wall_s"])
    per_epoch = common.ratio(plain["wall_s"] / plain["epochs_trained"], tk["wall_s"] / tk["epochs_trained"])
    gap = tk["exit_after_last_line_s"]
    ratio_name = "whole process, both tracked: wall-time ratio (plain Ray Tune script / tunekit command)"
    figures = [
        common.figure(ratio_name, speedup, "x"),
        common.figure("whole process: tunekit command, launch to exit", tk["wall_s"], "s"),
        common.figure("whole process: plain Ray Tune script, launch to exit", plain["wall_s"], "s"),
        common.figure("whole process: wall time per trained epoch ratio (plain / tunekit)", per_epoch, "x"),
        common.figure("whole process: tunekit epochs trained", tk["epochs_trained"]),
        common.figure("whole process: plain Ray Tune epochs trained", plain["epochs_trained"]),
        common.figure("whole process: tunekit command's exit after its last line", gap, "s", "<= 0.5 s", gap <= 0.5),
        common.figure(
            "whole process: plain Ray Tune script's exit after its last line", plain["exit_after_last_line_s"], "s"
        ),
    ]
    line = (
        f"whole process, both tracked (launch to exit, each a fresh process): tunekit command "
        f"{common.fmt(tk['wall_s'])} s vs plain Ray Tune script {common.fmt(plain['wall_s'])} s -> "
        f"{common.fmt(speedup)}x ({tk['epochs_trained']} vs {plain['epochs_trained']} epochs); exit after the "
        f"last line {common.fmt(gap)} s vs {common.fmt(plain['exit_after_last_line_s'])} s (load: tunekit "
        f"{tk['load_before'][0]:.1f} -> {tk['load_after'][0]:.1f}, plain {plain['load_before'][0]:.1f} -> "
        f"{plain['load_after'][0]:.1f})"
    )
    return figures, [line]
