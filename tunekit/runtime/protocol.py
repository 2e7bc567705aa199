"""What the warm runtime and its thin clients say to each other, and where they meet.

They meet at a Unix socket in the user's runtime directory (``runtime_dir``). Each message is
one JSON object on one line. A search request carries the command's argv, working directory and
environment, and the command's standard streams themselves (file descriptors passed with
``SCM_RIGHTS``): the runtime's console writes straight to the user's terminal, a terminal as
far as the console can tell, with nothing copied on the way. Stdlib only: the client imports
this module before anything else of tunekit.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import pickle
import socket
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RUNTIME_DIR_ENV = "TUNEKIT_RUNTIME_DIR"  # where the socket lives (tests, several runtimes)
RUNTIME_ENV = "TUNEKIT_RUNTIME"  # "off": every command runs cold, as without a runtime
SOCKET_FILE = "runtime.sock"
# Held (flock) by the runtime's process for its whole life, from before its start, and holding its
# pid: one runtime per folder, and `tunekit down` finds one that does not answer (yet).
LOCK_FILE = "runtime.lock"
LOG_FILE = "runtime.log"  # the daemon's own lines and Ray's start-up
PRELOADED_DIR = "preloaded"  # one <pid>.json per worker whose imports ended (tunekit.worker.preload)

# The environment that decides what a search does (the workers inherit the runtime's, fixed as
# it started): a request is served only when these equal the runtime's own. Anything else
# (the terminal's, the shell's) does not change a search.
_DECIDING_PREFIXES = (
    "AWS_", "AZURE_", "CUDA_", "GOOGLE_", "KERAS_", "MLFLOW_", "OMP_", "RAY_", "TF_", "TUNEKIT_", "XLA_",
)  # fmt: skip
_DECIDING_NAMES = ("PYTHONPATH", "PYTHONHASHSEED", "HIP_VISIBLE_DEVICES")
# Not deciding: which runtime to use, and the benchmarks' own start time.
_NOT_DECIDING = (RUNTIME_DIR_ENV, RUNTIME_ENV, "TUNEKIT_COMMAND_STARTED")
# The terminal's, applied in the runtime while it serves a request (the console's width and colour).
TERMINAL_NAMES = ("TERM", "COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR")

# The commands a runtime runs: the `tunekit` command's argv, or the probe's search process's
# (``python -m tunekit.search.probe``, which `tunekit plan --probe` starts).
TUNEKIT = "tunekit"
PROBE = "probe"
PYTHON = "python"  # tunekit.run or tunekit.resume called from Python (a notebook)

MAX_MESSAGE = 1 << 20  # a request with its environment is a few KB


def runtime_dir() -> Path:
    """The folder of this user's runtime: ``$TUNEKIT_RUNTIME_DIR``, else ``$XDG_RUNTIME_DIR/tunekit``,
    else ``<tmp>/tunekit-<uid>``."""
    if given := os.environ.get(RUNTIME_DIR_ENV):
        return Path(given)
    if (xdg := os.environ.get("XDG_RUNTIME_DIR")) and Path(xdg).is_dir():
        return Path(xdg) / "tunekit"
    return Path(tempfile.gettempdir()) / f"tunekit-{os.getuid()}"


def deciding_env(env: Mapping[str, str]) -> dict[str, str]:
    """The variables of ``env`` that decide what a search does (see ``_DECIDING_PREFIXES``)."""
    return {
        name: value
        for name, value in env.items()
        if (name.startswith(_DECIDING_PREFIXES) or name in _DECIDING_NAMES) and name not in _NOT_DECIDING
    }


def env_difference(runtime: Mapping[str, str], request: Mapping[str, str]) -> list[str]:
    """The names of the deciding variables set differently in ``request`` than in ``runtime``, sorted."""
    ours, theirs = deciding_env(runtime), deciding_env(request)
    return sorted(name for name in ours.keys() | theirs.keys() if ours.get(name) != theirs.get(name))


@dataclass(frozen=True)
class Request:
    """A command the runtime runs as if it had been started in ``cwd`` with ``env``."""

    argv: list[str]
    cwd: str
    env: dict[str, str]
    pid: int  # the client's, for `tunekit status` and the busy line
    command: str = TUNEKIT  # or PROBE: the search process of `tunekit plan --probe`; or PYTHON
    call: str = ""  # PYTHON's: ``tunekit.run`` or ``resume`` and its arguments (``encode_call``)

    def to_message(self) -> dict[str, Any]:
        fields = {"argv": self.argv, "cwd": self.cwd, "env": self.env, "pid": self.pid, "command": self.command}
        return {"op": "run", **fields, "call": self.call}

    @classmethod
    def from_message(cls, message: Mapping[str, Any]) -> Request:
        command = str(message["command"])
        if command not in (TUNEKIT, PROBE, PYTHON):
            raise ValueError(f"runtime message: unknown command {command!r}")
        fields = (list(message["argv"]), str(message["cwd"]), dict(message["env"]), int(message["pid"]))
        return cls(*fields, command, str(message.get("call", "")))


def encode_call(value: object) -> str:
    """A Python value as message text (pickle: the socket is this user's alone, as the runtime runs as them)."""
    return base64.b64encode(pickle.dumps(value)).decode()


def decode_call(text: str) -> Any:
    return pickle.loads(base64.b64decode(text))


def encode_error(error: BaseException) -> str:
    """An exception as message text, its class and attributes kept: rebuilt without its
    ``__init__``, whose arguments may not be its ``args`` (``SpecError(path, rule, value)``)."""
    try:
        return encode_call((type(error), error.args, vars(error)))
    except Exception:  # an attribute that does not pickle: the message, in tunekit's base class
        from tunekit.errors import TunekitError

        return encode_call((TunekitError, (str(error),), {}))


def decode_error(text: str) -> BaseException:
    kind, args, attributes = decode_call(text)
    error: BaseException = kind.__new__(kind, *args)
    error.args = args
    vars(error).update(attributes)
    return error


def encode(message: Mapping[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


class Channel:
    """One connection's messages, a JSON line each way; file descriptors ride on a message."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buffer = b""

    def send(self, message: Mapping[str, Any], fds: list[int] | None = None) -> None:
        data = encode(message)
        if fds:
            sent = socket.send_fds(self.sock, [data], fds)
            data = data[sent:]
        if data:
            self.sock.sendall(data)

    def receive(self, want_fds: int = 0) -> tuple[dict[str, Any] | None, list[int]]:
        """The next message (None at the end of the connection) and the descriptors that came with it."""
        fds: list[int] = []
        while b"\n" not in self._buffer:
            if want_fds and not fds:
                chunk, fds, _flags, _address = socket.recv_fds(self.sock, 65536, want_fds)
            else:
                chunk = self.sock.recv(65536)
            if not chunk:
                for fd in fds:
                    os.close(fd)
                return None, []
            self._buffer += chunk
            if len(self._buffer) > MAX_MESSAGE:
                raise ValueError(f"runtime message: longer than {MAX_MESSAGE} bytes")
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line), fds

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes a thread waiting on it
        self.sock.close()


def connect(directory: Path, timeout: float | None = None) -> Channel | None:
    """A channel to the runtime in ``directory``; None when none listens there."""
    path = directory / SOCKET_FILE
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(str(path))
    except OSError:  # no file, a stale file (refused), too long a path
        sock.close()
        return None
    return Channel(sock)


def ask(directory: Path, message: Mapping[str, Any], timeout: float = 5.0) -> dict[str, Any] | None:
    """One question and its answer (``status``, ``down``); None when no runtime answers."""
    channel = connect(directory, timeout)
    if channel is None:
        return None
    try:
        channel.send(message)
        answer, _ = channel.receive()
        return answer
    except (OSError, ValueError):
        return None
    finally:
        channel.close()
