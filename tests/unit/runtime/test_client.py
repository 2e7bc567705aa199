"""The thin client against a stand-in runtime that speaks the protocol on a real Unix socket (no Ray)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tunekit.runtime.client import describe, serve_command
from tunekit.runtime.modules import forgotten_request_modules
from tunekit.runtime.protocol import RUNTIME_DIR_ENV, RUNTIME_ENV, SOCKET_FILE, Channel

REPO = Path(__file__).resolve().parents[3]
Answer = Callable[[Channel, dict[str, Any], list[int]], None]


class StandIn:
    """A runtime that answers one connection with ``answer`` and keeps what it was sent."""

    def __init__(self, directory: Path, answer: Answer) -> None:
        self.path = directory / SOCKET_FILE
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(self.path))
        self.listener.listen(1)
        self.answer = answer
        self.request: dict[str, Any] | None = None
        self.connections = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            sock, _ = self.listener.accept()
        except OSError:
            return
        self.connections += 1
        channel = Channel(sock)
        self.request, fds = channel.receive(want_fds=3)
        try:
            self.answer(channel, self.request or {}, fds)
        finally:
            for fd in fds:
                os.close(fd)
            channel.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes an accept() that no command reached
        self.listener.close()
        self.thread.join(5)
        self.path.unlink()


@pytest.fixture
def runtime_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv(RUNTIME_DIR_ENV, str(tmp_path))
    monkeypatch.delenv(RUNTIME_ENV, raising=False)
    yield tmp_path


def _exit_with(status: int) -> Answer:
    def answer(channel: Channel, request: dict[str, Any], fds: list[int]) -> None:
        channel.send({"op": "accepted", "pid": 1})
        os.write(fds[1], b"a line the runtime's console printed\n")
        channel.send({"op": "exit", "status": status})

    return answer


def test_without_a_runtime_the_command_runs_here_and_says_nothing(
    runtime_folder: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    assert serve_command(["run", "spec.yaml"]) is None
    assert capfd.readouterr() == ("", "")


def test_a_taken_command_sends_its_argv_folder_environment_and_streams_and_exits_with_the_runtimes_status(
    runtime_folder: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///here.db")
    stand_in = StandIn(runtime_folder, _exit_with(7))
    try:
        assert serve_command(["run", "spec.yaml", "--set", "budget.num_samples=2"]) == 7
    finally:
        stand_in.close()
    assert stand_in.request is not None
    assert stand_in.request["argv"] == ["run", "spec.yaml", "--set", "budget.num_samples=2"]
    assert stand_in.request["cwd"] == os.getcwd() and stand_in.request["pid"] == os.getpid()
    assert stand_in.request["env"]["MLFLOW_TRACKING_URI"] == "sqlite:///here.db"
    assert stand_in.request["command"] == "tunekit"
    assert capfd.readouterr().out == "a line the runtime's console printed\n"


def test_a_declined_command_says_why_in_one_line_and_runs_here(
    runtime_folder: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    def busy(channel: Channel, request: dict[str, Any], fds: list[int]) -> None:
        channel.send({"op": "declined", "why": "it is busy with another command (pid 99)"})

    stand_in = StandIn(runtime_folder, busy)
    try:
        assert serve_command(["resume", "results/x"]) is None
    finally:
        stand_in.close()
    assert capfd.readouterr().err == (
        "tunekit: not on the warm runtime: it is busy with another command (pid 99); running here\n"
    )


def test_runtime_off_runs_every_command_here_without_asking(
    runtime_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(RUNTIME_ENV, "off")
    stand_in = StandIn(runtime_folder, _exit_with(0))
    try:
        assert serve_command(["run", "spec.yaml"]) is None
    finally:
        stand_in.close()
    assert stand_in.connections == 0


def test_ctrl_c_is_forwarded_to_the_runtime_which_decides_the_status(runtime_folder: Path) -> None:
    def stopped_by_the_signal(channel: Channel, request: dict[str, Any], fds: list[int]) -> None:
        channel.send({"op": "accepted", "pid": 1})
        os.kill(os.getpid(), signal.SIGINT)  # the user's Ctrl-C, at the command
        message, _ = channel.receive()
        assert message == {"op": "signal", "number": signal.SIGINT}
        channel.send({"op": "exit", "status": 128 + signal.SIGINT})

    stand_in = StandIn(runtime_folder, stopped_by_the_signal)
    try:
        assert serve_command(["run", "spec.yaml"]) == 130
    finally:
        stand_in.close()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back


def test_a_runtime_that_ends_mid_command_is_an_error_line_and_status_1(
    runtime_folder: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    def dies(channel: Channel, request: dict[str, Any], fds: list[int]) -> None:
        channel.send({"op": "accepted", "pid": 1})

    stand_in = StandIn(runtime_folder, dies)
    try:
        assert serve_command(["run", "spec.yaml"]) == 1
    finally:
        stand_in.close()
    assert capfd.readouterr().err == (
        f"tunekit: error: the warm runtime ended during the command (see {runtime_folder / 'runtime.log'})\n"
    )


def test_the_status_line_names_the_pool_and_what_the_runtime_does() -> None:
    assert describe(None) == "no warm runtime is running (tunekit up starts one)"
    status = {
        "pid": 12,
        "started": 0.0,
        "workers": 4,
        "ready": [101, 102, 103],
        "starting": 1,
        "serving": {"pid": 77, "argv": ["run", "a.yaml"]},
        "searches": 2,
        "idle_timeout_s": 3600.0,
        "idle_s": 0.0,
        "directory": "/run/user/0/tunekit",
    }
    line = describe(status)
    assert line.startswith("warm runtime up (pid 12, since ")
    assert "3 of 4 workers ready (TensorFlow imported), 1 starting; running `tunekit run a.yaml` for pid 77" in line
    idle = describe({**status, "serving": None, "idle_s": 1800.0})
    assert "; idle, stops in 30 min unless used; 2 command(s) served; folder /run/user/0/tunekit" in idle


def test_a_commands_own_modules_and_path_are_forgotten_after_it(tmp_path: Path) -> None:
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "warm_unit_probe.py").write_text("VALUE = 1\n")
    path = list(sys.path)
    with forgotten_request_modules(str(tmp_path / "project")):
        sys.path.insert(0, str(tmp_path / "project"))
        import warm_unit_probe  # noqa: F401

        import tunekit.runtime.daemon  # noqa: F401 - tunekit's own stays

        assert "warm_unit_probe" in sys.modules
    assert "warm_unit_probe" not in sys.modules and "tunekit.runtime.daemon" in sys.modules
    assert sys.path == path


def test_the_thin_client_imports_neither_ray_nor_tensorflow_nor_the_run_path(runtime_folder: Path) -> None:
    """The command's whole cost on a warm runtime is Python's start and this import set."""
    stand_in = StandIn(runtime_folder, _exit_with(0))
    script = textwrap.dedent(
        """
        import sys
        from tunekit.cli import main
        sys.argv = ["tunekit", "run", "spec.yaml"]
        status = main()
        heavy = ("ray", "tensorflow", "keras", "mlflow", "optuna", "pandas", "tunekit.driver.runner", "tunekit.worker")
        print(status, sorted({m for m in sys.modules if m.startswith(heavy)}))
        """
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            timeout=30,
        )
    finally:
        stand_in.close()
    assert done.stdout.splitlines()[-1] == "0 []", done.stdout + done.stderr


def test_a_python_call_stays_in_its_process_for_builders_and_streams(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import io

    from tunekit.runtime.client import why_python_call_runs_here

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    plain = {"spec": "spec.yaml", "progress": True, "address": None}
    assert why_python_call_runs_here(plain, (None, None, None, None)) is None
    assert why_python_call_runs_here(plain, (None, print, print, None)) == (
        "builders passed from Python run in their own process"
    )
    assert why_python_call_runs_here({**plain, "progress": io.StringIO()}, ()) == (
        "progress goes to a stream of this process"
    )


def test_a_busy_runtime_is_not_usable_and_a_python_call_says_why_it_runs_here(
    runtime_folder: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    from tunekit.runtime.client import serve_call, usable_runtime

    def busy_status(channel: Channel, request: dict[str, Any], fds: list[int]) -> None:
        channel.send({"op": "status", "serving": {"pid": 5, "argv": ["run", "a.yaml"]}})

    stand_in = StandIn(runtime_folder, busy_status)
    try:
        assert usable_runtime() is None
    finally:
        stand_in.close()

    def idle_status(channel: Channel, request: dict[str, Any], fds: list[int]) -> None:
        channel.send({"op": "status", "serving": None})

    stand_in = StandIn(runtime_folder, idle_status)
    try:
        assert serve_call("run", {}, "builders passed from Python run in their own process") is None
    finally:
        stand_in.close()
    assert capfd.readouterr().err == (
        "tunekit: not on the warm runtime: builders passed from Python run in their own process; running here\n"
    )


def test_a_search_on_another_ray_than_the_runtimes_local_one_is_named_by_the_drivers_rule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tunekit.driver.connect import record_address
    from tunekit.runtime.client import why_another_ray

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.chdir(tmp_path)
    assert why_another_ray("run", None) is None
    assert why_another_ray("run", "local") is None
    assert why_another_ray("run", "10.0.0.1:6379") == "the search joins the Ray cluster at 10.0.0.1:6379"
    (tmp_path / "on-a-cluster").mkdir()
    record_address(tmp_path / "on-a-cluster", "10.0.0.1:6379")
    (tmp_path / "here").mkdir()
    record_address(tmp_path / "here", None)
    # A resume runs where its search ran (a relative folder is the command's), unless told otherwise.
    assert why_another_ray("resume", None, resumed="on-a-cluster") == (
        "the search ran on the Ray cluster at 10.0.0.1:6379 and resumes there (--local: on a local Ray)"
    )
    assert why_another_ray("resume", None, local=True, resumed="on-a-cluster") is None
    assert why_another_ray("resume", "local", resumed="on-a-cluster") is None
    assert why_another_ray("resume", "10.0.0.2:6379", resumed="on-a-cluster") == (
        "the search joins the Ray cluster at 10.0.0.2:6379"
    )
    assert why_another_ray("resume", None, resumed="here") is None
    assert why_another_ray("resume", None, resumed="never-ran") is None
    assert why_another_ray("resume", "10.0.0.2:6379", local=True, resumed="here") is None  # its own error, anywhere
    monkeypatch.setenv("RAY_ADDRESS", "auto")
    assert why_another_ray("run", None) == "the search joins the Ray cluster at auto"
    assert why_another_ray("resume", None, resumed="never-ran") == "the search joins the Ray cluster at auto"
    assert why_another_ray("resume", None, resumed="here") == "the search joins the Ray cluster at auto"
    assert why_another_ray("resume", None, local=True, resumed="here") is None


def _never_answers(channel: Channel, request: dict[str, Any], fds: list[int]) -> None:
    assert request == {}  # the command hung up without a request


def test_a_command_or_call_on_another_ray_runs_here_and_says_so_once_a_runtime_answers(
    runtime_folder: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tunekit.driver.connect import record_address
    from tunekit.runtime.client import serve_call, why_another_ray

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    asked: list[str] = []

    def cluster() -> str | None:
        asked.append("asked")
        return why_another_ray("run", "10.0.0.1:6379")

    assert serve_command(["run", "spec.yaml", "--address", "10.0.0.1:6379"], cluster=cluster) is None
    assert asked == []  # no runtime: nothing to decide
    stand_in = StandIn(runtime_folder, _never_answers)
    try:
        assert serve_command(["run", "spec.yaml", "--address", "10.0.0.1:6379"], cluster=cluster) is None
    finally:
        stand_in.close()
    assert asked == ["asked"]
    (tmp_path / "searched").mkdir()
    record_address(tmp_path / "searched", "10.0.0.1:6379")
    stand_in = StandIn(runtime_folder, _never_answers)
    try:  # tunekit.resume from Python (tunekit._on_the_runtime_or_here)
        assert serve_call("resume", {"experiment_dir": tmp_path / "searched", "address": None}, None) is None
    finally:
        stand_in.close()
    assert capfd.readouterr().err == (
        "tunekit: not on the warm runtime: the search joins the Ray cluster at 10.0.0.1:6379; running here\n"
        "tunekit: not on the warm runtime: the search ran on the Ray cluster at 10.0.0.1:6379 and resumes there "
        "(--local: on a local Ray); running here\n"
    )


def test_tunekit_resume_of_a_cluster_search_runs_in_its_own_process_past_a_runtime(
    runtime_folder: Path, tmp_path: Path
) -> None:
    from tunekit.driver.connect import record_address

    (tmp_path / "searched").mkdir()
    record_address(tmp_path / "searched", "127.0.0.1:1")  # and no spec: the resume here fails at once
    stand_in = StandIn(runtime_folder, _never_answers)
    env = {**os.environ, "PYTHONPATH": str(REPO), RUNTIME_DIR_ENV: str(runtime_folder)}
    env.pop("RAY_ADDRESS", None)
    env.pop(RUNTIME_ENV, None)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tunekit.cli", "resume", "searched"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
        )
    finally:
        stand_in.close()
    assert done.stderr.splitlines() == [
        "tunekit: not on the warm runtime: the search ran on the Ray cluster at 127.0.0.1:1 and resumes there "
        "(--local: on a local Ray); running here",
        f"tunekit: error: {tmp_path / 'searched'}: not a tunekit experiment (no spec.yaml)",
    ], done.stderr
