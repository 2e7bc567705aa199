"""A real two-node Ray cluster on this machine: a head and a second raylet, both on loopback.

Ray rewrites 127.0.0.1 to the machine's outward address, so the nodes use 127.0.0.2
(still loopback). Token authentication stays on: the second node and the driver read
the token the head wrote.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

import tunekit

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
DEFAULT_SPEC = REPO / "search_spaces" / "digits_mlp.yaml"
NODE_IP = "127.0.0.2"
CURRENT_CLUSTER_FILE = Path("/tmp/ray/ray_current_cluster")
RAY = str(Path(sys.executable).parent / "ray")  # the ray CLI of the environment running the tests


def _restore(path: Path, text: str | None) -> None:
    if text is None:
        path.unlink(missing_ok=True)
    else:
        path.write_text(text)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((NODE_IP, 0))
        return int(sock.getsockname()[1])


def _start_node(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [RAY, "start", "--block", "--node-ip-address", NODE_IP, *args],
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _stop(process: subprocess.Popen[bytes], marker: str) -> None:
    """Stops a `ray start --block` node and every process it started, by pid."""
    members = {p for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or [])}
    with contextlib.suppress(psutil.NoSuchProcess):
        members |= set(psutil.Process(process.pid).children(recursive=True))
    os.killpg(process.pid, signal.SIGTERM)
    # Ray's node drains for up to 15 s on SIGTERM; whatever is still up after 3 s is killed.
    _, alive = psutil.wait_procs([*members, psutil.Process(process.pid)], timeout=3)
    for leftover in alive:
        leftover.kill()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=10)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    port = _free_port()
    logs = tmp_path_factory.mktemp("cluster-logs")
    # `ray start --head` records itself as the machine's default cluster; put back what was there.
    previous_cluster = CURRENT_CLUSTER_FILE.read_text() if CURRENT_CLUSTER_FILE.exists() else None
    # The cluster's own token: ~/.ray/auth_token is shared by every Ray started on the
    # machine, and another start can rewrite it between our head's start and our driver's.
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    head = _start_node(
        [
            "--head",
            "--port",
            str(port),
            "--num-cpus",
            "1",
            "--include-dashboard",
            "false",
            "--resources",
            '{"head_node": 1}',
        ],
        env,
        logs / "head.log",
    )
    address = f"{NODE_IP}:{port}"
    worker = None
    try:
        _wait_for_nodes(address, 1, env)
        worker = _start_node(
            ["--address", address, "--num-cpus", "1", "--resources", '{"node2": 1}'], env, logs / "node2.log"
        )
        _wait_for_nodes(address, 2, env)
        yield address, env["RAY_AUTH_TOKEN"]
    finally:
        if worker is not None:
            _stop(worker, f"--gcs-address={address}")
        _stop(head, f"{NODE_IP}:{port}")
        _restore(CURRENT_CLUSTER_FILE, previous_cluster)


def _wait_for_nodes(address: str, count: int, env: dict[str, str]) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        status = subprocess.run([RAY, "status", "--address", address], env=env, capture_output=True, text=True)
        if status.returncode == 0 and status.stdout.count("node_") >= count:
            return
        time.sleep(1)
    raise AssertionError(f"cluster at {address} did not reach {count} nodes:\n{status.stdout}\n{status.stderr}")


def test_trials_run_on_both_nodes(cluster: tuple[str, str], tmp_path: Path) -> None:
    address, token = cluster
    # A driver of its own, as a user would start it: Ray reads RAY_AUTH_MODE when it is
    # first imported, so this (already Ray-importing) test process cannot switch it on.
    command = [
        sys.executable,
        "-m",
        "tunekit.cli",
        "run",
        str(DEFAULT_SPEC),
        "--address",
        address,
        "--storage",
        str(tmp_path),
        "--name",
        "two-nodes",
        "--set",
        "budget.num_samples=4",
        "--set",
        "budget.max_epochs=2",
        "--set",
        "scheduler.type=fifo",
        "--set",
        "tracking.enabled=false",
    ]
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
    driver = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert driver.returncode == 0, driver.stderr[-3000:]

    results = tunekit.load(tmp_path / "two-nodes")
    assert len(results.trials) == 4
    assert (results.trials["status"] == "completed").all()
    nodes = set(results.trials["node_id"])
    assert len(nodes) == 2, f"trials ran on {nodes}"
