"""The warm runtime's messages, its folder, and which environment decides a search (no Ray)."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from pathlib import Path

import pytest

from tunekit.runtime.protocol import (
    MAX_MESSAGE,
    PROBE,
    RUNTIME_DIR_ENV,
    Channel,
    Request,
    ask,
    connect,
    deciding_env,
    decode_error,
    encode_error,
    env_difference,
    runtime_dir,
)


def test_the_runtime_folder_is_the_variables_then_the_users_runtime_dir_then_tmp(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(RUNTIME_DIR_ENV, str(tmp_path / "given"))
    assert runtime_dir() == tmp_path / "given"
    monkeypatch.delenv(RUNTIME_DIR_ENV)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert runtime_dir() == tmp_path / "tunekit"
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "missing"))
    assert runtime_dir().name == f"tunekit-{os.getuid()}"


def test_only_the_variables_that_change_a_search_decide_and_the_runtimes_own_do_not() -> None:
    env = {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        "MLFLOW_TRACKING_URI": "sqlite:///x.db",
        "PYTHONPATH": "/src",
        "TERM": "xterm",
        "PWD": "/home/me",
        RUNTIME_DIR_ENV: "/run/user/1/tunekit",
        "TUNEKIT_RUNTIME": "on",
    }
    assert deciding_env(env) == {k: env[k] for k in ("AWS_ENDPOINT_URL", "MLFLOW_TRACKING_URI", "PYTHONPATH")}
    request = {**env, "TERM": "dumb", "PWD": "/elsewhere", "MLFLOW_TRACKING_URI": "http://127.0.0.1:5000"}
    request.pop("AWS_ENDPOINT_URL")
    request["CUDA_VISIBLE_DEVICES"] = "0"
    assert env_difference(env, request) == ["AWS_ENDPOINT_URL", "CUDA_VISIBLE_DEVICES", "MLFLOW_TRACKING_URI"]
    assert env_difference(env, {**env, "COLUMNS": "80"}) == []


def test_a_request_travels_whole_and_an_unknown_command_is_refused() -> None:
    request = Request(["run", "spec.yaml", "--set", "budget.num_samples=2"], "/p", {"A": "1"}, 42, PROBE)
    assert Request.from_message(request.to_message()) == request
    with pytest.raises(ValueError, match="unknown command 'rm'"):
        Request.from_message({**request.to_message(), "command": "rm"})


def test_a_channel_carries_messages_and_the_commands_streams() -> None:
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    sender, receiver = Channel(left), Channel(right)
    read_end, write_end = os.pipe()
    try:
        sender.send({"op": "run", "n": 1}, fds=[write_end])
        sender.send({"op": "signal", "number": 2})
        message, fds = receiver.receive(want_fds=3)
        assert message == {"op": "run", "n": 1} and len(fds) == 1
        os.write(fds[0], b"to the user's terminal")  # the descriptor is the command's own stream
        os.close(fds[0])
        assert os.read(read_end, 100) == b"to the user's terminal"
        assert receiver.receive() == ({"op": "signal", "number": 2}, [])
        sender.close()
        assert receiver.receive() == (None, [])
    finally:
        receiver.close()
        os.close(read_end)
        os.close(write_end)


def test_a_message_longer_than_the_bound_is_refused() -> None:
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)

    def send_too_much() -> None:
        with contextlib.suppress(OSError):  # the reader closes as it refuses
            left.sendall(b"x" * (MAX_MESSAGE + 1))

    writer = threading.Thread(target=send_too_much)
    receiver = Channel(right)
    try:
        writer.start()
        with pytest.raises(ValueError, match=f"longer than {MAX_MESSAGE} bytes"):
            receiver.receive()
    finally:
        receiver.close()
        writer.join()
        left.close()


def test_no_runtime_answers_in_an_empty_folder_or_at_a_stale_socket(tmp_path: Path) -> None:
    assert connect(tmp_path) is None
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(tmp_path / "runtime.sock"))
    stale.close()  # the file stays; nothing listens: a killed runtime's
    assert connect(tmp_path) is None
    assert ask(tmp_path, {"op": "status"}) is None


def test_an_exception_comes_back_with_its_class_message_and_attributes() -> None:
    from tunekit.errors import SearchInterrupted, SpecError

    spec_error = decode_error(encode_error(SpecError("budget.num_samples", "must be an integer >= 1", 0)))
    assert type(spec_error) is SpecError and isinstance(spec_error, ValueError)
    assert str(spec_error) == "budget.num_samples: must be an integer >= 1, got 0" and spec_error.rule.startswith(
        "must"
    )
    stopped = decode_error(encode_error(SearchInterrupted("interrupted by SIGTERM", Path("/r/x"), 15)))
    assert type(stopped) is SearchInterrupted and stopped.signal_number == 15 and stopped.experiment_dir == Path("/r/x")

    class Local(Exception):  # a class the other side cannot import: its message, as a TunekitError
        pass

    unpicklable = Local("lost")
    unpicklable.handle = lambda: None  # type: ignore[attr-defined]
    assert str(decode_error(encode_error(unpicklable))) == "lost"
