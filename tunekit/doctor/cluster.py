"""Ray: what a local ``ray.init()`` would find here, or a cluster's resources, nodes and storage."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

from tunekit.doctor.gpus import NvidiaView
from tunekit.doctor.network import connect
from tunekit.doctor.report import Check, ok, problem
from tunekit.doctor.storage import check_bucket_on_nodes, check_storage_on_nodes
from tunekit.storage.buckets import is_uri

logger = logging.getLogger(__name__)


def check_local_ray(nvidia: NvidiaView) -> Check:
    """What ``tunekit run`` without an address does here: start a private local Ray.

    It never attaches to a cluster nobody named, not even one ``ray start`` recorded in the
    temp dir (``--address auto`` joins that one); the line says so when there is one.
    """
    name = "ray (local)"
    address_file = _ray_temp_dir() / "ray_current_cluster"
    try:
        recorded = address_file.read_text().strip()
    except OSError as error:
        logger.debug("no recorded cluster (%s): %s", address_file, error)
        recorded = ""
    detail = (
        f"no --address or RAY_ADDRESS: tunekit run starts a private local Ray with {cpu_count():g} CPUs "
        f"and {nvidia.visible} GPUs (counted without starting Ray)"
    )
    if recorded:
        unreachable = check_ray_reachable(recorded)
        state = f"not answering: {unreachable.detail}" if unreachable else "answering"
        detail += f"; --address auto joins the cluster `ray start` recorded here ({recorded}, {state})"
    return ok(name, detail)


def _ray_temp_dir() -> Path:
    """Ray's temp dir, found as Ray finds it: RAY_TMPDIR, else TMPDIR on Linux, else /tmp."""
    root = os.environ.get("RAY_TMPDIR")
    if root is None and sys.platform.startswith("linux"):
        root = os.environ.get("TMPDIR")
    return Path(root or "/tmp") / "ray"


def cpu_count() -> float:
    """The CPUs Ray would count: the affinity mask, limited by the cgroup (v2) quota."""
    try:
        count: float = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        count = os.cpu_count() or 1
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            count = min(count, max(1.0, int(quota) / int(period)))
    except (OSError, ValueError) as error:
        logger.debug("no cgroup CPU quota: %s", error)
    return count


def check_ray_reachable(address: str) -> Check | None:
    """A fast TCP connect to the cluster's address; None when it answers (or cannot be tested)."""
    host_port = address.split("://", 1)[1] if "://" in address else address
    host, sep, port_text = host_port.rpartition(":")
    if not sep or not port_text.isdigit():
        return None  # "auto" and friends: let ray.init resolve them
    error = connect(host.strip("[]"), int(port_text))
    if error:
        return problem(
            f"ray cluster {address}",
            f"cannot connect ({error})",
            "start the cluster (ray start --head on the head node) or fix --address / RAY_ADDRESS",
        )
    return None


def check_cluster(address: str, result: dict[str, Any], storage: str) -> list[Check]:
    """The cluster's resources and nodes, and the storage as every node sees it.

    Args:
        address: the cluster's address, as given.
        result: the answer of the ``ray`` probe (``tunekit.doctor.probes``).
        storage: the storage directory, or URI (each node writes there with its own credentials).
    """
    name = f"ray cluster {address}"
    refused = join_problem(address, result)
    if refused is not None:
        return [refused]
    resources = result.get("resources", {})
    nodes = result.get("nodes", [])
    checks = [ok(name, f"Ray {result.get('ray_version')}, {len(nodes)} alive node(s), {_resource_text(resources)}")]
    for node in nodes:
        role = ", head" if node.get("head") else ""
        checks.append(ok(f"ray node {node['host']} ({node['ip']})", _resource_text(node["resources"]) + role))
    if not nodes:
        checks.append(problem(name, "no alive nodes", "start the nodes (ray start --address=HEAD:PORT on each)"))
    found = result.get("storage", {})
    checks.append(check_bucket_on_nodes(storage, found) if is_uri(storage) else check_storage_on_nodes(storage, found))
    return checks


def join_problem(address: str, result: dict[str, Any]) -> Check | None:
    """Why the ``ray`` probe could not join the cluster, with the fix; None when it joined."""
    if not result.get("error"):
        return None
    return problem(f"ray cluster {address}", f"cannot join: {result['error']}", _ray_fix(result["error"]))


def _resource_text(resources: dict[str, Any]) -> str:
    cpus, gpus = resources.get("CPU", 0), resources.get("GPU", 0)
    memory = resources.get("memory", 0) / 2**30
    return f"{cpus:g} CPUs, {gpus:g} GPUs, {memory:.1f} GiB memory"


def _ray_fix(error: str) -> str:
    lowered = error.lower()
    if "auth" in lowered and "token" in lowered:
        return (
            "give this machine the cluster's token: RAY_AUTH_MODE=token and RAY_AUTH_TOKEN "
            "(or RAY_AUTH_TOKEN_PATH) from the cluster's secret; see deploy/README.md"
        )
    if "version" in lowered and "mismatch" in lowered:
        return "install the cluster's Ray and Python versions here (the tested stack pins them)"
    if "did not answer" in lowered:
        return "check the address (ray status on the head node) and that its port is reachable"
    return "check the address (ray status on the head node) and the cluster's logs"
