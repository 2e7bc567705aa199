"""The doctor's result type: one check, its status, what was seen and, for a problem, the fix."""

from __future__ import annotations

import os
from dataclasses import dataclass

OK = "ok"
PROBLEM = "PROBLEM"
SKIP = "skip"

INSTALL_FIX = "install the tested stack: pip install -c .ci/constraints.txt -e ."
# Environment variables whose values never appear in the doctor's output.
SECRET_ENV = (
    "RAY_AUTH_TOKEN",
    "MLFLOW_TRACKING_TOKEN",
    "MLFLOW_TRACKING_PASSWORD",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
)


@dataclass(frozen=True)
class Check:
    """The outcome of one check: a status, what was seen and, for a problem, the fix."""

    name: str
    status: str
    detail: str
    fix: str = ""

    @property
    def is_problem(self) -> bool:
        return self.status == PROBLEM

    def lines(self) -> list[str]:
        """The check's line and, for a problem, its ``fix:`` line."""
        text = [f"{self.status:<8} {self.name}: {self.detail}"]
        if self.is_problem:
            text.append(f"{'':<8} fix: {self.fix}")
        return text


def ok(name: str, detail: str) -> Check:
    return Check(name, OK, detail)


def problem(name: str, detail: str, fix: str) -> Check:
    return Check(name, PROBLEM, detail, fix)


def skip(name: str, detail: str) -> Check:
    return Check(name, SKIP, detail)


def hide_secrets(text: str) -> str:
    """``text`` with the value of every secret environment variable replaced by ``***``."""
    for key in SECRET_ENV:
        value = os.environ.get(key)
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return text
