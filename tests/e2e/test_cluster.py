"""A real two-node Ray cluster on this machine: a head and a second raylet, both on loopback.

Ray rewrites 127.0.0.1 to the machine's outward address, so the nodes use 127.0.0.2
(still loopback). Token authentication stays on: the second node and the driver get the
cluster's own token. Each node has its own temp dir (sessions, sockets, logs, and the
head's record of the cluster), so nothing is shared with other Ray instances on the
machine. The module's tests share the cluster; the node-loss test kills the second node
and runs last.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import optuna
import psutil
import pytest

import tunekit
from tunekit.layout import CLUSTER_FILE, DRIVER_LOG_FILE, RETRAIN_DIR, RETRAIN_FILE, TRACKING_FILE, TRIALS_FILE
from tunekit.search.plan import study_storage
from tunekit.storage.buckets import Bucket
from tunekit.testing.servers import S3Server, free_port

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
DEFAULT_SPEC = REPO / "search_spaces" / "digits_mlp.yaml"
SLOW_DIGITS = REPO / "tests" / "trainables" / "slow_digits.py"
NODE_IP = "127.0.0.2"
RAY = str(Path(sys.executable).parent / "ray")  # the ray CLI of the environment running the tests
QUIET = ["--set", "tracking.enabled=false", "--set", "scheduler.type=fifo"]


@dataclass
class Cluster:
    address: str
    token: str
    worker: subprocess.Popen[bytes]  # the second node's `ray start --block`
    ray_tmpdir: Path  # RAY_TMPDIR under which the head recorded itself (<it>/ray/ray_current_cluster)
    s3: S3Server  # the bucket store every node reaches with the usual AWS_* environment
    node_env: dict[str, str]  # a node's `ray start` environment

    def driver_env(self, **extra: str) -> dict[str, str]:
        """A driver's environment as a user's on this cluster: the token, no RAY_ADDRESS."""
        env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_TMPDIR")}
        return {**env, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token, **extra}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((NODE_IP, 0))
        return int(sock.getsockname()[1])


def _start_node(args: list[str], env: dict[str, str], log: Path, temp_dir: Path) -> subprocess.Popen[bytes]:
    # Fixed agent ports: with dynamic ones the raylet waits 15 s for the agents to write their
    # port files and aborts the node when they are late, as on two loaded cores they are.
    ports = [
        *("--dashboard-agent-grpc-port", str(_free_port())),
        *("--dashboard-agent-listen-port", str(_free_port())),
        *("--metrics-export-port", str(_free_port())),
        *("--runtime-env-agent-port", str(_free_port())),
    ]
    return subprocess.Popen(
        [RAY, "start", "--block", "--node-ip-address", NODE_IP, "--temp-dir", str(temp_dir), *ports, *args],
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _stop(process: subprocess.Popen[bytes], temp_dir: Path) -> None:
    """Stops a `ray start --block` node and every process it started, by pid.

    Its processes are the ones whose command line names its own temp dir, and its children.
    """
    members = {p for p in psutil.process_iter(["cmdline"]) if str(temp_dir) in " ".join(p.info["cmdline"] or [])}
    with contextlib.suppress(psutil.NoSuchProcess):
        leader = psutil.Process(process.pid)
        members |= {leader, *leader.children(recursive=True)}
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    # Ray's node drains for up to 15 s on SIGTERM; whatever is still up after 3 s is killed.
    _, alive = psutil.wait_procs(list(members), timeout=3)
    for leftover in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            leftover.kill()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=10)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # Every node gets the S3 server's endpoint and credentials, as a KubeRay pod gets them from a Secret.
    s3 = S3Server(tmp_path_factory.mktemp("moto")).start()
    s3.make_bucket("exps")
    port = _free_port()
    # Short paths: Ray's sockets live in the temp dir, and a Unix socket path has 107 characters.
    root = Path(tempfile.mkdtemp(prefix="tk-cluster-", dir="/tmp"))
    head_temp, worker_temp = root / "ray", root / "node2"
    # The cluster's own token: ~/.ray/auth_token is shared by every Ray started on the
    # machine, and another start can rewrite it between our head's start and our driver's.
    env = {**os.environ, **s3.env, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    env.pop("RAY_ADDRESS", None)
    env["RAY_raylet_start_wait_time_s"] = "120"  # Ray's own hint when a loaded machine registers a node late
    # The GCS declares a killed node dead after 5 failed health checks a second apart (a dead
    # raylet refuses at once; a slow one has Ray's 10 s to answer), not Ray's 15-30 s, so the
    # search's console can say the node left before the search ends.
    env.update({"RAY_health_check_period_ms": "1000", "RAY_health_check_failure_threshold": "5"})
    head_args = ["--head", "--port", str(port), "--num-cpus", "1", "--include-dashboard", "false"]
    address = f"{NODE_IP}:{port}"
    head = worker = None
    try:
        head = _start_until_up([*head_args, "--resources", '{"head_node": 1}'], env, root / "head.log", head_temp)
        worker_args = ["--address", address, "--num-cpus", "1", "--resources", '{"node2": 1}']
        worker = _start_until_up(worker_args, env, root / "node2.log", worker_temp)
        yield Cluster(address, env["RAY_AUTH_TOKEN"], worker, root, s3, env)
    finally:
        if worker is not None:
            _stop(worker, worker_temp)
        if head is not None:
            _stop(head, head_temp)
        s3.stop()
        shutil.rmtree(root, ignore_errors=True)


def _start_until_up(args: list[str], env: dict[str, str], log: Path, temp_dir: Path) -> subprocess.Popen[bytes]:
    """Starts a `ray start --block` node and waits for it to say it is up, trying up to 3 times.

    Ray gives a starting node 30 s to register, hard-coded; on two cores loaded by other
    work it sometimes needs more and gives up. Its own log tells when it is up (a worker
    node: registered with the head), not `ray status`, whose every call costs seconds of CPU.
    """
    for _attempt in range(3):
        process = _start_node(args, env, log, temp_dir)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None:
            if "Ray runtime started" in log.read_text(errors="replace"):
                return process
            time.sleep(0.5)
        _stop(process, temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)
    raise AssertionError(f"ray start did not come up in 3 tries:\n{log.read_text(errors='replace')[-3000:]}")


def _tunekit(*args: str, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """The command, as a user runs it: Ray reads RAY_AUTH_MODE when it is first imported, so
    this (already Ray-importing) test process cannot switch it on for itself."""
    command = [sys.executable, "-m", "tunekit.cli", *args]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def _assert_one_error_line(done: subprocess.CompletedProcess[str], seconds: float, expected: str) -> None:
    assert done.returncode == 1, done.stdout + done.stderr
    assert seconds < 35, f"took {seconds:.1f} s"
    assert done.stderr.splitlines() == [expected], done.stderr
    assert "Traceback" not in done.stdout + done.stderr


def test_nothing_listening_ends_in_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    storage = tmp_path / "store"
    began = time.monotonic()
    done = _tunekit(
        "run",
        str(DEFAULT_SPEC),
        "--address",
        address,
        "--storage",
        str(storage),
        "--connect-timeout",
        "5",
        *QUIET,
        env={k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"},
        timeout=120,
    )
    _assert_one_error_line(
        done,
        time.monotonic() - began,
        f"tunekit: error: ray cluster {address}: cannot connect (connection refused); fix: start the cluster "
        "(ray start --head on the head node) or fix --address / RAY_ADDRESS",
    )
    assert not storage.exists()  # not even the storage folder


def test_a_signal_while_joining_says_nothing_started_and_leaves_nothing(tmp_path: Path) -> None:
    storage = tmp_path / "store"
    with socket.socket() as silent:  # accepts connections, never answers: ray.init would retry for minutes
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        command = [sys.executable, "-m", "tunekit.cli", "run", str(DEFAULT_SPEC), "--address", address]
        driver = subprocess.Popen(
            [*command, "--storage", str(storage), *QUIET],
            cwd=REPO,
            env={k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        probe = None
        deadline = time.monotonic() + 60
        while probe is None and time.monotonic() < deadline:  # the bounded probe is joining
            time.sleep(0.2)
            children = psutil.Process(driver.pid).children()
            probe = next((c for c in children if "tunekit.doctor.probes" in " ".join(c.cmdline())), None)
        assert probe is not None
        time.sleep(1)
        driver.send_signal(signal.SIGTERM)
        _, err = driver.communicate(timeout=30)
    assert driver.returncode == 128 + signal.SIGTERM
    assert err.strip().splitlines() == [
        "tunekit: interrupted by SIGTERM during start-up; nothing started and nothing was kept"
    ]
    assert not storage.exists()
    psutil.wait_procs([probe], timeout=5)  # the probe ends with its parent
    assert not probe.is_running()


@pytest.mark.parametrize(
    ("token", "detail"),
    [
        (None, "the cluster wants its token, this machine sends none (RAY_AUTH_MODE here: unset)"),
        (
            "0" * 64,
            "the cluster refused this machine's token (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token)",
        ),
    ],
    ids=["missing", "wrong"],
)
def test_a_refused_token_ends_in_one_line_and_leaves_nothing(
    cluster: Cluster, tmp_path: Path, token: str | None, detail: str
) -> None:
    env = cluster.driver_env()
    for key in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        env.pop(key, None)
    if token is not None:
        env |= {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
    storage = tmp_path / "store"
    storage.mkdir()
    began = time.monotonic()
    done = _tunekit(
        "run",
        str(DEFAULT_SPEC),
        "--address",
        cluster.address,
        "--storage",
        str(storage),
        "--connect-timeout",
        "5",
        *QUIET,
        env=env,
        timeout=120,
    )
    _assert_one_error_line(
        done,
        time.monotonic() - began,
        f"tunekit: error: ray cluster {cluster.address}: cannot join: InvalidAuthToken: {detail}; fix: give this "
        "machine the cluster's token: RAY_AUTH_MODE=token and RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH) from the "
        "cluster's secret; see deploy/README.md",
    )
    assert list(storage.iterdir()) == []


# --------------------------------------------------------------------------- node loss (runs last: it kills node 2)


def _node_id(temp_dir: Path) -> str:
    """A node's id, from its raylet's log in its own temp dir."""
    log = (temp_dir / "session_latest" / "logs" / "raylet.out").read_text(errors="replace")
    return log.split("Initializing NodeManager node_id=", 1)[1].split()[0]


def _raylets(temp_dir: Path) -> list[psutil.Process]:
    return [
        p
        for p in psutil.process_iter(["name", "cmdline"])
        if p.info["name"] == "raylet" and str(temp_dir) in " ".join(p.info["cmdline"] or [])
    ]


def _raylet(temp_dir: Path) -> psutil.Process:
    found = _raylets(temp_dir)
    assert len(found) == 1, found
    return found[0]


def test_a_lost_node_s_trial_finishes_on_the_surviving_node_and_resume_rejoins(
    cluster: Cluster, tmp_path: Path
) -> None:
    from tunekit.results.status import read_status

    head_id, lost_id = _node_id(cluster.ray_tmpdir / "ray"), _node_id(cluster.ray_tmpdir / "node2")
    experiment = tmp_path / "node-loss"
    # RAY_ADDRESS=auto: the cluster `ray start` recorded on this machine (under RAY_TMPDIR), as
    # a job's driver on a head node would find it; no --address.
    command = [
        sys.executable,
        "-m",
        "tunekit.cli",
        "run",
        str(DEFAULT_SPEC),
        "--storage",
        str(tmp_path),
        "--name",
        "node-loss",
        "--tracking-uri",
        f"sqlite:///{tmp_path / 'mlflow.db'}",
        "--set",
        f"trainable={SLOW_DIGITS}",
        "--set",
        "data.epoch_seconds=2.5",
        "--set",
        "budget.num_samples=2",
        "--set",
        "budget.max_epochs=4",
        "--set",
        "budget.max_concurrent=2",
        "--set",
        "scheduler.type=fifo",
        "--set",
        "training.checkpoint_every_s=2",  # FIFO has no rungs: a checkpoint after each 2.5 s epoch
    ]
    env = cluster.driver_env(RAY_ADDRESS="auto", RAY_TMPDIR=str(cluster.ray_tmpdir), PYTHONUNBUFFERED="1")
    driver = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # The trial on node 2, once it has reported an epoch (and checkpointed it) and still has two
        # to train (at least 5 s, room for `tunekit status` below on a loaded machine).
        deadline, victim = time.monotonic() + 300, None
        while victim is None and time.monotonic() < deadline and driver.poll() is None:
            time.sleep(0.3)
            if (experiment / TRIALS_FILE).is_file():
                running = read_status(experiment).running
                victim = next((r for r in running if r.node_id == lost_id and 2 <= r.epoch <= 3), None)
        if victim is None and driver.poll() is not None:
            out, err = driver.communicate()
            raise AssertionError(
                f"the search ended before a trial was seen mid-way on node 2:\n{out[-3000:]}{err[-3000:]}"
            )
        assert victim is not None, "no trial was seen mid-way on node 2"
        shown = _tunekit("status", str(experiment), env=cluster.driver_env(), timeout=60)
        assert shown.returncode == 0, shown.stderr
        row = next(line.split() for line in shown.stdout.splitlines() if line.split()[:1] == [victim.number])
        assert row[1:4] == [lost_id[:8], victim.pid, "1"], shown.stdout
        _raylet(cluster.ray_tmpdir / "node2").kill()
        out, err = driver.communicate(timeout=400)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 0, err[-3000:]

    results = tunekit.load(experiment)
    trials = results.trials.set_index("number")
    assert sorted(trials.index) == [0, 1] and (trials["status"] == "completed").all(), trials
    number = int(victim.number)
    assert trials.loc[number, "attempts"] == 2
    assert (trials.drop(index=number)["attempts"] == 1).all()
    # Retried from its last checkpoint, on the surviving node; each epoch recorded once.
    epochs = results.epochs[results.epochs["trial_id"] == victim.trial_id].sort_values("epoch")
    assert list(epochs["epoch"]) == [1, 2, 3, 4]
    resumed = epochs[epochs["attempt"] == 2]
    assert int(resumed["resumed_from_epoch"].dropna().iloc[0]) >= 1
    spans = results.spans[results.spans["trial_id"] == victim.trial_id]
    assert list(zip(spans["attempt"], spans["node_id"], strict=True)) == [(1, lost_id), (2, head_id)]
    # The console names the retried trial, its nodes and its attempts.
    assert f"trial {number}: attempt 2 starts from its last checkpoint" in out, out
    assert f"attempt 1 ran on node {lost_id[:8]}, worker pid {victim.pid}" in out, out
    assert f"trial {number}: attempt 2 runs on node {head_id[:8]}" in out, out
    assert (
        f"tunekit: warning: node {lost_id[:8]} ({NODE_IP}) left the cluster; trial {number} was running there: "
        "Ray retries it from its last checkpoint"
    ) in out, out
    # Ray's own lines (its C++ core's "[2026-... W 123 456] ..." or its logger's) stay off the console.
    ray_lines = [line for line in (out + err).splitlines() if re.match(r"^\[\d{4}-\d\d-\d\d |^\(raylet|^\x1b\[", line)]
    assert ray_lines == [], ray_lines
    assert "starting Ray (joining auto)" in out
    # Nothing twice in the study (MLflow's runs: tests/e2e/conftest.py's tunekit check).
    study = optuna.load_study(study_name=None, storage=study_storage(experiment))
    assert sorted(t.number for t in study.trials) == [0, 1]
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)
    # The cluster is recorded by its address ("auto" resolved), never its token; Ray's account of
    # the lost node is in driver.log.
    assert json.loads((experiment / CLUSTER_FILE).read_text()) == {"address": cluster.address}
    assert not [f for f in experiment.rglob("*") if f.is_file() and cluster.token.encode() in f.read_bytes()]
    assert "Raylet is terminated" in (experiment / DRIVER_LOG_FILE).read_text()
    _resume_runs_where_it_ran(cluster, experiment, tmp_path)


def _resume_runs_where_it_ran(cluster: Cluster, experiment: Path, tmp_path: Path) -> None:
    # Grown from a shell with neither RAY_ADDRESS nor --address: it joins the cluster it ran on.
    grown = _tunekit("resume", str(experiment), "--set", "budget.num_samples=3", env=cluster.driver_env())
    assert grown.returncode == 0, grown.stderr[-3000:]
    assert f"starting Ray (joining {cluster.address})" in grown.stdout
    assert len(tunekit.load(experiment).trials) == 3

    # A search whose cluster is gone is not quietly continued on this machine.
    moved = tmp_path / "moved"
    shutil.copytree(experiment, moved, symlinks=True)
    gone = f"{NODE_IP}:{free_port()}"
    (moved / CLUSTER_FILE).write_text(json.dumps({"address": gone}))
    (moved / TRACKING_FILE).unlink()  # MLflow's runs belong to the original; the copy is checked without them
    began = time.monotonic()
    # Grown, so it has trials to run (a complete search's resume needs no cluster at all).
    refused = _tunekit(
        "resume", str(moved), "--set", "budget.num_samples=4", "--connect-timeout", "5",
        env=cluster.driver_env(), timeout=120,
    )  # fmt: skip
    _assert_one_error_line(
        refused,
        time.monotonic() - began,
        f"tunekit: error: ray cluster {gone}: cannot connect (connection refused); fix: start the cluster "
        "(ray start --head on the head node) or fix --address / RAY_ADDRESS; or resume elsewhere: "
        "--address ADDRESS, or --local",
    )


def test_a_search_in_a_bucket_survives_a_lost_node_and_a_killed_driver(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The experiment only in the bucket: each node and each driver has its own folders (no
    shared experiment path). A node is lost mid-trial (its trial retried from its checkpoint in
    the bucket), the driver is killed, the search is resumed from another folder, and read from
    a third. Runs after the node-loss test, on a second node started again."""
    from tunekit.results.status import read_status

    node3 = cluster.ray_tmpdir / "node3"
    worker_args = ["--address", cluster.address, "--num-cpus", "1", "--resources", '{"node2": 1}']
    worker = _start_until_up(worker_args, cluster.node_env, cluster.ray_tmpdir / "node3.log", node3)
    uri = "s3://exps/cluster/bucket-run"
    folders = [Path(tempfile.mkdtemp(prefix=f"tk-bucket-{n}-")) for n in ("first", "second", "third")]
    envs = [cluster.driver_env(**cluster.s3.env, RAY_ADDRESS=cluster.address, TUNEKIT_CACHE=str(f)) for f in folders]
    try:
        # The node to lose: this test's own, or the fixture's second node when the node-loss test
        # did not take it first (this test run alone).
        workers = {_node_id(node3): node3}
        if _raylets(cluster.ray_tmpdir / "node2"):
            workers[_node_id(cluster.ray_tmpdir / "node2")] = cluster.ray_tmpdir / "node2"
        command = [
            sys.executable, "-m", "tunekit.cli", "run", str(DEFAULT_SPEC),
            "--storage", "s3://exps/cluster", "--name", "bucket-run",
            "--set", f"trainable={SLOW_DIGITS}", "--set", "data.epoch_seconds=3",
            "--set", "budget.num_samples=3", "--set", "budget.max_epochs=5", "--set", "budget.max_concurrent=2",
            "--set", "training.checkpoint_every_s=1", *QUIET,
        ]  # fmt: skip
        log = folders[0] / "driver.out"
        with log.open("wb") as out:
            driver = subprocess.Popen(
                command, cwd=folders[0], env=envs[0], stdout=out, stderr=out, start_new_session=True
            )
        for key, value in {**cluster.s3.env, "TUNEKIT_CACHE": str(folders[2])}.items():
            monkeypatch.setenv(key, value)  # this process reads the bucket as the third folder
        deadline, victim = time.monotonic() + 300, None
        while victim is None and time.monotonic() < deadline and driver.poll() is None:
            time.sleep(0.5)
            with contextlib.suppress(tunekit.TunekitError):
                running = read_status(uri).running
                victim = next((r for r in running if r.node_id in workers and r.epoch >= 1), None)
        assert victim is not None, log.read_text()[-3000:]
        _raylet(workers[victim.node_id]).kill()  # the node is lost: its trial goes on from its checkpoint in the bucket
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and driver.poll() is None:
            time.sleep(1.0)
            with contextlib.suppress(tunekit.TunekitError):
                epochs = tunekit.load(uri).epochs
                if (epochs[epochs["trial_id"] == victim.trial_id]["attempt"] >= 2).any():
                    break
        assert driver.poll() is None, "the search ended before its driver could be killed: " + log.read_text()[-3000:]
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()

        resumed = subprocess.run(
            [sys.executable, "-m", "tunekit.cli", "resume", uri],
            cwd=folders[1], env=envs[1], capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-3000:]
        for reader in ("check", "report", "status"):  # every reader, from a third folder
            read = subprocess.run(
                [sys.executable, "-m", "tunekit.cli", reader, uri],
                cwd=folders[2], env=envs[2], capture_output=True, text=True, timeout=300,
            )  # fmt: skip
            if read.returncode != 0:  # printed whole: an assertion's message is cut to a few lines
                print(f"tunekit {reader} exit {read.returncode}:\n{read.stdout}\n{read.stderr}")
            assert read.returncode == 0, (reader, read.stdout[-3000:], read.stderr[-2000:])
        synced = subprocess.run(  # sent to MLflow afterwards, its record written back to the bucket
            [sys.executable, "-m", "tunekit.cli", "sync", uri, "--tracking-uri", f"sqlite:///{folders[2] / 'mlflow.db'}"],
            cwd=folders[2], env=envs[2], capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert synced.returncode == 0 and "holds all 3 trials" in synced.stdout, synced.stderr[-3000:]
        results = tunekit.load(uri)
        assert (results.experiment_dir / TRACKING_FILE).is_file()  # pulled back from the bucket
        model = results.model_path()  # fetched from the bucket when asked for
        assert model is not None and model.is_relative_to(folders[2]) and zipfile.is_zipfile(model)
        trials = results.trials.set_index("trial_id")
        assert len(trials) == 3 and (trials["status"] == "completed").all(), trials[["status", "reason"]]
        assert trials.loc[victim.trial_id, "attempts"] >= 2
        epochs = results.epochs[results.epochs["trial_id"] == victim.trial_id].sort_values("epoch")
        assert list(epochs["epoch"]) == [1, 2, 3, 4, 5]  # each epoch once, retried from the bucket's checkpoint
        # Its later attempts (the retry after the node loss; another after the driver's kill)
        # went on from a checkpoint in the bucket, not from the first epoch.
        resumed = epochs[epochs["attempt"] >= 2]["resumed_from_epoch"].dropna()
        assert not resumed.empty and int(resumed.max()) >= 1, epochs
        # A retrain made from a reader's copy lands in the bucket, beside the experiment.
        retrained = results.retrain(epochs=1, track=False)
        filesystem, root = Bucket(uri).filesystem()
        record = filesystem.get_file_info(f"{root}/{RETRAIN_DIR}/{retrained.path.name}/{RETRAIN_FILE}")
        assert record.type.name == "File", record
        assert not any((folder / "s3:").exists() for folder in folders)
    finally:
        if "driver" in locals() and driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
        _stop(worker, node3)
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)
