"""``tunekit plan SPEC --probe``: a short real search that measures what a trial costs.

The probe runs the spec through the path every search takes (``tunekit.run``: Ray's
start, the Tuner, reused trial workers that import TensorFlow, the epoch reporter) in a
child process, with a few configurations sampled from the space with the spec's seed,
a few epochs each, FIFO, tracking off, at the spec's own concurrency (so epochs are
timed under the same contention as the real search). Its ``trials.csv`` and
``epochs.csv`` give the start-up, first and later epoch times of
``tunekit.search.forecast.Measurement``.

The child is bounded: at ``seconds`` it gets SIGTERM (tunekit stops the search and
writes its tables within a few seconds), and SIGKILL ``STOP_GRACE_S`` later. Whatever
it measured by then is used. This module imports neither Ray nor TensorFlow; the child
does.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunekit.config.resources import local_gpu_count
from tunekit.config.spec import ExperimentSpec, load_spec
from tunekit.errors import TunekitError
from tunekit.layout import PARAM_PREFIX, PROBES_DIR, TrialStatus
from tunekit.search.costs import probe_points
from tunekit.search.forecast import Measurement, Prediction, concurrency, target_of
from tunekit.storage.clock import duration

if TYPE_CHECKING:
    from tunekit.results.load import ExperimentResults

DEFAULT_SECONDS = 90.0
STOP_GRACE_S = 10.0  # after SIGTERM, how long the child may take to stop before SIGKILL
PROBE_EPOCHS = 3  # the first (tracing) epoch and two later ones
TRIALS_PER_SLOT = 2  # the second trial of a slot runs in a reused worker
_LAUNCH_FILE = "launch.json"  # the child's own record, in its scratch directory
_NAME = "probe"


@dataclass(frozen=True)
class ProbeSettings:
    spec_path: str
    overrides: tuple[str, ...]
    address: str | None
    seconds: float
    storage_root: Path  # the probe's scratch search lives here: shared by every node on a cluster


def probe_sections(spec: ExperimentSpec, slots: int) -> dict[str, Any]:
    """The spec's changes for a probe: a few short trials, FIFO, no tracking, random or TPE sampling,
    at the corners of the space's cost when it has size-like parameters (``costs.probe_points``)."""
    sections: dict[str, Any] = {
        "budget": {
            "num_samples": slots * TRIALS_PER_SLOT,
            "max_epochs": min(PROBE_EPOCHS, spec.budget.max_epochs),
            "max_concurrent": slots,
            "time_budget_s": None,
        },
        "scheduler": {"type": "fifo"},
        "tracking": {"enabled": False},
    }
    search: dict[str, Any] = {}
    if spec.search.algorithm == "grid":  # a grid fixes num_samples; sample its space instead
        search["algorithm"] = "random"
    # Run first, before the sampler's own picks: TPE's first picks said nothing of the costly
    # corner its later trials went to (the module docstring of tunekit.search.costs).
    points = probe_points(spec.space, slots * TRIALS_PER_SLOT, spec.search.seed)
    if points:
        search["warm_start"] = points
    if search:
        sections["search"] = search
    return sections


def probe_overrides(overrides: Sequence[str], sections: Mapping[str, Any]) -> list[str]:
    """The user's ``--set`` values the probe's own search keeps: none of the sections the probe sets.

    ``--set budget.num_samples=48`` shapes the predicted search, never the probe (which
    would otherwise run 48 trials at full length under a 4-trial, 3-epoch announcement);
    ``--set training.batch_size=256`` changes what an epoch costs, so the probe takes it.
    """
    owned = {f"{name}.{key}" for name, section in sections.items() for key in section} | {
        name for name in sections if name != "search"
    }
    return [item for item in overrides if not any(_under(item.partition("=")[0].strip(), key) for key in owned)]


def _under(path: str, key: str) -> bool:
    return path == key or path.startswith(key + ".") or key.startswith(path + ".")


def probe_slots(spec: ExperimentSpec, address: str | None) -> int:
    """The spec's concurrency on this machine (on a cluster, max_concurrent: its size is unknown yet)."""
    if target_of(address) != "local":
        return min(spec.budget.max_concurrent, spec.budget.num_samples)
    gpus = float(local_gpu_count()) if spec.resources.gpu > 0 else 0.0
    return concurrency(spec, float(os.cpu_count() or 1), gpus)[0]


def run_probe(settings: ProbeSettings, spec: ExperimentSpec) -> Measurement:
    """Runs the bounded probe search in a child process and measures its trials.

    Raises:
        TunekitError: the probe reported no epoch in time, or its child failed; the
            message ends with the tail of the child's output.
    """
    slots = probe_slots(spec, settings.address)
    scratch_root = settings.storage_root / PROBES_DIR
    scratch_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="scratch-", dir=scratch_root) as scratch:
        workdir = Path(scratch)
        log = workdir / "probe.log"
        command = [sys.executable, "-m", "tunekit.search.probe", settings.spec_path, str(workdir), str(slots)]
        command += ["--seconds", str(settings.seconds)]
        command += [f"--set={item}" for item in settings.overrides]
        if settings.address:
            command += ["--address", settings.address]
        began = time.time()
        _run_bounded(command, log, settings.seconds)
        elapsed = time.time() - began
        launch = _read_json(workdir / _LAUNCH_FILE)
        experiment = workdir / _NAME
        if launch is None or not experiment.is_dir():
            raise TunekitError(f"the probe did not start its search in {settings.seconds:g} s{_tail(log)}")
        from tunekit.results.load import load

        results = load(experiment)
        return measure(results, launch, slots, target_of(settings.address), elapsed, _tail(log))


def _run_bounded(command: Sequence[str], log: Path, seconds: float) -> None:
    with log.open("w") as out:
        child = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            child.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGTERM)  # tunekit stops the search and writes its tables
            try:
                child.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()


def measure(
    results: ExperimentResults, launch: dict[str, Any], slots: int, target: str, elapsed: float, tail: str = ""
) -> Measurement:
    """The probe's costs from its tables (see ``Measurement`` for each figure).

    Means, not medians: the prediction adds these durations up, and a sum's expectation
    is the mean's (the probe's configurations differ, e.g. in batch size, so their epochs do).
    """
    trials, epochs = results.trials, results.epochs
    origin = results.started_at
    if trials.empty or epochs.empty or origin is None or "epoch_seconds" not in epochs.columns:
        raise _no_epoch(trials, elapsed, tail)
    launched = float(launch["launched_at"])
    order = trials.sort_values("started_at")
    reports = {str(t): rows.sort_values("epoch") for t, rows in epochs.groupby("trial_id")}
    first_epochs: list[tuple[bool, float]] = []  # (in a new worker, trial start -> first report)
    later: list[float] = []
    ends: list[float] = []
    config_costs: list[dict[str, Any]] = []
    params = [c for c in order.columns if str(c).startswith(PARAM_PREFIX)]
    for position, (_, row) in enumerate(order.iterrows()):
        rows = reports.get(str(row["trial_id"]))
        if rows is None or rows.empty:
            continue
        times = [origin + float(t) for t in rows["time"]]
        first_epochs.append((position < slots, times[0] - float(row["started_at"])))
        gaps = [b - a for a, b in itertools.pairwise(times)]
        later += gaps
        if gaps:
            config = {str(c)[len(PARAM_PREFIX) :]: _plain(row[c]) for c in params if row[c] == row[c]}  # not NaN
            config_costs.append({"config": config, "epoch_s": statistics.fmean(gaps)})
        if row["ended_at"] == row["ended_at"]:  # not NaN: the trial ended before the probe stopped
            ends.append(float(row["ended_at"]) - times[-1])
    new = [s for fresh, s in first_epochs if fresh]
    reused = [s for fresh, s in first_epochs if not fresh]
    notes = []
    if not reused:
        notes.append("no trial ran in a reused worker in time: its first epoch is taken as a new worker's")
    if not later:
        notes.append("no trial reached a second epoch in time: later epochs are taken as the first one's own time")
    steady = statistics.fmean(later) if later else float(epochs["epoch_seconds"].mean())
    return Measurement(
        target=target,
        measured_at=time.time(),
        cpus=float(launch.get("cpus") or os.cpu_count() or 1),
        gpus=float(launch.get("gpus") or 0.0),
        startup_s=float(order["started_at"].min()) - launched,
        new_worker_first_epoch_s=statistics.fmean(new or [s for _, s in first_epochs]),
        reused_first_epoch_s=statistics.fmean(reused or new or [s for _, s in first_epochs]),
        epoch_s=steady,
        gap_s=_gap(order, slots),
        end_s=statistics.fmean(ends) if ends else 0.0,
        probe_trials=len(first_epochs),
        probe_epochs=len(epochs),
        probe_seconds=elapsed,
        notes=tuple(notes),
        config_costs=tuple(config_costs),
    )


def _plain(value: Any) -> Any:
    """A table's cell as the space's own value: numpy's numbers as Python's, a whole float as an int."""
    value = value.item() if hasattr(value, "item") else value
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _no_epoch(trials: Any, elapsed: float, tail: str) -> TunekitError:
    """Why the probe has nothing to measure: a trial failed (the first one's reason), or time ran out."""
    failed = trials[trials["status"] == str(TrialStatus.FAILED)] if not trials.empty else trials
    if not failed.empty:
        first = failed.sort_values("number").iloc[0]
        return TunekitError(
            f"the probe's trials reported no epoch: {len(failed)} of the {len(trials)} that started failed; "
            f"trial {first['number']}: {first['reason']}"
        )
    return TunekitError(f"the probe reported no epoch in {elapsed:.0f} s; allow more with --probe-seconds{tail}")


def _gap(order: Any, slots: int) -> float:
    """Mean wait between a trial's end and the start of the trial that took its slot."""
    ended = sorted(float(e) for e in order["ended_at"].dropna())
    gaps = []
    for started in [float(s) for s in order["started_at"]][slots:]:
        before = [e for e in ended if e <= started]
        if before:
            gaps.append(started - before[-1])
    return statistics.fmean(gaps) if gaps else 0.0


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _tail(log: Path, lines: int = 12) -> str:
    try:
        text = log.read_text(errors="replace").strip().splitlines()[-lines:]
    except OSError:
        return ""
    return ("\n--- the probe's last output:\n" + "\n".join(text)) if text else ""


# ------------------------------------------------------------------------- output


def describe(spec: ExperimentSpec, measurement: Measurement, prediction: Prediction, saved: Path) -> str:
    """The probe's figures and the prediction, as the table ``tunekit plan --probe`` prints."""
    m, p = measurement, prediction
    rows = [
        ("start-up (Ray, study, Tuner, until the first trial starts)", f"{m.startup_s:.1f} s"),
        ("first epoch in a new worker (process, TensorFlow import, tracing)", f"{m.new_worker_first_epoch_s:.1f} s"),
        ("first epoch in a reused worker (data, model, tracing)", f"{m.reused_first_epoch_s:.2f} s"),
        ("each later epoch (train, validate, checkpoint, report)", f"{m.epoch_s:.3f} s"),
        ("between a trial's end and the next trial's start", f"{m.gap_s:.2f} s"),
    ]
    if len(m.config_costs) > 1:  # what the forecast prices each configuration by
        costs = [float(c["epoch_s"]) for c in m.config_costs]
        rows.insert(4, (f"  by configuration ({len(costs)} measured)", f"{min(costs):.3f} to {max(costs):.3f} s"))
    width = max(len(label) for label, _ in rows)
    lines = [
        f"probe: {m.probe_trials} trials, {m.probe_epochs} epochs in {m.probe_seconds:.0f} s on {m.target} "
        f"({m.cpus:g} CPUs, {m.gpus:g} GPUs)",
        *(f"  {label:<{width}}  {value:>8}" for label, value in rows),
        *(f"  note: {note}" for note in m.notes),
        f"prediction: {p.trials} trials, {p.concurrency} at a time ({p.concurrency_reason})",
        f"  wall time    {duration(p.wall_seconds)} ({p.wall_seconds:.0f} s, until the last trial ends)",
        f"  epochs       {p.epochs:.0f} (asynchronous ASHA, simulated; the ideal rung plan: {p.planned_epochs})",
        f"  {p.slot_unit}-hours    {p.slot_hours:.4f}",
        f"saved: {saved} (`tunekit run` files it with the experiment; the report shows predicted against actual)",
    ]
    return "\n".join(lines)


# ------------------------------------------------------------------ the child process


def probe_search(argv: Sequence[str]) -> int:
    """``python -m tunekit.search.probe SPEC WORKDIR SLOTS --seconds S [--set K=V]... [--address A]``:
    the probe's search, in this process (its own, or the warm runtime's: ``tunekit.runtime``)."""
    parser = argparse.ArgumentParser(prog="python -m tunekit.search.probe")
    parser.add_argument("spec")
    parser.add_argument("workdir", type=Path)
    parser.add_argument("slots", type=int)
    parser.add_argument("--set", action="append", default=[])
    parser.add_argument("--address")
    parser.add_argument("--seconds", type=float, required=True)
    args = parser.parse_args(argv)
    # Bounded on its own too: a parent that died (killed, timed out) leaves no search running on.
    # Later than the parent's own SIGTERM, which a second signal would turn into an abrupt exit.
    timer = threading.Timer(args.seconds + 2 * STOP_GRACE_S, os.kill, (os.getpid(), signal.SIGTERM))
    timer.daemon = True
    timer.start()
    try:
        return _search(args)
    finally:
        timer.cancel()  # the warm runtime's process lives on


def _search(args: argparse.Namespace) -> int:
    from tunekit.driver.runner import run  # imported before the clock starts, as in `tunekit run`
    from tunekit.errors import NoResultError, SearchInterrupted

    spec = load_spec(args.spec, args.set)
    sections = probe_sections(spec, args.slots)
    probe_spec = load_spec(args.spec, probe_overrides(args.set, sections), sections)
    launch: dict[str, Any] = {"launched_at": time.time()}
    (args.workdir / _LAUNCH_FILE).write_text(json.dumps(launch))
    try:
        run(probe_spec, name=_NAME, storage=args.workdir, address=args.address, progress=sys.stdout)
    except (SearchInterrupted, NoResultError) as error:
        print(f"tunekit: probe: {error}", flush=True)  # stopped at its time limit: measure what ran
    launch.update(_cluster_size())
    (args.workdir / _LAUNCH_FILE).write_text(json.dumps(launch))
    return 0


def _cluster_size() -> dict[str, float]:
    import ray

    if not ray.is_initialized():
        return {}
    total = ray.cluster_resources()
    return {"cpus": float(total.get("CPU", 0.0)), "gpus": float(total.get("GPU", 0.0))}


if __name__ == "__main__":
    from tunekit.runtime.client import serve_command
    from tunekit.runtime.protocol import PROBE

    if (served := serve_command(sys.argv[1:], PROBE)) is not None:
        raise SystemExit(served)
    from tunekit.driver.ending import end_command

    status = probe_search(sys.argv[1:])
    end_command(status)  # its Ray ended at once: `plan --probe` waits for this process's exit
    raise SystemExit(status)
