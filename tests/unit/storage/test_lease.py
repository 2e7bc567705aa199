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
from tunekit.storage import lease as lease_module
from tunekit.storage.lease import DriverLease

HOLD = """
import sys, time
from pathlib import Path
from tunekit.storage.lease import DriverLease
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
    lease = DriverLease(tmp_path, "resume", stale_s=0.8)
    began = time.monotonic()
    lease.acquire()  # the heartbeat never moves: stale 0.8 s later
    try:
        assert 0.5 < time.monotonic() - began < 3.0
        assert lease.took_over is not None and lease.took_over.host == "node-b"
    finally:
        lease.release()


def test_another_host_s_moving_heartbeat_is_a_live_driver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lease_module, "BEAT_S", 0.4)  # the taker looks every 0.2 s, not every second
    _lease_of_another_host(tmp_path, time.time())
    stop = threading.Event()

    def beating() -> None:
        while not stop.wait(0.3):
            _lease_of_another_host(tmp_path, time.time())

    thread = threading.Thread(target=beating)
    thread.start()
    try:
        with pytest.raises(LeaseHeldError, match="pid 4242 on node-b"):
            DriverLease(tmp_path, "resume", stale_s=30).acquire()
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
        assert lease.lost is not None and getattr(lease.lost.holder, "host", None) == "node-b"
    finally:
        lease.release()
    assert (tmp_path / "driver.lease").exists()  # the new holder's lease stays


def test_the_same_process_shares_its_lease(tmp_path: Path) -> None:
    with DriverLease(tmp_path, "resume"), DriverLease(tmp_path, "sync"):
        assert (tmp_path / "driver.lease").exists()
    assert not (tmp_path / "driver.lease").exists()


# --------------------------------------------------- liveness never trusts another host's clock


def test_a_live_holder_whose_clock_runs_minutes_behind_keeps_its_lease(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its heartbeats say "five minutes ago" by this host's clock, but they move: it lives.
    monkeypatch.setattr(lease_module, "BEAT_S", 0.4)  # the taker looks every 0.2 s, not every second
    skew = -300.0
    _lease_of_another_host(tmp_path, time.time() + skew)
    stop = threading.Event()

    def beating() -> None:
        while not stop.wait(0.3):
            _lease_of_another_host(tmp_path, time.time() + skew)

    thread = threading.Thread(target=beating)
    thread.start()
    try:
        began = time.monotonic()
        with pytest.raises(LeaseHeldError, match="pid 4242 on node-b"):
            DriverLease(tmp_path, "resume", stale_s=20).acquire()
        assert time.monotonic() - began < 3.0
    finally:
        stop.set()
        thread.join()


@pytest.mark.timeout(30)
def test_a_dead_holder_whose_clock_ran_minutes_ahead_is_taken_over_in_the_stale_window(tmp_path: Path) -> None:
    # Its last heartbeat says "in five minutes" by this host's clock; the storage wrote it 30 s ago.
    _lease_of_another_host(tmp_path, time.time() + 300)
    written = time.time() - 30
    os.utime(tmp_path / "driver.lease", (written, written))
    lease = DriverLease(tmp_path, "resume", stale_s=1)
    began = time.monotonic()
    lease.acquire()
    try:
        assert time.monotonic() - began < 4.0  # the stale window watched, not 300 s more
        assert lease.took_over is not None and lease.took_over.host == "node-b"
    finally:
        lease.release()


# ----------------------------------------------------------------------------- fencing

# FENCE_S cut to 0.5 s (3 s in the product) so the test's pause past it is short.
WRITER = """
import sys, time
from pathlib import Path
from tunekit.storage import lease as lease_module
from tunekit.driver.signals import exit_when_lost
from tunekit.storage.lease import DriverLease
from tunekit.storage.store import write_text
lease_module.FENCE_S = 0.5
experiment = Path(sys.argv[1])
lease = DriverLease(experiment, "run")
lease.acquire()
exit_when_lost(lease)
print("held", flush=True)
for count in range(100000):
    write_text(experiment / "records.txt", str(count))
    time.sleep(0.05)
"""


def _writer_process(experiment: Path) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(experiment)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert process.stdout is not None and process.stdout.readline().strip() == "held"
    return process


@pytest.mark.parametrize("taken", ["by another driver", "by removing it"])
def test_a_paused_driver_that_lost_its_lease_writes_nothing_more_and_exits_with_its_status(
    tmp_path: Path, taken: str
) -> None:
    writer = _writer_process(tmp_path)
    try:
        while not (tmp_path / "records.txt").exists():
            time.sleep(0.05)
        os.kill(writer.pid, signal.SIGSTOP)
        time.sleep(1.0)  # paused past FENCE_S: it must confirm its lease before its next write
        if taken == "by another driver":
            _lease_of_another_host(tmp_path, time.time())
        else:
            (tmp_path / "driver.lease").unlink()
        records = (tmp_path / "records.txt").read_text()
        os.kill(writer.pid, signal.SIGCONT)
        _, stderr = writer.communicate(timeout=20)
    finally:
        writer.kill()
    assert writer.returncode == 3, stderr
    # Nothing after it woke but the one write a pause may catch between its check and the write
    # (the window the faults page states), never the writes of the loop going on.
    assert int((tmp_path / "records.txt").read_text()) in (int(records), int(records) + 1)
    who = (
        "`tunekit run` (pid 4242 on node-b) holds it since"
        if taken == "by another driver"
        else "its lease file was removed"
    )
    assert stderr.strip().startswith(f"tunekit: error: {tmp_path}: this driver lost the experiment's lease: {who}")
    assert stderr.strip().endswith("it stopped writing and leaves its trials to the driver that holds it")
    assert len(stderr.strip().splitlines()) == 1, stderr


def test_a_storage_error_while_renewing_is_no_verdict(tmp_path: Path) -> None:
    lease = DriverLease(tmp_path, "run")
    lease.acquire()
    try:
        held = (tmp_path / "driver.lease").read_text()
        (tmp_path / "driver.lease").unlink()
        (tmp_path / "driver.lease").mkdir()  # every read and write of it fails now
        lease.beat()
        assert lease.lost is None
        (tmp_path / "driver.lease").rmdir()
        (tmp_path / "driver.lease").write_text(held)  # the storage answers again, the lease still ours
        lease.beat()
        assert lease.lost is None
        assert json.loads((tmp_path / "driver.lease").read_text())["beat"] > json.loads(held)["beat"]
    finally:
        lease.release()


def test_writes_wait_for_a_storage_that_cannot_confirm_the_lease_then_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tunekit.errors import StorageError
    from tunekit.storage import lease as lease_module
    from tunekit.storage.store import write_text

    monkeypatch.setattr(lease_module, "FENCE_S", 0.0)  # every write confirms the lease first
    lease = DriverLease(tmp_path, "run", stale_s=0.3)
    lease.outage_s = 0.6
    lease.acquire()
    try:
        (tmp_path / "driver.lease").unlink()
        (tmp_path / "driver.lease").mkdir()  # the storage cannot confirm it
        write_text(tmp_path / "early.txt", "x")  # within the stale window of the last confirmation: goes on
        time.sleep(0.4)
        began = time.monotonic()
        with pytest.raises(StorageError, match=r"the storage has not confirmed this driver.s lease for 0\.6 s"):
            write_text(tmp_path / "records.txt", "x")
        assert 0.3 < time.monotonic() - began < 3.0
        assert not (tmp_path / "records.txt").exists()
    finally:
        (tmp_path / "driver.lease").rmdir()
        lease.release()
