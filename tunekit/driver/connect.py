"""Which Ray a search runs on, and joining a cluster with a bound, before anything is written.

One rule for every command (``run``, ``resume``, ``plan --probe``): ``--address`` (``auto``
is the cluster ``ray start`` recorded on this machine), else ``RAY_ADDRESS``, else a private
local Ray. tunekit never attaches to a cluster nobody named; a ``resume`` names the one its
search ran on (``cluster.json``).

``ray.init(address=...)`` has no bound of its own: with nothing listening it retries for
about 14 minutes, and a missing token prints pages before it fails. So a cluster is first
joined by ``tunekit doctor``'s probe, in a child process with a deadline (``--connect-timeout``):
a TCP connect, then ``ray.init`` there, whose log lines are read as they come (a refused token
shows within a second). Each failure becomes one line in the doctor's words, with its fix;
Ray's own lines go to the experiment's ``driver.log``, never the console. The nodes the probe
saw are checked against a trial's resources before the driver's own ``ray.init``.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tunekit.config.resources import trial_resources, unplaceable
from tunekit.config.spec import ExperimentSpec
from tunekit.doctor.report import Check
from tunekit.errors import ClusterError, ResourceError
from tunekit.layout import CLUSTER_FILE, DRIVER_LOG_FILE
from tunekit.storage.store import write_text

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 30.0
IMPORT_ALLOWANCE_S = 60.0  # the probe's import of Ray, before its connect timeout starts
LOCAL = "local"  # Ray's own word for "start a new local instance"


@dataclass(frozen=True)
class Target:
    """Where a search runs: a cluster's address, or None for a private local Ray.

    ``note`` says why, when it is not the obvious choice (a resume that moved).
    """

    address: str | None
    note: str = ""


@dataclass(frozen=True)
class JoinedCluster:
    """What the bounded probe saw of a cluster: each alive node's resources, and Ray's log lines."""

    address: str
    nodes: list[dict[str, float]]
    resources: dict[str, float]
    ray_log: str = field(default="", repr=False)


def run_target(address: str | None) -> Target:
    """``--address``, else ``RAY_ADDRESS``, else a private local Ray (never a cluster nobody named)."""
    chosen = address or os.environ.get("RAY_ADDRESS") or None
    return Target(None if chosen == LOCAL else chosen)


def resume_target(experiment_dir: Path, address: str | None, *, local: bool) -> Target:
    """A resume joins the cluster its search ran on, unless told otherwise.

    Args:
        experiment_dir: holds ``cluster.json`` (the address the search last ran on).
        address: ``--address``: another cluster (said on the console).
        local: ``--local``: a private local Ray, even though the search ran on a cluster.

    Raises:
        ClusterError: both ``address`` and ``local``.
    """
    if address and local:
        raise ClusterError(f"--address {address} and --local: choose one")
    recorded = recorded_address(experiment_dir)
    if local:
        note = f"running on a local Ray (--local); the search ran on {recorded}" if recorded else ""
        return Target(None, note)
    if address:
        target = run_target(address)
        if recorded and target.address != recorded:
            return Target(target.address, f"joining {target.address or 'a local Ray'}; the search ran on {recorded}")
        return target
    if recorded:
        return Target(recorded)
    return run_target(None)


def recorded_address(experiment_dir: Path) -> str | None:
    """The cluster a search last ran on, from ``cluster.json``; None for a local Ray or none recorded."""
    return _cluster_record(experiment_dir).get("address") or None


def ran_on_callers_ray(experiment_dir: Path) -> bool:
    """Whether the search's last session ran on a Ray its caller had started (``cluster.json``)."""
    return bool(_cluster_record(experiment_dir).get("callers_ray"))


def record_address(experiment_dir: Path, address: str | None, *, callers_ray: bool = False) -> None:
    """``cluster.json``: the address this session joined (None: a local Ray), and whether the
    caller had started that Ray itself (``tunekit.run`` in a process with ``ray.init`` done).
    Never the token."""
    record = {"address": address, **({"callers_ray": True} if callers_ray else {})}
    write_text(experiment_dir / CLUSTER_FILE, json.dumps(record) + "\n")


def _cluster_record(experiment_dir: Path) -> dict[str, Any]:
    """``cluster.json`` as written by ``record_address``; empty when there is none or it is unreadable."""
    path = experiment_dir / CLUSTER_FILE
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        logger.debug("no cluster recorded in %s: %s", path, error)
        return {}
    return record if isinstance(record, dict) else {}


def join(address: str, timeout_s: float, *, resuming: bool = False) -> JoinedCluster:
    """Joins the cluster at ``address`` in a child process, within ``timeout_s``.

    Raises:
        ClusterError: nothing listens there, the cluster refused this machine's token, Ray or
            Python differ, or it did not answer in time: one line, the doctor's, with the fix.
    """
    from tunekit.doctor.child import probe
    from tunekit.doctor.cluster import check_ray_reachable, join_problem
    from tunekit.doctor.ray_errors import join_error_in

    unreachable = check_ray_reachable(address)
    if unreachable is not None:
        raise ClusterError(_one_line(unreachable, resuming))
    # The child's own bound is on ray.init; its deadline also allows for importing Ray.
    args = (address, "", f"{timeout_s:g}")
    child = probe("ray", args, timeout_s + IMPORT_ALLOWANCE_S, env={"RAY_DEDUP_LOGS": "0"}, early_answer=join_error_in)
    try:
        result = child.result()
    finally:
        child.kill()
    refused = join_problem(address, result)
    if refused is not None:
        raise ClusterError(_one_line(refused, resuming), ray_log=child.stderr)
    nodes = [dict(node.get("resources") or {}) for node in result.get("nodes", [])]
    return JoinedCluster(address, nodes, dict(result.get("resources") or {}), child.stderr)


def _one_line(check: Check, resuming: bool) -> str:
    elsewhere = "; or resume elsewhere: --address ADDRESS, or --local" if resuming else ""
    return f"{check.name}: {check.detail}; fix: {check.fix}{elsewhere}"


def check_fits(spec: ExperimentSpec, cluster: JoinedCluster | None) -> None:
    """Refuses a trial no node can ever place, before Ray starts (Ray Tune would wait forever).

    Args:
        cluster: what the probe saw of the cluster; None for the private local Ray tunekit is
            about to start, whose one node is this machine, counted the way Ray counts it.
    """
    wanted = trial_resources(spec.resources)
    if cluster is not None:
        problem = unplaceable(wanted, cluster.nodes, cluster.resources)
    else:
        problem = unplaceable(wanted, [_this_machine(spec)])
    if problem:
        raise ResourceError(problem)


def _this_machine(spec: ExperimentSpec) -> dict[str, float]:
    """The CPUs and GPUs a new local Ray would find here (the doctor's counts, without starting Ray)."""
    from tunekit.doctor.cluster import cpu_count

    gpus = 0.0
    if spec.resources.gpu > 0:  # nvidia-smi only when a trial wants a GPU
        from tunekit.doctor.gpus import nvidia_gpus

        gpus = float(nvidia_gpus().visible)
    return {"CPU": cpu_count(), "GPU": gpus}


def keep_ray_log(experiment_dir: Path, text: str) -> None:
    """Adds Ray's own lines (the probe's, ``ray.init``'s) to the experiment's ``driver.log``."""
    if text:
        with (experiment_dir / DRIVER_LOG_FILE).open("a") as log:
            log.write(text if text.endswith("\n") else text + "\n")


def ray_is_running_here() -> bool:
    """Whether this process already has a Ray (the caller's, or one tunekit kept): no probe then."""
    ray = sys.modules.get("ray")
    return bool(ray is not None and getattr(ray, "is_initialized", lambda: False)())
