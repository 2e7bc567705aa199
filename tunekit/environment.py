"""What tunekit finds around it: the installed stack, URIs safe to show, shared storage.

One home for three things the doctor, the tracker, the driver and the benchmarks all need:

- ``PACKAGES`` and ``installed_versions()``: the stack's versions, read from package
  metadata (TensorFlow is never imported to learn its version).
- ``redact_uri()``: a URI without its user, password and token-like query parameters,
  the only form in which a URI is printed, logged or recorded.
- ``sqlite_database()``: the database file of a ``sqlite:///`` tracking URI (the doctor checks
  it; the tracker keeps its artifacts beside it).
- ``storage_shared_by_nodes()``: whether every node of a Ray cluster can write a
  directory and sees the files the others write there; ``bucket_writable_by_nodes()``:
  whether every node can write under a storage URI with its own credentials.

Only the standard library is imported at module level, so importing this module costs
nothing; the storage probe imports Ray when it is called, inside a session its caller joined.
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import urllib.parse
import uuid
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

# The packages whose versions tunekit reports, by name, each with the distributions that
# provide it (other wheels of the same project); the first one installed wins.
PACKAGES: dict[str, tuple[str, ...]] = {
    "tensorflow": ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-macos", "tf-nightly"),
    "keras": ("keras",),
    "ray": ("ray",),
    "optuna": ("optuna",),
    "mlflow": ("mlflow", "mlflow-skinny"),
    # keras.callbacks.TensorBoard needs it (TensorFlow 2.21 does not install it); tunekit's
    # own TensorBoard logs are written with tensorboardX, which needs no TensorFlow.
    "tensorboard": ("tensorboard", "tb-nightly"),
    "tensorboardX": ("tensorboardX",),
    "numpy": ("numpy",),
    "tunekit": ("tunekit",),
    # CUDA/cuDNN as pip wheels (tensorflow[and-cuda]); a trainable may report the
    # build's versions instead as info keys cuda_version / cudnn_version.
    "cuda_wheel": ("nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu11"),
    "cudnn_wheel": ("nvidia-cudnn-cu12", "nvidia-cudnn-cu11"),
}
# The stack tunekit is built on: the doctor checks each against tunekit's requirements.
STACK = ("tensorflow", "keras", "ray", "optuna", "mlflow", "tensorboard", "tensorboardX")

REDACTED = "***"
# Query parameters whose value is a credential: tokens, keys and signatures of presigned
# or SAS URLs (AWS X-Amz-Signature / X-Amz-Credential, GCS X-Goog-Signature, Azure sig).
_SECRET_PARAM_WORDS = ("token", "secret", "passw", "pwd", "signature", "credential", "auth", "apikey", "api_key")
_SECRET_PARAMS = frozenset({"sig", "key", "access_key", "accesskey", "private_key", "code"})

STORAGE_PROBE_PREFIX = ".tunekit-probe-"
THIS_MACHINE = "this machine"


# --------------------------------------------------------------------------- versions


def installed(name: str) -> tuple[str, str] | None:
    """The distribution that provides ``name`` and its version, or None when none is installed.

    Args:
        name: a key of ``PACKAGES``, or any distribution name.
    """
    for distribution in PACKAGES.get(name, (name,)):
        try:
            return distribution, metadata.version(distribution)
        except metadata.PackageNotFoundError:
            continue
    return None


def installed_versions(names: Iterable[str] = tuple(PACKAGES)) -> dict[str, str]:
    """Python's version (key ``python``) and the version of each installed package of ``names``.

    Packages that are not installed are left out.

    Args:
        names: keys of ``PACKAGES`` or other distribution names; default all of ``PACKAGES``.
    """
    versions = {"python": platform.python_version()}
    for name in names:
        found = installed(name)
        if found is not None:
            versions[name] = found[1]
    return versions


# --------------------------------------------------------------------------- URIs


def redact_uri(uri: str) -> str:
    """The URI without user, password and the values of token-like query parameters.

    Anything that is not a ``scheme://`` URI (a local path) is returned unchanged, and so
    is every other part of a URI, byte for byte.

    >>> redact_uri("https://alice:s3cret@mlflow.example.com:5000/x")
    'https://mlflow.example.com:5000/x'
    >>> redact_uri("s3://bucket/results?region=eu-west-1&X-Amz-Signature=abc")
    's3://bucket/results?region=eu-west-1&X-Amz-Signature=***'
    """
    scheme, sep, rest = uri.partition("://")
    if not sep:
        return uri
    authority = re.match(r"[^/?#]*", rest)
    host = authority.group(0) if authority else ""
    tail = rest[len(host) :]
    host = host.rpartition("@")[2]  # user:password@ or a bare token@
    before_fragment, hash_sign, fragment = tail.partition("#")
    path, question, query = before_fragment.partition("?")
    if query:
        query = "&".join(_redact_param(param) for param in query.split("&"))
    return f"{scheme}://{host}{path}{question}{query}{hash_sign}{fragment}"


def _redact_param(param: str) -> str:
    key, equals, value = param.partition("=")
    if not (equals and value):
        return param
    name = re.sub(r"%[0-9a-fA-F]{2}", "_", key).lower().replace("-", "_").replace(".", "_")
    if name in _SECRET_PARAMS or any(word in name for word in _SECRET_PARAM_WORDS):
        return f"{key}={REDACTED}"
    return param


# --------------------------------------------------------------------------- storage


def sqlite_database(uri: str) -> Path | None:
    """The absolute path of the database file of a SQLite URI (SQLAlchemy's form:
    ``sqlite:///relative.db`` from the working directory, ``sqlite:////absolute.db``); None
    for another scheme or an in-memory database (``sqlite://``, ``sqlite:///:memory:``)."""
    text = uri.split("?", 1)[0]
    if not text.lower().startswith("sqlite:///"):
        return None
    path_text = text[len("sqlite:///") :]
    if path_text in ("", ":memory:"):
        return None
    path = Path(urllib.parse.unquote(path_text)).expanduser()
    return (path if path.is_absolute() else Path.cwd() / path).resolve()


def storage_shared_by_nodes(
    path: str, nodes: Mapping[str, str], *, check_here: bool = True, timeout_s: float | None = None
) -> dict[str, Any]:
    """Whether every node of the joined Ray cluster can write ``path`` and sees the others' files.

    Each node writes a probe file named for it (creating missing folders), then every node
    and, with ``check_here``, this process list the probes they see; the probes and the
    folders made for them are removed at the end. Since Ray 2.7 nothing is synced to the
    head node, so a directory that is not shared loses the trials' checkpoints.

    The functions that run on the nodes are defined in this function, so Ray pickles them
    by value and they use only the standard library: the nodes need not have tunekit.

    Args:
        path: the directory, the same path on every node.
        nodes: the alive nodes, node ID -> the label to report it by (host name or address).
        check_here: also check that this process sees every node's file (not through Ray
            Client, whose driver runs elsewhere).
        timeout_s: how long to wait for each round of tasks; None waits without limit.

    Returns:
        A JSON-serialisable mapping: ``hosts`` (the sorted labels), ``write_errors`` (label ->
        why the node could not write), ``unseen`` (viewer -> labels whose files it does not
        see; ``THIS_MACHINE`` is this process), ``driver_checked`` (whether this process
        compared). Visibility is compared only when every node could write.

    Raises:
        ray.exceptions.GetTimeoutError: when a round of tasks takes longer than ``timeout_s``.
    """
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    token = uuid.uuid4().hex[:12]
    prefix = STORAGE_PROBE_PREFIX + token + "-"

    def write(node_id: str) -> list[Any]:
        created: list[str] = []
        try:
            missing, node = [], path
            while not os.path.exists(node) and node != os.path.dirname(node):
                missing.append(node)
                node = os.path.dirname(node)
            for folder in reversed(missing):
                try:
                    os.mkdir(folder)
                except FileExistsError:
                    continue  # another node made it first: the directory is shared
                created.append(folder)
            with open(os.path.join(path, prefix + node_id), "x") as handle:
                handle.write("tunekit storage probe\n")
            return ["", created]
        except OSError as error:
            return [error.strerror or str(error), created]

    def seen(node_ids: list[str]) -> list[str]:
        return [n for n in node_ids if os.path.exists(os.path.join(path, prefix + n))]

    def remove_probe(node_id: str) -> None:
        # Missing when its write failed; one that cannot be removed does not change the answer.
        with contextlib.suppress(OSError):
            os.remove(os.path.join(path, prefix + node_id))

    def remove_folders(created: list[str]) -> None:
        for folder in reversed(created):
            try:
                os.rmdir(folder)
            except OSError:
                return  # not empty: someone else's files live there now; keep it

    def on(node_id: str, function: Any) -> Any:
        task = ray.remote(num_cpus=0, max_retries=0)(function)
        return task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False))

    ids = list(nodes)
    written = ray.get([on(i, write).remote(i) for i in ids], timeout=timeout_s)
    errors = {nodes[i]: w[0] for i, w in zip(ids, written, strict=True) if w[0]}
    unseen: dict[str, list[str]] = {}
    if not errors:
        views = ray.get([on(i, seen).remote(ids) for i in ids], timeout=timeout_s)
        for i, view in zip(ids, views, strict=True):
            unseen[nodes[i]] = [nodes[o] for o in ids if o not in view]
        if check_here:
            mine = seen(ids)
            unseen[THIS_MACHINE] = [nodes[o] for o in ids if o not in mine]
    # Probes first, folders after: a folder one node made holds the others' probes too.
    ray.get([on(i, remove_probe).remote(i) for i in ids], timeout=timeout_s)
    ray.get([on(i, remove_folders).remote(w[1]) for i, w in zip(ids, written, strict=True) if w[1]], timeout=timeout_s)
    return {
        "hosts": sorted(set(nodes.values())),
        "write_errors": errors,
        "unseen": unseen,
        "driver_checked": bool(unseen) and check_here,
    }


def bucket_writable_by_nodes(uri: str, nodes: Mapping[str, str], *, timeout_s: float) -> dict[str, Any]:
    """Whether every node of the joined Ray cluster can write and delete an object under the
    storage URI ``uri``, with the credentials and endpoint of that node's own environment (as
    its trials would: a node without them fails here, not in its trials).

    A task pinned to each node writes a probe object named for it and deletes it, through
    pyarrow (which Ray Tune's storage needs on every node). The function is defined here, so
    Ray pickles it by value: the nodes need not have tunekit.

    Returns:
        A JSON-serialisable mapping: ``hosts`` (the sorted labels) and ``write_errors`` (label
        -> why the node could not write, or that it did not answer within ``timeout_s``).
    """
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    prefix = STORAGE_PROBE_PREFIX + uuid.uuid4().hex[:12] + "-"

    def write_and_delete(node_id: str) -> str:
        try:
            from pyarrow import fs

            filesystem, root = fs.FileSystem.from_uri(uri)
            probe = root.rstrip("/") + "/" + prefix + node_id
            with filesystem.open_output_stream(probe) as stream:
                stream.write(b"tunekit storage probe\n")
            filesystem.delete_file(probe)
            return ""
        except Exception as error:  # every failure is the answer
            return f"{type(error).__name__}: {error}"

    task = ray.remote(num_cpus=0, max_retries=0)(write_and_delete)
    pending = {
        task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(i, soft=False)).remote(i): i for i in nodes
    }
    done, late = ray.wait(list(pending), num_returns=len(pending), timeout=timeout_s)
    errors = {nodes[pending[ref]]: error for ref, error in zip(done, ray.get(done), strict=True) if error}
    errors |= {nodes[pending[ref]]: f"did not answer within {timeout_s:g} s" for ref in late}
    for ref in late:
        ray.cancel(ref, force=True)
    return {"hosts": sorted(set(nodes.values())), "write_errors": errors}
