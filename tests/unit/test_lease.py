"""The driver's lease: one writer at a time, a dead driver's lease taken over, readers free."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tunekit.errors import LeaseHeldError
from tunekit.lease import DriverLease

HOLD = """
import sys, time
from pathlib import Path
from tunekit.lease import DriverLease
lease = DriverLease(Path(sys.argv[1]), "resume")
lease.acquire()
print("held", flush=True)
time.sleep(60)
"""


def _holder_process(experiment: Path) -> subprocess.Popen[str]:
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(experiment)], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline().strip() == "held"
    return process


def test_a_second_driver_is_refused_at_once_naming_the_holder(tmp_path: Path) -> None:
    holder = _holder_process(tmp_path)
    try:
        began = time.monotonic()
        with pytest.raises(LeaseHeldError) as refused:
            DriverLease(tmp_path, "run").acquire()
        assert time.monotonic() - began < 1.0
        text = str(refused.value)
        assert text.startswith(
            f"{tmp_path}: another driver is writing this experiment: `tunekit resume` (pid {holder.pid} on "
        )
        assert "one writer at a time, readers (`tunekit status`, `report`, `check`) need no lease" in text
    finally:
        holder.kill()
        holder.wait()


def test_a_killed_driver_s_lease_is_taken_over_at_once_on_its_host(tmp_path: Path) -> None:
    holder = _holder_process(tmp_path)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    lease = DriverLease(tmp_path, "resume")
    lease.acquire()
    try:
        assert lease.took_over is not None and lease.took_over.pid == holder.pid
        assert json.loads((tmp_path / "driver.lease").read_text())["pid"] == os.getpid()
    finally:
        lease.release()
    assert not (tmp_path / "driver.lease").exists()
    assert [p.name for p in tmp_path.iterdir()] == []  # nothing set aside left behind


def _lease_of_another_host(experiment: Path, beat: float) -> None:
    record = {
        "host": "node-b",
        "pid": 4242,
        "process_started": 1.0,
        "command": "run",
        "since": beat - 100,
        "beat": beat,
        "token": "theirs",
    }
    (experiment / "driver.lease").write_text(json.dumps(record))


def test_another_host_s_stale_heartbeat_is_taken_over(tmp_path: Path) -> None:
    _lease_of_another_host(tmp_path, time.time() - 0.5)
    lease = DriverLease(tmp_path, "resume")
    began = time.monotonic()
    lease.acquire(stale_s=1.5)  # the heartbeat never moves: stale a second later
    try:
        assert 0.5 < time.monotonic() - began < 3.0
        assert lease.took_over is not None and lease.took_over.host == "node-b"
    finally:
        lease.release()


def test_another_host_s_moving_heartbeat_is_a_live_driver(tmp_path: Path) -> None:
    _lease_of_another_host(tmp_path, time.time())
    stop = threading.Event()

    def beating() -> None:
        while not stop.wait(0.3):
            _lease_of_another_host(tmp_path, time.time())

    thread = threading.Thread(target=beating)
    thread.start()
    try:
        with pytest.raises(LeaseHeldError, match="pid 4242 on node-b"):
            DriverLease(tmp_path, "resume").acquire(stale_s=30)
    finally:
        stop.set()
        thread.join()


def test_the_holder_s_heartbeat_moves_and_a_lost_lease_is_noticed(tmp_path: Path) -> None:
    lease = DriverLease(tmp_path, "run")
    lease.acquire()
    try:
        first = json.loads((tmp_path / "driver.lease").read_text())["beat"]
        lease.beat()
        assert json.loads((tmp_path / "driver.lease").read_text())["beat"] > first
        _lease_of_another_host(tmp_path, time.time())  # taken over while this driver stalled
        lease.beat()
        assert lease.lost is not None and lease.lost.host == "node-b"
    finally:
        lease.release()
    assert (tmp_path / "driver.lease").exists()  # the new holder's lease stays


def test_the_same_process_shares_its_lease(tmp_path: Path) -> None:
    with DriverLease(tmp_path, "resume"), DriverLease(tmp_path, "sync"):
        assert (tmp_path / "driver.lease").exists()
    assert not (tmp_path / "driver.lease").exists()
