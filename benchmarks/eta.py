"""The ETA's error: ``tunekit plan --probe``'s prediction against the search it predicts.

Each round runs, one after the other, as a user would: ``tunekit plan SPEC --probe`` (a bounded
real probe; its measurement is kept under the storage root), then ``tunekit run SPEC`` (which
files the prediction with the experiment), and compares the predicted wall time, epochs and
CPU-hours with the experiment's actual ones (``tunekit report``'s predicted-against-actual).
Two held-out shapes, each with MLflow tracking to a SQLite file in the work directory: the
shipped default, ``search_spaces/digits_mlp.yaml``, and a small CNN on the same digits as 8x8
images whose epoch cost grows about 3x with its ``filters`` (``benchmarks.eta_cnn``). The
CIFAR specs need a download and are left out.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import common, eta_cnn

NAME = "eta"
TITLE = "tunekit plan --probe: predicted against actual wall time, the default search and a CNN whose epochs cost 3x"
TARGET = 35.0  # per cent, either way

MODES: dict[str, dict[str, Any]] = {
    "smoke": {"rounds": 1, "set": ["budget.num_samples=4", "budget.max_epochs=3"], "probe_seconds": 60},
    "quick": {"rounds": 2, "set": [], "probe_seconds": 150},
    "full": {"rounds": 4, "set": [], "probe_seconds": 150},
}
SHAPES = ("default", "cnn")  # each mode's rounds run per shape

DEFINITIONS = {
    "predicted wall time": "plan --probe's predicted_wall_seconds: from the search's start (tunekit.run called, "
    "after the driver's imports) to its last trial's end",
    "actual wall time": "the same span in the experiment: prediction.json's launched_at to the last ended_at "
    "of trials.csv",
    "error": "(predicted - actual) / actual, per cent",
    "process wall time": "the whole `tunekit run` process, as the shell sees it (Python start, imports, "
    "shutdown included): shown for context",
}


def _tunekit(args: list[str], workdir: Path, log: Path) -> float:
    """Runs ``tunekit ARGS`` from the repository root; returns its wall seconds."""
    started = time.time()
    with log.open("a") as out:
        code = subprocess.run(
            [sys.executable, "-m", "tunekit.cli", *args],
            cwd=common.REPO,
            env=common.child_env(),
            stdout=out,
            stderr=out,
        ).returncode
    if code != 0:
        raise common.ChildFailed(f"tunekit {args[0]} exited {code}; see {log}:\n{log.read_text()[-3000:]}")
    return time.time() - started


def spec_of(shape: str, workdir: Path) -> str:
    """The shape's spec file: the shipped default, or the CNN's, written into the work directory."""
    if shape == "default":
        return str(common.DIGITS_SPEC)
    path = workdir / "eta_cnn.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(eta_cnn.SPEC)
    return str(path)


def one_round(index: int, settings: dict[str, Any], workdir: Path, shape: str = "default") -> dict[str, Any]:
    spec = spec_of(shape, workdir)
    overrides = [f"--set={item}" for item in settings["set"]]
    storage = ["--storage", str(workdir / f"round{index}")]
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / f"round{index}.log"
    load_before = os.getloadavg()[0]
    probe_s = _tunekit(
        ["plan", spec, *overrides, *storage, "--probe", "--probe-seconds", str(settings["probe_seconds"])], workdir, log
    )
    tracking = ["--tracking-uri", f"sqlite:///{workdir / f'round{index}.db'}"]
    run_s = _tunekit(["run", spec, *overrides, *storage, *tracking, "--name", "search"], workdir, log)
    report = subprocess.run(
        [sys.executable, "-m", "tunekit.cli", "report", str(workdir / f"round{index}" / "search"), "--format", "json"],
        cwd=common.REPO,
        env=common.child_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    compared = {row["figure"]: row for row in json.loads(report.stdout)["predicted_vs_actual"] or []}
    return {
        "shape": shape,
        "probe_seconds": probe_s,
        "process_wall_seconds": run_s,
        "compared": compared,
        "parts": parts(workdir / f"round{index}" / "search"),
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
    }


PARTS = ("startup_s", "new_worker_first_epoch_s", "reused_first_epoch_s", "epoch_s", "gap_s")


def parts(experiment: Path) -> dict[str, dict[str, float]]:
    """Where a miss comes from: each part of the probe's measurement (as filed with the experiment)
    beside the same part measured on the search itself, by the probe's own reading of its tables;
    and the mean later epoch the forecast priced trials at (its configurations drawn from the space)."""
    from tunekit.results.load import load
    from tunekit.search.forecast import Measurement, read_prediction
    from tunekit.search.probe import measure

    filed = read_prediction(experiment) or {}
    probed = Measurement.from_dict(filed.get("measurement") or {})
    results = load(experiment)
    searched = measure(results, {"launched_at": filed["launched_at"]}, results.spec.budget.max_concurrent, "local", 0.0)
    model = probed.cost_model(results.spec)
    priced = statistics.fmean(model.pool(0)) if model is not None else probed.epoch_s
    return {
        **{part: {"probe": getattr(probed, part), "search": getattr(searched, part)} for part in PARTS},
        "priced_epoch_s": {"probe": priced, "search": searched.epoch_s},
    }


RAY_START_FAILED = "timed out during startup"  # Ray's own words when an overloaded machine starts it too slowly
ATTEMPTS = 3


def _round_with_retries(
    index: int, settings: dict[str, Any], workdir: Path, retried: list[str], shape: str
) -> dict[str, Any]:
    """One round; run again from its probe when Ray itself failed to start (a round measures tunekit, not that)."""
    for attempt in range(1, ATTEMPTS):
        try:
            return one_round(index, settings, workdir / f"attempt{attempt}", shape)
        except common.ChildFailed as error:
            if RAY_START_FAILED not in str(error):
                raise
            retried.append(
                f"{shape} round {index}, attempt {attempt}: Ray did not start (load {os.getloadavg()[0]:.1f})"
            )
            print(f"[{NAME}] {retried[-1]}; again", flush=True)
    return one_round(index, settings, workdir / f"attempt{ATTEMPTS}", shape)


def analyse(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    errors = [r["compared"]["wall seconds"]["error_percent"] for r in rounds]
    worst = max(errors, key=abs)
    figures = []
    for r in rounds:
        wall, epochs, hours = (r["compared"][k] for k in ("wall seconds", "epochs", "CPU-hours"))
        index = f"{r.get('shape', 'default')} {r.get('index', '')}".strip()
        figures += [
            common.figure(
                f"round {index}: wall time predicted / actual",
                f"{wall['predicted']:.1f} / {wall['actual']:.1f}",
                "s",
                f"within ±{TARGET:.0f}%",
                abs(wall["error_percent"]) <= TARGET,
                f"error {wall['error_percent']:+.1f}%; load {r['load_before']:.1f} -> {r['load_after']:.1f}",
            ),
            common.figure(
                f"round {index}: epochs predicted / actual",
                f"{epochs['predicted']:.0f} / {epochs['actual']:.0f}",
                note=f"error {epochs['error_percent']:+.1f}%",
            ),
            common.figure(
                f"round {index}: CPU-hours predicted / actual",
                f"{hours['predicted']:.4f} / {hours['actual']:.4f}",
                note=f"error {hours['error_percent']:+.1f}%",
            ),
            common.figure(
                f"round {index}: probe / search, per part",
                "; ".join(f"{k} {v['probe']:.3g} / {v['search']:.3g}" for k, v in r.get("parts", {}).items()),
                "s",
            ),
            common.figure(
                f"round {index}: probe / whole run process",
                f"{r['probe_seconds']:.0f} / {r['process_wall_seconds']:.0f}",
                "s",
            ),
        ]
    for shape in SHAPES:
        of_shape = [e for r, e in zip(rounds, errors, strict=True) if r.get("shape", "default") == shape]
        if of_shape:
            largest = max(of_shape, key=abs)
            target = f"within ±{TARGET:.0f}%"
            figures.append(
                common.figure(f"{shape}: largest wall-time error", largest, "%", target, abs(largest) <= TARGET)
            )
    figures.append(common.figure("largest wall-time error", worst, "%", f"within ±{TARGET:.0f}%", abs(worst) <= TARGET))
    walls = [r["compared"]["wall seconds"] for r in rounds]
    ratios = [
        f"{r.get('shape', 'default')} round {r.get('index', i)}: predicted {wall['predicted']:.1f} s "
        f"against {wall['actual']:.1f} s actual ({e:+.1f}%)"
        for i, (r, wall, e) in enumerate(zip(rounds, walls, errors, strict=True))
    ]
    return {"figures": figures, "ratios": ratios}


def main(argv: list[str] | None = None) -> int:
    args = common.parser(NAME, __doc__.splitlines()[0]).parse_args(argv)
    settings = MODES[args.mode]
    report = common.Report(NAME, TITLE, args.mode, args.out)
    rounds = []
    retried: list[str] = []
    with common.Workdir(NAME, args.keep) as workdir:
        for index in range(settings["rounds"]):
            for shape in SHAPES:  # alternating, so the machine's load moves both alike
                print(f"[{NAME}] {shape} round {index}: plan --probe, then the search ...", flush=True)
                done = _round_with_retries(index, settings, workdir / shape, retried, shape)
                rounds.append({**done, "index": index})
    analysis = analyse(rounds)
    with_set = f" with {', '.join(settings['set'])}" if settings["set"] else ""
    setup = {
        "spec": "search_spaces/digits_mlp.yaml" + with_set,
        "cnn_spec": "benchmarks/eta_cnn.py's SPEC (filters 8..64, log; 12 trials x 9 epochs)" + with_set,
        "rounds": settings["rounds"],
        "probe_seconds": settings["probe_seconds"],
        "tracking": "MLflow, SQLite in the work directory",
    }
    notes = [
        "The CIFAR specs (search_spaces/cifar_*.yaml) need a dataset download and are not measured.",
        "Each round probes afresh, then searches; nothing else of the benchmark runs meanwhile, "
        "but the machine's load (shown per round) moves both.",
        *(f"{line}; the round was run again from its probe" for line in retried),
    ]
    return report.finish(analysis["figures"], analysis["ratios"], DEFINITIONS, setup, notes, {"rounds": rounds})


if __name__ == "__main__":
    sys.exit(main())
