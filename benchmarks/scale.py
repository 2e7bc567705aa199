"""Driver scaling: thousands of synthetic trials through every real part of tunekit's driver.

The trial is a function of its configuration, not a model: it sleeps ``EPOCH_S`` per epoch
and reports a learning curve computed from ``learning_rate``, ``units`` and ``dropout`` (no
TensorFlow). It runs through ``tunekit.driver.runner.synthetic_trials_for_benchmarks``, the
seam that swaps the trial function, so the searcher and its study (Optuna's journal), ASHA, the
recorder and its files, the failure guard, the progress line (to a file), the MLflow tracker
against a real ``mlflow server`` (PostgreSQL on 127.0.0.1 when ``initdb`` and ``pg_ctl`` are
here, else SQLite, said in the notes) and Ray's experiment checkpointing all run as in a real
search. Per window of ended trials (a tenth of the smallest size reported) it records the
driver's CPU time per trial, split by a profile of the driver's main thread (sampler, study storage, recorder, tracker,
Ray bookkeeping; the tracker's writer thread is the CPU outside the profiled thread), trials
per minute, the tracker's backlog, the driver's RSS and the sizes of the experiment
directory and the study. At the end, MLflow is counted through its API: one parent, one
child per trial, and every reported epoch as a metric point.

Peers, each in its own process with the same synthetic function: plain Ray Tune with the
same ASHA and no searcher (Ray's floor), Ray Tune with its own ``OptunaSearch``, and Optuna
alone (in-memory storage, ``SuccessiveHalvingPruner``: the sampler's floor).

Each side runs once, to the largest size; the smaller sizes' figures come from the same run's
first trials (``--full``: one run of 10,000 trials per side, reported at 1,000, 5,000 and
10,000). Ray Tune with ``OptunaSearch`` stops at tunekit's whole wall (``time_budget_s``): if
it has not finished by then, tunekit was faster, and its ratio is a lower bound.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import math
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks import common

NAME = "scale"
TITLE = "driver scaling: synthetic trials through tunekit's driver, against Ray's and Optuna's floors"
EPOCH_S = 0.003  # a synthetic epoch
MAX_EPOCHS = 9
GRACE, REDUCTION = 1, 3
SLOTS = os.cpu_count() or 2
# The sizes each mode reports. Each side runs once, to the largest size; a smaller size's
# figures are that run's first trials (its first 1,000 of 10,000), so --full costs one
# 10,000-trial run per side, not three runs of 1,000, 5,000 and 10,000.
MODES: dict[str, list[int]] = {"smoke": [60], "quick": [1000], "full": [1000, 5000, 10000]}
FLUSH_TIMEOUT_S = 1800  # the tunekit side's wait for MLflow to take every record at the end
TENTHS = 10  # a size's growth: its last tenth of trials against its first
SIZES_EVERY = 1000  # the experiment directory and study are measured every this many trials (a walk of every file)
# tunekit_untracked: tunekit's side again with tracking off, so the figures say what the MLflow
# server, PostgreSQL and the writer cost the search when they share its cores.
PEERS = ("tunekit_untracked", "ray_floor", "ray_optuna", "optuna_floor", "optuna_history")
# search.tpe_history measured against TPE's whole history: Optuna alone, the same trials
# (--tpe-history sets it, and the tunekit side's search.tpe_history).
TPE_HISTORY = 1000
BUCKETS = {  # where the driver's main thread spent its CPU, by the file of the code running
    "sampler": ("optuna/samplers", "optuna/_hypervolume", "optuna/search_space", "scipy"),
    "study storage": ("optuna/storages", "tunekit/compat/optuna_study", "sqlalchemy", "sqlite3", "alembic"),
    "recorder": ("tunekit/driver/recorder", "tunekit/driver/records", "tunekit/storage/clock", "csv"),
    "tracker": ("tunekit/tracking", "mlflow"),
    "progress": ("tunekit/driver/progress",),
    "ray": ("ray/",),
}
# The sampler's calls, through the wrapper tunekit.search.study.build_sampler returns.
SAMPLER_WRAPPER = "tunekit/search/study.py"
SAMPLER_CALLS = {"infer_relative_search_space", "sample_relative", "sample_independent", "before_trial", "after_trial"}

DEFINITIONS = {
    "driver CPU per trial": "the driver process's CPU seconds (every thread but the profiler's own) over the "
    "window / trials ended in it, with the MLflow writer's CPU counted per the events the window's trials "
    "queued (its CPU per event taken in the window), not as spent in the window: the writer sends a backlog "
    "late, so the window a backlog is sent in would pay for another window's trials",
    "profile split": "the driver's main thread's CPU clock, sampled every 2 ms by a thread: the sampler whole "
    "(its calls through tunekit's wrapper and everything they call), everything else by the file of the "
    "innermost Python frame (a builtin's time by its caller's); 'other threads' is the process's CPU outside "
    "the main thread but the MLflow writer's (Ray's threads), 'MLflow writer' its thread's and lanes' CPU (per the "
    "window's trials, as above); 'profiler' (not in the driver's CPU) is the sampling "
    "thread's own CPU, which grows with the window's wall, not with its trials",
    "garbage collection": "the CPU of Python's cyclic collector in any thread of the driver (inside the driver's "
    "CPU, across the split), per trial, and its full collections in the window",
    "trials per minute": "trials ended in the window / the window's wall minutes",
    "backlog": "the tracker's queued events, sampled on every controller step; the window's maximum",
}


# ------------------------------------------------------------------ the synthetic trial


def curve(config: dict[str, Any], epoch: int) -> float:
    """A learning curve shaped like the digits MLP's: a ceiling set by the configuration."""
    rate = math.log10(float(config["learning_rate"]))
    ceiling = (
        0.98 - 0.25 * abs(rate + 2.5) - 0.3 * float(config["dropout"]) - (0.04 if int(config["units"]) < 64 else 0)
    )
    return max(0.05, ceiling) * (1 - math.exp(-epoch / 2.5))


def synthetic_trial(config: dict[str, Any], spec: Any, experiment_dir: str) -> None:
    """tunekit's trial contract without a model: one report per epoch, as the Keras reporter's."""
    from ray import tune

    from tunekit.layout import EPOCH_KEY, INFO_KEY

    for epoch in range(1, spec.budget.max_epochs + 1):
        time.sleep(EPOCH_S)
        bookkeeping: dict[str, Any] = {"metrics": ["val_accuracy", "epoch_seconds"]}
        if epoch == 1:
            bookkeeping.update(resumed_from_epoch=0, info={})
        tune.report(
            {EPOCH_KEY: epoch, "val_accuracy": curve(config, epoch), "epoch_seconds": EPOCH_S, INFO_KEY: bookkeeping}
        )


def plain_trial(config: dict[str, Any]) -> None:
    """The same trial as a plain Ray Tune function."""
    from ray import tune

    for epoch in range(1, MAX_EPOCHS + 1):
        time.sleep(EPOCH_S)
        tune.report({"epoch": epoch, "val_accuracy": curve(config, epoch)})


# ------------------------------------------------------------------ tunekit's side


class CpuSampler:
    """A sampling profiler of one thread's CPU: every ``interval`` it reads the thread's CPU clock
    and gives the CPU spent since the last sample to the code the thread is running.

    Sampling costs the profiled thread almost nothing, so the search's wall time stays
    comparable with the peers', which run unprofiled (cProfile slowed the driver's Python).
    The code is bucketed by its innermost Python frame's file (a builtin's time goes to the
    Python code that called it), except that anything under the sampler's calls through
    tunekit's wrapper is the sampler's, whatever file it is in. Waiting (a sleep, a lock,
    an fsync) uses no CPU and is not cost.
    """

    def __init__(self, thread_id: int, interval: float = 0.002) -> None:
        self._thread_id = thread_id
        self._clock = time.pthread_getcpuclockid(thread_id)
        self._interval = interval
        self.buckets: dict[str, float] = dict.fromkeys([*BUCKETS, "rest"], 0.0)
        self.functions: dict[str, float] = {}
        # Its own thread's CPU: 500 wake-ups a second cost a share of a core whatever the
        # driver does, so a slower trial would carry more of it (left out of the driver's CPU).
        self.own_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def total(self) -> float:
        return sum(self.buckets.values())

    def top_functions(self, count: int = 30) -> list[dict[str, Any]]:
        ranked = sorted(self.functions.items(), key=lambda item: item[1], reverse=True)[:count]
        return [{"function": name, "own_s": seconds} for name, seconds in ranked]

    def _run(self) -> None:
        last = time.clock_gettime(self._clock)
        while not self._stop.wait(self._interval):
            self.own_s = time.thread_time()
            frame = sys._current_frames().get(self._thread_id)
            now = time.clock_gettime(self._clock)
            spent, last = now - last, now
            if frame is None or spent <= 0:
                continue
            code = frame.f_code
            bucket = _bucket_of_stack(frame)
            where = f"[{bucket}] {code.co_filename}:{frame.f_lineno}({code.co_name}) <- {_caller(frame)}"
            self.functions[where] = self.functions.get(where, 0.0) + spent
            self.buckets[bucket] += spent


def _caller(frame: Any) -> str:
    """The first frame outside the innermost frame's file: who called into that code."""
    filename = frame.f_code.co_filename
    caller = frame.f_back
    while caller is not None and caller.f_code.co_filename == filename:
        caller = caller.f_back
    if caller is None:
        return "?"
    return f"{caller.f_code.co_filename}:{caller.f_lineno}({caller.f_code.co_name})"


def _bucket_of_stack(frame: Any) -> str:
    innermost = frame.f_code.co_filename
    while frame is not None:
        code = frame.f_code
        if code.co_name in SAMPLER_CALLS and code.co_filename.endswith(SAMPLER_WRAPPER):
            return "sampler"
        frame = frame.f_back
    return next((name for name, parts in BUCKETS.items() if any(part in innermost for part in parts)), "rest")


class GcClock:
    """The CPU Python's cyclic garbage collector spends, in whichever thread it runs, and its full collections."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.full = 0
        self._began: dict[int, float] = {}

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        thread = threading.get_ident()
        if phase == "start":
            self._began[thread] = time.thread_time()
            return
        self.seconds += time.thread_time() - self._began.pop(thread, time.thread_time())
        self.full += info["generation"] == 2


class WriterClock:
    """The MLflow writer's CPU, in its thread and in the lanes it sends on, and the events it took.

    The writer sends what the search queued when it can, so a window can end with a thousand
    events still queued, and the next window pays for sending them: the first window's
    writer CPU looked 30 % cheaper than the last's only because its backlog was sent later.
    Its CPU per event taken, times the events the window's trials queued, is the writer's
    cost of those trials, whenever it was paid (``Windows`` reports both).
    """

    def __init__(self) -> None:
        self.taken = 0
        self._lanes_s = 0.0
        self._writer_s = 0.0  # the writer thread's CPU when it ended
        self._writer: threading.Thread | None = None
        self._lock = threading.Lock()
        self._undo: list[tuple[Any, str, Any]] = []

    def install(self) -> None:
        from tunekit.tracking import runs, writer

        clock = self
        take, run, side_by_side = writer.MlflowWriter._take, writer.MlflowWriter.run, runs.side_by_side

        def counted_take(self: Any, timeout: float | None) -> list[Any]:
            events = take(self, timeout)
            clock.taken += len(events)  # only the writer's thread takes
            return events

        def timed_run(self: Any) -> None:
            clock._writer = threading.current_thread()
            try:
                run(self)
            finally:
                clock._writer_s = time.thread_time()

        def timed_side_by_side(send: Any, items: Any, lanes: int) -> Any:
            writer_thread = threading.get_ident()

            def timed(item: Any) -> None:
                if threading.get_ident() == writer_thread:  # in the writer thread's own CPU
                    send(item)
                    return
                began = time.thread_time()
                try:
                    send(item)
                finally:
                    with clock._lock:
                        clock._lanes_s += time.thread_time() - began

            return side_by_side(timed, items, lanes)

        self._undo = [
            (writer.MlflowWriter, "_take", take),
            (writer.MlflowWriter, "run", run),
            (runs, "side_by_side", side_by_side),
        ]
        writer.MlflowWriter._take = counted_take  # type: ignore[method-assign]
        writer.MlflowWriter.run = timed_run  # type: ignore[method-assign]
        runs.side_by_side = timed_side_by_side

    def uninstall(self) -> None:
        for owner, name, original in self._undo:
            setattr(owner, name, original)
        self._undo = []

    def seconds(self) -> float:
        """The writer's CPU so far: its thread's (read live while it runs) and its lanes'."""
        writer = self._writer
        own = self._writer_s
        if writer is not None and writer.is_alive() and writer.ident is not None:
            try:
                own = time.clock_gettime(time.pthread_getcpuclockid(writer.ident))
            except OSError:  # it ended between the two reads
                own = self._writer_s
        with self._lock:
            return own + self._lanes_s


class Windows:
    """A recorder listener: per ``window`` ended trials, the driver's costs (see DEFINITIONS)."""

    def __init__(self, window: int, planned: int) -> None:
        self.window = window
        self.planned = planned
        self.origin = time.monotonic()  # the side's start, as the peers' windows count from theirs
        self.rows: list[dict[str, Any]] = []
        self.cpu: CpuSampler | None = None  # of the driver's main thread, which calls the listeners
        self._recorder: Any = None
        self._tracker: Any = None
        self._ended = 0
        self._backlog = 0
        self._max_backlog = 0
        # The main thread's CPU by function, cumulative when the last window closed, and per
        # trial in the first and the latest window: what grows is their difference.
        self._functions_then: dict[str, float] = {}
        self._first_functions: dict[str, float] = {}
        self._latest_functions: dict[str, float] = {}
        # (wall, process CPU less the profiler's, sampled total, sampled per bucket) when the last window closed
        self._last: tuple[float, float, float, dict[str, float]] = (time.monotonic(), time.process_time(), 0.0, {})
        self._profiler_then = 0.0  # the profiler's own CPU when the last window closed
        self.gc = GcClock()
        self._gc_then = (0.0, 0)  # its seconds and full collections when the last window closed
        self.writer = WriterClock()  # installed by the tracked side only
        self._writer_then = (0.0, 0, 0)  # its seconds, events taken and the backlog when the last window closed

    def experiment_started(self, recorder: Any) -> None:
        from tunekit.tracking.tracker import MlflowTracker

        self._recorder = recorder
        self._tracker = next((x for x in recorder.listeners if isinstance(x, MlflowTracker)), None)
        self._last = (time.monotonic(), time.process_time(), 0.0, {})
        self.cpu = CpuSampler(threading.get_ident())
        self.cpu.start()
        gc.callbacks.append(self.gc)

    def trial_started(self, record: Any) -> None: ...
    def epoch_reported(self, record: Any, row: Any) -> None: ...
    def warning(self, message: str) -> None: ...

    def tick(self, recorder: Any) -> None:
        if self._tracker is not None:
            self._backlog = self._tracker.backlog
            self._max_backlog = max(self._max_backlog, self._backlog)

    def trial_ended(self, record: Any) -> None:
        self._ended += 1
        if self._ended % self.window == 0:
            self._close_window()

    def experiment_ended(self, recorder: Any) -> None:
        if self._ended % self.window:
            self.planned = self._ended  # a search that ended short: its last window is measured
            self._close_window()
        if self.cpu is not None:
            self.cpu.stop()
        if self.gc in gc.callbacks:
            gc.callbacks.remove(self.gc)

    def top_functions(self) -> list[dict[str, Any]]:
        """The main thread's most costly code over the whole run, by the CPU sampled in it."""
        return self.cpu.top_functions() if self.cpu is not None else []

    def growing_functions(self, count: int = 30) -> list[dict[str, Any]]:
        """The main thread's code whose CPU per trial grew most from the first window to the last."""
        first, last = self._first_functions, self._latest_functions
        growth = {name: last.get(name, 0.0) - first.get(name, 0.0) for name in first.keys() | last.keys()}
        ranked = sorted(growth.items(), key=lambda item: item[1], reverse=True)[:count]
        return [
            {"function": name, "first_ms": 1000 * first.get(name, 0.0), "last_ms": 1000 * last.get(name, 0.0)}
            for name, _ in ranked
        ]

    def _writer_cost(self, trials: int) -> tuple[float, float]:
        """The MLflow writer's CPU in the window, and its cost of the window's trials: its CPU per
        event taken in the window times the events they queued (taken, less the backlog the
        window found, plus the backlog it leaves)."""
        seconds, taken = self.writer.seconds(), self.writer.taken
        then_seconds, then_taken, then_backlog = self._writer_then
        self._writer_then = (seconds, taken, self._backlog)
        spent, took = seconds - then_seconds, taken - then_taken
        queued = took - then_backlog + self._backlog
        return spent, (spent / took * queued if took else spent)

    def _close_window(self) -> None:
        from tunekit.layout import study_file

        assert self.cpu is not None
        profiler = self.cpu.own_s
        wall, cpu = time.monotonic(), time.process_time() - profiler
        buckets, sampled = dict(self.cpu.buckets), self.cpu.total()
        then_wall, then_cpu, then_sampled, then_buckets = self._last
        trials = self._ended - sum(row["trials"] for row in self.rows)
        spent_cpu = cpu - then_cpu
        split = {name: (buckets.get(name, 0.0) - then_buckets.get(name, 0.0)) / trials for name in buckets}
        writer_s, own_writer_s = self._writer_cost(trials)
        split["other threads"] = max(0.0, spent_cpu - (sampled - then_sampled) - writer_s) / trials
        split["MLflow writer"] = own_writer_s / trials
        profiler_per_trial = (profiler - self._profiler_then) / trials
        functions = dict(self.cpu.functions)
        self._latest_functions = {
            name: (seconds - self._functions_then.get(name, 0.0)) / trials for name, seconds in functions.items()
        }
        self._functions_then = functions
        if not self.rows:
            self._first_functions = self._latest_functions
        directory = self._recorder.experiment_dir
        measured = self._ended % SIZES_EVERY == 0 or self._ended >= self.planned
        self.rows.append(
            {
                "window": len(self.rows) + 1,
                "trials": trials,
                "ended": self._ended,
                "elapsed_s": wall - self.origin,
                "driver_cpu_per_trial_ms": 1000 * spent_cpu / trials,
                # The writer's cost of this window's trials in place of the writer CPU spent in it.
                "driver_cpu_own_ms": 1000 * (spent_cpu - writer_s + own_writer_s) / trials,
                "writer_ms": 1000 * writer_s / trials,
                "split_ms": {name: 1000 * value for name, value in split.items()},
                "profiler_ms": 1000 * profiler_per_trial,
                "gc_ms": 1000 * (self.gc.seconds - self._gc_then[0]) / trials,
                "gc_full_collections": self.gc.full - self._gc_then[1],
                "trials_per_minute": 60 * trials / (wall - then_wall),
                "backlog_max": self._max_backlog,
                "backlog_now": self._backlog,
                "rss_mb": _rss_mb(),
                "experiment_dir_mb": _size_mb(directory) if measured else None,
                "study_mb": _size_mb(study_file(directory)) if measured else None,
            }
        )
        self._max_backlog = self._backlog
        self._gc_then = (self.gc.seconds, self.gc.full)
        # Measuring the sizes walks every trial's files: its cost counts in neither window.
        self._profiler_then = self.cpu.own_s
        self._last = (
            time.monotonic(),
            time.process_time() - self._profiler_then,
            self.cpu.total(),
            dict(self.cpu.buckets),
        )


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _size_mb(path: Path) -> float:
    if path.is_file():
        return path.stat().st_size / 2**20
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


def _spec(trials: int, tracking_uri: str | None, tpe_history: int | None = None) -> dict[str, Any]:
    """The search both tunekit sides run; ``tracking_uri`` None: tracking off."""
    tracking = {"enabled": False} if tracking_uri is None else {"enabled": True, "uri": tracking_uri}
    return common.digits_spec(
        name=f"scale-{trials}",
        budget={"num_samples": trials, "max_epochs": MAX_EPOCHS, "max_concurrent": SLOTS},
        search={"algorithm": "tpe", "seed": 0, "n_startup_trials": 10, "tpe_history": tpe_history},
        scheduler={"type": "asha", "grace_period": GRACE, "reduction_factor": REDUCTION},
        resources={"cpu": 1, "gpu": 0},
        tracking={**tracking, "experiment": f"scale-{trials}"},
    )


def _run_tunekit(trials: int, window: int, workdir: Path, tpe_history: int | None = None) -> dict[str, Any]:
    import tunekit
    from tunekit.driver.tune_run import synthetic_trials_for_benchmarks
    from tunekit.testing.servers import MlflowServer, PostgresServer, postgres_bin
    from tunekit.tracking.tracker import FLUSH_TIMEOUT_ENV

    workdir.mkdir(parents=True, exist_ok=True)
    os.chmod(workdir, 0o755)  # PostgreSQL runs as its own user when this runs as root
    postgres = PostgresServer(workdir / "postgres") if postgres_bin() else None
    server: MlflowServer | None = None
    windows = Windows(window, trials)
    windows.writer.install()
    try:
        backend = postgres.start().uri if postgres else None
        server = MlflowServer(workdir / "mlflow", backend).start()
        # Every record must reach MLflow (the figure counts them): the search waits for the
        # writer to finish, however long, and that wait is in tunekit's wall.
        os.environ[FLUSH_TIMEOUT_ENV] = str(FLUSH_TIMEOUT_S)
        spec = tunekit.load_spec(_spec(trials, server.uri, tpe_history))
        tracking_pids = [pid for pid in (server.pid, postgres.pid if postgres else None) if pid is not None]
        server_cpu_before = _cpu_of_trees(tracking_pids)
        started = time.monotonic()
        with synthetic_trials_for_benchmarks(synthetic_trial, windows), (workdir / "console.log").open("w") as console:
            results = tunekit.run(spec, storage=workdir, name="tunekit", progress=console)
        wall = time.monotonic() - started
        server_cpu = _cpu_of_trees(tracking_pids) - server_cpu_before
        timings = _load_and_report(results.experiment_dir)
        counted = _count_mlflow(server.uri, f"scale-{trials}", results)
    finally:
        windows.writer.uninstall()
        if server is not None:
            server.stop()
        if postgres is not None:
            postgres.stop()
    return {
        "side": "tunekit",
        "trials": trials,
        "wall_s": wall,
        "windows": windows.rows,
        "top_functions": windows.top_functions(),
        "growing_functions": windows.growing_functions(),
        "tracking_backend": "postgresql" if postgres else "sqlite",
        "tpe_history": tpe_history,
        "mlflow": counted,
        "tracking_server_cpu_s": server_cpu,
        **timings,
    }


def _cpu_of_trees(pids: list[int]) -> float:
    """CPU seconds (user and system) of these processes and their descendants, ended ones
    included: an ended child's time is in its parent's ``children_*`` once it was reaped."""
    import psutil

    total, seen = 0.0, set()
    for pid in pids:
        try:
            root = psutil.Process(pid)
            tree = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
        for process in tree:
            if process.pid in seen:
                continue
            seen.add(process.pid)
            with contextlib.suppress(psutil.Error):
                times = process.cpu_times()
                total += times.user + times.system + times.children_user + times.children_system
    return total


def _run_tunekit_untracked(trials: int, window: int, workdir: Path, tpe_history: int | None = None) -> dict[str, Any]:
    """The tunekit side with tracking off: no MLflow server, PostgreSQL or writer beside the search."""
    import tunekit
    from tunekit.driver.tune_run import synthetic_trials_for_benchmarks

    workdir.mkdir(parents=True, exist_ok=True)
    windows = Windows(window, trials)
    spec = tunekit.load_spec(_spec(trials, None, tpe_history))
    started = time.monotonic()
    with synthetic_trials_for_benchmarks(synthetic_trial, windows), (workdir / "console.log").open("w") as console:
        tunekit.run(spec, storage=workdir, name="tunekit", progress=console)
    return {
        "side": "tunekit_untracked",
        "trials": trials,
        "wall_s": time.monotonic() - started,
        "windows": windows.rows,
    }


def _load_and_report(experiment_dir: Path) -> dict[str, float]:
    import subprocess

    import tunekit

    started = time.monotonic()
    tunekit.load(experiment_dir).trials  # noqa: B018 - the load itself is measured
    loaded = time.monotonic() - started
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "tunekit.cli", "report", str(experiment_dir)], capture_output=True, check=True
    )
    return {"load_s": loaded, "report_s": time.monotonic() - started}


def _count_mlflow(uri: str, experiment: str, results: Any) -> dict[str, Any]:
    """What MLflow holds, counted through its API, against what the experiment recorded."""
    from mlflow.tracking import MlflowClient

    from tunekit.tracking.client import search_all_runs
    from tunekit.tracking.tags import PARENT_RUN_TAG, TAG_ROLE

    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    assert found is not None, f"no MLflow experiment {experiment}"
    ids = [found.experiment_id]
    parents = list(search_all_runs(client, ids, f"tags.`{TAG_ROLE}` = 'experiment'"))
    children = list(search_all_runs(client, ids, f"tags.`{PARENT_RUN_TAG}` = '{parents[0].info.run_id}'"))
    points = sum(len(client.get_metric_history(run.info.run_id, "val_accuracy")) for run in children)
    return {
        "parents": len(parents),
        "children": len(children),
        "trials": len(results.trials),
        "epoch_points": points,
        "epochs": len(results.epochs),
    }


# ------------------------------------------------------------------ peers


def _ray_space() -> dict[str, Any]:
    from ray import tune

    return {
        "learning_rate": tune.loguniform(1e-4, 1e-2),
        "units": tune.choice([32, 64, 128, 256]),
        "dropout": tune.uniform(0.0, 0.5),
        "batch_size": tune.choice([16, 32, 64]),
    }


def _ray_windows(window: int) -> Any:
    """A Ray Tune callback: the driver's process CPU per ended trial over each ``window`` of
    them, so Ray's own growth sits beside tunekit's (which includes it), and when each window
    ended, counted from the callback's creation (before ``ray.init``, as tunekit's)."""
    from ray import tune

    class RayWindows(tune.Callback):
        def __init__(self) -> None:
            self.origin = time.monotonic()
            self.rows: list[dict[str, Any]] = []
            self.ended = 0
            self._last = (time.monotonic(), time.process_time())

        def setup(
            self,
            stop: Any = None,
            num_samples: int | None = None,
            total_num_samples: int | None = None,
            **info: Any,
        ) -> None:
            self._last = (time.monotonic(), time.process_time())  # Ray is up: as tunekit's windows begin

        def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            self.ended += 1
            if self.ended % window == 0:
                self._close()

        def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
            if self.ended % window:
                self._close()

        def _close(self) -> None:
            wall, cpu = time.monotonic(), time.process_time()
            count = self.ended - sum(row["trials"] for row in self.rows)
            self.rows.append(
                {
                    "window": len(self.rows) + 1,
                    "trials": count,
                    "ended": self.ended,
                    "elapsed_s": wall - self.origin,
                    "driver_cpu_per_trial_ms": (cpu - self._last[1]) / count * 1000,
                    "trials_per_minute": count / max(wall - self._last[0], 1e-9) * 60,
                }
            )
            self._last = (wall, cpu)

    return RayWindows()


def _run_ray(trials: int, window: int, workdir: Path, with_optuna: bool, stop_after_s: float | None) -> dict[str, Any]:
    """Plain Ray Tune on the synthetic trial; ``stop_after_s``: Ray stops the search after that
    long (``time_budget_s``), once it can no longer beat the time it is compared with."""
    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler

    search = None
    if with_optuna:
        from ray.tune.search.optuna import OptunaSearch

        search = OptunaSearch(sampler=_sampler())
    windows = _ray_windows(window)
    started, cpu = time.monotonic(), time.process_time()
    ray.init(address="local", num_cpus=SLOTS, include_dashboard=False, log_to_driver=False)
    tuner = tune.Tuner(
        tune.with_resources(plain_trial, {"cpu": 1}),
        param_space=_ray_space(),
        tune_config=tune.TuneConfig(
            metric="val_accuracy",
            mode="max",
            search_alg=search,
            scheduler=ASHAScheduler(max_t=MAX_EPOCHS, grace_period=GRACE, reduction_factor=REDUCTION),
            num_samples=trials,
            max_concurrent_trials=SLOTS,
            reuse_actors=True,
            time_budget_s=stop_after_s,
        ),
        run_config=tune.RunConfig(name="plain", storage_path=str(workdir), verbose=0, callbacks=[windows]),
    )
    grid = tuner.fit()
    ray.shutdown()
    return {
        "wall_s": time.monotonic() - started,
        "driver_cpu_s": time.process_time() - cpu,
        "trials": len(grid),
        "stopped_after_s": stop_after_s if windows.ended < trials else None,
        "ended": windows.ended,
        "windows": windows.rows,
    }


def _sampler(tpe_history: int | None = None) -> Any:
    """The sampler tunekit builds for this benchmark's spec: TPE, multivariate, constant liar,
    seeded; ``tpe_history``: it models only that many recent trials (``search.tpe_history``)."""
    import tunekit
    from tunekit.search.study import build_sampler

    return build_sampler(tunekit.load_spec(_spec(1, "http://127.0.0.1:5000", tpe_history)))


def _run_optuna(trials: int, window: int, history: int | None = None) -> dict[str, Any]:
    """Optuna alone, one trial at a time, its sampler's seconds (ask and tell) summed every
    ``window`` trials; ``history``: TPE models only that many recent trials, through tunekit's
    own sampler wrapper (``search.tpe_history``). It does not sleep the synthetic epochs: only
    the sampler's seconds are its floor, and the sleeps cost minutes at 10,000 trials."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        direction="maximize",
        sampler=_sampler(history),
        pruner=optuna.pruners.SuccessiveHalvingPruner(min_resource=GRACE, reduction_factor=REDUCTION),
    )
    sampler_s, sampler_at, started = 0.0, [], time.monotonic()
    for number in range(1, trials + 1):
        ask = time.monotonic()
        trial = study.ask()
        config = {
            "learning_rate": trial.suggest_float("learning_rate", 1e-4, 1e-2, log=True),
            "units": trial.suggest_categorical("units", [32, 64, 128, 256]),
            "dropout": trial.suggest_float("dropout", 0.0, 0.5),
            "batch_size": trial.suggest_categorical("batch_size", [16, 32, 64]),
        }
        sampler_s += time.monotonic() - ask
        value, pruned = 0.0, False
        for epoch in range(1, MAX_EPOCHS + 1):
            value = curve(config, epoch)
            trial.report(value, epoch)
            if trial.should_prune():
                pruned = True
                break
        tell = time.monotonic()
        study.tell(trial, state=optuna.trial.TrialState.PRUNED) if pruned else study.tell(trial, value)
        sampler_s += time.monotonic() - tell
        if number % window == 0 or number == trials:
            sampler_at.append({"ended": number, "sampler_s": sampler_s})
    completed = optuna.trial.TrialState.COMPLETE
    return {
        "wall_s": time.monotonic() - started,
        "sampler_s": sampler_s,
        "sampler_at": sampler_at,
        "trials": trials,
        "history": history,
        "finals": [[t.number, float(t.values[0])] for t in study.trials if t.state == completed],
    }


# ------------------------------------------------------------------ analysis and main


def analyse(sides: dict[str, dict[str, Any]], sizes: list[int]) -> tuple[list[dict[str, Any]], list[str]]:
    """Each size's figures, from one run of each side to the largest size: a smaller size is
    the run's first trials (its walls, CPU and sampler seconds when that many had ended)."""
    figures: list[dict[str, Any]] = []
    ratios: list[str] = []
    tk, ray_floor, ray_optuna = sides["tunekit"], sides["ray_floor"], sides["ray_optuna"]
    largest = max(sizes)
    for trials in sorted(sizes):
        whole = trials == largest
        tenths = _tenths(tk["windows"], trials)
        first, last = tenths[0], tenths[-1]
        growth = common.ratio(last["driver_cpu_per_trial_ms"], first["driver_cpu_per_trial_ms"])
        # The target leaves out the sampler's own model fitting, which grows with TPE's history.
        growth_driver = common.ratio(_without_sampler(last), _without_sampler(first))
        growth_spent = common.ratio(_without_sampler(last, own=False), _without_sampler(first, own=False))
        ray_tenths = _tenths(ray_floor.get("windows") or [], trials)
        ray_growth = (
            common.ratio(ray_tenths[-1]["driver_cpu_per_trial_ms"], ray_tenths[0]["driver_cpu_per_trial_ms"])
            if ray_tenths
            else None
        )
        # A tunekit side with search.tpe_history: the sampler's floor is TPE with the same history.
        sampler_floor = sides["optuna_history" if tk.get("tpe_history") else "optuna_floor"]
        tk_wall, ray_wall = _wall_at(tk, trials, whole), _wall_at(ray_floor, trials, whole)
        sampler_s = _sampler_at(sampler_floor, trials) or 0.0
        floor = None if ray_wall is None else ray_wall + sampler_s
        vs_floor = common.ratio(tk_wall, floor)
        optuna_wall = _wall_at(ray_optuna, trials, whole)
        if optuna_wall is None:  # stopped at tunekit's whole wall before this many trials ended
            optuna_wall = float(ray_optuna["stopped_after_s"])
            vs_optuna, optuna_text = common.ratio(optuna_wall, tk_wall), f"more than {optuna_wall:.0f} s"
            optuna_note = (
                f"at least: stopped after {optuna_wall:.0f} s (tunekit's whole wall) with "
                f"{ray_optuna['ended']:,} trials ended"
            )
        else:
            vs_optuna, optuna_text, optuna_note = common.ratio(optuna_wall, tk_wall), f"{optuna_wall:.0f} s", ""
        reached = [row for row in tk["windows"] if row["ended"] <= trials]
        at_size = reached[-1]
        figures += [
            common.figure(
                f"{trials} trials: driver CPU per trial without the sampler, last tenth / first",
                growth_driver,
                "x",
                "<= 1.25x",
                growth_driver is not None and growth_driver <= 1.25,
                note=(f"with the sampler's own work: {growth:.2f}x" if growth is not None else "")
                + (
                    f"; with the MLflow writer's CPU as spent in each tenth (not per its trials): {growth_spent:.2f}x"
                    if growth_spent is not None and growth_spent != growth_driver
                    else ""
                )
                + (f"; Ray's floor alone: {ray_growth:.2f}x" if ray_growth is not None else ""),
            ),
            common.figure(
                f"{trials} trials: wall / (Ray's floor + the sampler's floor)",
                vs_floor,
                "x",
                "<= 1.3x",
                vs_floor is not None and vs_floor <= 1.3,
            ),
            common.figure(
                f"{trials} trials: Ray Tune + OptunaSearch wall / tunekit's",
                vs_optuna,
                "x",
                "> 1x",
                # Stopped short at tunekit's whole wall: it was still running when tunekit was done.
                vs_optuna is not None and (vs_optuna > 1 or bool(optuna_note)),
                note=optuna_note,
            ),
            common.figure(f"{trials} trials: driver RSS", at_size["rss_mb"], "MB", "< 1536", at_size["rss_mb"] < 1536),
            common.figure(
                f"{trials} trials: tracker backlog max",
                max(row["backlog_max"] for row in reached),
                note=f"{at_size['backlog_now']} queued when trial {trials:,} ended",
            ),
        ]
        if "tunekit_untracked" in sides:
            figures.append(
                _untracked_figure(trials, _wall_at(sides["tunekit_untracked"], trials, whole), tk_wall, floor)
            )
        if _sampler_at(sides["optuna_floor"], trials) is not None:  # whole history: up to the next-largest size
            figures.append(_history_figure(trials, sides["optuna_floor"], sides["optuna_history"]))
        if whole:
            counted = tk["mlflow"]
            lost = (counted["parents"], counted["children"], counted["epoch_points"]) != (1, trials, counted["epochs"])
            figures += [
                common.figure(
                    f"{trials} trials: MLflow lost nothing ({tk['tracking_backend']})",
                    not lost,
                    target="1 parent, every trial, every epoch",
                    met=not lost,
                    note=str(counted),
                ),
                _tracking_server_figure(trials, tk, sides.get("tunekit_untracked")),
                common.figure(f"{trials} trials: tunekit.load", tk["load_s"], "s", "< 10", tk["load_s"] < 10),
                common.figure(f"{trials} trials: tunekit report", tk["report_s"], "s", "< 10", tk["report_s"] < 10),
            ]
            figures += _tenth_figures(trials, tenths, ray_tenths)
        ratios.append(
            f"{trials} trials: tunekit {tk_wall:.0f} s; Ray floor {_text(ray_wall)}; Ray Tune + OptunaSearch "
            f"{optuna_text}; the sampler alone {sampler_s:.1f} s"
        )
    return figures, ratios


def _tracking_server_figure(trials: int, tk: dict[str, Any], untracked: dict[str, Any] | None) -> dict[str, Any]:
    """What the MLflow server and PostgreSQL spent over the tracked search, on the search's cores."""
    spent = tk.get("tracking_server_cpu_s")
    longer = (
        f"; the tracked search took {tk['wall_s'] - untracked['wall_s']:.0f} s longer than the untracked one"
        if untracked
        else ""
    )
    return common.figure(
        f"{trials} trials: MLflow server and PostgreSQL CPU per trial",
        None if spent is None else 1000 * spent / trials,
        "ms",
        note="" if spent is None else f"{spent:.0f} s of CPU over the search, on the same 2 cores{longer}",
    )


def _untracked_figure(
    trials: int, untracked: float | None, tracked: float | None, floor: float | None
) -> dict[str, Any]:
    """tunekit with tracking off against the floors: what is left once MLflow's work is gone."""
    note = f"{_text(untracked)} against {_text(tracked)} with MLflow tracking on"
    return common.figure(
        f"{trials} trials: tunekit with tracking off, wall / (Ray's floor + the sampler's floor)",
        common.ratio(untracked, floor),
        "x",
        note=note,
    )


def _tenth_figures(trials: int, tenths: list[dict[str, Any]], ray_tenths: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The largest size's tenths: tunekit's driver CPU per trial with its profile, and Ray's."""
    figures = []
    for number, row in enumerate(tenths, 1):
        split = ", ".join(f"{k} {v:.1f}" for k, v in row["split_ms"].items())
        sizes = (
            f"; experiment {row['experiment_dir_mb']:.1f} MB, study {row['study_mb']:.1f} MB"
            if row.get("experiment_dir_mb") is not None
            else ""
        )
        figures.append(
            common.figure(
                f"{trials} trials, tenth {number} (to trial {row['ended']}): driver CPU per trial",
                row["driver_cpu_per_trial_ms"],
                "ms",
                note=f"{split}; {row['trials_per_minute']:.0f} trials/min; without the sampler "
                f"{_without_sampler(row) * row['trials_per_minute'] / 60:.0f} ms of CPU per second; "
                f"backlog max {row['backlog_max']}; RSS {row['rss_mb']:.0f} MB{sizes}",
            )
        )
    for number, row in enumerate(ray_tenths, 1):
        figures.append(
            common.figure(
                f"{trials} trials, Ray's floor, tenth {number} (to trial {row['ended']}): driver CPU per trial",
                row["driver_cpu_per_trial_ms"],
                "ms",
                note=f"{row['trials_per_minute']:.0f} trials/min",
            )
        )
    return figures


def _tenths(rows: list[dict[str, Any]], trials: int) -> list[dict[str, Any]]:
    """The windows of the first ``trials`` ended trials merged into tenths of them (a window
    belongs to the tenth its last trial falls in); [] when the side recorded no windows."""
    groups: list[list[dict[str, Any]]] = [[] for _ in range(TENTHS)]
    for row in rows:
        if row["ended"] <= trials:
            groups[min(TENTHS, math.ceil(row["ended"] * TENTHS / trials)) - 1].append(row)
    return [_merged(group) for group in groups if group]


def _merged(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Consecutive windows as one: per-trial figures weighted by each window's trials."""
    trials = sum(row["trials"] for row in rows)
    minutes = sum(row["trials"] / row["trials_per_minute"] for row in rows)
    per_trial: dict[str, float] = {
        key: sum(row[key] * row["trials"] for row in rows) / trials
        for key in ("driver_cpu_per_trial_ms", "driver_cpu_own_ms", "writer_ms")
        if key in rows[-1]
    }
    merged = {
        **rows[-1],
        "trials": trials,
        **per_trial,
        "trials_per_minute": trials / minutes if minutes else 0.0,
        "backlog_max": max(row.get("backlog_max", 0) for row in rows),
    }
    if "split_ms" in rows[-1]:
        names = {name for row in rows for name in row["split_ms"]}
        merged["split_ms"] = {
            name: sum(row["split_ms"].get(name, 0.0) * row["trials"] for row in rows) / trials for name in names
        }
    return merged


def _wall_at(side: dict[str, Any], trials: int, whole: bool) -> float | None:
    """The side's wall when its ``trials``-th trial ended (its whole wall at the largest size);
    None when it never got there (stopped by its time budget)."""
    if whole:
        return None if side.get("stopped_after_s") else float(side["wall_s"])
    at = next((row for row in side.get("windows", []) if row["ended"] == trials), None)
    return None if at is None else float(at["elapsed_s"])


def _sampler_at(side: dict[str, Any], trials: int) -> float | None:
    """The side's sampler seconds once ``trials`` trials were told; None when it stopped short."""
    return next((float(point["sampler_s"]) for point in side["sampler_at"] if point["ended"] == trials), None)


def _quality(side: dict[str, Any], trials: int) -> tuple[float, int | None]:
    """The best final value among the first ``trials`` trials, and the trial that first came
    within 0.005 of it."""
    finals = [(number, value) for number, value in side["finals"] if number < trials]
    best = max((value for _, value in finals), default=0.0)
    return best, next((number + 1 for number, value in finals if value >= best - 0.005), None)


def _history_figure(trials: int, whole: dict[str, Any], recent: dict[str, Any]) -> dict[str, Any]:
    """search.tpe_history against TPE's whole history: the sampler's seconds, and search quality."""
    whole_s, recent_s = _sampler_at(whole, trials) or 0.0, _sampler_at(recent, trials) or 0.0
    (whole_best, whole_at), (recent_best, recent_at) = _quality(whole, trials), _quality(recent, trials)
    return common.figure(
        f"{trials} trials: TPE modelling the last {recent['history']:,} trials, sampler seconds / whole history's",
        common.ratio(recent_s, whole_s),
        "x",
        note=f"best final value {recent_best:.4f} (reached by trial {recent_at}) against "
        f"{whole_best:.4f} (trial {whole_at}); sampler {recent_s:.1f} s against {whole_s:.1f} s",
    )


def _text(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.0f} s"


def _without_sampler(row: dict[str, Any], *, own: bool = True) -> float:
    """The window's driver CPU per trial less the sampler's; ``own``: with the MLflow writer's
    cost of the window's trials in place of the writer CPU spent in the window (WriterClock)."""
    cpu = row.get("driver_cpu_own_ms", row["driver_cpu_per_trial_ms"]) if own else row["driver_cpu_per_trial_ms"]
    return float(cpu) - float(row["split_ms"].get("sampler", 0.0))


def main(argv: list[str] | None = None) -> int:
    p = common.parser(NAME, __doc__.splitlines()[0])
    p.add_argument(
        "--sizes",
        type=lambda text: [int(n) for n in text.split(",")],
        help="trial counts in place of the mode's, e.g. 5000",
    )
    p.add_argument(
        "--tpe-history",
        type=int,
        default=TPE_HISTORY,
        help=f"the tunekit side's search.tpe_history (default {TPE_HISTORY:,}, the setting the README publishes; "
        "0: TPE models every trial, the spec's default)",
    )
    p.add_argument("--side", choices=("tunekit", *PEERS), help=argparse.SUPPRESS)
    p.add_argument("--trials", type=int, help=argparse.SUPPRESS)
    p.add_argument("--window", type=int, help=argparse.SUPPRESS)
    p.add_argument("--stop-after-s", type=float, help=argparse.SUPPRESS)
    p.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.side:
        # A stopped benchmark still stops the PostgreSQL and mlflow server it started (finally blocks).
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        trials, window = args.trials, args.window
        runs = {
            "tunekit": lambda: _run_tunekit(trials, window, args.workdir, args.tpe_history or None),
            "tunekit_untracked": lambda: _run_tunekit_untracked(trials, window, args.workdir, args.tpe_history or None),
            "ray_floor": lambda: _run_ray(trials, window, args.workdir, False, args.stop_after_s),
            "ray_optuna": lambda: _run_ray(trials, window, args.workdir, True, args.stop_after_s),
            "optuna_floor": lambda: _run_optuna(trials, window),
            "optuna_history": lambda: _run_optuna(trials, window, args.tpe_history or TPE_HISTORY),
        }
        common.write_json(args.result, common.clean(runs[args.side]()))
        return 0

    report = common.Report(NAME, TITLE, args.mode, args.out)
    sizes = sorted(args.sizes or MODES[args.mode])
    trials, window = sizes[-1], max(1, sizes[0] // TENTHS)
    if any(size % window or (size // TENTHS) % window for size in sizes):
        p.error(f"--sizes {sizes}: each size's tenth must be a multiple of the smallest's ({window} trials)")
    sides: dict[str, dict[str, Any]] = {}
    # Under /tmp, not the repository: PostgreSQL's own user must reach its folder.
    root = Path(tempfile.mkdtemp(prefix="tunekit-scale-"))
    os.chmod(root, 0o755)
    try:
        for side in ("tunekit", *PEERS):
            print(f"[{NAME}] {trials} trials: {side} ...", flush=True)
            # Ray Tune with OptunaSearch stops at tunekit's wall: past it, tunekit was faster.
            stop = ["--stop-after-s", f"{sides['tunekit']['wall_s']:.1f}"] if side == "ray_optuna" else []
            # TPE over its whole history costs O(n^2) (522 s of sampler at 10,000 trials, 126 s
            # at 5,000): with a bounded history on the tunekit side it is only the search-quality
            # comparison, made up to the next-largest size.
            whole_history_to = sizes[-2] if len(sizes) > 1 and args.tpe_history else trials
            count = whole_history_to if side == "optuna_floor" else trials
            sides[side] = common.run_child(
                f"benchmarks.{NAME}",
                [
                    f"--{args.mode}",
                    *["--tpe-history", str(args.tpe_history)],
                    *["--side", side, "--trials", str(count), "--window", str(window)],
                    *["--workdir", str(root / side), *stop],
                ],
                root,
                side,
            )
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    figures, ratios = analyse(sides, sizes)
    backend = sides["tunekit"]["tracking_backend"]
    setup = {
        "trial": f"synthetic: {EPOCH_S * 1000:.0f} ms per epoch, up to {MAX_EPOCHS} epochs, a curve from the config",
        "search": f"TPE seed 0, ASHA grace {GRACE} rf {REDUCTION}, {SLOTS} trials at a time; tunekit's "
        + (f"search.tpe_history {args.tpe_history:,}" if args.tpe_history else "TPE over every trial"),
        "tracking": f"mlflow server on 127.0.0.1 backed by {backend}; the search waits until MLflow took every record "
        f"(TUNEKIT_TRACKING_FLUSH_TIMEOUT_S={FLUSH_TIMEOUT_S}, in tunekit's wall)",
        "sizes": f"{', '.join(f'{size:,}' for size in sizes)}: one run of each side to {trials:,} trials, "
        "a smaller size's figures from its first trials",
    }
    notes = [
        "The MLflow backend is PostgreSQL (initdb/pg_ctl in a temp dir)."
        if backend == "postgresql"
        else "No PostgreSQL here (initdb/pg_ctl not found): the MLflow backend fell back to SQLite.",
        "A sampling thread reads the driver's main-thread CPU clock every 2 ms; its own CPU is left out of the "
        "driver's (each window's profiler_ms).",
        "Optuna alone runs one trial at a time, without the epochs' sleeps; its sampler seconds (ask and tell) "
        "are the sampler's floor.",
        "Ray Tune with OptunaSearch runs with time_budget_s at tunekit's whole wall: when it stops short, its "
        "ratio is a lower bound.",
    ]
    return report.finish(figures, ratios, DEFINITIONS, setup, notes, {"sides": sides})


if __name__ == "__main__":
    sys.exit(main())
