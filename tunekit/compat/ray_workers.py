"""Reaches into Ray's workers: idle workers started before the actors that will need them, the
runtime environment of Ray Tune's trial actors, and a trial's working directory on its node (see
``tunekit.compat``). Checked against Ray 2.60."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

# Ray's own prestart, off: at its first driver a raylet starts one idle Python worker per CPU;
# with TensorFlow imported in each (tunekit.worker.preload) they would only cost, a 64-core
# machine running 2 trials at a time importing it 64 times. tunekit asks for as many workers as
# its trials need, for Tune's actors (``prestart_workers``).
NO_PRESTART_AT_FIRST_DRIVER = {"prestart_worker_first_driver": False}

PRESTART_TIMEOUT_S = 10.0

# Ray Tune's ``DEFAULT_ENV_VARS`` (``ray.tune.execution.class_cache``, Ray 2.60), which tunekit's
# local raylet gets in its environment, so that its workers inherit them (``trial_runtime_env``).
# Spelled out: importing Ray Tune before ``ray.init`` would delay Ray's start. Should Ray Tune
# set others, its trials get its runtime environment again (``trial_runtime_env`` compares).
TUNE_TRIAL_ENV = {"PL_DISABLE_FORK": "1"}

# The environment the workers of tunekit's own local Ray inherit from its raylet, and that Ray's
# address: set as tunekit starts it (``local_workers_inherit``), None while it runs none.
_LOCAL_WORKERS: tuple[str, dict[str, str]] | None = None


def local_workers_inherit(gcs_address: str | None, env: dict[str, str] | None) -> None:
    """Records that the local Ray at ``gcs_address`` (started by tunekit) gives each worker ``env``
    (its raylet's, the driver's at ``ray.init``); None: tunekit runs no local Ray of its own."""
    global _LOCAL_WORKERS
    _LOCAL_WORKERS = None if gcs_address is None or env is None else (gcs_address, dict(env))


def tune_actor_runtime_env() -> dict[str, Any]:
    """The runtime environment Ray Tune gives its trial actors, from this process's environment.

    Ray 2.60's ``_ActorClassCache.get`` creates every trainable's actor class with
    ``{"env_vars": ...}``: its defaults and the variables it copies from the driver's
    environment. A raylet hands an actor only an idle worker started for the same runtime
    environment, so workers started without it (Ray's own prestarted ones) never ran a trial.
    """
    from ray.tune.execution.class_cache import DEFAULT_ENV_VARS, ENV_VARS_TO_PROPAGATE

    copied = {name: os.environ[name] for name in ENV_VARS_TO_PROPAGATE if name in os.environ}
    return {"env_vars": {**DEFAULT_ENV_VARS, **copied}}


def trial_runtime_env() -> dict[str, Any]:
    """The runtime environment of the trials' actors on the Ray this process runs: none on
    tunekit's own local Ray when its workers inherited each of Ray Tune's variables
    (``tune_actor_runtime_env``) with the same value, else Ray Tune's.

    Why none: a raylet starts a worker for an actor with a runtime environment through two Python
    processes in turn (``setup_worker.py``, which imports Ray and execs ``default_worker.py``,
    which imports it again), after a round trip to its runtime-environment agent; without one,
    ``default_worker.py`` starts at once. On 2 cores the first trial's worker went from its start
    to its TensorFlow import in 1.9 s against 3.6 s (medians of 8, load 4-12; the performance
    page). The variables reach the worker all the same: the raylet's environment is the driver's
    at ``ray.init``, with ``TUNE_TRIAL_ENV``.
    """
    import ray

    address = ray.get_runtime_context().gcs_address if ray.is_initialized() else None
    return runtime_env_on(address, tune_actor_runtime_env())


def runtime_env_on(gcs_address: str | None, tune: dict[str, Any]) -> dict[str, Any]:
    """``trial_runtime_env`` on the Ray at ``gcs_address`` (None: none), ``tune`` being Ray Tune's."""
    if _LOCAL_WORKERS is None or gcs_address != _LOCAL_WORKERS[0]:  # not tunekit's own local Ray
        return tune
    inherited = _LOCAL_WORKERS[1]
    if any(inherited.get(name) != value for name, value in tune["env_vars"].items()):
        return tune  # a variable changed since Ray started (AWS credentials in a notebook)
    return {}


def trial_actors_in_their_runtime_env() -> None:
    """Ray Tune creates its trial actors with ``trial_runtime_env`` instead of its own runtime
    environment. Checked against Ray 2.60: each ``TuneController`` makes one actor class per
    trainable in its ``_ActorClassCache.get``, the only place that sets their runtime environment."""
    import ray
    from ray.tune.execution.class_cache import _ActorClassCache

    def get(self: Any, trainable_cls: Any) -> Any:
        if trainable_cls not in self._cache:
            runtime_env = trial_runtime_env()
            remote = ray.remote(runtime_env=runtime_env) if runtime_env else ray.remote
            self._cache[trainable_cls] = remote(trainable_cls)
        return self._cache[trainable_cls]

    _ActorClassCache.get = get  # type: ignore[method-assign]


def prestart_workers(count: int, keep_alive_s: int) -> bool:
    """Asks this node's raylet to start ``count`` idle Python workers for Ray Tune's trial actors
    of this driver's job (their runtime environment: ``trial_runtime_env``).

    Ray's ``PrestartWorkers`` request to the raylet (node_manager.proto, since Ray 2.40) has no
    public call. Workers it starts are idle and were never leased, so an actor's lease can take
    one (a worker that ran a task cannot host an actor); the raylet keeps them at least
    ``keep_alive_s`` seconds (it caps ``count`` at its ``restart_workers_api_max_num_workers``,
    10). It answers at once; the workers start in the background. The runtime environment is
    described as Ray's ``ActorClass._remote`` describes an actor's, so the raylet's hashes match.

    Returns whether the raylet took the request. Anything else (a Ray without the request,
    a refused token) is logged: the trials' workers then start when their actors ask, as
    without it.
    """
    import ray

    try:
        from ray._private.grpc_utils import init_grpc_channel
        from ray._private.utils import get_runtime_env_info, parse_runtime_env_for_task_or_actor
        from ray.core.generated import common_pb2, node_manager_pb2, node_manager_pb2_grpc
        from ray.runtime_env import RuntimeEnv

        node = ray._private.worker.global_worker.node
        runtime_env = parse_runtime_env_for_task_or_actor(trial_runtime_env()) or RuntimeEnv()
        # protobuf's generated modules have no type stubs: their message classes are made at import
        request = node_manager_pb2.PrestartWorkersRequest(  # type: ignore[attr-defined]
            language=common_pb2.Language.PYTHON,  # type: ignore[attr-defined]
            job_id=bytes.fromhex(ray.get_runtime_context().get_job_id()),
            runtime_env_info=get_runtime_env_info(runtime_env, is_job_runtime_env=False, serialize=False),
            keep_alive_duration_secs=keep_alive_s,
            num_workers=count,
        )
        channel = init_grpc_channel(f"{node.node_ip_address}:{node.node_manager_port}")
        try:
            node_manager_pb2_grpc.NodeManagerServiceStub(channel).PrestartWorkers(request, timeout=PRESTART_TIMEOUT_S)
        finally:
            channel.close()
    except Exception as error:
        logger.info("Ray did not prestart %d worker(s): %s: %s", count, type(error).__name__, error)
        return False
    return True


def idle_local_workers() -> set[int]:
    """The pids of the idle workers of the local Ray this process started: registered with its
    raylet, no task or actor yet. Ray titles such a process ``ray::IDLE`` once it has registered
    (a worker still starting has Python's command line), so this reads the process table, without
    a request to Ray. The raylet of a local Ray is a child of the process that started it (other
    Rays on the machine are not)."""
    import psutil

    idle = set()
    for process in psutil.Process().children(recursive=True):
        try:
            if process.cmdline()[:1] == ["ray::IDLE"]:
                idle.add(process.pid)
        except psutil.Error:  # it ended meanwhile
            continue
    return idle


def trial_working_directory() -> Path:
    """The running trial's working directory on this node: the folder Ray Tune uploads to the
    trial's folder in storage when ``SyncConfig(sync_artifacts=True)`` (at each checkpoint and,
    from the actor's main thread, whenever the attempt ends: stopped, failed or reused).

    Why private: ``tune.get_context().get_trial_dir()`` is Ray's driver staging path in an
    actor's first trial and this folder only after a reuse (``FunctionTrainable.setup`` and
    ``reset_config`` build ``TrialInfo`` with different ``logdir``s). Checked against Ray 2.60
    (``StorageContext.trial_working_directory``).
    """
    from ray.train._internal.session import get_session

    session = get_session()
    if session is None or session.storage is None:
        raise RuntimeError("trial_working_directory: not inside a Ray Tune trial")
    return Path(session.storage.trial_working_directory)
