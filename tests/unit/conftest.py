"""Shared helpers of the unit tests: no Ray, no TensorFlow, no MLflow, milliseconds each."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("tensorflow", "keras", "ray", "mlflow", "optuna", "matplotlib", "pandas")


def heavy_modules_after(code: str, *, cwd: Path = REPO) -> list[str]:
    """Runs ``code`` in a fresh interpreter; the heavy libraries it left imported."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=cwd, timeout=60)
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.fixture
def imported_after() -> Callable[..., list[str]]:
    return heavy_modules_after
