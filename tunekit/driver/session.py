"""The Ray session a search runs in: started once per process and kept, or joined.

Also the driver's and workers' environment, the code shipped to cluster nodes, and the
checks that the cluster can run the search (resources, shared storage).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tunekit.compat.ray_node import lean_local_node
from tunekit.compat.ray_tune import (
    notebook_output_kept,
    ray_leaves_sigterm_alone,
    ray_processes_in_their_own_group,
    send_ray_cluster_messages,
)
from tunekit.compat.ray_workers import (
    NO_PRESTART_AT_FIRST_DRIVER,
    TUNE_TRIAL_ENV,
    idle_local_workers,
    local_workers_inherit,
    prestart_workers,
)
from tunekit.config.spec import ExperimentSpec
from tunekit.contract import TrainableRef
from tunekit.driver.connect import record_address
from tunekit.driver.signals import StopSignals, kill_ray_children
from tunekit.errors import ClusterError, ResourceError, StorageError
from tunekit.layout import DRIVER_LOG_FILE
from tunekit.storage.buckets import bucket_of
from tunekit.tracking.prepare import prepare_in_background
from tunekit.worker.devices import LOGICAL_GPUS_ENV

logger = logging.getLogger(__name__)

SAVE_STATE_EVERY_S = 1
SAVE_STATE_AT_MOST_EVERY_S = 30
SAVE_STATE_SHARE = 0.02  # of the driver's time, at most, between those two bounds
# With a bucket as storage, each save uploads Ray's whole state (tunekit's own records go every
# 2 s, tunekit.storage.mirror.PUSH_EVERY_S): a killed driver's resume then redoes up to these seconds.
SAVE_STATE_TO_A_BUCKET_EVERY_S = 5

# Settings of the driver's Ray Tune, and why:
_DRIVER_ENV = {
    # tunekit writes its own trial and epoch tables; Ray's per-result JSON, CSV and
    # TensorBoard loggers would only slow the driver loop every trial waits on.
    "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "1",
    # A failed trial's last report has no metric; the trainable checks metric names
    # itself and fails with the list of names it did see.
    "TUNE_DISABLE_STRICT_METRIC_CHECKING": "1",
    # Save Ray's experiment state (trials, searcher and recorder state) every second,
    # so a killed driver loses at most a second of bookkeeping, unless saves take more
    # than SAVE_STATE_SHARE of that (thousands of trials), when it saves less often, at least
    # every SAVE_STATE_AT_MOST_EVERY_S (see compat.bound_experiment_state_saves).
    "TUNE_GLOBAL_CHECKPOINT_S": str(SAVE_STATE_EVERY_S),
    # verbose=0 alone still prints the new output engine's banner; tunekit shows its own progress.
    "RAY_AIR_NEW_OUTPUT": "0",
    # tunekit handles SIGINT and SIGTERM itself (StopSignals) and stops Tune through the
    # same event Ray's Ctrl-C handler sets, so both signals stop a search the same way.
    "TUNE_DISABLE_SIGINT_HANDLER": "1",
    # Ray's worker and raylet lines go to driver.log, a file: without terminal colour codes.
    "RAY_COLOR_PREFIX": "0",
}


# ...and of the workers:
_WORKER_ENV = {
    "TF_CPP_MIN_LOG_LEVEL": "2",
    # ASHA's STOP reaches a reused worker as SystemExit inside report(). Ray waits only
    # 2 s (read in the worker) for that thread to unwind, then fails the *next* trial
    # outright, without retry; on a busy machine Keras needs longer.
    "TUNE_FUNCTION_THREAD_TIMEOUT_S": "60",
    # Relative paths in a trainable (data folders) resolve against the launch directory.
    "RAY_CHDIR_TO_TRIAL_DIR": "0",
}


@contextlib.contextmanager
def driver_env() -> Iterator[None]:
    """The driver's Ray Tune settings (``_DRIVER_ENV``), in this process while a search runs.

    In Jupyter, Ray Tune's own reporter would clear the cell's output (the opening lines the
    console printed); it is replaced by a silent one meanwhile (``compat.notebook_output_kept``).
    """
    with _environment(_DRIVER_ENV), notebook_output_kept():
        yield


@contextlib.contextmanager
def _environment(env_vars: dict[str, str]) -> Iterator[None]:
    """``env_vars`` set in this process's environment, then each put back as it was."""
    saved = {key: os.environ.get(key) for key in env_vars}
    os.environ.update(env_vars)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def ray_init_options(
    spec: ExperimentSpec | None = None, *, cluster: bool = False, logical_gpus: bool = False
) -> dict[str, Any]:
    """Keyword arguments for ``ray.init`` that tunekit's workers rely on (``tunekit.ray_init_options``).

    Pass them when starting Ray yourself, before calling ``tunekit.run``; for example two
    logical GPUs on a machine without one:
    ``ray.init(address="local", num_gpus=2, **tunekit.ray_init_options(logical_gpus=True))``.
    With ``logical_gpus`` a trial given GPUs TensorFlow cannot see trains on the CPU instead
    of failing, and several whole "GPUs" become as many CPU devices for ``MirroredStrategy``.
    On a cluster, the trainable's top-level package and tunekit itself travel to every
    node through the runtime environment, so nodes need no manual copy.
    """
    cwd = str(Path.cwd())
    python_path = os.pathsep.join(p for p in (cwd, os.environ.get("PYTHONPATH", "")) if p)
    env_vars = {**_WORKER_ENV, "PYTHONPATH": python_path, **({LOGICAL_GPUS_ENV: "1"} if logical_gpus else {})}
    runtime_env: dict[str, Any] = {"env_vars": env_vars}
    if cluster and spec is not None:
        runtime_env["py_modules"] = _code_for_nodes(spec)
    options: dict[str, Any] = {"log_to_driver": False, "logging_level": "ERROR", "runtime_env": runtime_env}
    if not cluster:
        options["include_dashboard"] = False  # only a new local Ray takes this
    return options


def _code_for_nodes(spec: ExperimentSpec) -> list[str]:
    """Directories that must exist on every node: tunekit and the trainable's package."""
    modules = [str(Path(__file__).resolve().parents[1])]  # the tunekit package this driver runs
    trainable = spec.trainable
    if not isinstance(trainable, TrainableRef):
        return modules  # builders passed from Python travel by value, pickled by Ray
    parts = trainable.reference.split(".")
    if not trainable.is_file and len(parts) > 1:
        # trainables/digits_mlp.py for "trainables.digits_mlp": ship the whole package
        modules.append(str(trainable.source.parents[len(parts) - 2]))
    return modules


STORAGE_TIMEOUT_S = 60.0  # each round of the storage probe's node tasks


def check_storage_shared(experiment_dir: Path) -> None:
    """On a multi-node cluster, every node must be able to write the experiment directory.

    Since Ray 2.7 nothing is synced to the head node, so trial checkpoints written to a
    node-local path are lost to the driver. Each node writes a probe file; every node and
    the driver must see them all. The failure reads as ``tunekit doctor --storage`` says it.
    """
    import ray

    from tunekit.doctor.storage import check_storage_on_nodes
    from tunekit.environment import storage_shared_by_nodes

    nodes = [n for n in ray.nodes() if n["Alive"]]
    if len(nodes) < 2:
        return
    # The same probe as `tunekit doctor --address`: each node writes, every node and the driver look.
    labels = {n["NodeID"]: n.get("NodeManagerHostname") or n["NodeManagerAddress"] for n in nodes}
    try:
        found = storage_shared_by_nodes(str(experiment_dir), labels, timeout_s=STORAGE_TIMEOUT_S)
    except ray.exceptions.GetTimeoutError:
        raise StorageError(
            f"storage {experiment_dir} on every node: the nodes did not answer the probe in "
            f"{STORAGE_TIMEOUT_S:g} s; fix: check the cluster is not full (ray status), then run "
            "tunekit doctor --address ADDRESS --storage DIR"
        ) from None
    check = check_storage_on_nodes(str(experiment_dir), found)
    if check.is_problem:
        raise StorageError(f"{check.name}: {check.detail}; fix: {check.fix}")


# Imported by every worker process of the local Ray tunekit starts, as the process starts.
PRELOAD_MODULE = "tunekit.worker.preload"
# Idle workers tunekit starts stay at least this long (a notebook's pause between searches).
WARM_WORKERS_KEPT_S = 3600

# The Ray tunekit started in this process and kept for later runs (notebooks call
# ``tunekit.run`` again and again; starting Ray costs seconds each time). None when
# tunekit started none, or shut it down.
OWNED_RAY: dict[str, Any] | None = None
_ATEXIT_REGISTERED = False


def shutdown() -> None:
    """Stops the Ray that ``tunekit.run`` started in this process and kept for later runs.

    A Ray started by the caller (``ray.init`` before ``tunekit.run``) is left alone. Called
    at interpreter exit too; calling it again is harmless.
    """
    global OWNED_RAY
    if OWNED_RAY is None:
        return
    OWNED_RAY = None
    local_workers_inherit(None, None)
    import ray

    send_ray_cluster_messages(None)
    if ray.is_initialized():
        ray.shutdown()


def _shutdown_at_exit() -> None:
    """``shutdown`` as the interpreter exits. A second Ctrl-C while Ray stops (it takes
    seconds) means "exit now": no traceback; Ray's own exit hook still reaps its processes."""
    try:
        shutdown()
    except KeyboardInterrupt:
        print("tunekit: exiting without waiting for Ray to stop", file=sys.stderr)


def reuses_ray(address: str | None) -> bool:
    """Whether ``ray_session(address, ...)`` would use a Ray already running in this process
    (the caller's, or the one tunekit kept) instead of joining or starting one."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return False
    return OWNED_RAY is None or json.loads(OWNED_RAY["key"])["address"] == address


@contextlib.contextmanager
def ray_session(
    address: str | None,
    spec: ExperimentSpec,
    console: Any = None,
    signals: StopSignals | None = None,
    ray_log: Path | None = None,
    imports: tuple[str, ...] = (),
) -> Iterator[None]:
    """Joins ``address`` or starts a private local Ray (None), once per process.

    The address is chosen already (``tunekit.driver.connect``: --address, RAY_ADDRESS, or a
    resume's recorded cluster) and a cluster answered its bounded probe. A Ray the caller
    started is used as it is and never shut down. One tunekit started is kept for the next
    run when that run would start it the same way (same address and runtime environment:
    the workers' PYTHONPATH, which holds the working directory, and their environment are
    fixed at ``ray.init``); otherwise it is restarted, and says so. Ray's own lines from
    ``ray.init`` go to ``ray_log`` (the experiment's driver.log), not the console. ``imports``,
    the modules the caller needs once Ray is up, are imported while ``ray.init`` waits for Ray's
    processes (``_import_in_background``).
    """
    global OWNED_RAY, _ATEXIT_REGISTERED
    import ray

    # MLflow's imports and store opened while Ray starts, which mostly waits (tunekit.tracking.prepare).
    prepare_in_background(spec)
    options = ray_init_options(spec, cluster=address is not None)
    key = json.dumps({"address": address, "runtime_env": options["runtime_env"]}, sort_keys=True, default=str)
    if ray.is_initialized():
        if OWNED_RAY is None:  # the caller's Ray: its messages are given back after the search
            send_ray_cluster_messages(ray_log)
            try:
                yield
            finally:
                send_ray_cluster_messages(None)
            return
        if OWNED_RAY.get("runtime"):
            _on_the_runtime(address, console)
            send_ray_cluster_messages(ray_log)
            yield
            return
        if OWNED_RAY["key"] == key:
            if console:
                console.phase("reusing the Ray this process started")
            send_ray_cluster_messages(ray_log)
            yield
            return
        if console:
            console.phase(f"restarting Ray: {_why_restart(OWNED_RAY['key'], key)}")
        shutdown()
    if console:
        console.phase(f"starting Ray ({'joining ' + address if address else 'local'})")
    importing = _import_in_background(imports)
    try:
        with ray_leaves_sigterm_alone(), ray_processes_in_their_own_group(), _stderr_to(ray_log):
            # "local": without an address, a new local Ray, never a cluster that happens to run here.
            _init(ray, address, options)
        # Before this thread imports anything more: the same modules imported by two threads at
        # once can meet half-imported (joining a running cluster, ray.init returns at once and
        # driver_env's ``import ray.tune.tune`` failed on Ray Tune's own circular import).
        importing.join()
        if signals is not None:
            signals.install()
            signals.raise_if_received()
    except BaseException:
        if signals is not None:
            signals.handled()  # an interruption must not strike again during the shutdown
        ray.shutdown()  # a half-started Ray must not outlive the process
        raise
    OWNED_RAY = {"key": key, "local": address is None}
    if address is None:  # TensorFlow imported in them while the study and the Tuner are built
        _prestart_warm_workers(spec)
    # Until tunekit shuts its Ray down: a lost node's account arrives after the search too.
    send_ray_cluster_messages(ray_log)
    if not _ATEXIT_REGISTERED:
        atexit.register(_shutdown_at_exit)
        _ATEXIT_REGISTERED = True
    if console:
        resources = ray.cluster_resources()
        console.phase(
            f"Ray is up: {resources.get('CPU', 0):g} CPUs, {resources.get('GPU', 0):g} GPUs"
            f" on {len([n for n in ray.nodes() if n['Alive']])} node(s)"
        )
    yield


# The key of the warm runtime's Ray (``start_runtime_ray``): every local search it serves uses it.
RUNTIME_KEY = json.dumps({"address": None, "runtime_env": "the warm runtime's"})


def start_runtime_ray(ray_log: Path) -> None:
    """Starts the local Ray of the warm runtime (``tunekit up``, ``tunekit.runtime.daemon``), kept
    like the one a process's first search starts, for every local search the runtime serves,
    whichever directory it comes from: a trial imports its module from its import root
    (``tunekit.contract``), not from the workers' PYTHONPATH, which holds the runtime's folder."""
    global OWNED_RAY
    import ray

    with ray_leaves_sigterm_alone(), ray_processes_in_their_own_group(), _stderr_to(ray_log):
        _init(ray, None, ray_init_options())
    OWNED_RAY = {"key": RUNTIME_KEY, "local": True, "runtime": True}


def on_the_runtime() -> bool:
    """Whether this process is the warm runtime (``tunekit up``), whose Ray serves the search."""
    return OWNED_RAY is not None and bool(OWNED_RAY.get("runtime"))


def _on_the_runtime(address: str | None, console: Any) -> None:
    """A search in the warm runtime: on its local Ray, said in one line; a cluster is refused
    (the runtime's one Ray stays up for the next search)."""
    if address is not None:
        raise ClusterError(
            f"ray cluster {address}: the warm runtime (tunekit up) runs searches on its local Ray only; "
            "fix: run the command with TUNEKIT_RUNTIME=off, or stop the runtime with tunekit down"
        )
    if console:
        console.phase(f"on the warm runtime (tunekit up, pid {os.getpid()}): Ray and workers ready")


def _import_in_background(modules: tuple[str, ...]) -> threading.Thread:
    """Imports ``modules`` in a daemon thread, beside ``ray.init``; the caller joins it before it
    imports anything itself.

    Why: ``ray.init`` mostly waits for Ray's processes, which start one after the other, while
    the driver's imports of Ray Tune, Optuna and pandas (0.7 s of CPU, quiet) came before it, on
    the path from the command to the first epoch (which runs through Ray's start, then the
    workers' own). Ray itself is imported already (the caller's ``import ray``): what this thread
    and ``ray.init`` then both import for the first time (argparse, gettext, Ray's usage
    statistics modules, checked with Ray 2.60) imports nothing of the other in a cycle, so the two
    threads' import locks cannot deadlock into a half-imported module. A failed import is left
    for the caller's own import to raise.
    """
    thread = threading.Thread(target=_import_all, args=(modules,), name="tunekit-imports", daemon=True)
    thread.start()
    return thread


def _import_all(modules: tuple[str, ...]) -> None:
    for name in modules:
        with contextlib.suppress(Exception):
            importlib.import_module(name)


def _init(ray: Any, address: str | None, options: dict[str, Any]) -> None:
    """``ray.init``; its failure (a local node too slow to start on a loaded machine) as one line."""
    try:
        if address is None:
            # A local Ray's raylet starts with this process's environment (Ray Tune's trial
            # variables too) and every worker it starts inherits it: as through a runtime
            # environment, except that Ray's prestarted workers, started before a job's runtime
            # environment is known, serve the first trials, and Ray starts none through one more
            # Python process (``trial_runtime_env``). With one Ray started two more workers and
            # left its two idle: 1.0 s to a trial's first actor against 0.3 s. Each worker imports
            # TensorFlow as it starts (tunekit.worker.preload); tunekit starts as many as its
            # trials need (_prestart_warm_workers), not Ray one per CPU.
            with _environment({**options["runtime_env"]["env_vars"], **TUNE_TRIAL_ENV}), lean_local_node():
                ray.init(
                    address="local",
                    _system_config={"preload_python_modules": [PRELOAD_MODULE], **NO_PRESTART_AT_FIRST_DRIVER},
                    **{key: value for key, value in options.items() if key != "runtime_env"},
                )
                local_workers_inherit(ray.get_runtime_context().gcs_address, dict(os.environ))
        else:
            ray.init(address=address, **options)
    except Exception as error:
        cause = " ".join(str(error).split())[:300]
        where = f"ray cluster {address}" if address else "ray (local)"
        raise ClusterError(
            f"{where}: did not start: {type(error).__name__}: {cause}; fix: see driver.log, run tunekit doctor, "
            "and try again when the machine is less loaded"
        ) from error


@contextlib.contextmanager
def _stderr_to(log: Path | None) -> Iterator[None]:
    """Sends this process's stderr (file descriptor 2, where Ray's C++ core logs) to ``log``."""
    if log is None:
        yield
        return
    from tunekit.driver import signals

    sys.stderr.flush()
    saved = os.dup(2)
    signals.console_fd = saved  # a signal's line still reaches the user
    try:
        with log.open("a") as handle:
            os.dup2(handle.fileno(), 2)
            yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        signals.console_fd = None
        os.close(saved)


def joined_address() -> str:
    """The GCS address of the cluster this process joined (``auto`` resolved)."""
    import ray

    return str(ray.get_runtime_context().gcs_address)


def _why_restart(old_key: str, new_key: str) -> str:
    old, new = json.loads(old_key), json.loads(new_key)
    if old["address"] != new["address"]:
        return f"the address changed from {old['address'] or 'local'} to {new['address'] or 'local'}"
    return "the workers' environment changed (working directory, PYTHONPATH or the code shipped to nodes)"


def wait_for_released_resources(timeout: float = 10.0) -> None:
    """Waits until Tune's reused trial actors have released their CPUs and GPUs.

    Tune removes its cached actors when ``fit`` returns, but Ray frees their resources a
    moment later; a run started right after (a notebook) would otherwise see a busy node.
    Only for a Ray tunekit owns: in the caller's Ray other work may hold resources.
    """
    if OWNED_RAY is None:
        return
    import ray

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        total, free = ray.cluster_resources(), ray.available_resources()
        if all(free.get(k, 0.0) >= total.get(k, 0.0) - 1e-6 for k in ("CPU", "GPU")):
            return
        time.sleep(0.1)


def keep_workers_warm(spec: ExperimentSpec) -> None:
    """After a search on the local Ray tunekit started: idle workers with TensorFlow imported
    for the next search in this process (a notebook's next ``tunekit.run``).

    Ray Tune removes its trial actors as a search ends, and their worker processes with
    them; a new search's actors would start new ones, each importing TensorFlow again.
    """
    if _SEARCH_AFTER and OWNED_RAY is not None and OWNED_RAY["local"]:
        _prestart_warm_workers(spec)


_SEARCH_AFTER = True  # whether a search may follow in this process (see no_search_after)


@contextlib.contextmanager
def no_search_after() -> Iterator[None]:
    """The searches inside start no idle workers for a next one as they end: the ``tunekit``
    command's process ends with its search, and they would import TensorFlow only to be stopped."""
    global _SEARCH_AFTER
    saved, _SEARCH_AFTER = _SEARCH_AFTER, False
    try:
        yield
    finally:
        _SEARCH_AFTER = saved


def _prestart_warm_workers(spec: ExperimentSpec) -> None:
    """Starts, idle, as many workers as ``spec`` runs trials at once on this node, less those idle
    already; each imports TensorFlow as it starts (tunekit.worker.preload) and takes a trial's
    actor once it asks."""
    global _WARM_WORKERS
    import ray

    resources = ray.cluster_resources()
    at_once = spec.budget.max_concurrent
    if spec.resources.cpu > 0:
        at_once = min(at_once, int(resources.get("CPU", 0.0) // spec.resources.cpu))
    if spec.resources.gpu > 0:
        at_once = min(at_once, int(resources.get("GPU", 0.0) // spec.resources.gpu))
    missing = at_once - len(idle_local_workers())
    if missing > 0 and prestart_workers(missing, WARM_WORKERS_KEPT_S):
        _WARM_WORKERS = at_once


_WARM_WORKERS = 0  # idle workers tunekit last asked its local Ray to have


def wait_for_warm_workers(stopping: Callable[[], bool], timeout: float = 15.0) -> None:
    """Before Ray Tune asks for its trials' actors: waits until the workers tunekit prestarted
    have registered with the raylet (they start in a second or two, slower on a busy machine).

    An actor asking before then finds no idle worker, and Ray starts another, which imports
    TensorFlow as well, on the cores the first trials need. A worker registers before its
    TensorFlow import, so this waits for no import. Only for the local Ray tunekit started;
    a stop asked meanwhile (``stopping``) ends the wait.
    """
    global _WARM_WORKERS
    if OWNED_RAY is None or not OWNED_RAY["local"] or _WARM_WORKERS == 0:
        return
    deadline = time.monotonic() + timeout
    while len(idle_local_workers()) < _WARM_WORKERS and time.monotonic() < deadline and not stopping():
        time.sleep(0.05)
    _WARM_WORKERS = 0


def callers_ray() -> bool:
    """Whether this session runs on a Ray the caller started (``ray.init`` before ``tunekit.run``)."""
    import ray

    return ray.is_initialized() and OWNED_RAY is None


def check_cluster_fits(spec: ExperimentSpec, experiment_dir: Path) -> None:
    """Refuses a trial no alive node can ever place (Ray Tune would wait forever, silently)."""
    import ray

    from tunekit.config.resources import trial_resources, unplaceable
    from tunekit.driver.connect import ran_on_callers_ray

    nodes = [dict(n.get("Resources") or {}) for n in ray.nodes() if n.get("Alive")]
    problem = unplaceable(trial_resources(spec.resources), nodes, ray.cluster_resources())
    if problem and not callers_ray() and ran_on_callers_ray(experiment_dir):
        # tunekit's own local Ray has only this machine's devices, not the logical GPUs or
        # resources the caller's Ray declared.
        problem += (
            "; this search last ran on a Ray its caller started (with ray.init before tunekit.run): start that "
            "Ray the same way (for logical GPUs, ray.init(..., **tunekit.ray_init_options(logical_gpus=True))) "
            "and call tunekit.resume in that process, or join a Ray started with `ray start` by --address"
        )
    if problem:
        raise ResourceError(problem, experiment_dir)


def kill_owned_local_ray() -> None:
    """Kills the local Ray this process started (its GCS, raylet, agents and workers), at once.

    For the forced exit only: without it, workers busy importing TensorFlow and Ray's
    agents outlive the driver for a minute or more. A Ray on a cluster, or the caller's,
    is left alone.
    """
    if OWNED_RAY is None or not OWNED_RAY["local"]:
        return
    kill_ray_children()


@contextlib.contextmanager
def search_session(
    address: str | None,
    spec: ExperimentSpec,
    experiment_dir: Path,
    console: Any,
    signals: StopSignals,
    imports: tuple[str, ...] = (),
) -> Iterator[None]:
    """One search's Ray session, from its start to its end, around the search's Tuner and ``fit``.

    It starts (or reuses, or joins) Ray as ``ray_session`` does, with the driver's Ray Tune
    settings (``driver_env``), refuses a trial no node can place, records where it ran for the
    next resume (``cluster.json``) and checks every node shares the storage. A search that ends
    without an error then waits for its trials' resources to be released and, unless a signal
    stopped it, leaves idle workers warm for this process's next search.
    """
    with (
        ray_session(address, spec, console, signals, experiment_dir / DRIVER_LOG_FILE, imports),
        # After Ray's start: it imports Ray Tune (in the background meanwhile, with ``imports``).
        driver_env(),
    ):
        # A session that cannot place a trial ran nowhere: cluster.json keeps the last one's.
        check_cluster_fits(spec, experiment_dir)
        # Where this session ran, for the next resume (a local Ray records null).
        record_address(experiment_dir, joined_address() if address is not None else None, callers_ray=callers_ray())
        if bucket_of(experiment_dir) is None:  # a bucket is every node's by its nature
            check_storage_shared(experiment_dir)
        yield
        wait_for_released_resources()
        if signals.received is None:
            keep_workers_warm(spec)  # for this process's next search
