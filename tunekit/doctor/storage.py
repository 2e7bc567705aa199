"""Whether tunekit can create experiment directories under ``--storage``: here, and on every node."""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from tunekit.doctor.report import Check, ok, problem
from tunekit.environment import STORAGE_PROBE_PREFIX, redact_uri
from tunekit.storage.buckets import bucket_problem, is_uri

logger = logging.getLogger(__name__)

STORAGE_FIX = "choose a writable --storage or fix permissions"


def check_storage(storage: str) -> Check:
    """Whether tunekit can create experiment directories under ``storage`` on this machine."""
    if is_uri(storage):
        return _check_storage_uri(storage)
    return writable_check(f"storage {storage}", Path(storage), "directory", STORAGE_FIX)


def writable_check(name: str, path: Path, what: str, fix: str) -> Check:
    """Whether files can be written in the directory ``path`` (created if missing, then removed)."""
    if path.exists() and not path.is_dir():
        return problem(name, "exists and is not a directory", fix)
    existed = path.is_dir()
    error = probe_directory(path, create=True)
    if error:
        return problem(name, f"not writable ({error})", fix)
    free = _free_space(path)
    note = "" if existed else " (missing; it will be created)"
    return ok(name, f"{what} writable{note}{free}")


def probe_directory(path: Path, *, create: bool) -> str:
    """Writes and removes a probe file in ``path`` (creating missing folders, then removing
    them when ``create``). Returns "" on success, else the reason."""
    created: list[Path] = []
    try:
        if create:
            missing = []
            node = path
            while not node.exists() and node != node.parent:
                missing.append(node)
                node = node.parent
            for folder in reversed(missing):
                folder.mkdir()
                created.append(folder)
        probe_file = path / f"{STORAGE_PROBE_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}"
        with probe_file.open("x") as handle:
            handle.write("tunekit doctor probe\n")
        probe_file.unlink()
        return ""
    except OSError as error:
        return error.strerror or str(error)
    finally:
        for folder in reversed(created):
            try:
                folder.rmdir()
            except OSError as error:  # someone else wrote there meanwhile: theirs now
                logger.debug("kept %s: %s", folder, error)


def _free_space(path: Path) -> str:
    node = path
    while not node.exists() and node != node.parent:
        node = node.parent
    try:
        free = shutil.disk_usage(node).free
    except OSError as error:
        logger.debug("no free space for %s: %s", node, error)
        return ""
    return f", {free / 2**30:.1f} GiB free"


def _check_storage_uri(uri: str) -> Check:
    """The probe and the words of ``tunekit run``'s (``tunekit.storage.buckets.bucket_problem``), one limit."""
    name = f"storage {redact_uri(uri)}"
    if found := bucket_problem(uri):
        what, _, fix = found.partition("; fix: ")
        return problem(name, what, fix)
    return ok(name, "a probe object was written and deleted")


def check_bucket_on_nodes(uri: str, found: dict[str, Any]) -> Check:
    """A storage URI as every node of a cluster sees it, from ``bucket_writable_by_nodes``:
    each node writes with its own credentials and endpoint, as its trials will."""
    name = f"storage {redact_uri(uri)} on every node"
    failed = [f"{host}: {error}" for host, error in found.get("write_errors", {}).items()]
    if failed:
        return problem(
            name,
            "not writable from " + "; ".join(failed),
            "give every node the credentials and endpoint (AWS_*, AWS_ENDPOINT_URL, GOOGLE_APPLICATION_CREDENTIALS) "
            "in its own environment, as a KubeRay pod gets them from a Secret",
        )
    hosts = found.get("hosts", [])
    return ok(name, f"a probe object was written and deleted from every node, on {len(hosts)} host(s)")


def check_storage_on_nodes(storage: str, found: dict[str, Any]) -> Check:
    """The storage as every node of a cluster sees it, from ``storage_shared_by_nodes``."""
    name = f"storage {storage} on every node"
    fix = (
        "mount one shared volume (NFS, a ReadWriteMany PVC) at this same path on every node, "
        "or choose another --storage"
    )
    failed = [f"{host}: {error}" for host, error in found.get("write_errors", {}).items()]
    if failed:
        return problem(name, "not writable on " + "; ".join(failed), fix)
    blind = [
        f"{host} does not see the files of {', '.join(others)}"
        for host, others in found.get("unseen", {}).items()
        if others
    ]
    if blind:
        return problem(name, "not shared: " + "; ".join(blind), fix)
    # Counted by host: several nodes on one machine (a loopback cluster) share its disk anyway,
    # and "2 alive node(s)" beside "shared by 1 node(s)" read as a node left out.
    hosts = found.get("hosts", [])
    return ok(
        name,
        f"writable and shared by every node, on {len(hosts)} host(s)"
        + (" and this machine" if found.get("driver_checked") else ""),
    )
