"""The command's side of the warm runtime: ``tunekit up``, ``down``, its status, and the thin client.

A search command (``run``, ``resume``) first looks for a runtime (``serve_command``). When one
answers and takes the command, the command only waits: the runtime runs the search with the
command's folder, environment and streams, the command forwards its signals (Ctrl-C, SIGTERM,
SIGHUP) and exits with the search's status. Without a runtime nothing changes; a busy runtime,
or one started with another environment, is said in one line and the command runs cold.
Stdlib only (imports nothing of Ray, TensorFlow or tunekit's run path): the command stays quick.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from tunekit.errors import TunekitError
from tunekit.layout import CLUSTER_FILE
from tunekit.runtime.protocol import (
    LOCK_FILE,
    LOG_FILE,
    PYTHON,
    RUNTIME_ENV,
    TUNEKIT,
    Channel,
    Request,
    ask,
    connect,
    decode_error,
    encode_call,
    runtime_dir,
)

UP_TIMEOUT_S = 300.0  # Ray's start and the workers' TensorFlow imports, on a loaded machine
UP_POLL_S = 0.2
LOCK_TRIES = 5
DOWN_TIMEOUT_S = 60.0
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def serve_command(
    argv: Sequence[str], command: str = TUNEKIT, cluster: Callable[[], str | None] = lambda: None
) -> int | None:
    """Runs ``tunekit ARGV`` (or the probe's search process's ARGV) on the warm runtime and returns
    its exit status; None when it is to run in this process (no runtime, ``TUNEKIT_RUNTIME=off``,
    ``cluster``'s reason, or the runtime declined: said in one line). ``cluster``: why the search
    runs on another Ray than the runtime's (``why_another_ray``), asked once a runtime answers."""
    ended = _serve(Request(list(argv), os.getcwd(), dict(os.environ), os.getpid(), command), cluster)
    if ended is None:
        return None
    if "raised" in ended:  # the runtime could not start the command
        print(f"tunekit: error: {decode_error(ended['raised'])}", file=sys.stderr)
    return int(ended["status"])


def serve_call(function: str, arguments: dict[str, Any], why_here: str | None) -> Path | None:
    """``tunekit.run`` or ``resume`` (``function``) with ``arguments`` on the warm runtime: the
    experiment's folder, or the runtime's exception raised here; None when it is to run in this
    process. ``why_here``: the caller's reason it must run here (said when a runtime is up)."""
    if why_here is not None:
        if usable_runtime() is not None:
            print(f"tunekit: not on the warm runtime: {why_here}; running here", file=sys.stderr, flush=True)
        return None
    request = Request(
        [function], os.getcwd(), dict(os.environ), os.getpid(), PYTHON, encode_call((function, arguments))
    )

    def cluster() -> str | None:
        where = arguments.get("experiment_dir")
        return why_another_ray(function, arguments.get("address"), local=bool(arguments.get("local")), resumed=where)

    ended = _serve(request, cluster)
    if ended is None:
        return None
    if "raised" in ended:
        raise decode_error(ended["raised"])
    return Path(ended["experiment_dir"])


def why_python_call_runs_here(arguments: dict[str, Any], builders: Sequence[object]) -> str | None:
    """Why ``tunekit.run``/``resume`` called with these must run in the calling process, or None
    (a cluster's reason is asked once a runtime answers: ``why_another_ray``)."""
    from tunekit.contract import Builders

    spec = arguments.get("spec")
    if any(builder is not None for builder in builders) or isinstance(getattr(spec, "trainable", None), Builders):
        return "builders passed from Python run in their own process"
    if arguments.get("progress") not in (True, False, None):
        return "progress goes to a stream of this process"
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        return "this process has a Ray of its own"
    return None


def why_another_ray(
    command: str, address: str | None, *, local: bool = False, resumed: str | os.PathLike[str] | None = None
) -> str | None:
    """Why a search runs in its command's process, not on the warm runtime, whose Ray is local: the
    Ray cluster it joins, by the rule of ``tunekit.driver.connect`` (``--address``; else, for a
    ``resume`` of ``resumed``, the cluster its search ran on, in its ``cluster.json``; else
    ``RAY_ADDRESS``). None when it runs on a local Ray: the runtime's serves it.
    """
    if command == "run" and not address and not os.environ.get("RAY_ADDRESS"):
        return None  # the common case, said without importing the rule's module (the doctor's checks: 30 ms)
    from tunekit.driver.connect import recorded_address, resume_target, run_target
    from tunekit.errors import ClusterError

    if command == "run" or resumed is None:
        joined = run_target(address).address
        return None if joined is None else f"the search joins the Ray cluster at {joined}"
    with _recorded_cluster(resumed) as folder:
        recorded = recorded_address(folder)
        try:
            joined = resume_target(folder, address, local=local).address
        except ClusterError:  # --address and --local: the resume's own error, wherever it runs
            return None
    if joined is None:
        return None
    if joined == recorded and not address:
        return f"the search ran on the Ray cluster at {joined} and resumes there (--local: on a local Ray)"
    return f"the search joins the Ray cluster at {joined}"


@contextlib.contextmanager
def _recorded_cluster(location: str | os.PathLike[str]) -> Iterator[Path]:
    """A folder with the experiment's ``cluster.json``: its own, or a bucket's copy of it (none when
    it cannot be read: the resume, wherever it runs, says why)."""
    from tunekit.storage.buckets import Bucket, is_uri, local_path

    if not is_uri(location):
        yield local_path(location)
        return
    with tempfile.TemporaryDirectory(prefix="tunekit-cluster-") as folder:
        with contextlib.suppress(OSError, TunekitError):  # none recorded, or the bucket not readable from here
            Bucket(str(location)).fetch(Path(folder), CLUSTER_FILE)
        yield Path(folder)


def _serve(request: Request, cluster: Callable[[], str | None]) -> dict[str, Any] | None:
    """The runtime's last message for ``request`` (its exit status, and a call's outcome); None
    when it is to run in this process."""
    if os.environ.get(RUNTIME_ENV) == "off":
        return None
    channel = connect(runtime_dir())
    if channel is None:
        return None
    if (why := cluster()) is not None:
        channel.close()
        print(f"tunekit: not on the warm runtime: {why}; running here", file=sys.stderr, flush=True)
        return None
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    forwarded: list[int] = []
    try:
        # From the request on: a Ctrl-C before the answer reaches the runtime with the request.
        with _signals_forwarded(channel, forwarded):
            try:
                channel.send(request.to_message(), fds=[0, 1, 2])
                answer, _ = channel.receive()
            except (OSError, ValueError):  # it ended meanwhile
                answer = None
            if answer is not None and answer.get("op") == "accepted":
                return _wait_for_exit(channel, forwarded)
    finally:
        channel.close()
    why = answer.get("why") if answer else "it did not answer"
    print(f"tunekit: not on the warm runtime: {why}; running here", file=sys.stderr, flush=True)
    for number in forwarded:  # meant for a search that now runs here: as if it came now
        signal.raise_signal(number)
    return None


def _wait_for_exit(channel: Channel, forwarded: list[int]) -> dict[str, Any]:
    """The runtime's exit message; this process's signals go to the runtime meanwhile."""
    while True:
        try:
            message, _ = channel.receive()
        except OSError:
            message = None
        if message is None:
            print(
                f"tunekit: error: the warm runtime ended during the command (see {runtime_dir() / LOG_FILE})",
                file=sys.stderr,
            )
            return {"status": 128 + forwarded[-1] if forwarded else 1}
        if message.get("op") == "exit":
            return message


@contextlib.contextmanager
def _signals_forwarded(channel: Channel, forwarded: list[int]) -> Iterator[None]:
    def forward(number: int, frame: FrameType | None) -> None:
        forwarded.append(number)
        with contextlib.suppress(OSError):
            channel.send({"op": "signal", "number": number})

    saved = {number: signal.signal(number, forward) for number in FORWARDED}
    try:
        yield
    finally:
        for number, handler in saved.items():
            signal.signal(number, handler)


def runtime_status() -> dict[str, Any] | None:
    """The running runtime's status message, or None when none answers."""
    return ask(runtime_dir(), {"op": "status"})


def usable_runtime() -> dict[str, Any] | None:
    """The runtime's status when one is up, idle and not turned off here (``TUNEKIT_RUNTIME=off``)."""
    if os.environ.get(RUNTIME_ENV) == "off":
        return None
    status = runtime_status()
    return status if status is not None and status["serving"] is None else None


def describe(status: dict[str, Any] | None) -> str:
    """``tunekit status``'s and ``tunekit doctor``'s account of the runtime, in one line."""
    if status is None:
        return "no warm runtime is running (tunekit up starts one)"
    since = time.strftime("%H:%M:%S", time.localtime(status["started"]))
    ready, workers, starting = len(status["ready"]), status["workers"], status["starting"]
    pool = f"{ready} of {workers} workers ready (TensorFlow imported)" + (f", {starting} starting" if starting else "")
    serving = status["serving"]
    if serving is not None:
        doing = f"running `tunekit {' '.join(serving['argv'])}` for pid {serving['pid']}"
    else:
        left = max(0.0, status["idle_timeout_s"] - status["idle_s"])
        doing = f"idle, stops in {left / 60:.0f} min unless used"
    return (
        f"warm runtime up (pid {status['pid']}, since {since}): a local Ray, {pool}; {doing}; "
        f"{status['searches']} command(s) served; folder {status['directory']}"
    )


def up(workers: int, idle_timeout_s: float) -> str:
    """Starts the runtime in the background and waits until its workers are ready; its line.

    One runtime per folder: starting one takes the folder's lock (``LOCK_FILE``), which its process
    then holds until it ends. A ``tunekit up`` that finds the lock held attaches instead: to a
    runtime that answers, at once; to one another ``tunekit up`` is starting, once its workers are
    ready (said in one line as it starts waiting), and fails as that one does.
    """
    directory = runtime_dir()
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    lock = _start_lock(directory)
    if lock is None:
        return _attach(directory)
    os.ftruncate(lock, 0)  # the last runtime's pid: no longer this lock's
    log = directory / LOG_FILE
    began = time.monotonic()
    settings = [f"--workers={workers}", f"--idle-timeout={idle_timeout_s}"]
    command = [sys.executable, "-m", "tunekit.runtime.daemon", *settings]
    try:
        with log.open("a") as out:
            daemon = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                start_new_session=True,  # neither the terminal's Ctrl-C nor its hang-up reaches it
                cwd=directory,
                pass_fds=(lock,),  # it holds the lock from here until it ends (none of its children does)
            )
        os.pwrite(lock, f"{daemon.pid}\n".encode(), 0)
    finally:
        os.close(lock)

    def ended() -> str | None:
        if daemon.poll() is None:
            return None
        return f"warm runtime: exited with status {daemon.returncode} while starting; see {log}"

    if (status := _wait_until_ready(ended)) is None:
        daemon.terminate()
        raise TunekitError(f"warm runtime: not ready in {UP_TIMEOUT_S:g} s; stopped it; see {log}")
    return (
        f"tunekit: warm runtime up in {time.monotonic() - began:.1f} s (pid {daemon.pid}): a local Ray and "
        f"{len(status['ready'])} workers with TensorFlow imported; it stops after "
        f"{idle_timeout_s / 60:g} min idle, or with tunekit down"
    )


def _attach(directory: Path) -> str:
    """``tunekit up`` when the folder's runtime lives: its line once it answers with its workers ready."""
    if (status := runtime_status()) is None:
        log = directory / LOG_FILE
        print("tunekit: a warm runtime is starting (another tunekit up); waiting until it is ready", flush=True)

        def ended() -> str | None:
            return None if _lock_held(directory) else f"warm runtime: exited while starting; see {log}"

        if (status := _wait_until_ready(ended)) is None:
            raise TunekitError(f"warm runtime: not ready in {UP_TIMEOUT_S:g} s; see {log}")
    return f"tunekit: a warm runtime is up already (pid {status['pid']}); tunekit down stops it"


def _wait_until_ready(ended: Callable[[], str | None]) -> dict[str, Any] | None:
    """The runtime's status once it answers with its workers ready, None if not in ``UP_TIMEOUT_S``;
    ``ended``'s line raised when its process ended first (None while it runs)."""
    deadline = time.monotonic() + UP_TIMEOUT_S
    while time.monotonic() < deadline:
        if (why := ended()) is not None:
            raise TunekitError(why)
        status = runtime_status()
        if status is not None and len(status["ready"]) >= status["workers"]:
            return status
        time.sleep(UP_POLL_S)
    return None


def down() -> str:
    """Stops the runtime and waits until its process (and so its Ray) has ended; its line."""
    directory = runtime_dir()
    answer = ask(directory, {"op": "down"})
    pid = answer["pid"] if answer else _locked_pid(directory)
    if pid is None:
        return "tunekit: no warm runtime is running"
    if answer is None:  # not answering (starting, or stuck): its process is told to stop
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + DOWN_TIMEOUT_S
    while _alive(pid):
        if time.monotonic() > deadline:
            raise TunekitError(f"warm runtime (pid {pid}): still running {DOWN_TIMEOUT_S:g} s after told to stop")
        time.sleep(0.1)
    return f"tunekit: warm runtime stopped (pid {pid})"


def _start_lock(directory: Path) -> int | None:
    """The folder's lock, taken (its file descriptor), or None when a runtime's process holds it."""
    lock = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    # A `tunekit up` or `down` looking whether it is held (``_lock_held``) holds it for microseconds.
    for _ in range(LOCK_TRIES):
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return lock
        except BlockingIOError:
            time.sleep(0.01)
    os.close(lock)
    return None


def _lock_held(directory: Path) -> bool:
    """Whether a runtime's process (or the `tunekit up` starting it) holds the folder's lock."""
    try:
        lock = os.open(directory / LOCK_FILE, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)  # shared: two lookers never meet
    except BlockingIOError:
        return True
    finally:
        os.close(lock)
    return False


def _locked_pid(directory: Path) -> int | None:
    """The pid of the runtime's process that holds the folder's lock; None when none holds it (or
    the `tunekit up` starting it has not written it yet: for microseconds)."""
    if not _lock_held(directory):
        return None
    with contextlib.suppress(OSError, ValueError):
        return int((directory / LOCK_FILE).read_text())
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A child of this process (tests) lingers as a zombie until reaped: ended all the same.
    with contextlib.suppress(OSError):
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    return True
