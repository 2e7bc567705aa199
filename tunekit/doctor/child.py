"""The doctor's children: ``python -m tunekit.doctor.probes KIND ARGS...`` with a deadline.

A child prints one line, ``MARK`` followed by a JSON object (``{"error": ...}`` on
failure). It runs in its own process group and is killed with that group, so a hanging
``ray.init`` or TensorFlow import (and whatever it started) never outlives the doctor.
Its stderr is read as it comes: a line that already tells the answer (``ray.init`` logs
"InvalidAuthToken" within a second, then retries for minutes) ends the child at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

MARK = "TUNEKIT_DOCTOR_RESULT "


# Reads one stderr line of a child; returns the child's answer (an error) when the line tells it.
EarlyAnswer = Callable[[str], str | None]


def probe(
    kind: str,
    args: Sequence[str],
    timeout_s: float,
    env: dict[str, str] | None = None,
    early_answer: EarlyAnswer | None = None,
) -> Child:
    """Starts one of ``tunekit.doctor.probes`` in a child; its answer is read later."""
    return Child(["-m", "tunekit.doctor.probes", kind, *args], timeout_s, env, early_answer)


class Child:
    """A Python child in its own process group, with a deadline; killed with its group."""

    def __init__(
        self,
        python_args: Sequence[str],
        timeout_s: float,
        env: dict[str, str] | None = None,
        early_answer: EarlyAnswer | None = None,
    ) -> None:
        self.timeout_s = timeout_s
        self.deadline = time.monotonic() + timeout_s
        self._early_answer = early_answer
        self._early: str | None = None
        self._answered = threading.Event()
        self._stderr: list[str] = []
        self._stdout: list[str] = []
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
        self._readers = [
            threading.Thread(target=self._read, args=(self.process.stdout, self._stdout, False), daemon=True),
            threading.Thread(target=self._read, args=(self.process.stderr, self._stderr, True), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    @property
    def stderr(self) -> str:
        """What the child wrote to stderr so far (Ray's own log lines, for a log file)."""
        return "".join(self._stderr)

    def result(self) -> dict[str, Any]:
        """The child's answer, waiting until the deadline; ``{"error": ...}`` when it has none."""
        if self._result is not None:
            return self._result
        while self.process.poll() is None and not self._answered.is_set():
            left = self.deadline - time.monotonic()
            if left <= 0:
                self.kill()
                self._result = {"error": f"did not answer in {self.timeout_s:g} s"}
                return self._result
            self._answered.wait(min(left, 0.2))
        if self._early is not None:
            self.kill()
            self._result = {"error": self._early}
            return self._result
        self._join_readers()
        for line in reversed(self._stdout):
            if line.startswith(MARK):
                self._result = dict(json.loads(line[len(MARK) :]))
                return self._result
        reason = last_line(self.stderr) or f"exit status {self.process.returncode}"
        self._result = {"error": f"the check crashed ({reason})"}
        return self._result

    def _read(self, stream: Any, lines: list[str], watch: bool) -> None:
        for line in stream:
            lines.append(line)
            if watch and self._early_answer is not None and self._early is None:
                self._early = self._early_answer(line)
                if self._early is not None:
                    self._answered.set()

    def _join_readers(self) -> None:
        for reader in self._readers:
            reader.join(timeout=5)

    def kill(self) -> None:
        """Kills the child's whole process group (a no-op once it has exited)."""
        if self.process.poll() is None:
            # Gone already, or (PermissionError) its group was reused by someone else's.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
        # The kernel is slow to reap.
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)
        self._join_readers()


def last_line(text: str) -> str:
    """The last non-blank line of ``text``, cut at 300 characters."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""
