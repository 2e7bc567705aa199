"""Real servers for tests and benchmarks, started on 127.0.0.1 and stopped by their process group:
MLflow's tracking server (on SQLite or PostgreSQL), TensorBoard, moto's S3 API, and a proxy that
cuts a connection on demand."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

MLFLOW = Path(sys.executable).with_name("mlflow")


def stop_group(process: subprocess.Popen[Any] | None) -> None:
    """Stops a server started in its own session: SIGTERM to its group, SIGKILL after 20 s; a
    group whose leader is gone already may still hold what it started: SIGKILL."""
    if process is None:
        return
    if process.poll() is not None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=20)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class MlflowServer:
    """A real ``mlflow server`` on 127.0.0.1: SQLite backend (or ``backend_uri``), local artifact store."""

    def __init__(self, root: Path, backend_uri: str | None = None) -> None:
        self.root = root
        self.backend_uri = backend_uri or f"sqlite:///{root / 'mlflow.db'}"
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
            self.backend_uri,
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

    @property
    def pid(self) -> int | None:
        """The ``mlflow server`` process's id once started (its workers are its children)."""
        return None if self.process is None else self.process.pid

    def answers(self) -> bool:
        import requests

        try:
            return requests.get(f"{self.uri}/health", timeout=2).ok
        except requests.RequestException:
            return False

    def stop(self) -> None:
        stop_group(self.process)


class PostgresServer:
    """A throw-away PostgreSQL on 127.0.0.1 in ``root`` (``initdb`` and ``pg_ctl`` from PATH or
    Debian's /usr/lib/postgresql/*/bin), for a production-like MLflow backend.

    PostgreSQL refuses to run as root: as root, its commands run as the ``postgres`` user, who
    owns ``root`` (which must be reachable by that user, as a folder under /tmp is).
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.data = root / "pgdata"
        self.bin = postgres_bin()

    @property
    def uri(self) -> str:
        return f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/mlflow"  # the pinned driver (bench extra)

    def start(self) -> PostgresServer:
        if self.bin is None:
            raise RuntimeError("no PostgreSQL here: initdb and pg_ctl are on neither PATH nor /usr/lib/postgresql")
        self.root.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust")
        options = f"-c listen_addresses=127.0.0.1 -c port={self.port} -k {self.root}"
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.root / "pg.log"), "-w", "start")
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "mlflow")
        return self

    @property
    def pid(self) -> int | None:
        """The postmaster's process id while the server runs (its backends are its children)."""
        pid_file = self.data / "postmaster.pid"
        return int(pid_file.read_text().split()[0]) if pid_file.is_file() else None

    def stop(self) -> None:
        if self.bin is not None and (self.data / "postmaster.pid").is_file():
            self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def _run(self, tool: str, *args: str) -> None:
        assert self.bin is not None
        as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        done = subprocess.run([*as_postgres, str(self.bin / tool), *args], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{tool} failed: {done.stderr.strip()[-1000:]}")


def postgres_bin() -> Path | None:
    """The folder holding initdb, pg_ctl and createdb, or None when PostgreSQL is not installed."""
    found = shutil.which("initdb")
    candidates = [Path(found).resolve().parent] if found else []
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
    return next((c for c in candidates if all((c / tool).is_file() for tool in ("initdb", "pg_ctl", "createdb"))), None)


TENSORBOARD = Path(sys.executable).with_name("tensorboard")


class TensorBoardServer:
    """A real ``tensorboard --logdir`` on 127.0.0.1, reading ``logdir`` (tunekit's logs of an experiment)."""

    def __init__(self, logdir: Path, log: Path) -> None:
        self.logdir = logdir
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 120.0) -> TensorBoardServer:
        command = [str(TENSORBOARD), "--logdir", str(self.logdir), "--host", "127.0.0.1", "--port", str(self.port)]
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"tensorboard exited: {self.log.read_text()[-2000:]}")
            if self.answers():
                return self
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"tensorboard did not answer in {timeout:.0f} s: {self.log.read_text()[-2000:]}")

    def answers(self) -> bool:
        import requests

        try:
            return requests.get(f"{self.uri}/data/environment", timeout=2).ok
        except requests.RequestException:
            return False

    def post(self, route: str, body: dict[str, Any]) -> Any:
        """A POST to one of the HParams plugin's data routes (``experiment``, ``session_groups``), as JSON."""
        import requests

        answer = requests.post(f"{self.uri}/data/plugin/hparams/{route}", json=body, timeout=30)
        answer.raise_for_status()
        return answer.json()

    def stop(self) -> None:
        stop_group(self.process)


class S3Server:
    """A real S3 API on 127.0.0.1: moto's server mode (``moto_server``), in memory.

    ``env`` holds what a process needs to use it the usual way (``AWS_ENDPOINT_URL`` and
    test credentials); ``make_bucket`` creates a bucket (tunekit never creates buckets).
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log = root / "moto.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.env = {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def start(self, timeout: float = 60.0) -> S3Server:
        self.root.mkdir(parents=True, exist_ok=True)
        command = [str(Path(sys.executable).with_name("moto_server")), "-H", "127.0.0.1", "-p", str(self.port)]
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"moto_server exited: {self.log.read_text()[-2000:]}")
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"moto_server did not answer in {timeout:.0f} s")

    def make_bucket(self, name: str) -> str:
        """Creates ``name``; returns its URI."""
        from pyarrow import fs

        filesystem = fs.S3FileSystem(
            access_key=self.env["AWS_ACCESS_KEY_ID"],
            secret_key=self.env["AWS_SECRET_ACCESS_KEY"],
            endpoint_override=self.endpoint,
            scheme="http",
            region="us-east-1",
            allow_bucket_creation=True,
        )
        filesystem.create_dir(name)
        return f"s3://{name}"

    def stop(self) -> None:
        stop_group(self.process)


class LoopbackProxy:
    """A TCP proxy on 127.0.0.1 in front of ``target_port``: an outage switch for a server.

    ``stop`` closes the listening socket and every connection (clients see refused and reset
    connections); ``start`` opens the same port again. With ``silent``, it accepts connections
    and never answers (an endpoint that hangs).
    """

    def __init__(self, target_port: int, *, silent: bool = False) -> None:
        self.target_port, self.silent = target_port, silent
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._listener: socket.socket | None = None
        self._open: list[socket.socket] = []

    def start(self) -> LoopbackProxy:
        import threading

        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    def stop(self) -> None:
        listener, self._listener = self._listener, None
        for held in [*([listener] if listener else []), *self._open]:
            with contextlib.suppress(OSError):
                held.shutdown(socket.SHUT_RDWR)
            held.close()
        self._open.clear()

    def _accept(self, listener: socket.socket) -> None:
        import threading

        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # stopped
            self._open.append(client)
            if self.silent:
                continue
            try:
                server = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()
                continue
            self._open.append(server)
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=_pipe, args=(source, sink), daemon=True).start()


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)
