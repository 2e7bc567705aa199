"""The one command: ``python -m benchmarks.run [--smoke|--quick|--full] [--only NAME] [--out DIR]``.

Runs the benchmarks one after the other, each in its own process (so none shares a Ray
session or a TensorFlow runtime with another), prints every comparison as ratios, and
writes ``DIR/results.json`` and ``DIR/results.md`` (default DIR: ``benchmarks/out``): the
figures, the machine (cores, memory, GPU), the stack's versions and the date.

Each benchmark module exposes ``main(argv)`` accepting ``--quick`` (and ``--full``,
``--smoke``) and ``--out DIR``, and writes a JSON of its figures into DIR; the runner
gives each its own ``DIR/<name>/`` and collects the JSON it finds there. With ``--only``,
entries of benchmarks not run this time are kept from an earlier ``results.json`` in DIR,
each with its own date.

Benchmarks are not tests: the exit status is non-zero only when a benchmark failed to run,
never because of a timing.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import common

# name -> what it compares; the order they run in.
BENCHMARKS: dict[str, str] = {
    "overhead": "tunekit vs plain Ray Tune: wall time and per-trial overhead",
    "memory": "resident memory of one reused worker across 30 trials",
    "grid": "tunekit TPE + ASHA vs the exhaustive 3x3x3 grid",
    "quality": "search quality vs KerasTuner Hyperband and random search + ASHA",
    "pipeline": "input pipeline (benchmarks/pipeline.py)",
    "logging_cost": "cost of MLflow tracking (benchmarks/logging_cost.py)",
    "tracking_cost": "MLflow tracking's cost in the default search: tracked against untracked, run after run",
    "cold_start": "launch to the first epoch: tunekit's critical path against KerasTuner's in-process first epoch",
    "warm": "a second tunekit.run in one process (warm Ray) vs the first",
    "warm_runtime": "tunekit run on the warm runtime (tunekit up): its first epoch from the command's launch",
    "eta": "tunekit plan --probe's predicted wall time against the actual: the default search and a CNN",
    "pbt": "PBT vs TPE + ASHA at equal compute (epochs) on the digits MLP",
    "pareto": "MO-TPE + MO-ASHA vs MO-TPE without pruning vs random + ASHA + filter (accuracy against size)",
    "scale": "driver scaling: 1,000 to 10,000 synthetic trials against Ray's and Optuna's floors",
    "failures": "failed trials TPE proposes when failures teach it vs plain FAIL (synthetic, no Ray)",
}
# Written by others; run when present.
EXTERNAL = ("pipeline", "logging_cost")
RESULTS_JSON = "results.json"
RESULTS_MD = "results.md"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.splitlines()[0])
    group = p.add_mutually_exclusive_group()
    for mode, text in (
        ("smoke", "tiny runs that only check each benchmark works"),
        ("quick", "a few minutes per benchmark on 2 cores (default)"),
        ("full", "full-size benchmarks"),
    ):
        group.add_argument(f"--{mode}", dest="mode", action="store_const", const=mode, help=text)
    p.set_defaults(mode="quick")
    p.add_argument(
        "--only",
        action="append",
        metavar="NAME",
        help=f"run only these (repeat or comma-separate): {', '.join(BENCHMARKS)}",
    )
    p.add_argument("--out", type=Path, default=common.DEFAULT_OUT, help="output directory (default benchmarks/out)")
    p.add_argument("--keep", action="store_true", help="keep each benchmark's work directory")
    args = p.parse_args(argv)

    names = list(BENCHMARKS)
    if args.only:
        wanted = [n.strip() for item in args.only for n in item.split(",") if n.strip()]
        unknown = [n for n in wanted if n not in BENCHMARKS]
        if unknown:
            p.error(f"--only: unknown benchmark {', '.join(unknown)}; valid names are {', '.join(BENCHMARKS)}")
        names = [n for n in BENCHMARKS if n in wanted]

    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    machine, stack = common.machine_info(), common.stack_versions()
    print(f"tunekit benchmarks ({args.mode}) on {_machine_line(machine)}", flush=True)
    entries: dict[str, Any] = {}
    for name in names:
        entries[name] = run_one(name, args.mode, out, args.keep)
    total = time.time() - started

    previous = _previous_entries(out / RESULTS_JSON)
    merged = {
        name: entries.get(name) or previous.get(name) for name in BENCHMARKS if name in entries or name in previous
    }
    results = {
        "date": _dt.datetime.now().isoformat(timespec="seconds"),
        "mode": args.mode,
        "command": "python -m benchmarks.run " + " ".join(argv if argv is not None else sys.argv[1:]),
        "elapsed_s": round(total, 1),
        "machine": machine,
        "stack": stack,
        "benchmarks": merged,
    }
    common.write_json(out / RESULTS_JSON, common.clean(results))
    (out / RESULTS_MD).write_text(render_markdown(results))
    print(f"\nall done in {total / 60:.1f} min; wrote {out / RESULTS_JSON} and {out / RESULTS_MD}", flush=True)
    failed = [n for n, e in entries.items() if e["status"] == "failed"]
    if failed:
        print(f"failed to run: {', '.join(failed)}", flush=True)
    return 1 if failed else 0


def run_one(name: str, mode: str, out: Path, keep: bool) -> dict[str, Any]:
    """Runs one benchmark's ``main(argv)`` in a child process and collects the JSON it writes."""
    source = common.REPO / "benchmarks" / f"{name}.py"
    entry: dict[str, Any] = {
        "name": name,
        "mode": mode,
        "description": BENCHMARKS[name],
        "date": _dt.datetime.now().isoformat(timespec="seconds"),
    }
    print(f"\n--- {name}: {BENCHMARKS[name]}", flush=True)
    if not source.is_file():
        entry.update(status="not available", reason=f"benchmarks/{name}.py does not exist")
        print(f"{name}: not available (benchmarks/{name}.py does not exist)", flush=True)
        return entry
    if mode == "smoke" and name in EXTERNAL and not _has_smoke_mode(source.read_text()):
        entry.update(status="skipped", reason=f"benchmarks/{name}.py has no --smoke mode")
        print(f"{name}: skipped (no --smoke mode)", flush=True)
        return entry
    bench_out = out / name
    bench_out.mkdir(parents=True, exist_ok=True)
    for stale in bench_out.glob("*.json"):
        stale.unlink()
    argv = [f"--{mode}", "--out", str(bench_out)] + (["--keep"] if keep and name not in EXTERNAL else [])
    command = [
        sys.executable,
        "-c",
        f"import sys; from benchmarks.{name} import main; sys.exit(main(sys.argv[1:]))",
        *argv,
    ]
    load_before = os.getloadavg()
    began = time.time()
    code = _stream(command, bench_out / "run.log")
    entry.update(
        elapsed_s=round(time.time() - began, 1),
        load_before=list(load_before),
        load_after=list(os.getloadavg()),
        exit_code=code,
    )
    payloads = {p.name: json.loads(p.read_text()) for p in sorted(bench_out.glob("*.json"))}
    if code != 0 or not payloads:
        entry.update(
            status="failed",
            reason=f"exit status {code}; see {bench_out / 'run.log'}" + ("" if payloads else "; it wrote no JSON"),
        )
        print(f"{name}: FAILED ({entry['reason']})", flush=True)
    else:
        entry["status"] = "ok"
    own = payloads.pop(f"{name}.json", None)
    if own is not None and "figures" in own:
        entry["result"] = own
    elif own is not None:
        payloads[f"{name}.json"] = own
    if payloads:
        entry["files"] = payloads
    if entry["status"] == "ok" and name in EXTERNAL:
        for line in external_lines(entry):
            print(f"  {line}", flush=True)
    return entry


def _has_smoke_mode(source: str) -> bool:
    """Whether a benchmark module takes --smoke (itself, or through common.parser)."""
    return "--smoke" in source or "common.parser(" in source


def _stream(command: list[str], log_path: Path) -> int:
    """Runs ``command`` in the repository root, echoing its output and keeping it in ``log_path``."""
    with (
        log_path.open("w") as log,
        subprocess.Popen(
            command,
            cwd=common.REPO,
            env=common.child_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
        ) as process,
    ):
        assert process.stdout is not None
        for line in process.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            log.write(line)
        return process.wait()


def _previous_entries(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text()).get("benchmarks") or {})
    except (OSError, ValueError):
        return {}


# ------------------------------------------------------------------------- rendering


def external_lines(entry: dict[str, Any]) -> list[str]:
    """Figures of a JSON not in this suite's shape: its scalar leaves, one 'path: value' each."""
    lines = []
    for file_name, payload in (entry.get("files") or {}).items():
        if isinstance(payload, dict) and isinstance(payload.get("figures"), list):
            lines += [
                f"{f.get('name')}: {common.fmt(f.get('value'))} {f.get('unit') or ''}".rstrip()
                for f in payload["figures"]
                if isinstance(f, dict)
            ]
            lines += [f"ratio: {r}" for r in payload.get("ratios", []) if isinstance(r, str)]
            continue
        for key, value in flatten(payload):
            lines.append(f"{file_name}:{key}: {common.fmt(value)}")
    return lines


def flatten(value: Any, prefix: str = "", depth: int = 0) -> list[tuple[str, Any]]:
    if isinstance(value, dict) and depth < 5:
        rows: list[tuple[str, Any]] = []
        for key, item in value.items():
            rows += flatten(item, f"{prefix}.{key}" if prefix else str(key), depth + 1)
        return rows
    if isinstance(value, list):
        if len(value) <= 8 and all(not isinstance(v, dict | list) for v in value):
            return [(prefix, ", ".join(common.fmt(v) for v in value))]
        return [(prefix, f"[{len(value)} items]")]
    if isinstance(value, dict):
        return [(prefix, "{...}")]
    return [(prefix, value)]


def _machine_line(machine: dict[str, Any]) -> str:
    gpus = ", ".join(machine.get("gpus") or []) or "no GPU"
    return (
        f"{machine.get('cpu_count')} cores ({machine.get('cpus_usable')} usable, {machine.get('cpu_model')}), "
        f"{machine.get('memory_gb')} GB memory, {gpus}; load average {machine.get('load_average')}"
    )


def _cell(value: Any) -> str:
    return common.fmt(value).replace("|", "\\|").replace("\n", " ")


def render_markdown(results: dict[str, Any]) -> str:
    machine, stack = results["machine"], results["stack"]
    lines = [
        "# tunekit benchmarks",
        "",
        f"- Date: {results['date']}",
        f"- Command: `{results['command'].strip()}` (mode: {results['mode']}, "
        f"{results['elapsed_s'] / 60:.1f} min in all)",
        f"- Machine: {_machine_line(machine)}",
        f"- Platform: {machine.get('platform')}, Python {machine.get('python')}",
        "- Stack: " + ", ".join(f"{k} {v}" for k, v in stack.items() if k != "python"),
        "",
        "Ratios are measured side by side in one run, on the same data, space and budget, one side after the "
        "other. These are benchmarks, not tests: nothing gates on the timings. The load average before and "
        "after each benchmark shows how busy the machine was (other processes may share the CPU).",
        "",
        "| benchmark | status | mode | date | time | load before -> after |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, entry in results["benchmarks"].items():
        load = ""
        if entry.get("load_before"):
            load = f"{entry['load_before'][0]:.1f} -> {entry['load_after'][0]:.1f}"
        took = f"{entry['elapsed_s']:.0f} s" if entry.get("elapsed_s") is not None else ""
        lines.append(
            f"| {name} | {entry['status']} | {entry.get('mode', '')} | {entry.get('date', '')} | {took} | {load} |"
        )
    for name, entry in results["benchmarks"].items():
        lines += ["", f"## {name}: {entry.get('description', '')}", ""]
        if entry["status"] != "ok":
            lines.append(f"**{entry['status']}**: {entry.get('reason', '')}")
            if entry["status"] != "failed":
                continue
        payload = entry.get("result")
        if payload:
            lines += _render_payload(payload)
        for file_name, other in (entry.get("files") or {}).items():
            lines += ["", f"`{file_name}`:", "", "| figure | value |", "| --- | --- |"]
            if isinstance(other, dict) and isinstance(other.get("figures"), list):
                lines += [
                    f"| {_cell(f.get('name'))} | {_cell(f.get('value'))} {f.get('unit') or ''} |"
                    for f in other["figures"]
                    if isinstance(f, dict)
                ]
            else:
                lines += [f"| {_cell(k)} | {_cell(v)} |" for k, v in flatten(other)]
    return "\n".join(lines) + "\n"


def _render_payload(payload: dict[str, Any]) -> list[str]:
    lines = [f"*{payload.get('title', '')}*", ""]
    if payload.get("ratios"):
        lines += ["Side by side:", ""] + [f"- {r}" for r in payload["ratios"]] + [""]
    lines += ["| figure | value | target | met |", "| --- | --- | --- | --- |"]
    for f in payload.get("figures", []):
        value = f"{_cell(f.get('value'))} {f.get('unit') or ''}".strip()
        met = "" if f.get("met") is None else ("yes" if f["met"] else "**no**")
        note = f" ({f['note']})" if f.get("note") else ""
        lines.append(
            f"| {_cell(f.get('name'))}{_cell(note) if note else ''} | {value} | "
            f"{_cell(f.get('target') or '')} | {met} |"
        )
    if payload.get("setup"):
        lines += ["", "Set-up:", ""]
        lines += [f"- {k}: {_setup_value(v)}" for k, v in payload["setup"].items()]
    if payload.get("definitions"):
        lines += ["", "Definitions:", ""]
        lines += [f"- *{k}*: {v}" for k, v in payload["definitions"].items()]
    if payload.get("notes"):
        lines += ["", "Notes:", ""] + [f"- {n}" for n in payload["notes"]]
    return lines


def _setup_value(value: Any) -> str:
    if isinstance(value, dict):
        return "; ".join(f"{k} = {_setup_value(v)}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(common.fmt(v) for v in value)
    return common.fmt(value)


if __name__ == "__main__":
    sys.exit(main())
