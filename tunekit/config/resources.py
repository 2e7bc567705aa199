"""What a trial asks of the cluster, from the spec's resources section; cheap local checks (no TensorFlow, no Ray)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from tunekit.config.sections import ResourcesSpec

if TYPE_CHECKING:
    pass


def trial_resources(resources: ResourcesSpec) -> dict[str, float]:
    return {"cpu": resources.cpu, "gpu": resources.gpu}


_UNITS = {"cpu": ("CPU", "CPUs"), "gpu": ("GPU", "GPUs")}


def unplaceable(
    wanted: dict[str, float], nodes: list[dict[str, float]], totals: dict[str, float] | None = None
) -> str | None:
    """Why no node can ever run one trial, in one line, or None when some node can.

    Args:
        wanted: a trial's request, as ``trial_resources`` returns it.
        nodes: each alive node's total resources (Ray's ``ray.nodes()[i]["Resources"]``).
        totals: the cluster's totals (``ray.cluster_resources()``); the nodes' sum when omitted.
    """
    for key in ("gpu", "cpu"):
        need = float(wanted.get(key, 0.0))
        if need <= 0:
            continue
        ray_key, units = _UNITS[key]
        largest = max((float(n.get(ray_key, 0.0)) for n in nodes), default=0.0)
        if largest + 1e-9 >= need:
            continue
        total = float((totals or {}).get(ray_key, sum(float(n.get(ray_key, 0.0)) for n in nodes)))
        if total <= 0:
            return f"resources.{key}: {need:g} per trial, but the cluster has 0 {units} (run tunekit doctor)"
        unit = units if largest != 1 else units[:-1]
        return f"resources.{key}: {need:g} per trial, but the largest node has {largest:g} {unit}"
    return None


def local_gpu_count(timeout: float = 2.0) -> int:
    """NVIDIA GPUs on this machine, cheaply (no TensorFlow, no Ray): the driver's list, else nvidia-smi."""
    import shutil
    import subprocess
    from pathlib import Path

    listing = Path("/proc/driver/nvidia/gpus")
    if listing.is_dir():
        return sum(1 for _ in listing.iterdir())
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        output = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in output.stdout.splitlines() if line.startswith("GPU "))


def local_fit_warning(resources: ResourcesSpec) -> str | None:
    """A warning when this machine alone could never run one trial (a cluster may still)."""
    nodes = [{"CPU": float(os.cpu_count() or 1), "GPU": float(local_gpu_count()) if resources.gpu > 0 else 0.0}]
    problem = unplaceable(trial_resources(resources), nodes)
    if problem is None:
        return None
    problem = problem.replace(" (run tunekit doctor)", "")
    problem = problem.replace("the cluster has", "this machine has").replace("the largest node has", "this machine has")
    return f"{problem}; a local run stops at once (a cluster joined with --address may have more)"


def whole_gpus(resources: ResourcesSpec) -> int:
    """GPUs a trial owns outright (0 for a fractional share)."""
    return int(resources.gpu) if resources.gpu >= 1 else 0
