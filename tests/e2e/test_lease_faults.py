"""The lease against faults no unit test can make: other hosts (``unshare --uts``), skewed clocks
(Debian's ``faketime``), and two drivers racing on a real S3 API (moto's server on 127.0.0.1).
No Ray: each driver is a Python process taking the lease the way ``run`` and ``resume`` do."""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from tunekit.testing.servers import S3Server

# A driver on another host (its own UTS namespace, hostname given) whose clock is skewed by
# faketime: takes the lease, says what happened, holds it a moment, and releases it.
TAKE = """
import sys, time
from tunekit.errors import LeaseHeldError
from tunekit.storage.lease import DriverLease
began = time.monotonic()
lease = DriverLease(sys.argv[1], "resume")
try:
    lease.acquire()
except LeaseHeldError as error:
    print(f"refused after {time.monotonic() - began:.1f} s: {error}", flush=True)
    sys.exit(1)
print(f"took after {time.monotonic() - began:.1f} s from {lease.took_over and lease.took_over.host}", flush=True)
lease.release()
"""

HOLD = """
import sys, time
from tunekit.storage.lease import DriverLease
lease = DriverLease(sys.argv[1], "run")
lease.acquire()
print("held", flush=True)
time.sleep(120)
"""


def _on_another_host(hostname: str, skew: str, code: str, *args: str) -> list[str]:
    """A Python command run as ``hostname`` with its clock ``skew`` away (``+5m``, ``-5m``)."""
    python = " ".join([sys.executable, "-c", _quoted(code), *map(_quoted, args)])
    inner = f"hostname {hostname} && exec faketime -f {skew} {python}"
    return ["unshare", "--uts", "sh", "-c", inner]


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


@pytest.fixture(scope="module", autouse=True)
def hosts_and_clocks() -> None:
    for tool in ("unshare", "faketime"):
        assert shutil.which(tool), f"{tool} is missing: .ci/bootstrap --test installs it"
    probe = subprocess.run(["unshare", "--uts", "true"], capture_output=True, text=True)
    assert probe.returncode == 0, f"unshare --uts needs root here: {probe.stderr}"


def _holder(experiment: Path) -> subprocess.Popen[str]:
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(experiment)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


def test_a_host_whose_clock_runs_five_minutes_ahead_cannot_take_a_live_lease(tmp_path: Path) -> None:
    holder = _holder(tmp_path)
    try:
        taker = subprocess.run(
            _on_another_host("tk-ahead", "+5m", TAKE, str(tmp_path)), capture_output=True, text=True, timeout=60
        )
    finally:
        holder.kill()
        holder.wait()
    assert taker.returncode == 1, taker.stdout + taker.stderr
    assert "another driver is writing this experiment: `tunekit run` (pid" in taker.stdout
    assert float(taker.stdout.split("refused after ")[1].split(" s")[0]) < 5.0  # its heartbeat moved


def test_a_host_whose_clock_runs_five_minutes_behind_takes_a_dead_lease_in_the_stale_window(tmp_path: Path) -> None:
    holder = _holder(tmp_path)
    holder.send_signal(signal.SIGKILL)  # a driver killed on its host: only its heartbeat tells, from afar
    holder.wait()
    env = {**os.environ, "TUNEKIT_LEASE_STALE_S": "4"}
    taker = subprocess.run(
        _on_another_host("tk-behind", "-5m", TAKE, str(tmp_path)), capture_output=True, text=True, timeout=60, env=env
    )
    assert taker.returncode == 0, taker.stdout + taker.stderr
    took_s = float(taker.stdout.split("took after ")[1].split(" s")[0])
    assert took_s < 8.0, taker.stdout  # the stale window (4 s) watched, not 300 s more
    assert not (tmp_path / "driver.lease").exists()


# --------------------------------------------------------------------------- a bucket


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    server = S3Server(tmp_path_factory.mktemp("moto")).start()
    server.make_bucket("leases")
    yield server
    server.stop()


ROUNDS = 20


def _racer(seed: int, start: Any, decided: Any, out: Any) -> None:
    """One of two drivers that race ``ROUNDS`` times, each time on a new experiment, each start
    a seeded moment (within half a second) after both are ready: the same second."""
    from tunekit.errors import LeaseHeldError
    from tunekit.storage.lease import DriverLease

    rng = random.Random(seed)
    for attempt in range(ROUNDS):
        lease = DriverLease(f"s3://leases/exp-{attempt}", "run")
        start.wait()
        time.sleep(rng.uniform(0.0, 0.5))
        try:
            lease.acquire()
            won = True
        except LeaseHeldError:
            won = False
        out.put((attempt, won))
        decided.wait()  # the winner holds it until the other has tried
        if won:
            lease.release()


def test_of_two_drivers_starting_in_the_same_second_on_a_bucket_exactly_one_proceeds(
    s3: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in s3.env.items():
        monkeypatch.setenv(name, value)
    context = multiprocessing.get_context("fork")
    start, decided, out = context.Barrier(2), context.Barrier(2), context.Queue()
    drivers = [context.Process(target=_racer, args=(seed, start, decided, out)) for seed in (49, 50)]
    for driver in drivers:
        driver.start()
    results = [out.get(timeout=60) for _ in range(2 * ROUNDS)]
    for driver in drivers:
        driver.join(timeout=60)
    winners = [sum(won for attempt, won in results if attempt == round_) for round_ in range(ROUNDS)]
    assert winners == [1] * ROUNDS


def test_a_bucket_lease_replaced_between_a_read_and_a_renewal_is_never_overwritten(
    s3: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tunekit.storage.lease import DriverLease
    from tunekit.storage.lease_files import S3LeaseObject

    for name, value in s3.env.items():
        monkeypatch.setenv(name, value)
    lease = DriverLease("s3://leases/taken", "run")
    lease.acquire()
    client = boto3.client("s3")
    try:
        assert isinstance(lease.file, S3LeaseObject)
        ours = lease.file.read()  # the heartbeat has read it as ours ...
        assert ours is not None
        theirs = json.dumps({**json.loads(ours), "token": "theirs", "host": "h2"})
        client.put_object(Bucket="leases", Key="taken/driver.lease", Body=theirs.encode())  # ... a taker replaces it
        assert lease.file.renew(ours) is False  # ... and the renewal does not write over it (If-Match)
        held = client.get_object(Bucket="leases", Key="taken/driver.lease")["Body"].read().decode()
        assert json.loads(held)["token"] == "theirs"
        lease.beat()
        assert lease.lost is not None and getattr(lease.lost.holder, "host", None) == "h2"
    finally:
        lease.release()
    assert "theirs" in client.get_object(Bucket="leases", Key="taken/driver.lease")["Body"].read().decode()
