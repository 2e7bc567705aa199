"""`tunekit up` and `tunekit down` around the runtime folder's lock, held by real processes (no Ray):
a second `up` while one starts waits and attaches, or fails as it does; `down` finds one that
does not answer yet by the pid its lock holds, and a lock nobody holds names nobody."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tunekit.errors import TunekitError
from tunekit.runtime import client
from tunekit.runtime.protocol import LOCK_FILE, RUNTIME_DIR_ENV, Channel

from .test_client import StandIn

# A runtime's process as the lock sees it: it holds the folder's lock and its pid is written there.
HOLDER = (
    "import fcntl, os, sys; lock = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600); "
    "fcntl.flock(lock, fcntl.LOCK_EX); os.write(lock, str(os.getpid()).encode()); "
    "print('held', flush=True); sys.stdin.read()"
)


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(RUNTIME_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(client, "UP_POLL_S", 0.01)
    return tmp_path


@pytest.fixture
def holder(folder: Path) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", HOLDER, str(folder / LOCK_FILE)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stdout.readline() == "held\n"
    yield process
    process.kill()
    process.wait()


def _ready(pid: int) -> Any:
    def answer(channel: Channel, request: dict[str, Any], fds: list[int]) -> None:
        assert request == {"op": "status"}
        channel.send({"op": "status", "pid": pid, "workers": 2, "ready": [101, 102]})

    return answer


def _up_in_a_thread(capsys: pytest.CaptureFixture[str]) -> tuple[threading.Thread, list[object]]:
    """``up`` called beside the test, once it said that it waits."""
    outcome: list[object] = []

    def call() -> None:
        try:
            outcome.append(client.up(2, 60.0))
        except TunekitError as error:
            outcome.append(error)

    thread = threading.Thread(target=call)
    thread.start()
    said = ""
    deadline = time.monotonic() + 10
    while "waiting" not in said and thread.is_alive() and time.monotonic() < deadline:
        said += capsys.readouterr().out
        time.sleep(0.005)
    assert said == "tunekit: a warm runtime is starting (another tunekit up); waiting until it is ready\n"
    return thread, outcome


def test_a_second_up_while_one_starts_waits_for_its_workers_and_attaches(
    folder: Path, holder: subprocess.Popen[str], capsys: pytest.CaptureFixture[str]
) -> None:
    thread, outcome = _up_in_a_thread(capsys)
    stand_in = StandIn(folder, _ready(holder.pid))  # the starting runtime answers, its workers ready
    try:
        thread.join(10)
    finally:
        stand_in.close()
    assert outcome == [f"tunekit: a warm runtime is up already (pid {holder.pid}); tunekit down stops it"]
    assert holder.poll() is None  # attached: nothing started, nothing stopped


def test_a_second_up_fails_as_the_one_it_waits_for_exits_while_starting(
    folder: Path, holder: subprocess.Popen[str], capsys: pytest.CaptureFixture[str]
) -> None:
    thread, outcome = _up_in_a_thread(capsys)
    holder.kill()
    holder.wait()
    thread.join(10)
    assert [str(error) for error in outcome] == [f"warm runtime: exited while starting; see {folder / 'runtime.log'}"]


def test_up_beside_a_runtime_that_answers_says_so_at_once(
    folder: Path, holder: subprocess.Popen[str], capsys: pytest.CaptureFixture[str]
) -> None:
    stand_in = StandIn(folder, _ready(holder.pid))
    try:
        assert client.up(2, 60.0) == f"tunekit: a warm runtime is up already (pid {holder.pid}); tunekit down stops it"
    finally:
        stand_in.close()
    assert capsys.readouterr().out == ""


def test_down_stops_a_runtime_not_answering_yet_by_its_locks_pid_and_then_finds_none(
    folder: Path, holder: subprocess.Popen[str]
) -> None:
    assert client.down() == f"tunekit: warm runtime stopped (pid {holder.pid})"
    assert holder.wait(5) == -signal.SIGTERM
    # The lock file still names it, but no process holds the lock: no pid to signal.
    assert (folder / LOCK_FILE).read_text() == str(holder.pid)
    assert client.down() == "tunekit: no warm runtime is running"


def test_down_without_a_runtime_folder_finds_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RUNTIME_DIR_ENV, str(tmp_path / "never-made"))
    assert client.down() == "tunekit: no warm runtime is running"
    assert os.listdir(tmp_path) == []
