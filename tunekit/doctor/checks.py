"""``tunekit doctor``: checks the stack, the GPUs, the Ray cluster, MLflow tracking and storage.

Each check prints one line, ``ok``, ``PROBLEM`` or ``skip``, and every problem is followed
by one ``fix:`` line. The exit status is 0 when nothing is wrong and 1 otherwise.

The checks live in one module per family: ``stack`` (versions), ``tracking`` (MLflow),
``storage``, ``gpus`` (TensorFlow, NVIDIA) and ``cluster`` (Ray); ``report`` holds the
result type and ``child`` the child processes the slow checks run in.

The doctor never hangs and never imports TensorFlow or Ray in its own process:

- TensorFlow (build info, GPUs) is checked in a child (``tunekit.doctor.probes``), so a broken
  install is reported instead of crashing the doctor, and its 4-8 s import runs while
  the fast checks go on.
- A Ray cluster (``--address`` or ``RAY_ADDRESS``) is inspected in a second child:
  ``ray.init(address=...)``, ``ray.cluster_resources()``, ``ray.nodes()``, and a probe
  task pinned to every node that checks the storage directory is writable there and
  shared by all nodes. ``ray.init`` retries an unreachable address for minutes, so a
  TCP connect with a short timeout goes first, and the child has a deadline.
- Without an address the doctor does not start a local Ray (that costs seconds and
  leaves processes behind). It reports what a local Ray would find: Ray counts NVIDIA
  GPUs through NVML, limited by ``CUDA_VISIBLE_DEVICES``, which is what
  ``nvidia-smi`` lists filtered the same way; CPUs come from the affinity mask and
  the cgroup quota, as Ray counts them.

Secrets (``RAY_AUTH_TOKEN``, MLflow passwords and tokens, users, passwords and tokens in
URIs) are never printed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from tunekit.doctor.child import probe
from tunekit.doctor.cluster import check_cluster, check_local_ray, check_ray_reachable
from tunekit.doctor.gpus import check_tensorflow, nvidia_gpus
from tunekit.doctor.precision import check_cpu_bf16, read_cpuinfo
from tunekit.doctor.ray_errors import join_error_in
from tunekit.doctor.report import OK, SKIP, Check, hide_secrets
from tunekit.doctor.stack import check_import_costs, check_versions
from tunekit.doctor.storage import check_storage
from tunekit.doctor.tracking import check_tracking, default_tracking_uri
from tunekit.storage.buckets import is_uri

TENSORFLOW_TIMEOUT_S = 120.0
RAY_TIMEOUT_S = 90.0


def check_warm_runtime() -> Check:
    """The warm runtime (``tunekit up``): up, with its workers, or not running (neither is a problem)."""
    from tunekit.runtime.client import describe, runtime_status

    status = runtime_status()
    return Check("warm runtime", OK if status is not None else SKIP, describe(status).removeprefix("warm runtime "))


def run_checks(address: str | None, tracking_uri: str | None, storage: str, *, stream: TextIO | None = None) -> int:
    """Runs every check and prints one line per check (plus a fix line per problem).

    Args:
        address: a Ray cluster to inspect (``host:port`` or ``ray://host:port``); default
            ``RAY_ADDRESS``; without either, the local machine is described.
        tracking_uri: the MLflow tracking URI; default ``MLFLOW_TRACKING_URI``, else
            ``sqlite:///<cwd>/mlflow.db``.
        storage: the directory that holds experiment directories.
        stream: where to print (default stdout).

    Returns:
        0 when every check passed, 1 when any found a problem.
    """
    out = stream or sys.stdout
    address = address or os.environ.get("RAY_ADDRESS") or None
    tracking_uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri()
    storage_path = storage if is_uri(storage) else str(Path(storage).expanduser().resolve())

    # The slow children start first and run while the fast checks print.
    quiet_tf = {"TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")}
    tensorflow_child = probe("tensorflow", (), TENSORFLOW_TIMEOUT_S, env=quiet_tf)
    ray_reachable = check_ray_reachable(address) if address else None
    ray_child = None
    if address and ray_reachable is None:
        ray_child = probe(
            "ray",
            (address, storage_path),
            RAY_TIMEOUT_S,
            env={"RAY_DEDUP_LOGS": "0"},
            early_answer=join_error_in,
        )

    checks: list[Check] = []

    def emit(found: Sequence[Check]) -> None:
        for check in found:
            checks.append(check)
            for line in check.lines():
                print(hide_secrets(line), file=out, flush=True)

    print("tunekit doctor", file=out, flush=True)
    try:
        emit(check_versions())
        emit(check_import_costs())
        emit([check_cpu_bf16(read_cpuinfo())])
        emit([check_tracking(tracking_uri)])
        emit([check_storage(storage_path)])
        nvidia = nvidia_gpus()
        emit(check_tensorflow(tensorflow_child.result(), nvidia))
        if address is None:
            emit([check_local_ray(nvidia), check_warm_runtime()])
        elif ray_reachable is not None:
            emit([ray_reachable])
        elif ray_child is not None:  # always, here: the address answered, so its child started
            emit(check_cluster(address, ray_child.result(), storage_path))
    finally:
        tensorflow_child.kill()
        if ray_child is not None:
            ray_child.kill()

    problems = sum(check.is_problem for check in checks)
    if problems:
        print(
            f"tunekit doctor: {problems} problem{'s' if problems > 1 else ''} found; each is followed by its fix",
            file=out,
            flush=True,
        )
        return 1
    print(f"tunekit doctor: all {len(checks)} checks passed", file=out, flush=True)
    return 0
