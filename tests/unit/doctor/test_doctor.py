"""`tunekit doctor`'s single checks (tracking, storage, Ray address, GPUs, the child-process
deadline), each in milliseconds against real files, sockets and processes.

Whole runs and real Ray and MLflow servers: tests/e2e/test_doctor.py.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import textwrap
import time
from pathlib import Path

import pytest
from conftest import STORAGE_FIX

from tunekit.doctor import cluster as doctor
from tunekit.doctor.child import Child
from tunekit.doctor.gpus import NvidiaView, check_tensorflow
from tunekit.doctor.report import OK, PROBLEM
from tunekit.doctor.storage import check_storage
from tunekit.doctor.tracking import check_tracking
from tunekit.testing.servers import free_port

# --------------------------------------------------------------------------- single checks


def test_sqlite_tracking_under_tmp_is_ok_before_and_after_the_database_exists(
    tmp_path: Path,
) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    check = check_tracking(uri)
    assert (check.status, check.detail) == (
        OK,
        f"directory {tmp_path} writable; the database will be created",
    )
    sqlite3.connect(tmp_path / "mlflow.db").execute("create table t (x)").connection.close()
    assert check_tracking(uri).detail == f"{tmp_path / 'mlflow.db'} writable"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlflow.db"]  # the probe left nothing


@pytest.mark.parametrize(
    ("make", "detail", "fix"),
    [
        (
            lambda d: f"sqlite:///{d}/missing/mlflow.db",
            "directory {d}/missing does not exist",
            "create it (mkdir -p {d}/missing) or fix --tracking-uri",
        ),
        (
            lambda d: f"sqlite:///{d}/not_a_db",
            "{d}/not_a_db is not a SQLite database",
            "point --tracking-uri at an MLflow SQLite file or a new file name",
        ),
        (
            lambda d: "sqlite://",
            "an in-memory database loses every run when the process ends",
            "use a file, e.g. --tracking-uri sqlite:////absolute/path/mlflow.db",
        ),
        (
            lambda d: f"file://{d}/not_a_db/mlruns",
            "not writable (Not a directory)",
            "choose a writable --tracking-uri directory or fix its permissions",
        ),
    ],
    ids=["missing-directory", "not-a-database", "in-memory", "file-store-under-a-file"],
)
def test_broken_local_tracking_uris(make: object, detail: str, fix: str, tmp_path: Path) -> None:
    (tmp_path / "not_a_db").write_text("these are notes, not a database\n")
    check = check_tracking(make(tmp_path))  # type: ignore[operator]
    assert (check.status, check.detail, check.fix) == (
        PROBLEM,
        detail.format(d=tmp_path),
        fix.format(d=tmp_path),
    )


def test_unreachable_tracking_server_is_reported_fast_with_its_fix() -> None:
    port = free_port()
    started = time.monotonic()
    check = check_tracking(f"http://127.0.0.1:{port}")
    assert time.monotonic() - started < 5
    assert check.lines() == [
        f"PROBLEM  tracking http://127.0.0.1:{port}: not reachable (connection refused)",
        "         fix: start the server (mlflow server --host 127.0.0.1 --port PORT "
        "--backend-store-uri sqlite:///mlflow.db) or fix --tracking-uri",
    ]


def test_tracking_password_is_never_printed() -> None:
    check = check_tracking(f"http://alice:s3cret-pw@127.0.0.1:{free_port()}/")
    assert "s3cret-pw" not in "\n".join(check.lines())
    assert check.name.startswith("tracking http://127.0.0.1:")  # the user is hidden too (redact_uri)


def test_storage_probe_leaves_an_existing_directory_as_it_was(tmp_path: Path) -> None:
    (tmp_path / "old-experiment").mkdir()
    check = check_storage(str(tmp_path))
    assert check.status == OK and check.detail.startswith("directory writable, ")
    assert [p.name for p in tmp_path.iterdir()] == ["old-experiment"]


def test_storage_that_does_not_exist_yet_is_probed_and_not_left_behind(
    tmp_path: Path,
) -> None:
    storage = tmp_path / "a" / "b" / "results"
    check = check_storage(str(storage))
    assert check.status == OK and "(missing; it will be created)" in check.detail
    assert list(tmp_path.iterdir()) == []


def test_storage_under_a_regular_file_is_not_writable_even_for_root(
    tmp_path: Path,
) -> None:
    # chmod does not stop root; a path whose parent is a file fails for every user.
    (tmp_path / "notes.txt").write_text("a file, not a folder\n")
    check = check_storage(str(tmp_path / "notes.txt" / "results"))
    assert check.lines() == [
        f"PROBLEM  storage {tmp_path}/notes.txt/results: not writable (Not a directory)",
        f"         {STORAGE_FIX}",
    ]
    assert check_storage(str(tmp_path / "notes.txt")).detail == "exists and is not a directory"


def test_ray_address_nobody_listens_on_fails_fast() -> None:
    port = free_port()
    started = time.monotonic()
    for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}"):
        check = doctor.check_ray_reachable(address)
        assert check is not None and check.status == PROBLEM
        assert check.detail == "cannot connect (connection refused)"
        assert "start the cluster" in check.fix
    assert time.monotonic() - started < 5


def test_without_an_address_a_local_ray_starts_whatever_ray_start_recorded(
    clean_env: pytest.MonkeyPatch,
) -> None:
    address_file = Path(os.environ["RAY_TMPDIR"]) / "ray" / "ray_current_cluster"
    address_file.parent.mkdir()
    stale_address = f"127.0.0.1:{free_port()}"
    address_file.write_text(stale_address)  # what a crashed `ray start` leaves
    stale = doctor.check_local_ray(NvidiaView(None))
    assert stale.status == OK and "tunekit run starts a private local Ray" in stale.detail
    assert stale.detail.endswith(
        f"; --address auto joins the cluster `ray start` recorded here ({stale_address}, "
        "not answering: cannot connect (connection refused))"
    )
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        live_address = f"127.0.0.1:{listener.getsockname()[1]}"
        address_file.write_text(live_address)
        live = doctor.check_local_ray(NvidiaView(None))
    assert live.status == OK and "tunekit run starts a private local Ray" in live.detail
    assert live.detail.endswith(f"({live_address}, answering)")
    address_file.unlink()
    assert "--address auto" not in doctor.check_local_ray(NvidiaView(None)).detail


def test_ray_fix_names_the_token_on_an_auth_error() -> None:
    checks = doctor.check_cluster(
        "10.0.0.1:6379",
        {"error": "InvalidAuthToken: the cluster wants its token (RAY_AUTH_MODE here: unset)"},
        "/shared/results",
    )
    assert [c.status for c in checks] == [PROBLEM]
    assert "RAY_AUTH_MODE=token and RAY_AUTH_TOKEN" in checks[0].fix


def test_storage_not_shared_between_nodes_is_a_problem() -> None:
    probe = {
        "hosts": ["head", "gpu-1"],
        "write_errors": {},
        "unseen": {"gpu-1": ["head"], "head": []},
    }
    result = {
        "ray_version": "2.60.0",
        "resources": {"CPU": 8, "GPU": 1},
        "nodes": [
            {"host": "head", "ip": "10.0.0.1", "resources": {"CPU": 4}, "head": True},
            {"host": "gpu-1", "ip": "10.0.0.2", "resources": {"CPU": 4, "GPU": 1}},
        ],
        "storage": probe,
    }
    checks = doctor.check_cluster("10.0.0.1:6379", result, "/data/results")
    assert [c.status for c in checks] == [OK, OK, OK, PROBLEM]
    assert checks[1].lines() == ["ok       ray node head (10.0.0.1): 4 CPUs, 0 GPUs, 0.0 GiB memory, head"]
    assert checks[3].detail == "not shared: gpu-1 does not see the files of head"
    assert "ReadWriteMany" in checks[3].fix


@pytest.mark.parametrize(
    ("nvidia", "tf_result", "statuses"),
    [
        (
            NvidiaView(None),
            {
                "version": "2.21.0",
                "cuda_build": True,
                "cuda": "12.5.1",
                "cudnn": "9",
                "gpus": [],
            },
            [OK, OK, OK],
        ),
        (
            NvidiaView(("0, NVIDIA H100, 81559 MiB, 580.1",)),
            {
                "version": "2.21.0",
                "cuda_build": True,
                "cuda": "12.5.1",
                "cudnn": "9",
                "gpus": [
                    {
                        "name": "/physical_device:GPU:0",
                        "model": "NVIDIA H100",
                        "compute_capability": [9, 0],
                    }
                ],
            },
            [OK, OK, OK],
        ),
        (
            NvidiaView(("0, NVIDIA H100, 81559 MiB, 580.1",)),
            {
                "version": "2.21.0",
                "cuda_build": True,
                "cuda": "12.5.1",
                "cudnn": "9",
                "gpus": [],
            },
            [OK, OK, PROBLEM],
        ),
        (
            NvidiaView(("0, NVIDIA H100, 81559 MiB, 580.1",)),
            {"version": "2.21.0", "cuda_build": False, "gpus": []},
            [OK, PROBLEM, PROBLEM],
        ),
        (
            NvidiaView((), "Failed to initialize NVML: Driver/library version mismatch"),
            {
                "version": "2.21.0",
                "cuda_build": True,
                "cuda": "12.5.1",
                "cudnn": "9",
                "gpus": [],
            },
            [PROBLEM, OK, OK],
        ),
        (
            NvidiaView(None),
            {"error": "ImportError: libcudart.so.12: cannot open shared object file"},
            [OK, PROBLEM],
        ),
    ],
    ids=[
        "cpu-machine",
        "gpu-seen",
        "gpu-unseen-by-tf",
        "cpu-only-build",
        "broken-driver",
        "broken-tf",
    ],
)
def test_tensorflow_gpu_checks_compare_with_nvidia_smi(
    nvidia: NvidiaView,
    tf_result: dict,
    statuses: list[str],
    clean_env: pytest.MonkeyPatch,
) -> None:
    checks = check_tensorflow(tf_result, nvidia)
    assert [c.status for c in checks] == statuses
    assert all(c.fix for c in checks if c.status == PROBLEM)


def test_cuda_visible_devices_limits_the_gpus_a_process_may_use(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    view = NvidiaView(("0, A", "1, B", "2, C"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,2")
    assert view.visible == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert view.visible == 0
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert view.visible == 3


def test_a_hanging_child_is_killed_with_its_children_at_the_deadline(
    tmp_path: Path,
) -> None:
    pid_file = tmp_path / "grandchild.pid"
    code = textwrap.dedent(f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        open({str(pid_file)!r}, "w").write(str(child.pid))
        time.sleep(120)
    """)
    started = time.monotonic()
    result = Child(["-c", code], timeout_s=1.0).result()
    assert result == {"error": "did not answer in 1 s"}
    assert time.monotonic() - started < 15
    grandchild = int(pid_file.read_text())
    for _ in range(50):  # the kill is immediate, the kernel's reaping may take a moment
        if not Path(f"/proc/{grandchild}").exists() or "Z" in _state(grandchild):
            break
        time.sleep(0.1)
    assert not Path(f"/proc/{grandchild}").exists() or "Z" in _state(grandchild)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


def test_a_version_mismatch_keeps_both_sides_and_names_the_fix() -> None:
    from tunekit.doctor.ray_errors import describe

    # Ray 2.60's own text (ray._private.utils.check_version_info), raised by ray.init.
    ray_error = RuntimeError(
        "Version mismatch: The cluster was started with:\n    Ray: 2.60.0\n    Python: 3.11.7\n"
        "This process on node 10.0.0.7 was started with:\n    Ray: 2.59.0\n    Python: 3.12.1\n"
    )
    text = describe(ray_error)
    assert text == (
        "Version mismatch: The cluster was started with: Ray: 2.60.0 Python: 3.11.7 "
        "This process on node 10.0.0.7 was started with: Ray: 2.59.0 Python: 3.12.1"
    )
    [check] = doctor.check_cluster("10.0.0.5:6379", {"error": text}, "/shared/results")
    assert check.fix == "install the cluster's Ray and Python versions here (the tested stack pins them)"


def test_a_package_that_slows_every_ray_process_is_a_problem_with_its_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tunekit.doctor import stack

    # This environment leaves it out (.ci/excludes.txt): the check passes here.
    assert [check.status for check in stack.check_import_costs()] == ["ok"]
    (tmp_path / "rfc3987_syntax").mkdir()
    (tmp_path / "rfc3987_syntax" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    [found] = stack.check_import_costs()
    assert found.is_problem
    assert found.lines()[0].startswith("PROBLEM  ray start-up: rfc3987-syntax is installed: jsonschema imports it")
    assert found.lines()[1].strip().startswith("fix: pip uninstall rfc3987-syntax")


def test_a_bucket_is_probed_from_every_node_and_a_node_without_credentials_is_a_problem() -> None:
    nodes = [
        {"host": "head", "ip": "10.0.0.1", "resources": {"CPU": 4}, "head": True},
        {"host": "gpu-1", "ip": "10.0.0.2", "resources": {"CPU": 4}},
    ]
    result = {"ray_version": "2.60.0", "resources": {"CPU": 8}, "nodes": nodes}
    uri = "s3://exps/team"
    written = doctor.check_cluster("10.0.0.1:6379", {**result, "storage": {"hosts": ["gpu-1", "head"]}}, uri)
    assert written[-1].lines() == [
        "ok       storage s3://exps/team on every node: a probe object was written and deleted from every node, "
        "on 2 host(s)"
    ]
    denied = {"hosts": ["gpu-1", "head"], "write_errors": {"gpu-1": "OSError: AWS Error ACCESS_DENIED"}}
    [*_, check] = doctor.check_cluster("10.0.0.1:6379", {**result, "storage": denied}, uri)
    assert check.status == PROBLEM
    assert check.detail == "not writable from gpu-1: OSError: AWS Error ACCESS_DENIED"
    assert check.fix.startswith("give every node the credentials and endpoint")
