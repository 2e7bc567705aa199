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

``--compare tensorboard`` runs the same pairs for tunekit's TensorBoard logs instead: the
default search as shipped (MLflow's default store, new, on both sides) with
``tracking.tensorboard: true`` (the default) against ``false``, nothing else changed. Inside
the side with TensorBoard on, the logger's hooks are timed on the driver's thread (what an
epoch's report costs the loop that drives Ray) and its writer thread's CPU is read.
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
TENSORBOARD_TITLE = "TensorBoard logging's share of the default search: on against off, run after run"
TARGET = 1.05  # tracked wall at most 5 % over untracked
TENSORBOARD_SHARE_TARGET = 0.02  # TensorBoard logging at most 2 % of the default search's wall
# What each comparison turns on and off, and the words its sides are called by.
COMPARISONS: dict[str, dict[str, Any]] = {
    "mlflow": {"on": "tracked", "off": "untracked", "off_tracking": {"enabled": False}},
    "tensorboard": {"on": "TensorBoard on", "off": "TensorBoard off", "off_tracking": {"tensorboard": False}},
}

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
    "TensorBoard share": "1 - 1/r, r the median per-trained-epoch ratio of the pairs (on / off): the part of "
    "the search's wall with TensorBoard on that its logging adds",
    "TensorBoard hooks on the driver's thread": "the logger's listener hooks (trial started, epoch reported, "
    "trial ended, experiment started), timed where the recorder calls them: on the thread that drives Ray's "
    "loop; per epoch = their total over the epochs reported",
    "TensorBoard writer CPU": "the logger's writer thread's own CPU seconds (time.thread_time), tensorboardX's "
    "import and every event file's writes and flushes",
    "TensorBoard final wait": "seconds the search's end waits for the writer to write the rest and close its files",
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


def _instrument_tensorboard(pieces: dict[str, float]) -> None:
    """Times the TensorBoard logger's hooks on the driver's thread and its writer's CPU (tunekit is not changed)."""
    from tunekit.tracking import tensorboard

    logger = tensorboard.TensorBoardLogger
    pieces.update(tb_hooks_s=0.0, tb_epochs=0.0)

    def timed(hook: Any, counts_epoch: bool = False) -> Any:
        def wrapper(self: Any, *args: Any) -> None:
            began = time.perf_counter()
            try:
                hook(self, *args)
            finally:
                pieces["tb_hooks_s"] += time.perf_counter() - began
                pieces["tb_epochs"] += counts_epoch

        return wrapper

    for name in ("experiment_started", "trial_started", "trial_ended"):
        setattr(logger, name, timed(getattr(logger, name)))
    logger.epoch_reported = timed(logger.epoch_reported, counts_epoch=True)  # type: ignore[method-assign]
    ended, run = logger.experiment_ended, tensorboard._Writer.run

    def timed_ended(self: Any, recorder: Any) -> None:
        began = time.perf_counter()
        try:
            ended(self, recorder)
        finally:
            pieces["tb_final_wait_s"] = time.perf_counter() - began

    def timed_run(self: Any) -> None:
        cpu = time.thread_time()
        try:
            run(self)
        finally:
            pieces["tb_writer_cpu_s"] = time.thread_time() - cpu

    logger.experiment_ended = timed_ended  # type: ignore[method-assign]
    tensorboard._Writer.run = timed_run  # type: ignore[method-assign]


def _run_side(settings: dict[str, int], workdir: Path, tracked: bool, compare: str = "mlflow") -> dict[str, Any]:
    # A user's first `tunekit run` in a fresh folder: MLflow's default store is created there.
    workdir.mkdir(parents=True, exist_ok=True)
    os.chdir(workdir)
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    import tunekit

    pieces: dict[str, float] = {}
    if tracked:
        (_instrument if compare == "mlflow" else _instrument_tensorboard)(pieces)
    sections: dict[str, Any] = {
        "budget": {"num_samples": settings["num_samples"], "max_epochs": settings["max_epochs"], "max_concurrent": 2}
    }
    if not tracked:
        sections["tracking"] = COMPARISONS[compare]["off_tracking"]
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
        # A quiet default search's wall barely moves with the epochs ASHA lets it train (its
        # trials overlap), so dividing by epochs adds noise there: every pair's raw ratio too.
        "every_pair_ratio": common.median(r for r in ratios if r is not None),
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
        **_tensorboard_pieces(tracked),
    }


def _tensorboard_pieces(on: list[dict[str, Any]]) -> dict[str, Any]:
    """The TensorBoard logger's timed pieces over the sides that logged (none for MLflow's pairs)."""
    timed = [s["pieces"] for s in on if s.get("pieces", {}).get("tb_epochs")]
    return {
        "tb_hooks_per_epoch_ms": [1000 * p["tb_hooks_s"] / p["tb_epochs"] for p in timed],
        "tb_writer_cpu_per_epoch_ms": [
            1000 * p["tb_writer_cpu_s"] / p["tb_epochs"] for p in timed if "tb_writer_cpu_s" in p
        ],
        "tb_writer_cpu_s": [p["tb_writer_cpu_s"] for p in timed if "tb_writer_cpu_s" in p],
        "tb_final_wait_s": [p["tb_final_wait_s"] for p in timed if "tb_final_wait_s" in p],
    }


def tensorboard_share(ratio: float | None) -> float | None:
    """The part of the search's wall with TensorBoard on that its logging adds: 1 - off / on."""
    return None if not ratio else 1 - 1 / ratio


def tensorboard_figures(a: dict[str, Any]) -> list[dict[str, Any]]:
    """The TensorBoard comparison's figures: its share of the search's wall, and the micro-measures."""
    share = tensorboard_share(a["ratio"])

    def spread(values: list[float], digits: int = 3) -> str:
        return ", ".join(common.fmt(v, digits) for v in values) or "none"

    return [
        common.figure(
            "TensorBoard's share of the default search's wall (per trained epoch, median of pairs)",
            None if share is None else 100 * share,
            "%",
            f"<= {100 * TENSORBOARD_SHARE_TARGET:g}%",
            None if share is None else share <= TENSORBOARD_SHARE_TARGET,
            note="pairs' shares: " + spread([100 * (1 - 1 / r) for r in a["per_epoch_ratios"] if r]) + " %",
        ),
        common.figure(
            "TensorBoard on / off process wall per trained epoch (median of pairs)",
            a["ratio"],
            "x",
            note="pairs: " + spread(a["per_epoch_ratios"]),
        ),
        common.figure(
            "TensorBoard on / off process wall, pairs that trained the same epochs",
            common.median(a["same_work_ratios"]),
            "x",
            note="pairs: " + spread(a["same_work_ratios"]),
        ),
        common.figure(
            "TensorBoard on / off process wall, every pair (median)",
            a["every_pair_ratio"],
            "x",
            note="pairs: " + spread([r for r in a["ratios"] if r is not None]),
        ),
        common.figure("TensorBoard on: process wall", common.median(a["tracked_s"]), "s"),
        common.figure("TensorBoard off: process wall", common.median(a["untracked_s"]), "s"),
        common.figure(
            "TensorBoard hooks on the driver's thread, per epoch reported",
            common.median(a["tb_hooks_per_epoch_ms"]),
            "ms",
            note="sides: " + spread(a["tb_hooks_per_epoch_ms"]),
        ),
        common.figure(
            "TensorBoard writer thread's CPU, per epoch reported",
            common.median(a["tb_writer_cpu_per_epoch_ms"]),
            "ms",
            note="sides: " + spread(a["tb_writer_cpu_per_epoch_ms"]),
        ),
        common.figure("TensorBoard writer thread's CPU over the search", common.median(a["tb_writer_cpu_s"]), "s"),
        common.figure("TensorBoard final wait at the search's end", common.median(a["tb_final_wait_s"]), "s"),
        common.figure("driver CPU, TensorBoard on", a["driver_cpu_tracked_s"], "s"),
        common.figure("driver CPU, TensorBoard off", a["driver_cpu_untracked_s"], "s"),
    ]


def pair_lines(sides: list[dict[str, Any]], a: dict[str, Any], words: dict[str, Any]) -> list[str]:
    """One line per pair: both walls, the epochs each trained, and the raw ratio when they did the same work."""
    on, off = [s for s in sides if s["tracked"]], [s for s in sides if not s["tracked"]]
    return [
        f"pair {i + 1}: {words['on']} {common.fmt(t['process_s'])} s (load {common.fmt(t.get('load_before'))}) "
        f"vs {words['off']} {common.fmt(u['process_s'])} s (load {common.fmt(u.get('load_before'))}), "
        f"{t['epochs_trained']} vs {u['epochs_trained']} epochs trained -> "
        + (f"{common.fmt(r)}x" if t["epochs_trained"] == u["epochs_trained"] else "different work: per epoch only")
        for i, (t, u, r) in enumerate(zip(on, off, a["ratios"], strict=False))
    ]


def main(argv: list[str] | None = None) -> int:
    p = common.parser(NAME, __doc__.splitlines()[0])
    p.add_argument("--side", choices=("tracked", "untracked"), help=argparse.SUPPRESS)
    p.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--pairs", type=int, help="on/off pairs (default: by mode)")
    p.add_argument(
        "--compare",
        choices=tuple(COMPARISONS),
        default="mlflow",
        help="mlflow: tracked against tracking.enabled: false (default); tensorboard: tracking.tensorboard true "
        "against false, MLflow as shipped on both sides (writes tracking_cost_tensorboard.json)",
    )
    args = p.parse_args(argv)
    settings = MODES[args.mode]
    if args.side:
        outcome = _run_side(settings, args.workdir, args.side == "tracked", args.compare)
        common.write_json(args.result, common.clean(outcome))
        return 0

    words = COMPARISONS[args.compare]
    if args.compare == "tensorboard":
        report = common.Report(f"{NAME}_tensorboard", TENSORBOARD_TITLE, args.mode, args.out)
    else:
        report = common.Report(NAME, TITLE, args.mode, args.out)
    sides: list[dict[str, Any]] = []
    with common.Workdir(NAME, args.keep) as workdir:
        for pair in range(args.pairs or settings["pairs"]):
            for side in ("tracked", "untracked"):  # one after the other, never at the same time
                label = words["on"] if side == "tracked" else words["off"]
                print(f"[{NAME}] pair {pair + 1}: the {label} search ({args.mode}) ...", flush=True)
                side_dir = workdir / f"{pair}-{side}"
                load = os.getloadavg()[0]
                began = time.time()
                result = common.run_child(
                    f"benchmarks.{NAME}",
                    [f"--{args.mode}", "--side", side, "--compare", args.compare, "--workdir", str(side_dir)],
                    side_dir,
                    side,
                )
                result["process_s"] = time.time() - began
                result["load_before"] = load
                sides.append(result)
    a = analyse(sides)
    if args.compare == "tensorboard":
        return report.finish(
            tensorboard_figures(a),
            pair_lines(sides, a, words),
            DEFINITIONS,
            {
                "search": "search_spaces/digits_mlp.yaml as shipped"
                + ("" if args.mode != "smoke" else f" at {settings['num_samples']} x {settings['max_epochs']}"),
                "TensorBoard on": "tracking.tensorboard: true (the default); MLflow's default store, new",
                "TensorBoard off": "tracking.tensorboard: false; MLflow's default store, new",
                "order": "on, off, on, off ...: each in its own process",
            },
            [
                "Both sides track to MLflow as shipped (a new sqlite:///mlflow.db in a fresh folder); only "
                "tracking.tensorboard differs. ASHA's decisions can fall differently with timing, so each "
                "pair's epochs trained are shown with it, and the per-epoch ratio beside the raw one.",
                "Other processes shared the CPU during this run; see load_before/load_after and each side's load.",
            ],
            {"sides": sides, "analysis": a},
        )
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
        common.figure(
            "tracked / untracked process wall, every pair (median)",
            a["every_pair_ratio"],
            "x",
            note="pairs: " + ", ".join(common.fmt(r) for r in a["ratios"]),
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
    ratios = pair_lines(sides, a, words)
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
