"""SIGINT and SIGTERM during a search: stop Ray Tune the way Ctrl-C does, in every phase; and
the forced exits (a second signal, a lost lease).

Also quiets the traceback dumps Ray logs for failed trials (tunekit prints one line each).
"""

from __future__ import annotations

import _thread
import contextlib
import logging
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, ClassVar

from tunekit.errors import EXIT_LEASE_LOST, LeaseLostError, SearchInterrupted, TunekitError
from tunekit.storage.buckets import shown

if TYPE_CHECKING:
    from tunekit.storage.lease import DriverLease


class _TrialTracebackFilter(logging.Filter):
    """Drops Ray Tune's log records that dump a failed trial's traceback on the console.

    A failed trial gets one line from tunekit's progress, with the path of its full
    traceback (``<trial id>/error.txt``); Ray's copy would bury the progress lines.
    """

    DROPPED = (
        "Trial task failed for trial",
        "Trials did not complete",
        "Last sync command failed",  # a traceback as text: no exception to tell transient by
    )

    def filter(self, record: logging.LogRecord) -> bool:
        from tunekit.storage.faults import is_permanent, is_transient

        # Ray's own tracebacks of a storage fault (a checkpoint it could not rotate away, its
        # state it could not save): tunekit says an outage once as it starts and once as it ends,
        # and a read-only or full store in the one line the search ends with.
        raised = record.exc_info[1] if record.exc_info else None
        storage = raised is not None and (is_transient(raised) or is_permanent(raised))
        return not (str(record.msg).startswith(self.DROPPED) or storage)


@contextlib.contextmanager
def quiet_trial_tracebacks() -> Iterator[None]:
    quiet = _TrialTracebackFilter()
    names = (
        "ray.tune.execution.tune_controller",
        "ray.tune.tune",
        "ray.train._internal.storage",
        "ray.tune.execution.experiment_state",
        "ray.train._internal.syncer",
    )
    loggers = [logging.getLogger(name) for name in names]
    for logger in loggers:
        logger.addFilter(quiet)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(quiet)


class _StartUpInterrupted(BaseException):
    """What the handler raises before ``fit``. A BaseException, as KeyboardInterrupt is, so
    the ``except Exception`` blocks inside ``ray.init`` cannot swallow it; ``StopSignals``
    turns it into ``SearchInterrupted`` as it exits."""


class StopSignals:
    """SIGINT and SIGTERM stop a search the way Ray Tune's Ctrl-C does, in every phase.

    Before ``Tuner.fit`` (starting Ray, building the study and the Tuner) the first signal
    is recorded and raises ``SearchInterrupted`` at once. Python swallows a raise from a
    signal handler in some places (an at-fork hook inside ``ray.init``, a ``__del__``), so
    the interruption is raised again every second until the start-up code has taken it
    (``handled``), and checked after ``ray.init`` and at the start of ``fit``. During
    ``fit`` it sets Tune's own stop event (Ray
    installs its handler for SIGUSR1 too, and tunekit sets ``TUNE_DISABLE_SIGINT_HANDLER``),
    so Tune ends its loop, saves the experiment state and removes its actors, including
    trials still waiting for resources; ``fit`` returns and the tables are written. After
    ``fit`` returned by itself (the search's closing writes: the study settled, the journal
    sealed) the signal is kept in ``late`` and the closing finishes, so the records stay whole;
    the search then ends as a stopped one does. A second signal exits at once with status
    128 + signal.
    """

    _SIGNALS = (signal.SIGINT, signal.SIGTERM)
    # True while the ``tunekit`` command searches (``exit_at_once_in_start_up``). Before
    # ``fit`` nothing needs saving (``resume`` starts such a search afresh), so the command
    # ends at once: it kills the Ray it was starting and exits, rather than raising through
    # whatever ``ray.init`` is doing, where Python may swallow the raise (an at-fork hook)
    # and print it. A library caller (a notebook, whose kernel must live on) gets
    # ``SearchInterrupted`` instead.
    exit_in_start_up: ClassVar[bool] = False
    # The handlers in place in this process (the innermost), for ``stop_search_for``.
    running: ClassVar[StopSignals | None] = None

    def __init__(
        self,
        experiment_dir: Path | None,
        on_forced_exit: Callable[[], None] | None = None,
        *,
        discard: Path | None = None,
    ) -> None:
        """A signal's message names ``experiment_dir`` (None: none exists yet, nothing started).

        ``on_forced_exit`` runs before a second signal ends the process (kills a local Ray).
        ``discard``: a new search's directory, removed when the command exits during start-up
        (no trial ran; there is nothing to resume).
        """
        self.experiment_dir = experiment_dir
        self._on_forced_exit = on_forced_exit
        # Called (in the main thread) when the first signal comes during fit, before Ray stops.
        self.on_stop: list[Callable[[], None]] = []
        self._discard = discard
        self.received: int | None = None
        self.late: int | None = None  # a signal after fit returned by itself (see the class)
        self._in_fit = False
        self._fitted = False
        self._saved: dict[int, Any] = {}
        self._active = threading.current_thread() is threading.main_thread()
        self._handled = threading.Event()
        self._raising_again = False
        self.stopped_for: TunekitError | None = None  # a stop that is no user's signal (stop_for)
        self._outer: StopSignals | None = None

    def __enter__(self) -> StopSignals:
        if self._active:
            self._saved = {s: signal.getsignal(s) for s in (*self._SIGNALS, signal.SIGUSR1)}
            self.install()
            self._outer, StopSignals.running = StopSignals.running, self
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: object) -> None:
        self.handled()
        if self._active:
            StopSignals.running = self._outer
            for number, handler in self._saved.items():
                signal.signal(number, handler if handler is not None else signal.SIG_DFL)
            if self._fitted and self.exit_in_start_up:
                # The command's closing lines and exit are left: a signal meanwhile is said as it ends.
                _closing.update(signal=self.late, experiment_dir=self.experiment_dir)
                for number in self._SIGNALS:
                    signal.signal(number, _signal_while_closing)
        if isinstance(error, _StartUpInterrupted) and self.received is not None:
            name = signal.Signals(self.received).name
            raise SearchInterrupted(
                f"interrupted by {name} during start-up", self.experiment_dir, self.received
            ) from None

    def install(self) -> None:
        """Registers the handlers with the operating system (again).

        Needed again after ``ray.init``: Ray's core worker installs its C++ failure-signal
        handler for SIGTERM below Python (it prints "*** SIGTERM received ***" and exits),
        which ``signal.getsignal`` does not show.
        """
        if self._active:
            for number in self._SIGNALS:
                signal.signal(number, self._handle)

    def stop_for(self, error: TunekitError) -> None:
        """Stops the search as a first SIGTERM does (its running trials held for the resume), from
        any thread, for ``error`` (a storage outage past its bound), which the console says."""
        if self.stopped_for is None and self.received is None:
            self.stopped_for = error
            _thread.interrupt_main(signal.SIGTERM)  # the handler runs in the main thread, as a signal's

    def handled(self) -> None:
        """The start-up code caught the interruption (and cleans up): stop raising it again."""
        self._handled.set()

    def raise_if_received(self) -> None:
        """Ends the start-up if a signal came whose exception Python swallowed (an at-fork hook)."""
        if self.received is not None:
            raise _StartUpInterrupted

    @contextlib.contextmanager
    def fitting(self) -> Iterator[None]:
        self.raise_if_received()
        if self._active:
            # Whatever handles SIGUSR1 once fit runs is Ray's stop handler (a stale one from
            # an earlier fit in this process would set an event nobody waits on).
            signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        self._in_fit = True
        try:
            yield
        finally:
            self._in_fit = False
            self._fitted = True

    def _handle(self, number: int, frame: FrameType | None) -> None:
        if self._raising_again:
            self._raising_again = False
            raise _StartUpInterrupted
        if self.received is not None or self.late is not None:
            to_console(
                f"\ntunekit: second {signal.Signals(number).name}: exiting now; "
                f"`tunekit resume {self.experiment_dir and shown(self.experiment_dir)}` continues from Ray's last "
                "saved state\n"
            )
            if self._on_forced_exit is not None:
                self._on_forced_exit()
            os._exit(128 + number)
        if self._fitted:
            # Not the start-up's exit at once, which would remove a new search that has run.
            self.late = number
            return
        self.received = number
        if not self._in_fit:
            if self.exit_in_start_up:
                self._exit_now(number)
            threading.Thread(target=self._raise_again_until_handled, name="tunekit-interrupt", daemon=True).start()
            raise _StartUpInterrupted
        for hook in self.on_stop:
            hook()
        name = signal.Signals(number).name
        if self.stopped_for is not None:
            to_console(f"\ntunekit: {self.stopped_for}: stopping the search and saving its state\n")
        else:
            to_console(f"\ntunekit: {name} received: stopping the search and saving its state (again to force)\n")
        threading.Thread(target=self._stop_tune, name="tunekit-stop", daemon=True).start()

    def _exit_now(self, number: int) -> None:
        with contextlib.suppress(Exception):
            sys.stdout.flush()  # the console's start-up lines; os._exit would drop them
        kill_ray_children()
        if self._discard is not None:
            shutil.rmtree(self._discard, ignore_errors=True)
        to_console(f"\n{interrupted_text(number, None if self._discard else self.experiment_dir)}\n")
        os._exit(128 + number)

    def _raise_again_until_handled(self) -> None:
        """Re-delivers the interruption to the main thread while the start-up goes on regardless."""
        while not self._handled.wait(1.0):
            self._raising_again = True
            _thread.interrupt_main(signal.Signals(self.received or signal.SIGTERM))

    def _stop_tune(self) -> None:
        """Sends SIGUSR1 once Ray's handler is in place (it is set at the start of fit)."""
        while self._in_fit:
            if callable(signal.getsignal(signal.SIGUSR1)):
                os.kill(os.getpid(), signal.SIGUSR1)
                return
            time.sleep(0.05)


def stop_search_for(error: TunekitError) -> None:
    """Stops the search this process runs (``StopSignals.stop_for``); nothing when none runs."""
    if (running := StopSignals.running) is not None:
        running.stop_for(error)


# The terminal's stderr while tunekit.driver.session sends file descriptor 2 to driver.log
# (Ray's C++ lines during ray.init): tunekit's own lines about a signal still reach the user.
console_fd: int | None = None


def to_console(text: str) -> None:
    """Writes ``text`` to the user's stderr, even while fd 2 goes to driver.log; safe in a signal handler."""
    with contextlib.suppress(OSError):
        sys.stderr.flush()
        os.write(console_fd if console_fd is not None else 2, text.encode())


def interrupted_text(number: int, experiment_dir: Path | None) -> str:
    """The command's line for a search a signal stopped (``experiment_dir`` None: nothing was kept)."""
    name = signal.Signals(number).name
    if experiment_dir is None:
        return f"tunekit: interrupted by {name} during start-up; nothing started and nothing was kept"
    return f"tunekit: interrupted by {name}; `tunekit resume {shown(experiment_dir)}` continues the search"


# The signal that came while the command closed its search (after its StopSignals ended; the
# search's records were written), and the experiment it names; see signalled_while_closing.
_closing: dict[str, Any] = {"signal": None, "experiment_dir": None}


def _signal_while_closing(number: int, frame: FrameType | None) -> None:
    if _closing["signal"] is not None:
        to_console(f"\ntunekit: second {signal.Signals(number).name}: exiting now\n")
        os._exit(128 + number)
    _closing["signal"] = number


def signalled_while_closing(status: int) -> int:
    """The command's exit status: ``status``, or, for a search that ended well while a signal came
    as it closed, the signal's line said and 128 + signal, as for any stopped search."""
    number = _closing["signal"]
    if number is None or status != 0:
        return status
    to_console(f"{interrupted_text(number, _closing['experiment_dir'])}\n")
    return 128 + int(number)


@contextlib.contextmanager
def exit_at_once_in_start_up() -> Iterator[None]:
    """For the ``tunekit`` command's searches: a signal before ``fit`` ends the process at once;
    one after it (the closing lines) ends it with the signal's status (``signalled_while_closing``)."""
    _closing.update(signal=None, experiment_dir=None)
    StopSignals.exit_in_start_up = True
    try:
        yield
    finally:
        StopSignals.exit_in_start_up = False


def kill_ray_children() -> None:
    """Has every Ray process this process started killed as this process exits, whether or not
    ``ray.init`` finished. For the command's exits only (``os._exit`` follows).

    Ray's processes are stopped (SIGSTOP) now, and killed (SIGKILL) by a small process of their
    own once this one has exited. Killed before, a raylet's end reached this process's Ray client,
    which ends the process with status 1 at once, from its own thread (``Failed to get the system
    config from raylet because it is dead``): a driver that lost its lease said so and exited 1,
    not 3. Stopped, none can start another: a raylet killed while it started a worker would
    orphan it, and a worker busy importing TensorFlow notices its raylet gone only when the
    import ends, seconds after this process exited.
    """
    try:
        import psutil

        ray = []
        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                # Ray's processes, no other child: its binaries, its workers, its Python daemons
                # (`python -u .../ray/_private/log_monitor.py`)
                command = " ".join(child.cmdline()[:3])
                if command.startswith("ray::") or "/ray/" in command:
                    child.suspend()
                    ray.append(child)
        doomed = {process.pid: process for process in ray}
        for process in ray:  # none of them can start another now
            with contextlib.suppress(psutil.Error):
                doomed |= {descendant.pid: descendant for descendant in process.children(recursive=True)}
        for process in doomed.values():
            with contextlib.suppress(psutil.Error):
                process.suspend()
        if doomed:
            _kill_after_this_process(sorted(doomed))
    except Exception as error:  # best effort on the way out; the process is exiting anyway
        logging.getLogger(__name__).debug("could not kill the local Ray's processes: %s", error)


def _kill_after_this_process(pids: list[int]) -> None:
    """Starts ``kill -KILL pids`` waiting for this process's end: it reads a pipe whose one
    writing end this process holds (not inherited by any child), which closes as it exits."""
    reading, writing = os.pipe()
    os.posix_spawn(
        "/bin/sh",
        ["sh", "-c", 'read -r _; kill -KILL "$@"', "sh", *map(str, pids)],
        dict(os.environ),
        file_actions=[
            (os.POSIX_SPAWN_DUP2, reading, 0),
            # Not the console's, nor a pipe a caller reads to its end: some pids are gone already.
            (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
            (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
        ],
        setsid=True,  # a signal to this process's group does not end it before its work
    )
    os.close(reading)
    _HELD_UNTIL_EXIT.append(writing)


# The writing ends of the pipes _kill_after_this_process's killers wait on: open until the exit.
_HELD_UNTIL_EXIT: list[int] = []


def exit_when_lost(lease: DriverLease) -> None:
    """Makes a lost lease (``tunekit.storage.lease``) end this process at once: one line, its local Ray
    killed, exit status ``EXIT_LEASE_LOST``. No graceful stop: a stop saves Ray's state and holds
    the trials, writes that would land over the new holder's, whose trials these now are."""
    lease.on_lost = _exit_lease_lost


# Held for good by the first thread that ends the process: any other that finds the loss waits
# here for the exit rather than go on to write, or say it twice.
_EXITING = threading.Lock()


def _exit_lease_lost(error: LeaseLostError) -> None:
    _EXITING.acquire()
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    to_console(f"\ntunekit: error: {error}\n")
    kill_ray_children()
    os._exit(EXIT_LEASE_LOST)
