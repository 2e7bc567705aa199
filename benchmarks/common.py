"""Shared plumbing for the benchmarks: modes, child processes, figures, machine facts.

Every benchmark module exposes ``main(argv)`` taking ``--smoke | --quick | --full`` and
``--out DIR``, writes ``DIR/<name>.json`` and returns 0. Heavy imports (Ray, TensorFlow)
happen only in child processes, so one side of a comparison never shares a Ray session,
a TensorFlow runtime or a warm cache with the other.

The JSON every module here writes has the same shape, so the runner can print it::

    {"benchmark": str, "mode": str, "title": str,
     "figures": [{"name", "value", "unit", "target", "met", "note"}, ...],
     "ratios": [str, ...],           # side-by-side comparisons, one line each
     "definitions": {term: text},    # what each measured quantity means
     "setup": {key: value},          # data, model, epochs, budgets: the scaling
     "notes": [str, ...],
     "details": {...},               # raw per-side numbers behind the figures
     "elapsed_s": float, "load_before": [..], "load_after": [..]}
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "benchmarks" / "out"
DIGITS_SPEC = REPO / "search_spaces" / "digits_mlp.yaml"
MODES = ("smoke", "quick", "full")

# Versions recorded with every benchmark: tunekit's stack (tunekit.environment.PACKAGES,
# the list the tracker and the doctor use) and the baselines and tools benchmarks also run.
BENCHMARK_PACKAGES = ("keras-tuner", "scikit-learn", "pandas", "psutil")


# ------------------------------------------------------------------------ arguments


def parser(name: str, description: str) -> argparse.ArgumentParser:
    """An argument parser with the flags every benchmark takes."""
    p = argparse.ArgumentParser(prog=f"python -m benchmarks.{name}", description=description)
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "--smoke",
        dest="mode",
        action="store_const",
        const="smoke",
        help="tiny run that only checks the benchmark works (tests use it)",
    )
    group.add_argument(
        "--quick", dest="mode", action="store_const", const="quick", help="a few minutes on 2 cores (default)"
    )
    group.add_argument("--full", dest="mode", action="store_const", const="full", help="the full-size benchmark")
    p.set_defaults(mode="quick")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="directory for the JSON result")
    p.add_argument("--keep", action="store_true", help="keep the work directory (experiment dirs, logs)")
    return p


# ------------------------------------------------------------------- child processes


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a child process: the repository importable, a private local Ray.

    ``RAY_ADDRESS=local`` makes ``ray.init()`` start its own local instance instead of
    joining a cluster some other process started with ``ray start`` on this machine.
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env["RAY_ADDRESS"] = "local"
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.update(extra or {})
    return env


class ChildFailed(RuntimeError):
    """A child process exited non-zero or wrote no result."""


def run_child(
    module: str,
    args: Sequence[str],
    workdir: Path,
    label: str,
    timeout: float | None = None,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Runs ``python -m module ARGS --result FILE`` in the repository root; returns FILE's JSON.

    stdout and stderr go to ``workdir/label.log``; on failure the log's tail is in the error.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    result_path = workdir / f"{label}.result.json"
    log_path = workdir / f"{label}.log"
    result_path.unlink(missing_ok=True)
    command = [sys.executable, "-m", module, *args, "--result", str(result_path)]
    with log_path.open("w") as log:
        try:
            code = subprocess.run(
                command,
                cwd=REPO,
                env=env or child_env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                check=False,
            ).returncode
        except subprocess.TimeoutExpired:
            code = -1
    if code != 0 or not result_path.is_file():
        tail = log_path.read_text(errors="replace")[-3000:]
        raise ChildFailed(f"{label}: child {' '.join(command[2:4])} exited {code}; log tail:\n{tail}")
    return json.loads(result_path.read_text())


def write_json(path: Path, payload: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(payload, indent=2, default=_json_default, allow_nan=False))
    partial.replace(path)


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, set | tuple):
        return list(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def clean(value: Any) -> Any:
    """Replaces NaN and infinities (which JSON cannot hold) with None, recursively."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    if hasattr(value, "item"):
        return clean(value.item())
    return value


class Workdir:
    """A scratch directory for one benchmark run; removed at the end unless kept."""

    def __init__(self, name: str, keep: bool) -> None:
        self.keep = keep
        self.path = Path(tempfile.mkdtemp(prefix=f"tunekit-bench-{name}-"))

    def __enter__(self) -> Path:
        return self.path

    def __exit__(self, *exc: object) -> None:
        if self.keep:
            print(f"  work directory kept: {self.path}", flush=True)
        else:
            shutil.rmtree(self.path, ignore_errors=True)


# ---------------------------------------------------------------------------- figures


def figure(
    name: str, value: Any, unit: str = "", target: str | None = None, met: bool | None = None, note: str = ""
) -> dict[str, Any]:
    return {"name": name, "value": clean(value), "unit": unit, "target": target, "met": met, "note": note}


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator == 0:
        return None
    return numerator / denominator


def median(values: Iterable[float | None]) -> float | None:
    """Median that treats None as +infinity (a target never reached), and returns None then."""
    items = sorted(math.inf if v is None else float(v) for v in values)
    if not items:
        return None
    middle = len(items) // 2
    value = items[middle] if len(items) % 2 else (items[middle - 1] + items[middle]) / 2
    return value if math.isfinite(value) else None


def fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value == 0:
            return "0"
        magnitude = abs(value)
        if magnitude >= 1000:
            return f"{value:,.0f}"
        if magnitude >= 100:
            return f"{value:.1f}"
        return f"{value:.{digits}g}"
    return str(value)


class Report:
    """One benchmark's run: notes when it began and how busy the machine was, then writes its JSON."""

    def __init__(self, name: str, title: str, mode: str, out_dir: Path) -> None:
        self.name, self.title, self.mode, self.out_dir = name, title, mode, out_dir
        self.started = time.time()
        self.load_before = os.getloadavg()

    def finish(
        self,
        figures: list[dict[str, Any]],
        ratios: list[str],
        definitions: dict[str, str],
        setup: dict[str, Any],
        notes: list[str],
        details: dict[str, Any],
    ) -> int:
        """Writes ``out_dir/<name>.json``, prints the summary and returns the exit status."""
        payload = clean(
            {
                "benchmark": self.name,
                "mode": self.mode,
                "title": self.title,
                "figures": figures,
                "ratios": ratios,
                "definitions": definitions,
                "setup": setup,
                "notes": notes,
                "details": details,
                "elapsed_s": round(time.time() - self.started, 1),
                "load_before": list(self.load_before),
                "load_after": list(os.getloadavg()),
                "date": _dt.datetime.now().isoformat(timespec="seconds"),
            }
        )
        write_json(self.out_dir / f"{self.name}.json", payload)
        print_summary(payload)
        return 0


def print_summary(payload: dict[str, Any], stream: Any = None) -> None:
    """Prints a benchmark's ratios and figures, one line each."""
    stream = stream or sys.stdout
    print(f"== {payload.get('benchmark')}: {payload.get('title', '')} [{payload.get('mode')}]", file=stream)
    for line in payload.get("ratios", []):
        print(f"  ratio: {line}", file=stream)
    for fig in payload.get("figures", []):
        target = f"  (target {fig['target']}: {'met' if fig['met'] else 'NOT met'})" if fig.get("target") else ""
        unit = f" {fig['unit']}" if fig.get("unit") else ""
        print(f"  {fig['name']}: {fmt(fig['value'])}{unit}{target}", file=stream)
    for note in payload.get("notes", []):
        print(f"  note: {note}", file=stream)
    stream.flush()


# ------------------------------------------------------------------ machine and stack


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "cpu_count": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu_model": _cpu_model(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    try:
        import psutil

        info["memory_gb"] = round(psutil.virtual_memory().total / 2**30, 1)
    except ImportError:  # pragma: no cover - psutil is a dependency
        info["memory_gb"] = None
    info["gpus"] = _gpus()
    return info


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _gpus() -> list[str]:
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        output = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in output.splitlines() if line.strip()]


def stack_versions() -> dict[str, str]:
    from tunekit.environment import PACKAGES, installed_versions

    names = (*PACKAGES, *BENCHMARK_PACKAGES)
    found = installed_versions(names)
    return {"python": found["python"], **{name: found.get(name, "not installed") for name in names}}


# ------------------------------------------------------------------ tunekit helpers


def digits_spec(**sections: Any) -> dict[str, Any]:
    """The shipped digits spec as a mapping, with sections deep-merged over it."""
    import yaml

    from tunekit.config.spec import merge_sections

    # The spec's own merge rules: a distribution given whole replaces the shipped one.
    return merge_sections(yaml.safe_load(DIGITS_SPEC.read_text()), sections)


def read_json_files(directory: Path, pattern: str) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(directory.rglob(pattern))]


def now() -> float:
    return time.time()
