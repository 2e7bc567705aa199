"""The warm runtime (``tunekit up``): a long-lived driver that runs the commands' searches.

Why a process of its own: Ray's worker processes belong to the driver (job) that started them,
and Ray Tune ends a trial's actor, with its process, as the trial ends; so workers with
TensorFlow imported can outlive a command only under a driver that outlives it. The runtime is
that driver. It keeps Ray, Ray Tune, Optuna, MLflow and tunekit's run path imported, and a pool
of idle workers with TensorFlow, Keras and tunekit's trial modules imported
(``tunekit.worker.preload``), refilled in the background as searches take them, so a search
right after another finds its workers ready too. Each search takes pool workers that never ran
a trial: a trial's state (the user's modules, Keras's session, policies, seeds, devices) never
reaches another search, and a reused actor within a search resets it (``tunekit.worker.trial``).

It serves one command at a time, in its main thread (signal handlers live there), as if started
in the command's folder with the command's streams (``tunekit.runtime.protocol``); a second
command meanwhile is told it is busy, and runs cold. Idle for ``idle_timeout_s`` it stops.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import queue
import signal
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from tunekit.runtime.modules import forgotten_request_modules
from tunekit.runtime.protocol import (
    LOG_FILE,
    PRELOADED_DIR,
    PROBE,
    PYTHON,
    SOCKET_FILE,
    TERMINAL_NAMES,
    Channel,
    Request,
    decode_call,
    encode_error,
    env_difference,
    runtime_dir,
)

logger = logging.getLogger("tunekit.runtime")

DEFAULT_IDLE_TIMEOUT_S = 3600
REFILL_EVERY_S = 0.5
# A command's first seconds have the machine's cores to themselves: workers importing TensorFlow
# beside them (4-9 s of CPU each) tripled its first epoch (2 s to 6 s on 2 cores). The pool's
# refill waits this long into a command, so that one right after it finds workers ready too: the
# pool holds two searches' worth (``tunekit up --workers``).
REFILL_AFTER_START_S = 10.0
# Nor does a command launched the moment the previous one ended: the refill waits this long after it.
REFILL_AFTER_END_S = 2.0
# After asking the raylet for workers, their processes appear within this (a busy machine).
PRESTART_SETTLE_S = 3.0
# What a search imports in the driver, imported once as the runtime starts: the first search
# imported MLflow's SQL store (SQLAlchemy, Alembic: 4 s of CPU, the default tracking URI is a
# SQLite file) and boto3 otherwise, beside its first trials.
DRIVER_IMPORTS = (
    "ray.tune",
    "optuna",
    "mlflow",
    "mlflow.store.tracking.sqlalchemy_store",
    "boto3",
    "multiprocessing.pool",
    "pandas",
    "tunekit.cli",
    "tunekit.driver.runner",
    "tunekit.driver.tune_run",
    "tunekit.driver.recorder",
    "tunekit.driver.progress",
    "tunekit.search.history",
    "tunekit.search.searcher",
    "tunekit.search.schedulers",
    "tunekit.tracking.tracker",
    "tunekit.results.summary",
)


@dataclass
class Serving:
    """The command the runtime is running."""

    request: Request
    channel: Channel
    started: float


class Runtime:
    """The daemon's state: its socket, its pool of warm workers, the command it serves."""

    def __init__(self, directory: Path, workers: int, idle_timeout_s: float) -> None:
        self.directory = directory
        self.workers = workers
        self.idle_timeout_s = idle_timeout_s
        self.started = time.time()
        self.environment = dict(os.environ)  # as `tunekit up` had it: the workers inherit it
        self.requests: queue.Queue[tuple[Request, Channel, list[int]]] = queue.Queue()
        self.serving: Serving | None = None
        self.stopping = threading.Event()
        self.searches = 0
        self.last_used = time.monotonic()
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._next_prestart = 0.0
        self._pool = threading.Thread(target=self._keep_pool, name="tunekit-pool", daemon=True)

    # --- start and stop -------------------------------------------------------------------

    def start(self) -> None:
        """Ray up with the pool asked for, the driver's imports made, the socket listening."""
        from tunekit.driver.session import start_runtime_ray
        from tunekit.worker.profile import PRELOADED_DIR_ENV

        preloaded = self.directory / PRELOADED_DIR
        preloaded.mkdir(exist_ok=True)
        for old in preloaded.glob("*.json"):
            old.unlink()
        os.environ[PRELOADED_DIR_ENV] = str(preloaded)  # the raylet, and so every worker, inherits it
        start_runtime_ray(self.directory / LOG_FILE)
        self._refill()
        for name in DRIVER_IMPORTS:  # while the workers import TensorFlow
            importlib.import_module(name)
        self._listen()
        self._pool.start()
        threading.Thread(target=self._accept, name="tunekit-accept", daemon=True).start()

    def _listen(self) -> None:
        path = self.directory / SOCKET_FILE
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # a runtime that was killed left it; `tunekit up` found none answering
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(path))
        path.chmod(0o600)  # this user's commands only: a request runs code as the runtime's user
        listener.listen(8)
        self._listener = listener

    def stop(self) -> None:
        """Stops Ray and every process it started, and removes the socket."""
        from tunekit.driver.session import shutdown

        self.stopping.set()
        with contextlib.suppress(FileNotFoundError):
            (self.directory / SOCKET_FILE).unlink()
        if self._listener is not None:
            self._listener.close()
        if self._pool.is_alive():  # before Ray stops: a call of Ray's API from it would start another Ray
            self._pool.join()
        shutdown()
        _end_children()
        logger.info("stopped after %d search(es)", self.searches)

    # --- the pool ----------------------------------------------------------------------------

    def _keep_pool(self) -> None:
        while not self.stopping.is_set():
            time.sleep(REFILL_EVERY_S)
            try:
                self._refill()
            except Exception:
                logger.exception("refilling the pool")

    def _refill(self) -> None:
        """Asks the raylet for the workers the pool lacks: idle ones and ones still starting count."""
        from tunekit.compat.ray_workers import prestart_workers

        if time.monotonic() < self._next_prestart:
            return
        with self._lock:
            serving, last_used = self.serving, self.last_used
        if serving is not None and time.time() - serving.started < REFILL_AFTER_START_S:
            return
        if serving is None and self.searches and time.monotonic() - last_used < REFILL_AFTER_END_S:
            return
        spare = spare_workers()
        missing = self.workers - len(spare)
        if self.searches and missing > 0:
            # After the first fill, one import at a time: it takes one core, and leaves the other
            # to a search launched meanwhile (two at once doubled such a search's first epoch).
            if len(spare) > len(self.ready_workers()):
                return
            missing = 1
        if missing > 0:
            logger.info("pool: %d spare worker(s) of %d; asking for %d", len(spare), self.workers, missing)
            # Kept past the runtime's own idle timeout, so the raylet never ends one first.
            prestart_workers(missing, int(self.idle_timeout_s) + 60)
            self._next_prestart = time.monotonic() + PRESTART_SETTLE_S

    def ready_workers(self) -> list[int]:
        """The idle workers whose imports ended (TensorFlow, Keras, the trial's modules)."""
        preloaded = self.directory / PRELOADED_DIR
        return sorted(pid for pid in spare_workers(idle_only=True) if (preloaded / f"{pid}.json").is_file())

    # --- requests ----------------------------------------------------------------------------

    def _accept(self) -> None:
        assert self._listener is not None
        while not self.stopping.is_set():
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return  # closed: the runtime stops
            threading.Thread(target=self._answer, args=(Channel(sock),), daemon=True).start()

    def _answer(self, channel: Channel) -> None:
        """The first message of a connection: a question answered here, or a command queued."""
        queued = False
        try:
            message, fds = channel.receive(want_fds=3)
            if message is None:
                return
            if message["op"] == "status":
                channel.send(self.status())
            elif message["op"] == "down":
                channel.send({"op": "stopping", "pid": os.getpid()})
                self._stop_soon()
            elif message["op"] == "run":
                queued = self._take(Request.from_message(message), channel, fds)
        except (OSError, ValueError, KeyError):
            logger.exception("a client's message")
        finally:
            if not queued:
                channel.close()

    def _take(self, request: Request, channel: Channel, fds: list[int]) -> bool:
        with self._lock:
            why = self._why_not(request, fds)
            if why is None:
                self.serving = Serving(request, channel, time.time())
        if why is not None:
            for fd in fds:
                os.close(fd)
            channel.send({"op": "declined", "why": why})
            return False
        try:
            channel.send({"op": "accepted", "pid": os.getpid()})
        except OSError:  # the command went away meanwhile
            with self._lock:
                self.serving = None
            for fd in fds:
                os.close(fd)
            return False
        self.requests.put((request, channel, fds))
        return True

    def _why_not(self, request: Request, fds: list[int]) -> str | None:
        if self.stopping.is_set():
            return "it is stopping"
        if self.serving is not None:
            return f"it is busy with another command (pid {self.serving.request.pid})"
        if len(fds) != 3:
            return "the command's streams did not arrive"
        if differ := env_difference(self.environment, request.env):
            shown = ", ".join(differ[:3]) + (" ..." if len(differ) > 3 else "")
            return f"it was started with other values of {shown} (tunekit down, then tunekit up here, to use it)"
        return None

    def _stop_soon(self) -> None:
        self.stopping.set()
        with self._lock:
            serving = self.serving
        if serving is not None:  # the running search stops as Ctrl-C stops it, saving its state
            os.kill(os.getpid(), signal.SIGINT)

    def serve(self) -> None:
        """Runs the queued commands one after the other until stopped or idle too long."""
        while not self.stopping.is_set():
            try:
                request, channel, fds = self.requests.get(timeout=1.0)
            except queue.Empty:
                if time.monotonic() - self.last_used > self.idle_timeout_s:
                    logger.info("idle for %g s: stopping", self.idle_timeout_s)
                    self.stopping.set()
                continue
            self._serve(request, channel, fds)

    def _serve(self, request: Request, channel: Channel, fds: list[int]) -> None:
        relay = threading.Thread(target=self._relay_signals, args=(channel,), name="tunekit-signals", daemon=True)
        relay.start()
        logger.info("serving pid %d: tunekit %s (in %s)", request.pid, " ".join(request.argv), request.cwd)
        status, outcome = 1, dict[str, str]()
        try:
            with forgotten_request_modules(request.cwd), as_the_command(request, fds):
                if request.command == PYTHON:
                    status, outcome = run_call(request.call)
                else:
                    status = run_command(request)
        except _Declined as declined:
            from tunekit.errors import TunekitError

            status, outcome = 1, {"raised": encode_error(TunekitError(str(declined)))}
        finally:
            with self._lock:
                self.serving = None
                self.searches += 1
                self.last_used = time.monotonic()
            with contextlib.suppress(OSError):
                channel.send({"op": "exit", "status": status, **outcome})
            channel.close()
        logger.info("pid %d: exit status %d", request.pid, status)

    def _relay_signals(self, channel: Channel) -> None:
        """The command's signals, raised here; a command that went away stops its search as Ctrl-C does."""
        while True:
            try:
                message, _ = channel.receive()
            except (OSError, ValueError):
                message = None
            with self._lock:
                current = self.serving is not None and self.serving.channel is channel
            if not current:
                return
            if message is None:
                os.kill(os.getpid(), signal.SIGINT)
                return
            if message.get("op") == "signal":
                os.kill(os.getpid(), int(message["number"]))

    def status(self) -> dict[str, Any]:
        with self._lock:
            serving = self.serving
        spare = spare_workers()
        ready = self.ready_workers()
        return {
            "op": "status",
            "pid": os.getpid(),
            "started": self.started,
            "workers": self.workers,
            "ready": ready,
            "starting": len(spare) - len(ready),
            "serving": None if serving is None else {"pid": serving.request.pid, "argv": serving.request.argv},
            "searches": self.searches,
            "idle_timeout_s": self.idle_timeout_s,
            "idle_s": 0.0 if serving is not None else time.monotonic() - self.last_used,
            "directory": str(self.directory),
        }


def spare_workers(idle_only: bool = False) -> set[int]:
    """The pids of this runtime's Ray workers that run nothing: idle (registered with the raylet,
    titled ``ray::IDLE``), or, unless ``idle_only``, still starting (Python's own command line)."""
    import psutil

    found = set()
    for process in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            command = process.cmdline()
            idle = command[:1] == ["ray::IDLE"]
            starting = any(part.endswith("default_worker.py") for part in command)
            if idle or (starting and not idle_only):
                found.add(process.pid)
    return found


def run_command(request: Request) -> int:
    """The request's command in this process, as the command's own process would run it, but kept alive."""
    from tunekit.cli import main
    from tunekit.search.probe import probe_search

    argv = request.argv
    try:
        return probe_search(argv) if request.command == PROBE else main(argv, in_runtime=True)
    except SystemExit as ended:  # argparse's usage errors
        return ended.code if isinstance(ended.code, int) else 1
    except KeyboardInterrupt:
        print("tunekit: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    except Exception as error:
        logger.exception("tunekit %s", " ".join(argv))
        print(f"tunekit: error: the warm runtime failed: {type(error).__name__}: {error}", file=sys.stderr)
        return 1


def run_call(call: str) -> tuple[int, dict[str, str]]:
    """``tunekit.run`` or ``resume`` called from Python: the experiment's folder, or what it raised."""
    from tunekit.driver.runner import resume, run

    try:
        name, arguments = decode_call(call)
        results = (run if name == "run" else resume)(**arguments)
    except Exception as error:
        return 1, {"raised": encode_error(error)}
    return 0, {"experiment_dir": str(results.experiment_dir)}


@contextlib.contextmanager
def as_the_command(request: Request, fds: list[int]) -> Any:
    """This process with the command's streams, folder and terminal, and Ctrl-C's handlers; then as before."""
    saved_fds = [os.dup(fd) for fd in (0, 1, 2)]
    saved_env = {name: os.environ.get(name) for name in TERMINAL_NAMES}
    saved_handlers = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    _flush()
    try:
        for target, fd in zip((0, 1, 2), fds, strict=True):
            os.dup2(fd, target)
        for name in TERMINAL_NAMES:
            if name in request.env:
                os.environ[name] = request.env[name]
            else:
                os.environ.pop(name, None)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, _interrupt)
        try:
            os.chdir(request.cwd)
        except OSError as error:  # the command's folder went away meanwhile
            why = f"{request.cwd}: {error.strerror}; fix: run the command from a folder that exists"
            raise _Declined(why) from None
        yield
    finally:
        _flush()
        for number, handler in saved_handlers.items():
            signal.signal(number, handler)
        os.chdir(runtime_dir())
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        for target, fd in zip((0, 1, 2), saved_fds, strict=True):
            os.dup2(fd, target)
            os.close(fd)
        for fd in fds:
            os.close(fd)


class _Declined(Exception):
    """A command the runtime could not start: its one line, raised in the caller (Python) or
    printed by the thin client, which exits with status 1."""


def _interrupt(number: int, frame: FrameType | None) -> None:
    """SIGTERM outside tunekit's own handlers (before a search installs them): as Ctrl-C."""
    raise KeyboardInterrupt


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def _end_children() -> None:
    """Every process this one started that outlived Ray's shutdown: none may remain."""
    import psutil

    children = psutil.Process().children(recursive=True)
    for child in children:
        with contextlib.suppress(psutil.Error):
            child.terminate()
    _, alive = psutil.wait_procs(children, timeout=5)
    for child in alive:
        with contextlib.suppress(psutil.Error):
            child.kill()


def _on_sigterm_while_idle(runtime: Runtime) -> Any:
    def handle(number: int, frame: FrameType | None) -> None:
        runtime.stopping.set()

    return handle


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tunekit.runtime.daemon")
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--idle-timeout", type=float, default=DEFAULT_IDLE_TIMEOUT_S)
    args = parser.parse_args(argv)
    directory = runtime_dir()
    os.chdir(directory)  # no project's folder on the workers' PYTHONPATH, nor as their folder
    # Its own lines to its log file, by a handle of their own: while a command is served, file
    # descriptors 1 and 2 are the command's, and the console shows only what the command's own
    # process would show (the root logger stays as in a command's process).
    handler = logging.FileHandler(directory / LOG_FILE)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    # Its own lines reach the log at once; while serving, the console's reach the user's terminal at once.
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    runtime = Runtime(directory, args.workers, args.idle_timeout)
    signal.signal(signal.SIGTERM, _on_sigterm_while_idle(runtime))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a command's Ctrl-C arrives only while it is served
    status = 0
    try:
        runtime.start()
        logger.info("up: pid %d, %d workers, idle timeout %g s", os.getpid(), args.workers, args.idle_timeout)
        runtime.serve()
    except Exception:
        traceback.print_exc()
        status = 1
    finally:
        runtime.stop()
    return status


if __name__ == "__main__":
    ended = main()
    logging.shutdown()
    os._exit(ended)  # nothing left to tear down: Ray and its processes have ended (Runtime.stop)
