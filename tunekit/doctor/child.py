"""The doctor's children: ``python -m tunekit.doctor.probes KIND ARGS...`` with a deadline.

A child prints one line, ``MARK`` followed by a JSON object (``{"error": ...}`` on
failure). It runs in its own process group and is killed with that group, so a hanging
``ray.init`` or TensorFlow import (and whatever it started) never outlives the doctor.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

MARK = "TUNEKIT_DOCTOR_RESULT "


def probe(kind: str, args: Sequence[str], timeout_s: float, env: dict[str, str] | None = None) -> Child:
    """Starts one of ``tunekit.doctor.probes`` in a child; its answer is read later."""
    return Child(["-m", "tunekit.doctor.probes", kind, *args], timeout_s, env)


class Child:
    """A Python child in its own process group, with a deadline; killed with its group."""

    def __init__(self, python_args: Sequence[str], timeout_s: float, env: dict[str, str] | None = None) -> None:
        self.timeout_s = timeout_s
        self.deadline = time.monotonic() + timeout_s
        self.process = subprocess.Popen(
            [sys.executable, *python_args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )
        self._result: dict[str, Any] | None = None

    def result(self) -> dict[str, Any]:
        """The child's answer, waiting until the deadline; ``{"error": ...}`` when it has none."""
        if self._result is not None:
            return self._result
        try:
            left = max(0.1, self.deadline - time.monotonic())
            stdout, stderr = self.process.communicate(timeout=left)
        except subprocess.TimeoutExpired:
            self.kill()
            self._result = {"error": f"did not answer in {self.timeout_s:g} s"}
            return self._result
        for line in reversed(stdout.splitlines()):
            if line.startswith(MARK):
                self._result = dict(json.loads(line[len(MARK) :]))
                return self._result
        reason = last_line(stderr) or f"exit status {self.process.returncode}"
        self._result = {"error": f"the check crashed ({reason})"}
        return self._result

    def kill(self) -> None:
        """Kills the child's whole process group (a no-op once it has exited)."""
        if self.process.poll() is None:
            # Gone already, or (PermissionError) its group was reused by someone else's.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
        # The pipes are drained already (ValueError), or the kernel is slow to reap.
        with contextlib.suppress(subprocess.TimeoutExpired, ValueError):
            self.process.communicate(timeout=5)


def last_line(text: str) -> str:
    """The last non-blank line of ``text``, cut at 300 characters."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""
