"""`tunekit doctor` whole: one line per check, a fix line per problem, exit 1 when anything is wrong.

Whole runs start TensorFlow in a child process (seconds), and the Ray and MLflow tests start
real servers. The single checks: tests/unit/doctor/test_doctor.py.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import STORAGE_FIX

from tunekit.cli import main
from tunekit.doctor.checks import run_checks
from tunekit.doctor.report import PROBLEM
from tunekit.doctor.tracking import check_tracking
from tunekit.testing.servers import S3Server, free_port, stop_group

TRACKING_FIX = "or fix --tracking-uri"


def lines_of(text: str) -> list[str]:
    return text.splitlines()


def line_for(text: str, name: str) -> str:
    """The check line whose name starts with ``name``."""
    found = [line for line in lines_of(text) if re.match(rf"(ok|PROBLEM|skip)\s+{re.escape(name)}", line)]
    assert len(found) == 1, f"no single line for {name!r} in:\n{text}"
    return found[0]


def fix_after(text: str, name: str) -> str:
    lines = lines_of(text)
    index = lines.index(line_for(text, name))
    assert lines[index + 1].lstrip().startswith("fix: "), text
    return lines[index + 1].strip()


# --------------------------------------------------------------------------- whole runs


@pytest.mark.slow
def test_healthy_setup_passes_every_check(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    storage = tmp_path / "results"
    status = run_checks(None, f"sqlite:///{tmp_path / 'mlflow.db'}", str(storage), stream=out)
    text = out.getvalue()
    assert status == 0, text
    assert lines_of(text)[0] == "tunekit doctor"
    for name in ("python", "tensorflow", "keras", "ray", "optuna", "mlflow", "tensorboard", "tensorboardX"):
        assert re.fullmatch(rf"ok\s+{name}: \d+\.\d+\S*.*", line_for(text, f"{name}:")), text
    assert line_for(text, "tracking") == (
        f"ok       tracking sqlite:///{tmp_path}/mlflow.db: directory {tmp_path} writable; the database will be created"
    )
    assert line_for(text, "storage").startswith(
        f"ok       storage {storage}: directory writable (missing; it will be created), "
    )
    assert line_for(text, "tensorflow build").startswith("ok       tensorflow build: ")
    assert line_for(text, "gpus (tensorflow)").startswith("ok       gpus (tensorflow): ")
    assert line_for(text, "ray (local)").startswith("ok       ray (local): no --address or RAY_ADDRESS")
    assert re.fullmatch(r"tunekit doctor: all \d+ checks passed", lines_of(text)[-1])
    assert "PROBLEM" not in text and "fix:" not in text
    assert list(tmp_path.iterdir()) == []  # neither the storage nor the database was created


@pytest.mark.slow
def test_cli_unreachable_tracking_uri_exits_1_with_the_fix(
    tmp_path: Path, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = f"http://127.0.0.1:{free_port()}"
    status = main(["doctor", "--tracking-uri", uri, "--storage", str(tmp_path)])
    text = capsys.readouterr().out
    assert status == 1, text
    assert line_for(text, "tracking") == f"PROBLEM  tracking {uri}: not reachable (connection refused)"
    assert fix_after(text, "tracking").endswith(TRACKING_FIX)
    assert line_for(text, "storage").startswith("ok ")
    assert lines_of(text)[-1] == "tunekit doctor: 1 problem found; each is followed by its fix"


@pytest.mark.slow
def test_cli_unwritable_storage_exits_1_with_the_fix(
    tmp_path: Path, clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "notes.txt").write_text("a file\n")
    storage = tmp_path / "notes.txt" / "results"
    clean_env.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")  # the default's source
    status = main(["doctor", "--storage", str(storage)])
    text = capsys.readouterr().out
    assert status == 1, text
    assert line_for(text, "storage") == f"PROBLEM  storage {storage}: not writable (Not a directory)"
    assert fix_after(text, "storage") == STORAGE_FIX
    assert line_for(text, "tracking").startswith(f"ok       tracking sqlite:///{tmp_path}/mlflow.db")
    assert lines_of(text)[-1] == "tunekit doctor: 1 problem found; each is followed by its fix"


@pytest.mark.slow
def test_doctor_process_imports_neither_tensorflow_nor_ray(tmp_path: Path, clean_env: pytest.MonkeyPatch) -> None:
    code = textwrap.dedent(f"""
        import sys
        from tunekit.cli import main
        status = main(["doctor", "--storage", {str(tmp_path)!r},
                       "--tracking-uri", "sqlite:///{tmp_path}/mlflow.db"])
        heavy = sorted(m for m in ("tensorflow", "keras", "ray", "mlflow") if m in sys.modules)
        print("status", status, "heavy", heavy)
    """)
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.stdout.splitlines()[-1] == "status 0 heavy []", done.stdout + done.stderr


# --------------------------------------------------------------------------- real servers


@pytest.fixture
def mlflow_server(tmp_path: Path) -> Iterator[str]:
    """A real ``mlflow server`` on 127.0.0.1 with a SQLite store under tmp_path."""
    port = free_port()
    log = (tmp_path / "mlflow.log").open("w")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--backend-store-uri",
            f"sqlite:///{tmp_path / 'mlflow.db'}",
            "--default-artifact-root",
            str(tmp_path / "artifacts"),
            "--workers",
            "1",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240  # a loaded 2-core machine needs over a minute
        while True:
            try:
                with urllib.request.urlopen(uri + "/health", timeout=2):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("mlflow server did not start:\n" + (tmp_path / "mlflow.log").read_text()[-3000:])
                time.sleep(0.5)
        yield uri
    finally:
        stop_group(process)
        log.close()


@pytest.mark.slow
def test_real_mlflow_server_is_reachable(mlflow_server: str) -> None:
    check = check_tracking(mlflow_server)
    assert check.lines() == [f"ok       tracking {mlflow_server}: the MLflow server answers"]
    wrong_path = check_tracking(mlflow_server + "/not-mlflow")
    assert wrong_path.status == PROBLEM
    assert wrong_path.detail == "answers HTTP 404 to the MLflow API"


HEAD = """
import sys, ray
ray.init(address="local", num_cpus=1, num_gpus=2, include_dashboard=False,
         logging_level="ERROR", log_to_driver=False)
print(ray.get_runtime_context().gcs_address, flush=True)
sys.stdin.read()  # runs until the test closes stdin
ray.shutdown()
"""


@pytest.fixture(scope="module")
def ray_head() -> Iterator[str]:
    """A real one-node Ray cluster (two logical GPUs) started by a driver the test owns; its
    node has no bucket credentials (AWS_*), as a node someone forgot to give them."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("AWS_")}, "RAY_AUTH_MODE": "token"}
    env.pop("RAY_ADDRESS", None)
    process = subprocess.Popen(
        [sys.executable, "-c", HEAD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        address = process.stdout.readline().strip()
        assert re.fullmatch(r"[\d.]+:\d+", address), f"head did not start ({address!r})"
        yield address
    finally:
        assert process.stdin is not None
        process.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=60)
        stop_group(process)


@pytest.mark.slow
def test_cluster_resources_and_shared_storage_on_a_real_cluster(
    ray_head: str, tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    clean_env.setenv("RAY_AUTH_MODE", "token")  # the token comes from ~/.ray/auth_token
    storage = tmp_path / "shared" / "results"
    out = io.StringIO()
    status = run_checks(ray_head, f"sqlite:///{tmp_path / 'mlflow.db'}", str(storage), stream=out)
    text = out.getvalue()
    assert status == 0, text
    assert re.fullmatch(
        rf"ok\s+ray cluster {re.escape(ray_head)}: Ray [\d.]+, 1 alive node\(s\), "
        r"1 CPUs, 2 GPUs, [\d.]+ GiB memory",
        line_for(text, "ray cluster"),
    ), text
    assert line_for(text, "ray node").endswith(", head")
    assert line_for(text, f"storage {storage} on every node") == (
        f"ok       storage {storage} on every node: writable and shared by every node, on 1 host(s) and this machine"
    )
    assert list(tmp_path.iterdir()) == []  # probes and the folders made for them are gone


@pytest.mark.slow
def test_a_node_without_the_bucket_s_credentials_is_a_problem_in_doctor(
    ray_head: str, tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    """This machine reaches the bucket (its credentials pass the local probe); the cluster's
    node, without them, fails the same probe in a task pinned to it: doctor says so, not a
    search's failing trials."""
    clean_env.setenv("RAY_AUTH_MODE", "token")
    s3 = S3Server(tmp_path / "moto").start()
    try:
        s3.make_bucket("exps")
        for key, value in s3.env.items():
            clean_env.setenv(key, value)
        uri = f"s3://exps/team?endpoint_override=127.0.0.1:{s3.port}&scheme=http"  # the node knows the endpoint
        out = io.StringIO()
        status = run_checks(ray_head, f"sqlite:///{tmp_path / 'mlflow.db'}", uri, stream=out)
    finally:
        s3.stop()
    text = out.getvalue()
    assert status == 1, text
    assert line_for(text, f"storage {uri}:") == f"ok       storage {uri}: a probe object was written and deleted"
    on_nodes = line_for(text, f"storage {uri} on every node")
    assert on_nodes.startswith(f"PROBLEM  storage {uri} on every node: not writable from "), text
    assert "ACCESS_DENIED" in on_nodes, text
    assert fix_after(text, f"storage {uri} on every node").startswith(
        "fix: give every node the credentials and endpoint (AWS_*, AWS_ENDPOINT_URL"
    )


@pytest.mark.slow
def test_cluster_without_the_token_names_the_auth_fix(
    ray_head: str, tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    for key in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        clean_env.delenv(key, raising=False)
    out = io.StringIO()
    status = run_checks(ray_head, f"sqlite:///{tmp_path / 'mlflow.db'}", str(tmp_path), stream=out)
    text = out.getvalue()
    assert status == 1, text
    assert "InvalidAuthToken" in line_for(text, "ray cluster")
    assert fix_after(text, "ray cluster").startswith("fix: give this machine the cluster's token: RAY_AUTH_MODE=token")
