"""Reaches into Ray's workers: idle workers started before the actors that will need them, and
a trial's working directory on its node (see ``tunekit.compat``). Checked against Ray 2.60."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

# Ray's own prestart, off: at its first driver a raylet starts one idle worker per CPU, but
# without the runtime environment Ray Tune gives its trial actors (``tune_actor_runtime_env``),
# so no trial ever ran in one; with TensorFlow imported in each (tunekit.worker.preload) they
# would only cost, a 64-core machine running 2 trials at a time importing it 64 times. tunekit
# asks for as many workers as its trials need, for Tune's actors (``prestart_workers``).
NO_PRESTART_AT_FIRST_DRIVER = {"prestart_worker_first_driver": False}

PRESTART_TIMEOUT_S = 10.0


def tune_actor_runtime_env() -> dict[str, Any]:
    """The runtime environment Ray Tune gives its trial actors, from this process's environment.

    Ray 2.60's ``_ActorClassCache.get`` creates every trainable's actor class with
    ``{"env_vars": ...}``: its defaults and the variables it copies from the driver's
    environment. A raylet hands an actor only an idle worker started for the same runtime
    environment, so workers started without it (Ray's own prestarted ones) never ran a trial:
    the trials' actors started two more.
    """
    from ray.tune.execution.class_cache import DEFAULT_ENV_VARS, ENV_VARS_TO_PROPAGATE

    copied = {name: os.environ[name] for name in ENV_VARS_TO_PROPAGATE if name in os.environ}
    return {"env_vars": {**DEFAULT_ENV_VARS, **copied}}


def prestart_workers(count: int, keep_alive_s: int) -> bool:
    """Asks this node's raylet to start ``count`` idle Python workers for Ray Tune's trial actors
    of this driver's job (their runtime environment: ``tune_actor_runtime_env``).

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

        node = ray._private.worker.global_worker.node
        runtime_env = parse_runtime_env_for_task_or_actor(tune_actor_runtime_env())
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
