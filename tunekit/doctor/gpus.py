"""TensorFlow's build (CUDA, cuDNN) and the GPUs it sees, against what ``nvidia-smi`` lists."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any

from tunekit.doctor.child import last_line
from tunekit.doctor.report import Check, ok, problem

NVIDIA_SMI_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class NvidiaView:
    """What ``nvidia-smi`` lists: ``gpus`` is None without a driver; ``error`` when it fails."""

    gpus: tuple[str, ...] | None
    error: str = ""

    @property
    def visible(self) -> int:
        """The GPUs a process here may use: the listed ones, limited by CUDA_VISIBLE_DEVICES."""
        listed = len(self.gpus or ())
        mask = os.environ.get("CUDA_VISIBLE_DEVICES")
        if mask is None:
            return listed
        entries = [e for e in mask.split(",") if e.strip()]
        if not entries or entries[0].strip() == "-1":
            return 0
        return min(listed, len(entries))


def nvidia_gpus() -> NvidiaView:
    """The GPUs ``nvidia-smi`` lists (what Ray counts through NVML), one line each."""
    executable = shutil.which("nvidia-smi")
    if executable is None:
        return NvidiaView(None)
    try:
        done = subprocess.run(
            [executable, "--query-gpu=index,name,memory.total,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=NVIDIA_SMI_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return NvidiaView((), f"nvidia-smi did not answer in {NVIDIA_SMI_TIMEOUT_S:g} s")
    except OSError as error:
        return NvidiaView((), str(error))
    if done.returncode != 0:
        reason = last_line(done.stdout + done.stderr) or f"exit status {done.returncode}"
        return NvidiaView((), reason)
    return NvidiaView(tuple(line.strip() for line in done.stdout.splitlines() if line.strip()))


def check_tensorflow(result: dict[str, Any], nvidia: NvidiaView) -> list[Check]:
    """TensorFlow's build (CUDA, cuDNN) and the GPUs it sees, against what nvidia-smi lists.

    Args:
        result: the answer of the ``tensorflow`` probe (``tunekit.doctor.probes``).
        nvidia: what ``nvidia-smi`` lists here.
    """
    checks: list[Check] = []
    if nvidia.error:
        checks.append(
            problem(
                "gpus (nvidia-smi)",
                f"nvidia-smi fails: {nvidia.error}",
                "repair the NVIDIA driver until nvidia-smi lists the GPUs",
            )
        )
    elif nvidia.gpus is None:
        checks.append(ok("gpus (nvidia-smi)", "no NVIDIA driver here; trials run on CPU"))
    else:
        listed = "; ".join(nvidia.gpus) or "none"
        mask = os.environ.get("CUDA_VISIBLE_DEVICES")
        note = "" if mask is None else f" (CUDA_VISIBLE_DEVICES={mask!r}: {nvidia.visible} visible)"
        checks.append(ok("gpus (nvidia-smi)", f"{len(nvidia.gpus)}: {listed}{note}"))

    if result.get("error"):
        checks.append(
            problem(
                "tensorflow build",
                f"TensorFlow fails to load: {result['error']}",
                "reinstall TensorFlow from the tested stack: "
                "pip install -c .ci/constraints.txt --force-reinstall tensorflow",
            )
        )
        return checks
    version = result.get("version", "?")
    if result.get("cuda_build"):
        build = f"{version}, built with CUDA {result.get('cuda')} and cuDNN {result.get('cudnn')}"
    else:
        build = f"{version}, CPU-only build (no CUDA)"
    wants_gpu = nvidia.visible > 0
    if wants_gpu and not result.get("cuda_build"):
        checks.append(
            problem(
                "tensorflow build",
                build,
                f"install a CUDA build: pip install -c .ci/constraints.txt 'tensorflow[and-cuda]=={version}'",
            )
        )
    else:
        checks.append(ok("tensorflow build", build))

    gpus = result.get("gpus") or []
    described = "; ".join(_describe_tf_gpu(gpu) for gpu in gpus)
    seen = f"{len(gpus)}: {described}" if gpus else "none"
    if len(gpus) < nvidia.visible:
        checks.append(
            problem(
                "gpus (tensorflow)",
                f"{seen}, but nvidia-smi shows {nvidia.visible} usable",
                f"install TensorFlow's CUDA libraries (pip install -c .ci/constraints.txt "
                f"'tensorflow[and-cuda]=={version}') and check the driver supports CUDA "
                f"{result.get('cuda')}",
            )
        )
    else:
        checks.append(ok("gpus (tensorflow)", seen if gpus else "none; trials run on CPU"))
    return checks


def _describe_tf_gpu(gpu: dict[str, Any]) -> str:
    text = str(gpu.get("name", "GPU")).replace("/physical_device:", "")
    if gpu.get("model"):
        text += f" {gpu['model']}"
    capability = gpu.get("compute_capability")
    if capability:
        text += f" (compute {'.'.join(str(c) for c in capability)})"
    return text
