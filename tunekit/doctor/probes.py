"""The doctor's slow checks, each run as ``python -m tunekit.doctor.probes KIND ARGS...``.

They run in a child process so that a broken TensorFlow or Ray install is reported
instead of crashing the doctor, and so that a hang can be killed at a deadline. Each
prints one line, ``MARK`` followed by a JSON object (``{"error": ...}`` on failure).

Run with ``-m``, this module is ``__main__``: Ray pickles the storage probe functions
by value, so cluster nodes run them without tunekit installed. Only the standard
library is imported at module level: the doctor imports ``MARK`` and ``PROBE_PREFIX``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import sys
import uuid
from collections.abc import Callable
from typing import Any

MARK = "TUNEKIT_DOCTOR_RESULT "
PROBE_PREFIX = ".tunekit-doctor-"
ERROR_CAUSES_SHOWN = 3


def describe(error: BaseException | None) -> str:
    """The error and its causes: Ray wraps "InvalidAuthToken" in a bare ConnectionError."""
    parts: list[str] = []
    texts: list[str] = []
    while error is not None and len(parts) < 6:
        texts.append(str(error))
        text = (str(error).strip().splitlines() or [""])[0]
        parts.append(type(error).__name__ + (": " + text if text else ""))
        error = error.__cause__ or error.__context__
    if any("InvalidAuthToken" in text for text in texts):
        mode = os.environ.get("RAY_AUTH_MODE", "unset")
        return f"InvalidAuthToken: the cluster wants its token (RAY_AUTH_MODE here: {mode})"
    return " <- ".join(parts[:ERROR_CAUSES_SHOWN])[:500]


# ------------------------------------------------------------------------- TensorFlow


def tensorflow_probe() -> dict[str, Any]:
    """TensorFlow's version, the CUDA/cuDNN it was built with and the GPUs it sees."""
    import tensorflow as tf

    info = dict(tf.sysconfig.get_build_info())
    gpus = []
    for device in tf.config.list_physical_devices("GPU"):
        try:
            details = tf.config.experimental.get_device_details(device)
        except Exception:  # details are optional; a device without them is still a GPU
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
# write/seen/clean run on the cluster's nodes (pickled by value, standard library only).


def write(path: str, token: str, node_id: str) -> list[Any]:
    """Creates ``path`` (remembering what it created) and a probe file named for the node."""
    created: list[str] = []
    try:
        node = path
        missing = []
        while not os.path.exists(node) and node != os.path.dirname(node):
            missing.append(node)
            node = os.path.dirname(node)
        for folder in reversed(missing):
            os.mkdir(folder)
            created.append(folder)
        with open(os.path.join(path, PROBE_PREFIX + token + "-" + node_id), "x") as handle:
            handle.write("probe")
        return [socket.gethostname(), "", created]
    except OSError as error:
        return [socket.gethostname(), error.strerror or str(error), created]


def seen(path: str, token: str, node_ids: list[str]) -> list[str]:
    """The nodes whose probe file is visible here."""
    return [n for n in node_ids if os.path.exists(os.path.join(path, PROBE_PREFIX + token + "-" + n))]


def clean(path: str, token: str, node_id: str, created: list[str]) -> None:
    """Removes this node's probe file and the folders its write created."""
    with contextlib.suppress(OSError):
        os.remove(os.path.join(path, PROBE_PREFIX + token + "-" + node_id))
    for folder in reversed(created):
        with contextlib.suppress(OSError):
            os.rmdir(folder)


def ray_probe(address: str, storage: str) -> dict[str, Any]:
    """Joins the cluster: its resources, its nodes and, given ``storage``, whether all share it."""
    import ray

    ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
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
    if storage:
        result["storage"] = _storage_on_every_node(address, storage, [n["NodeID"] for n in nodes])
    return result


def _storage_on_every_node(address: str, storage: str, ids: list[str]) -> dict[str, Any]:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    def on(node_id: str, function: Callable[..., Any]) -> Any:
        task = ray.remote(num_cpus=0, max_retries=0)(function)
        return task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False))

    token = uuid.uuid4().hex[:12]
    written = ray.get([on(i, write).remote(storage, token, i) for i in ids], timeout=60)
    hosts = {i: w[0] for i, w in zip(ids, written, strict=True)}
    errors = {w[0]: w[1] for w in written if w[1]}
    ok_ids = [i for i, w in zip(ids, written, strict=True) if not w[1]]
    unseen: dict[str, list[str]] = {}
    # Through Ray Client the driver's files are elsewhere: only the nodes are compared.
    client = address.startswith("ray://")
    if not errors:
        views = ray.get([on(i, seen).remote(storage, token, ok_ids) for i in ids], timeout=60)
        for i, view in zip(ids, views, strict=True):
            unseen[hosts[i]] = [hosts[o] for o in ok_ids if o not in view]
        if not client:
            mine = seen(storage, token, ok_ids)
            unseen["this machine"] = [hosts[o] for o in ok_ids if o not in mine]
    ray.get([on(i, clean).remote(storage, token, i, w[2]) for i, w in zip(ids, written, strict=True)], timeout=60)
    return {
        "hosts": sorted(set(hosts.values())),
        "write_errors": errors,
        "unseen": unseen,
        "driver_checked": bool(unseen) and not client,
    }


# ------------------------------------------------------------------------- storage URI


def storage_uri_probe(uri: str) -> dict[str, Any]:
    """Writes and deletes a probe object under a ``scheme://`` storage URI."""
    from pyarrow import fs

    filesystem, root = fs.FileSystem.from_uri(uri)
    filesystem.create_dir(root, recursive=True)
    probe = root.rstrip("/") + "/" + PROBE_PREFIX + uuid.uuid4().hex[:8]
    with filesystem.open_output_stream(probe) as stream:
        stream.write(b"probe")
    filesystem.delete_file(probe)
    return {}


PROBES: dict[str, Callable[..., dict[str, Any]]] = {
    "tensorflow": tensorflow_probe,
    "ray": ray_probe,
    "storage-uri": storage_uri_probe,
}


def main(argv: list[str]) -> None:
    kind, *args = argv
    try:
        result = PROBES[kind](*args)
    except BaseException as error:  # every failure, even SystemExit from a library, is the answer
        result = {"error": describe(error)}
    print(MARK + json.dumps(result, default=str), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
