"""Helpers for tests and benchmarks that need real servers (started on 127.0.0.1, stopped by
pid) or a real browser (Debian's headless chromium)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

MLFLOW = Path(sys.executable).with_name("mlflow")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def chromium(url: str, workdir: Path, *flags: str) -> str:
    """Loads ``url`` in headless Chromium, lets its scripts and requests run, returns stdout."""
    profile = workdir / "chromium-profile"
    command = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        "--window-size=1400,1000",
        "--virtual-time-budget=20000",
        *flags,
        url,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, check=False, cwd=workdir)
    return done.stdout


def page_text(url: str, workdir: Path, expect: str, attempts: int = 3) -> str:
    """The rendered page as plain text; tries again while ``expect`` has not rendered yet."""
    text = ""
    for _ in range(attempts):
        dom = chromium(url, workdir, "--dump-dom")
        dom = re.sub(r"<(style|script)\b.*?</\1>", " ", dom, flags=re.S)
        text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dom))
        if re.search(expect, text):
            return text
        time.sleep(2)
    return text


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class MlflowServer:
    """A real ``mlflow server`` on 127.0.0.1: SQLite backend, local artifact store."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.log = root / "server.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 120.0) -> MlflowServer:
        self.root.mkdir(parents=True, exist_ok=True)
        command = [
            str(MLFLOW),
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--workers",
            "1",
            "--backend-store-uri",
            f"sqlite:///{self.root / 'mlflow.db'}",
            "--artifacts-destination",
            str(self.root / "artifacts"),
        ]
        with self.log.open("wb") as log:
            # Own session: stopping it by its id also ends any worker it started.
            # No background job runner (huey consumers): tunekit needs none of MLflow's GenAI jobs.
            env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, cwd=self.root, env=env, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"mlflow server exited: {self.log.read_text()[-2000:]}")
            if self.answers():
                return self
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"mlflow server did not answer in {timeout:.0f} s: {self.log.read_text()[-2000:]}")

    def answers(self) -> bool:
        import requests

        try:
            return requests.get(f"{self.uri}/health", timeout=2).ok
        except requests.RequestException:
            return False

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=20)
