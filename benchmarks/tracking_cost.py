"""What MLflow tracking costs the default search, tracked against untracked, run after run.

The shipped default search (``search_spaces/digits_mlp.yaml``: 24 trials, 20 epochs, 2 at a
time) as a user first runs it: a process that calls ``tunekit.run`` in a fresh folder, so
MLflow's default store (``sqlite:///mlflow.db`` there) is new and its schema is made during
the search. The tracked and the untracked search (``tracking.enabled: false``, nothing else
changed) alternate, tracked first, each in its own process; every pair gives a ratio.

Inside the tracked process the tracker's writer thread is timed piece by piece: importing
MLflow, opening the store and the parent run (a new store's schema migrations happen here),
the thread's own CPU over the search, and how long the search's end waits for its last
flush. The driver process's CPU is read on both sides.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import common

NAME = "tracking_cost"
TITLE = "MLflow tracking's cost in the default search: tracked against untracked, run after run"
TARGET = 1.05  # tracked wall at most 5 % over untracked

MODES: dict[str, dict[str, int]] = {
    "smoke": {"num_samples": 3, "max_epochs": 2, "pairs": 1},
    "quick": {"num_samples": 24, "max_epochs": 20, "pairs": 2},  # the shipped default search
    "full": {"num_samples": 24, "max_epochs": 20, "pairs": 4},
}

DEFINITIONS = {
    "process wall": "seconds from starting the side's Python process to its exit, as the parent sees it "
    "(imports, Ray's start and stop, the search, MLflow's last flush)",
    "tracked / untracked": "per trained epoch: a pair's (tracked process wall / epochs) over (untracked wall / "
    "epochs); the pairs alternate, tracked first; the median over pairs is the figure. A raw wall ratio only "
    "for pairs whose two searches trained the same epochs (ASHA's decisions move with timing)",
    "writer connect": "in the tracker's thread: importing MLflow, then opening the store and the experiment "
    "and the parent run (a new SQLite store's schema migrations); since the store is prepared while Ray "
    "starts, the wait for that preparation to end is in it",
    "prepared while Ray starts": "tunekit.tracking.prepare's thread, from before ray.init: MLflow's imports, a "
    "new store made, the store opened (wall and that thread's CPU)",
    "writer CPU": "the tracker's thread's own CPU seconds (time.thread_time) from its start to its end",
    "final flush wait": "seconds the search's end (experiment_ended) waits for the writer to send the rest",
    "driver CPU": "the driver process's own user + system CPU seconds (Ray's daemons and workers not counted)",
    "first epoch received": "seconds from calling tunekit.run to the driver's receipt of the search's first epoch",
    "last epoch to return": "seconds from the driver's receipt of the last epoch to tunekit.run's return",
}


def _instrument(pieces: dict[str, float]) -> None:
    """Times the tracker's writer thread by wrapping three of its methods (tunekit is not changed)."""
    from tunekit.tracking import tracker, writer

    connect, run, ended = writer.MlflowWriter._connect, writer.MlflowWriter.run, tracker.MlflowTracker.experiment_ended

    def timed_connect(self: Any) -> None:
        began, cpu = time.perf_counter(), time.thread_time()
        pieces["writer_started_at"] = time.time()
        import mlflow  # noqa: F401 - the import the writer's client would do, timed on its own

        pieces["mlflow_import_s"] = time.perf_counter() - began
        opened = time.perf_counter()
        try:
            connect(self)
        finally:
            now = time.perf_counter()
            pieces["open_store_and_parent_s"] = now - opened
            pieces["connect_s"] = now - began
            pieces["connect_cpu_s"] = time.thread_time() - cpu
            pieces["writer_connected_at"] = time.time()

    def timed_run(self: Any) -> None:
        cpu = time.thread_time()
        try:
            run(self)
        finally:
            pieces["writer_cpu_s"] = time.thread_time() - cpu

    def timed_ended(self: Any, recorder: Any) -> None:
        began = time.perf_counter()
        try:
            ended(self, recorder)
        finally:
            pieces["final_flush_wait_s"] = time.perf_counter() - began

    from tunekit.tracking import prepare

    prepared = prepare._prepare

    def timed_prepare(uri: str | None) -> None:
        began, cpu = time.perf_counter(), time.thread_time()
        pieces["prepare_started_at"] = time.time()
        try:
            prepared(uri)
        finally:
            pieces["prepare_s"] = time.perf_counter() - began
            pieces["prepare_cpu_s"] = time.thread_time() - cpu

    prepare._prepare = timed_prepare

    writer.MlflowWriter._connect = timed_connect  # type: ignore[method-assign]
    writer.MlflowWriter.run = timed_run  # type: ignore[method-assign]
    tracker.MlflowTracker.experiment_ended = timed_ended  # type: ignore[method-assign]


def _run_side(settings: dict[str, int], workdir: Path, tracked: bool) -> dict[str, Any]:
    # A user's first `tunekit run` in a fresh folder: MLflow's default store is created there.
    workdir.mkdir(parents=True, exist_ok=True)
    os.chdir(workdir)
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    import tunekit

    pieces: dict[str, float] = {}
    if tracked:
        _instrument(pieces)
    sections: dict[str, Any] = {
        "budget": {"num_samples": settings["num_samples"], "max_epochs": settings["max_epochs"], "max_concurrent": 2}
    }
    if not tracked:
        sections["tracking"] = {"enabled": False}
    spec = tunekit.load_spec(common.digits_spec(**sections))
    started = time.time()
    results = tunekit.run(spec, name="search", storage=workdir / "experiments", progress=False)
    run_s = time.time() - started
    usage = resource.getrusage(resource.RUSAGE_SELF)
    epochs = results.epochs
    # epochs.csv's time counts from the recorder's start (results.started_at): when the driver
    # received each epoch. The first and the last, from the search's start.
    zero = (results.started_at or started) - started
    received = [] if epochs.empty else sorted(float(t) for t in epochs["time"])
    return {
        "tracked": tracked,
        "run_s": run_s,
        "first_epoch_s": zero + received[0] if received else None,
        "last_epoch_s": zero + received[-1] if received else None,
        "driver_cpu_s": usage.ru_utime + usage.ru_stime,
        "epochs_trained": len(epochs),
        "trials": len(results.trials),
        "best": None if epochs.empty else float(epochs["val_accuracy"].max()),
        "store_made": (workdir / "mlflow.db").is_file(),
        "pieces": pieces,
        "run_started_at": started,
    }


def analyse(sides: list[dict[str, Any]]) -> dict[str, Any]:
    """Pairs (tracked, untracked) in run order; the median pair ratio and the writer's pieces."""
    tracked = [s for s in sides if s["tracked"]]
    untracked = [s for s in sides if not s["tracked"]]
    pairs = list(zip(tracked, untracked, strict=False))
    ratios = [common.ratio(a["process_s"], b["process_s"]) for a, b in pairs]
    same_work = [a["epochs_trained"] == b["epochs_trained"] for a, b in pairs]
    per_epoch = [
        common.ratio(a["process_s"] / a["epochs_trained"], b["process_s"] / b["epochs_trained"])
        for a, b in pairs
        if a["epochs_trained"] and b["epochs_trained"]
    ]

    def med(key: str, of: list[dict[str, Any]] = tracked) -> float | None:
        values = [s["pieces"].get(key) if key in s.get("pieces", {}) else s.get(key) for s in of]
        return common.median(v for v in values if v is not None)

    # A raw wall ratio only between searches that did the same work (ASHA's decisions move with
    # timing); every pair is compared per trained epoch, the figure the target reads.
    same = [r for r, equal in zip(ratios, same_work, strict=False) if equal and r is not None]
    ratio = common.median(per_epoch)
    return {
        "ratio": ratio,
        "ratios": ratios,
        "same_work_ratios": same,
        "per_epoch_ratios": per_epoch,
        "same_work": same_work,
        "tracked_s": [s["process_s"] for s in tracked],
        "untracked_s": [s["process_s"] for s in untracked],
        "mlflow_import_s": med("mlflow_import_s"),
        "open_store_and_parent_s": med("open_store_and_parent_s"),
        "connect_cpu_s": med("connect_cpu_s"),
        "writer_cpu_s": med("writer_cpu_s"),
        "prepare_s": med("prepare_s"),
        "prepare_cpu_s": med("prepare_cpu_s"),
        "final_flush_wait_s": med("final_flush_wait_s"),
        "first_epoch_tracked_s": med("first_epoch_s", tracked),
        "first_epoch_untracked_s": med("first_epoch_s", untracked),
        "after_last_epoch_tracked_s": common.median(
            s["run_s"] - s["last_epoch_s"] for s in tracked if s.get("last_epoch_s")
        ),
        "after_last_epoch_untracked_s": common.median(
            s["run_s"] - s["last_epoch_s"] for s in untracked if s.get("last_epoch_s")
        ),
        "driver_cpu_tracked_s": med("driver_cpu_s", tracked),
        "driver_cpu_untracked_s": med("driver_cpu_s", untracked),
        "met": None if ratio is None else ratio <= TARGET,
    }


def main(argv: list[str] | None = None) -> int:
    p = common.parser(NAME, __doc__.splitlines()[0])
    p.add_argument("--side", choices=("tracked", "untracked"), help=argparse.SUPPRESS)
    p.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--pairs", type=int, help="tracked/untracked pairs (default: by mode)")
    args = p.parse_args(argv)
    settings = MODES[args.mode]
    if args.side:
        common.write_json(args.result, common.clean(_run_side(settings, args.workdir, args.side == "tracked")))
        return 0

    report = common.Report(NAME, TITLE, args.mode, args.out)
    sides: list[dict[str, Any]] = []
    with common.Workdir(NAME, args.keep) as workdir:
        for pair in range(args.pairs or settings["pairs"]):
            for side in ("tracked", "untracked"):  # one after the other, never at the same time
                print(f"[{NAME}] pair {pair + 1}: the {side} search ({args.mode}) ...", flush=True)
                side_dir = workdir / f"{pair}-{side}"
                load = os.getloadavg()[0]
                began = time.time()
                result = common.run_child(
                    f"benchmarks.{NAME}",
                    [f"--{args.mode}", "--side", side, "--workdir", str(side_dir)],
                    side_dir,
                    side,
                )
                result["process_s"] = time.time() - began
                result["load_before"] = load
                sides.append(result)
    a = analyse(sides)
    figures = [
        common.figure(
            "tracked / untracked process wall per trained epoch (median of pairs)",
            a["ratio"],
            "x",
            f"<= {TARGET:g}x",
            a["met"],
            note="pairs: " + ", ".join(common.fmt(r) for r in a["per_epoch_ratios"]),
        ),
        common.figure(
            "tracked / untracked process wall, pairs that trained the same epochs",
            common.median(a["same_work_ratios"]),
            "x",
            note="pairs: " + (", ".join(common.fmt(r) for r in a["same_work_ratios"]) or "none"),
        ),
        common.figure("tracked process wall", common.median(a["tracked_s"]), "s"),
        common.figure("untracked process wall", common.median(a["untracked_s"]), "s"),
        common.figure("writer: MLflow import", a["mlflow_import_s"], "s"),
        common.figure("writer: open the store, experiment and parent run", a["open_store_and_parent_s"], "s"),
        common.figure("writer: connect CPU", a["connect_cpu_s"], "s"),
        common.figure("writer: thread CPU over the search", a["writer_cpu_s"], "s"),
        common.figure("prepared while Ray starts (MLflow's imports, the store)", a["prepare_s"], "s"),
        common.figure("prepared while Ray starts, CPU", a["prepare_cpu_s"], "s"),
        common.figure("final flush wait", a["final_flush_wait_s"], "s"),
        common.figure("first epoch received, from tunekit.run, tracked", a["first_epoch_tracked_s"], "s"),
        common.figure("first epoch received, from tunekit.run, untracked", a["first_epoch_untracked_s"], "s"),
        common.figure("last epoch to tunekit.run's return, tracked", a["after_last_epoch_tracked_s"], "s"),
        common.figure("last epoch to tunekit.run's return, untracked", a["after_last_epoch_untracked_s"], "s"),
        common.figure("driver CPU, tracked", a["driver_cpu_tracked_s"], "s"),
        common.figure("driver CPU, untracked", a["driver_cpu_untracked_s"], "s"),
    ]
    ratios = [
        f"pair {i + 1}: tracked {common.fmt(t['process_s'])} s vs untracked {common.fmt(u['process_s'])} s, "
        f"{t['epochs_trained']} vs {u['epochs_trained']} epochs trained -> "
        + (f"{common.fmt(r)}x" if t["epochs_trained"] == u["epochs_trained"] else "different work: per epoch only")
        for i, (t, u, r) in enumerate(
            zip([s for s in sides if s["tracked"]], [s for s in sides if not s["tracked"]], a["ratios"], strict=False)
        )
    ]
    setup = {
        "search": "search_spaces/digits_mlp.yaml as shipped"
        + ("" if args.mode != "smoke" else f" at {settings['num_samples']} trials x {settings['max_epochs']} epochs"),
        "tracked": "MLflow's default store, sqlite:///mlflow.db in a fresh folder (made during the search)",
        "untracked": "tracking.enabled: false",
        "order": "tracked, untracked, tracked, untracked ...: each in its own process",
    }
    notes = [
        "Both sides do the same search (TPE seed 0, ASHA); ASHA's decisions can fall differently with timing, "
        "so each pair's epochs trained are shown with it, and the per-epoch ratio beside the raw one.",
        "Other processes shared the CPU during this run; see load_before/load_after and each side's load.",
    ]
    return report.finish(figures, ratios, DEFINITIONS, setup, notes, {"sides": sides, "analysis": a})


if __name__ == "__main__":
    sys.exit(main())
