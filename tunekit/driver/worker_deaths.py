"""A trial's worker killed for memory, named as such, with what it used and what to change.

A worker that dies without reporting a failure ends its trial with Ray's error, not the
trial's, once Ray's retries are spent. Two deaths are a matter of memory, and say so in
Ray's words (checked against Ray 2.60's raylet and GCS, and the older wording they replace):

- Ray's memory monitor killed it: the actor's error has exit type ``NODE_OUT_OF_MEMORY`` and
  "N worker(s) were killed due to the node running low on memory. Memory on the node (IP: ...,
  ID: ...) was 7.21GB used / 7.60GB limit (0.948684) ... Selected to kill: (Actor(...): ...
  pid=4242, actual memory used=2.85GB, worker ID=...)"; before Ray 2.56, "Task was killed due
  to the node running low on memory. Memory on the node (...) where the task (actor ID: ...,
  pid=4242, memory used=2.85GB) was running was 7.21GB / 7.60GB (0.95), which exceeds the
  memory usage threshold of 0.95" (``ray.exceptions.OutOfMemoryError`` for a task).
- It was killed with SIGKILL, which the kernel's out-of-memory killer sends: an exit by
  signal 9 when the error says so; more often Ray only sees the worker's connection end
  ("Worker exit type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a
  connection error code 2. End of file", then Ray's own list of likely causes, the OOM
  killer first), which a crash (SIGSEGV, ``os._exit``) also leaves: the reason says both.

Everything else (a node lost, an error Ray raised) keeps the text of Ray's error.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# What the user can change; the spec has no per-trial memory setting: a larger CPU share
# puts fewer trials on a node, so each has more of its memory (Ray's own advice).
MEMORY_FIX = (
    "run fewer trials at a time (budget.max_concurrent) or give each more of a node's memory "
    "(a larger resources.cpu puts fewer trials on a node)"
)

_MEMORY_MONITOR = re.compile(r"running low on memory|\bNODE_OUT_OF_MEMORY\b")
# Ray lost the worker's connection: killed (the OOM killer's SIGKILL, Ray's first guess), or crashed.
_CONNECTION_LOST = re.compile(r"Worker unexpectedly exits with a connection error code")
_SIGKILL = re.compile(r"\bSIGKILL\b|killed by signal 9\b|exit(?:ed)? (?:with )?(?:code|status) (?:-9|137)\b")
_NUMBER = r"(\d+(?:\.\d+)?)"
# "was 7.21GB used / 7.60GB limit" (Ray 2.56 on), "was 7.21GB / 7.60GB" (before).
_NODE_MEMORY = re.compile(
    r"Memory on the node \([^)]*\)(?: where the task \([^)]*\) was running)?"
    rf" was {_NUMBER}\s?GB(?: used)? / {_NUMBER}\s?GB"
)
_WORKER_MEMORY = re.compile(rf"\bpid=(\d+), (?:actual )?memory used={_NUMBER}\s?GB")
_ACTOR_PID = re.compile(r"^\s*pid: (\d+)\s*$", re.MULTILINE)  # ActorDiedError's context lines
_SELECTED = re.compile(r"Selected to kill:|where the task \(")
_FAILURE_HEADER = re.compile(r"^Failure # \d+ \(occurred at [^)]*\)$", re.MULTILINE)


def worker_death_reason(error: str, last_rss_mb: float | None = None) -> str | None:
    """A trial's reason when Ray's ``error`` says its worker was killed for memory; None otherwise.

    Args:
        error: Ray's error for the trial (its text, or a traceback ending in it).
        last_rss_mb: the worker's resident memory at its last report, when known.
    """
    if _MEMORY_MONITOR.search(error):
        node = _NODE_MEMORY.search(error)
        where = f" ({node.group(1)} GB used of {node.group(2)} GB)" if node else ""
        used = _killed_worker_gb(error)
        worker = f"; the worker used {used} GB" if used is not None else _last_report(last_rss_mb)
        return f"killed by Ray's memory monitor: its node ran low on memory{where}{worker}; {MEMORY_FIX}"
    if _CONNECTION_LOST.search(error):  # Ray cannot tell a SIGKILL from a crash here, nor can tunekit
        return (
            "its worker process died without a word, most likely killed by the kernel's out-of-memory killer "
            f"(SIGKILL; see dmesg on its node), else a crash{_last_report(last_rss_mb)}; {MEMORY_FIX}"
        )
    if _SIGKILL.search(error):  # said outright, not among Ray's guesses above
        return (
            "its worker was killed (SIGKILL), most likely by the kernel's out-of-memory killer "
            f"(see dmesg on its node){_last_report(last_rss_mb)}; {MEMORY_FIX}"
        )
    return None


def last_rss_mb(last_result: Mapping[str, Any] | None, info: Mapping[str, Any]) -> float | None:
    """The worker's resident memory in MB at the trial's last report, when it ran on CPUs.

    ``tunekit.worker.reporter`` reports ``memory_mb`` at every epoch's end: the process's RSS
    on CPUs, TensorFlow's GPU peak on a GPU (``info``, the trial's first report, lists its
    GPUs), which says nothing of the host's memory.
    """
    if not last_result or info.get("ray_gpu_ids"):
        return None
    value = last_result.get("memory_mb")
    return float(value) if isinstance(value, int | float) and value > 0 else None


def ray_error_text(trial: Any) -> str:
    """Ray Tune's error for ``trial`` (a ``ray.tune.experiment.Trial``): its last failure's text,
    what ``settle_errored`` reads a worker's death from.

    Ray 2.60's ``Trial`` has no ``error_msg``; ``handle_error`` appends "Failure # N (occurred
    at ...)" and ``str(exception)`` to the file ``Trial.error_file`` names, before the
    callbacks' ``on_trial_error``. Older Rays kept the text in ``Trial.error_msg``.
    """
    text = str(getattr(trial, "error_msg", "") or "")
    if text:
        return text
    path = getattr(trial, "error_file", None)
    try:
        whole = Path(path).read_text(errors="replace") if path else ""
    except OSError:
        return ""
    return _FAILURE_HEADER.split(whole)[-1].strip()


def _killed_worker_gb(error: str) -> str | None:
    """The killed worker's memory in GB as Ray gives it: the entry with the actor's pid, else
    the first worker Ray selected to kill."""
    entries = {match.group(1): match.group(2) for match in _WORKER_MEMORY.finditer(error)}
    pid = _ACTOR_PID.search(error)
    if pid and pid.group(1) in entries:
        return entries[pid.group(1)]
    selected = _SELECTED.search(error)
    first = _WORKER_MEMORY.search(error, selected.end()) if selected else None
    return first.group(2) if first else None


def _last_report(rss_mb: float | None) -> str:
    return "" if rss_mb is None else f"; it used {rss_mb:,.0f} MB at its last report"
