"""Per-trial CPU/GPU shares, TensorFlow device set-up and the choice of strategy.

This is the only module that configures TensorFlow devices. It runs once per worker
process, before any TensorFlow op, because TensorFlow refuses device changes after it
has initialised (and by default maps nearly all GPU memory, so a second trial packed
on the same GPU would run out of memory).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tunekit.config.resources import whole_gpus
from tunekit.config.sections import ResourcesSpec
from tunekit.contract import TrialContext
from tunekit.errors import FatalTrialError

if TYPE_CHECKING:
    import tensorflow as tf

# On a machine without GPUs, Ray can still hand out logical GPUs (ray.init(num_gpus=N)).
# With this set, a trial that was given GPUs TensorFlow cannot see runs on CPU instead of
# failing, and several whole "GPUs" become as many logical CPU devices for MirroredStrategy.
LOGICAL_GPUS_ENV = "TUNEKIT_LOGICAL_GPUS"


@dataclass(frozen=True)
class WorkerDevices:
    """What one worker process ended up with; fixed for the life of the process."""

    strategy: Any  # tf.distribute.Strategy
    replicas: int
    device_names: tuple[str, ...]
    ray_gpu_ids: tuple[str, ...]
    gpu_compute_capability: tuple[int, int] | None
    cpus: int

    @property
    def on_gpu(self) -> bool:
        return any("GPU" in name.upper() for name in self.device_names)


def configure_worker(resources: ResourcesSpec, ray_gpu_ids: list[str]) -> WorkerDevices:
    """Sets threads, GPU memory and devices, then picks the strategy. Call once per process."""
    cpus = max(1, math.floor(resources.cpu))
    # tf.data and op thread pools default to every core; packed trials would fight.
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", str(cpus))
    os.environ.setdefault("TF_NUM_INTEROP_THREADS", str(max(1, min(2, cpus))))
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(cpus)
    tf.config.threading.set_inter_op_parallelism_threads(max(1, min(2, cpus)))
    gpus = tf.config.list_physical_devices("GPU")
    _check_gpu_assignment(resources, ray_gpu_ids, gpus)
    for gpu in gpus:
        _limit_gpu_memory(tf, gpu, resources)
    wanted = whole_gpus(resources)
    if wanted >= 2 and not gpus:
        # Logical GPUs on a CPU machine: split the CPU so MirroredStrategy has replicas.
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * wanted)
    capability = _compute_capability(tf, gpus[0]) if gpus else None
    if wanted >= 2:
        devices = [d.name for d in tf.config.list_logical_devices("GPU" if gpus else "CPU")][:wanted]
        strategy = tf.distribute.MirroredStrategy(devices=devices)
    else:
        strategy = tf.distribute.get_strategy()
        devices = [d.name for d in tf.config.list_logical_devices("GPU" if gpus else "CPU")][:1]
    return WorkerDevices(
        strategy=strategy,
        replicas=strategy.num_replicas_in_sync,
        device_names=tuple(devices),
        ray_gpu_ids=tuple(str(i) for i in ray_gpu_ids),
        gpu_compute_capability=capability,
        cpus=cpus,
    )


def resolve_precision(requested: str, devices: WorkerDevices) -> str:
    """``auto`` is mixed_float16 on GPUs of compute capability >= 7.0 (tensor cores), else float32."""
    if requested != "auto":
        return requested
    capability = devices.gpu_compute_capability
    return "mixed_float16" if capability is not None and capability >= (7, 0) else "float32"


def _check_gpu_assignment(resources: ResourcesSpec, ray_gpu_ids: list[str], gpus: list[Any]) -> None:
    if resources.gpu == 0 or os.environ.get(LOGICAL_GPUS_ENV) == "1":
        return
    if not gpus:
        raise FatalTrialError(
            f"Ray assigned GPU(s) {ray_gpu_ids} to this trial but TensorFlow sees no GPU; "
            "check the CUDA build with `tunekit doctor`, or set resources.gpu: 0"
        )
    expected = max(1, whole_gpus(resources))
    if len(gpus) != expected:
        raise FatalTrialError(
            f"TensorFlow sees {len(gpus)} GPU(s) but Ray assigned {ray_gpu_ids} "
            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r})"
        )


def _limit_gpu_memory(tf_module: Any, gpu: tf.config.PhysicalDevice, resources: ResourcesSpec) -> None:
    if resources.gpu_memory == "cap" and resources.gpu < 1:
        total_mb = tf_module.config.experimental.get_device_details(gpu).get("memory_limit_mb")
        total_mb = total_mb or _nvidia_total_memory_mb()
        limit = int(total_mb * resources.gpu * 0.95)  # leave room for the CUDA context
        tf_module.config.set_logical_device_configuration(
            gpu, [tf_module.config.LogicalDeviceConfiguration(memory_limit=limit)]
        )
    else:
        tf_module.config.experimental.set_memory_growth(gpu, True)


def _compute_capability(tf_module: Any, gpu: Any) -> tuple[int, int] | None:
    details = tf_module.config.experimental.get_device_details(gpu)
    capability = details.get("compute_capability")
    return tuple(capability) if capability else None


def _nvidia_total_memory_mb() -> int:
    import subprocess

    output = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits", "-i", "0"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return int(output.split()[0])


def memory_mb(devices: WorkerDevices) -> float:
    if devices.on_gpu:
        import tensorflow as tf

        return tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def node_id() -> str:
    """This worker's Ray node id ("" outside a Ray worker, as in unit tests)."""
    import ray

    return str(ray.get_runtime_context().get_node_id()) if ray.is_initialized() else ""


def trial_info(ctx: TrialContext, devices: WorkerDevices, scaled_learning_rate: float | None = None) -> dict[str, Any]:
    import tensorflow as tf

    build = tf.sysconfig.get_build_info()
    scaled = {} if scaled_learning_rate is None else {"scaled_learning_rate": scaled_learning_rate}
    return {
        **scaled,
        "cuda_version": str(build.get("cuda_version", "none")),
        "cudnn_version": str(build.get("cudnn_version", "none")),
        "node_id": node_id(),
        "precision": ctx.precision,
        "replicas": ctx.replicas,
        "batch_size": ctx.batch_size,
        "device_names": list(devices.device_names),
        "ray_gpu_ids": list(devices.ray_gpu_ids),
        "jit_compile": ctx.jit_compile,
    }
