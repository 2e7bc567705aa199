"""The doctor's slow checks, each run as ``python -m tunekit.doctor.probes KIND ARGS...``.

They run in a child process so that a broken TensorFlow or Ray install is reported
instead of crashing the doctor, and so that a hang can be killed at a deadline. Each
prints one line, ``MARK`` followed by a JSON object (``{"error": ...}`` on failure);
``tunekit.doctor.child`` starts them and reads that line.

The storage probe on a cluster is ``tunekit.environment.storage_shared_by_nodes``, the
one the driver runs before a search: its node functions are pickled by value, so cluster
nodes run them without tunekit installed. Only the standard library (and tunekit's
standard-library modules) are imported at module level; TensorFlow, Ray and pyarrow are
imported by the probe that needs them.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from tunekit.doctor.child import MARK
from tunekit.doctor.ray_errors import describe
from tunekit.environment import STORAGE_PROBE_PREFIX, bucket_writable_by_nodes, storage_shared_by_nodes

STORAGE_TIMEOUT_S = 60.0


# ------------------------------------------------------------------------- TensorFlow


def tensorflow_probe() -> dict[str, Any]:
    """TensorFlow's version, the CUDA/cuDNN it was built with and the GPUs it sees."""
    import tensorflow as tf

    info = dict(tf.sysconfig.get_build_info())
    gpus = []
    for device in tf.config.list_physical_devices("GPU"):
        try:
            details = tf.config.experimental.get_device_details(device)
        except Exception as error:  # details are optional; a device without them is still a GPU
            logging.getLogger(__name__).debug("no details for %s: %s", device.name, error)
            details = {}
        gpus.append(
            {
                "name": device.name,
                "model": details.get("device_name"),
                "compute_capability": details.get("compute_capability"),
            }
        )
    return {
        "version": tf.__version__,
        "cuda": info.get("cuda_version"),
        "cudnn": info.get("cudnn_version"),
        "cuda_build": bool(info.get("is_cuda_build")),
        "gpus": gpus,
    }


# ------------------------------------------------------------------------- Ray cluster


def ray_probe(address: str, storage: str, join_timeout_s: str = "") -> dict[str, Any]:
    """Joins the cluster: its resources, its nodes and, given ``storage``, whether all share it.

    ``join_timeout_s`` bounds ``ray.init`` itself, counted after Ray's import (seconds on a
    loaded machine), so a short bound still tells a refused token from a silent cluster.
    """
    import ray

    deadline = _answer_at(float(join_timeout_s)) if join_timeout_s else None
    ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
    if deadline is not None:
        deadline.cancel()
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    result: dict[str, Any] = {
        "ray_version": ray.__version__,
        "resources": ray.cluster_resources(),
        "nodes": [
            {
                "host": n.get("NodeManagerHostname"),
                "ip": n.get("NodeManagerAddress"),
                "resources": n.get("Resources", {}),
                "head": "node:__internal_head__" in n.get("Resources", {}),
            }
            for n in nodes
        ],
    }
    labels = {n["NodeID"]: n.get("NodeManagerHostname") or n["NodeManagerAddress"] for n in nodes}
    if "://" in storage and not storage.startswith("file://"):  # a bucket: each node with its own credentials
        result["storage"] = bucket_writable_by_nodes(storage, labels, timeout_s=STORAGE_TIMEOUT_S)
    elif storage:
        # The node functions are pickled by value: the nodes need not have tunekit.
        # Through Ray Client the driver's files are elsewhere: only the nodes are compared.
        result["storage"] = storage_shared_by_nodes(
            storage,
            labels,
            check_here=not address.startswith("ray://"),
            timeout_s=STORAGE_TIMEOUT_S,
        )
    return result


def _answer_at(seconds: float) -> threading.Timer:
    """Answers "did not answer" and ends the probe once ``seconds`` pass (``ray.init`` retries for minutes)."""

    def expire() -> None:
        print(MARK + json.dumps({"error": f"did not answer in {seconds:g} s"}), flush=True)
        os._exit(0)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    return timer


# ------------------------------------------------------------------------- storage URI


def storage_uri_probe(uri: str) -> dict[str, Any]:
    """Writes and deletes a probe object under a ``scheme://`` storage URI."""
    from pyarrow import fs

    filesystem, root = fs.FileSystem.from_uri(uri)
    filesystem.create_dir(root, recursive=True)
    probe = root.rstrip("/") + "/" + STORAGE_PROBE_PREFIX + uuid.uuid4().hex[:8]
    with filesystem.open_output_stream(probe) as stream:
        stream.write(b"probe")
    filesystem.delete_file(probe)
    return {}


PROBES: dict[str, Callable[..., dict[str, Any]]] = {
    "tensorflow": tensorflow_probe,
    "ray": ray_probe,
    "storage-uri": storage_uri_probe,
}


def _exit_with_parent() -> None:
    """Ends this probe when the process that started it is gone (killed): nothing outlives it."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="tunekit-probe-parent", daemon=True).start()


def main(argv: list[str]) -> None:
    _exit_with_parent()
    kind, *args = argv
    try:
        result = PROBES[kind](*args)
    except BaseException as error:  # every failure, even SystemExit from a library, is the answer
        result = {"error": describe(error)}
    print(MARK + json.dumps(result, default=str), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
