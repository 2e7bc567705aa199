"""``python -m benchmarks.chaos --histories N [--seed S] [--out DIR]``, or ``--replay SEED``."""

from __future__ import annotations

import argparse
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks import common
from benchmarks.chaos import faults, invariants
from benchmarks.chaos.bucket import OUTAGE_S, BucketStorage
from benchmarks.chaos.history import (
    NAME,
    SEARCH,
    History,
    check_exit,
    finish,
    plan,
    repair_damage_nothing_read,
    stop_everything,
    wait_for,
)
from tunekit.testing.runs import cli_sets

DEFAULT_OUT = common.DEFAULT_OUT / "chaos"


def _keep_logs(history_dir: Path, into: Path) -> None:
    """A violating history's driver logs, kept beside the report (seed 32368: a traceback whose log
    went with the history's folder, and whose replay did not meet the same moment)."""
    into.mkdir(parents=True, exist_ok=True)
    for log in (history_dir / "drivers").glob("*.log"):
        shutil.copyfile(log, into / log.name)


def run_history(seed: int, workdir: Path, kinds: list[str] | None = None) -> dict[str, Any]:
    """One seeded history in ``workdir``: its plan, what happened, the violations, its seconds."""
    off = faults.enabled()
    on = [name for name in (kinds or faults.KINDS) if name not in off]
    tmpfs = {name for name in on if faults.KINDS[name].tmpfs}
    bucket = frozenset(name for name in on if faults.KINDS[name].bucket)
    planned = plan(seed, on, tmpfs, bucket, frozenset(name for name in on if faults.KINDS[name].folder))
    root = workdir / f"history-{seed}"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    history = History(seed, root, root / "results", random.Random(seed))
    history.say("plan: " + "; ".join(f"{f.kind} {f.moment.describe()}" for f in planned))
    try:
        if any(f.kind in tmpfs for f in planned):
            history.storage.mkdir()
            subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={faults.TMPFS_SIZE}", "tmpfs", str(history.storage)], check=True
            )
            history.mounted = True
        extra = []
        if any(f.kind in bucket for f in planned):
            history.bucket = BucketStorage.serve(root, seed)
            extra = [f"storage.outage_s={OUTAGE_S}"]
        sets = cli_sets([*SEARCH, f"tracking.uri=sqlite:///{history.mlflow_db}", *extra])
        spec = str(common.DIGITS_SPEC)
        history.run_args = ["run", spec, "--storage", history.where, "--name", NAME, *sets]
        history.current = history.start(history.run_args, "run")
        for fault in planned:
            if not wait_for(history, fault.moment):
                history.say(f"{fault.kind}: the search completed before its moment; not injected")
                continue
            inject = faults.KINDS[fault.kind].inject
            assert inject is not None
            if history.restore is not None:  # an earlier fault's damage no refusal repaired
                history.earlier.append((history.restore, history.damaged_after, history.damage))
            history.restore = None  # a refusal's repair is for the damage this fault makes, if any
            history.idle = False
            inject(history)
            (history.found_nothing if history.idle else history.injected).append(fault.kind)
        finish(history)
        _final_checks(history)
    finally:
        stop_everything(history)
    return {
        "seed": seed,
        "plan": [{"kind": f.kind, "moment": f.moment.describe()} for f in planned],
        "injected": history.injected,
        "found_nothing": history.found_nothing,
        "drivers": [{"what": d.what, "exit": d.status(), "log": str(d.log)} for d in history.drivers],
        "events": history.events,
        "violations": history.violations,
        "seconds": round(time.monotonic() - history.began, 1),
        "dir": str(root),
    }


def _final_checks(history: History) -> None:
    for driver in history.drivers:
        check_exit(history, driver)
    logs = [d.log for d in history.drivers if not d.what.startswith("check")]
    repair_damage_nothing_read(history)
    history.pull()
    disagreements, outcome = invariants.violations(history.experiment, history.mlflow_db, logs)
    for problem in disagreements + outcome:
        history.violate(problem)
    checked = history.run_once(["check", history.target], "check at the end")
    if (checked.status() == 0) != (not disagreements):
        said = checked.log.read_text(errors="replace").strip()[-500:]
        history.violate(
            f"`tunekit check` exit {checked.status()} while the explorer found {len(disagreements)} disagreement(s): "
            + said
        )


def report(histories: list[dict[str, Any]], command: str, wall_s: float) -> dict[str, Any]:
    return {
        "command": command,
        "histories": len(histories),
        "faults_injected": dict(sorted(Counter(k for h in histories for k in h["injected"]).items())),
        # A fault's moment came but it found nothing to break (no trial worker, no checkpoint yet).
        "found_nothing": dict(sorted(Counter(k for h in histories for k in h["found_nothing"]).items())),
        "kinds": {name: kind.what for name, kind in faults.KINDS.items()},
        "kinds_off": faults.enabled(),
        "violations": [
            {"seed": h["seed"], "violation": v, "replay": f"python -m benchmarks.chaos --replay {h['seed']}"}
            for h in histories
            for v in h["violations"]
        ],
        "wall_s": round(wall_s, 1),
        "history_seconds": [h["seconds"] for h in histories],
        "details": histories,
        "machine": common.machine_info(),
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "# Fault explorer run",
        "",
        f"`{result['command']}`: {result['histories']} histories in {result['wall_s']:.0f} s, "
        f"{len(result['violations'])} violation(s).",
        "",
        "| fault kind | injected | found nothing to break |",
        "| --- | --- | --- |",
        *(
            f"| {kind} | {result['faults_injected'].get(kind, 0)} | {result['found_nothing'].get(kind, 0)} |"
            for kind in sorted({*result["faults_injected"], *result["found_nothing"]})
        ),
        *(f"| {kind} | {why} | |" for kind, why in result["kinds_off"].items()),
        "",
        "## Violations",
        "",
    ]
    lines += [f"- seed {v['seed']}: {v['violation']} (`{v['replay']}`)" for v in result["violations"]] or ["none"]
    lines += ["", "## Histories", ""]
    for history in result["details"]:
        lines += [f"### seed {history['seed']} ({history['seconds']:.0f} s)", "", "```", *history["events"], "```", ""]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.chaos", description=__doc__)
    p.add_argument("--histories", type=int, default=1, help="how many seeded histories to run")
    p.add_argument("--seed", type=int, default=0, help="the seed the histories' seeds are drawn from")
    p.add_argument("--replay", type=int, help="run the one history of this seed (a violation's seed)")
    p.add_argument("--kinds", help="only these fault kinds, comma-separated (default: every kind that is on)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where chaos.json and chaos.md go")
    p.add_argument("--keep", action="store_true", help="keep each history's folder (experiment, driver logs)")
    args = p.parse_args(argv)
    # A stop (Ctrl-C, SIGTERM, also when started in the background) ends the running history's
    # drivers and their Ray, and unmounts its tmpfs, on the way out.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda number, frame: sys.exit(128 + number))
    kinds = args.kinds.split(",") if args.kinds else None
    unknown = sorted(set(kinds or []) - set(faults.KINDS))
    if unknown:
        p.error(f"--kinds: unknown {unknown}; known: {', '.join(faults.KINDS)}")
    rng = random.Random(args.seed)
    seeds = [args.replay] if args.replay is not None else [rng.randrange(10**6) for _ in range(args.histories)]
    command = "python -m benchmarks.chaos " + " ".join(argv if argv is not None else sys.argv[1:])
    args.out.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="chaos-", dir=args.out if args.keep else None))
    began, histories = time.monotonic(), list[dict[str, Any]]()
    result = report(histories, command, 0.0)
    try:
        for seed in seeds:
            history = run_history(seed, workdir, kinds)
            histories.append(history)
            if history["violations"] and not args.keep:
                _keep_logs(workdir / f"history-{seed}", args.out / f"history-{seed}-logs")
            print(f"seed {seed}: {history['injected']} {history['seconds']:.0f} s, violations: {history['violations']}")
            result = report(histories, command, time.monotonic() - began)
            common.write_json(args.out / "chaos.json", result)
            (args.out / "chaos.md").write_text(markdown(result))
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"{len(histories)} histories, {len(result['violations'])} violation(s); report in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
