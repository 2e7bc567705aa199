"""A worker killed for memory is named as such: Ray's own error texts, no Ray runtime.

The errors are Ray's exceptions built as Ray builds them (``ActorDiedError`` from the GCS's
``ActorDiedErrorContext``), around the worker exit details of Ray 2.60's raylet (its format
strings, filled in) and of the Ray versions before 2.56 (as Ray's docs and users' logs show them).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from ray.core.generated.common_pb2 import ActorDiedErrorContext  # type: ignore[attr-defined]  # protobuf, no stubs
from ray.exceptions import ActorDiedError, OutOfMemoryError

from tunekit.driver.records import TrialRecord, settle_errored
from tunekit.driver.worker_deaths import MEMORY_FIX, last_rss_mb, ray_error_text, worker_death_reason
from tunekit.layout import TrialStatus

PID = 4242
# The GCS's error_message for an actor whose worker died (gcs_actor_manager).
DIED = "The actor is dead because its worker process has died. Worker exit type: {kind} Worker exit detail: {detail}"
# Ray 2.60's raylet: NodeManager::HandleClientConnectionError, outside resource isolation.
CONNECTION_LOST = (
    "Worker unexpectedly exits with a connection error code 2. End of file. Some common causes include: "
    "(1) the process was killed by the OOM killer due to high memory usage, (2) ray stop --force was called, "
    "or (3) the worker crashed unexpectedly due to SIGSEGV or another unexpected error. If the process was "
    "killed by the kernel OOM killer (verifiable by checking for OOM in dmesg of the OOMing node), consider "
    "enabling resource isolation via --enable-resource-isolation to prevent node deaths by resource contention "
    "and significant loss of progress by uninformed kernel OOM killing."
)
# Before: the same event in Ray 2.x's words.
CONNECTION_LOST_BEFORE = (
    "Worker unexpectedly exits with a connection error code 2. End of file. There are some potential root "
    "causes. (1) The process is killed by SIGKILL by OOM killer due to high memory usage. (2) ray stop --force "
    "is called. (3) The worker is crashed unexpectedly due to SIGSEGV or other unexpected errors."
)
# Ray 2.60's memory monitor ("%d worker(s) were killed due to the node running low on memory. %s"
# and the details' format strings, one per line); this trial's worker and another considered.
MONITOR_KILL = (
    "1 worker(s) were killed due to the node running low on memory. "
    "Memory on the node (IP: 10.0.0.7, ID: 5a0e7c1f9d2b4e6a8c0f1e3d5b7a9c2e4f6a8b0d1c3e5f7a9b2c4d6e) "
    "was 7.21GB used / 7.60GB limit (0.948684)\n"
    "OOM kill reason: node memory usage above the threshold\n"
    "Object store memory usage: [- objects spillable: 0]\n"
    "Ray killed 1 worker(s) based on the killing policy\n"
    "Considered workers: [\n"
    "(Actor(ImplicitFunc): job ID=01000000, lease ID=0500000001000000ffff, task name=ImplicitFunc.train, "
    "required resources={CPU: 1}, pid=4243, actual memory used=1.10GB, worker ID=34241048bfb59ac2)\n"
    "Selected to kill: (Actor(ImplicitFunc): job ID=01000000, lease ID=0400000001000000ffff, "
    f"task name=ImplicitFunc.train, required resources={{CPU: 1}}, pid={PID}, actual memory used=2.85GB, "
    "worker ID=0e5649d39c15609c)\n"
    "]\n"
    "To see more information about memory usage on this node, use `ray logs raylet.out -ip 10.0.0.7`\n"
    "Top 10 memory users: PID MEM(GB) COMMAND"
)
# Before Ray 2.56, as Ray's out-of-memory guide and users' logs show it (ray.exceptions.OutOfMemoryError's message).
MONITOR_KILL_BEFORE = (
    "Task was killed due to the node running low on memory.\n"
    "Memory on the node (IP: 10.0.62.231, ID: e5d953ef03e55e26f13973ea1b5a0fd0ecc729cd820bc89e4aa50451) where "
    "the task (task ID: 43534ce9375fa8e4cd0d0ec285d9974a6a95897401000000, name=allocate_memory, "
    f"pid={PID}, memory used=2.85GB) was running was 7.21GB / 7.60GB (0.948684), which exceeds the memory "
    "usage threshold of 0.95. Ray killed this worker (ID: a6755d5e9c2c41f7ee5f8b0b7bd11ad7153a4a5e7f7a3c0e0c0b4dd1) "
    "because it was the most recently scheduled task; to see more information about memory usage on this node, "
    "use `ray logs raylet.out -ip 10.0.62.231`."
)


NODE_DIED = (
    "The actor died because its node has died. Node Id: 5a0e7c1f9d2b4e6a8c0f1e3d5b7a9c2e4f6a8b0d1c3e5f7a9b2c4d6e"
)


def actor_died(kind: str, detail: str) -> str:
    """``str()`` of the ActorDiedError a Tune trial's actor raises, as Ray builds it."""
    return actor_error(DIED.format(kind=kind, detail=detail))


def actor_error(message: str) -> str:
    context = ActorDiedErrorContext(
        error_message=message,
        class_name="ImplicitFunc",
        actor_id=bytes.fromhex("4f48435abed4c32e8891fa7f0d000000"),
        pid=PID,
        node_ip_address="10.0.0.7",
        ray_namespace="c1d2e3f4",
    )
    return str(ActorDiedError(context))


def test_a_worker_rays_memory_monitor_killed_names_the_node_its_memory_and_the_fix() -> None:
    reason = worker_death_reason(actor_died("NODE_OUT_OF_MEMORY", MONITOR_KILL), last_rss_mb=900.0)
    assert reason == (
        "killed by Ray's memory monitor: its node ran low on memory (7.21 GB used of 7.60 GB); "
        "the worker used 2.85 GB; run fewer trials at a time (budget.max_concurrent) or give each more "
        "of a node's memory (a larger resources.cpu puts fewer trials on a node)"
    )


def test_the_memory_monitors_older_wording_and_its_task_error_read_the_same() -> None:
    expected = (
        "killed by Ray's memory monitor: its node ran low on memory (7.21 GB used of 7.60 GB); "
        f"the worker used 2.85 GB; {MEMORY_FIX}"
    )
    assert worker_death_reason(actor_died("NODE_OUT_OF_MEMORY", MONITOR_KILL_BEFORE)) == expected
    assert worker_death_reason(str(OutOfMemoryError(MONITOR_KILL_BEFORE))) == expected


def test_without_rays_figure_for_the_worker_its_last_report_stands_in() -> None:
    error = actor_died("NODE_OUT_OF_MEMORY", "1 worker(s) were killed due to the node running low on memory. ")
    assert worker_death_reason(error, last_rss_mb=1234.4) == (
        f"killed by Ray's memory monitor: its node ran low on memory; it used 1,234 MB at its last report; {MEMORY_FIX}"
    )


@pytest.mark.parametrize("detail", [CONNECTION_LOST, CONNECTION_LOST_BEFORE])
def test_a_worker_that_died_without_a_word_is_named_with_its_last_memory(detail: str) -> None:
    reason = worker_death_reason(actor_died("SYSTEM_ERROR", detail), last_rss_mb=3071.6)
    assert reason == (
        "its worker process died without a word, most likely killed by the kernel's out-of-memory killer "
        "(SIGKILL; see dmesg on its node), else a crash; it used 3,072 MB at its last report; run fewer trials "
        "at a time (budget.max_concurrent) or give each more of a node's memory (a larger resources.cpu puts "
        "fewer trials on a node)"
    )
    assert worker_death_reason(actor_died("SYSTEM_ERROR", detail)) == (
        "its worker process died without a word, most likely killed by the kernel's out-of-memory killer "
        f"(SIGKILL; see dmesg on its node), else a crash; {MEMORY_FIX}"
    )


def test_a_worker_killed_by_signal_9_is_named_so() -> None:
    # Python's subprocess wording, as a launcher reports a child the kernel killed.
    error = "RuntimeError: the worker process exited: Command '['python', 'w.py']' died with <Signals.SIGKILL: 9>."
    assert worker_death_reason(error, last_rss_mb=512.0) == (
        "its worker was killed (SIGKILL), most likely by the kernel's out-of-memory killer (see dmesg on its "
        f"node); it used 512 MB at its last report; {MEMORY_FIX}"
    )


@pytest.mark.parametrize(
    "error",
    [
        "Traceback (most recent call last):\n  File x\nValueError: bad shape\n",
        str(ActorDiedError()),  # the cause unknown
        actor_error(NODE_DIED),
        "",
    ],
)
def test_other_errors_are_not_taken_for_memory(error: str) -> None:
    assert worker_death_reason(error, last_rss_mb=100.0) is None


def test_the_last_memory_is_the_workers_rss_only_on_cpus() -> None:
    assert last_rss_mb({"memory_mb": 812.5, "epoch": 3}, {"ray_gpu_ids": []}) == 812.5
    # On a GPU memory_mb is TensorFlow's GPU peak, which says nothing of the host's memory.
    assert last_rss_mb({"memory_mb": 812.5}, {"ray_gpu_ids": ["0"]}) is None
    assert last_rss_mb(None, {}) is None
    assert last_rss_mb({"epoch": 1}, {}) is None


def record(**fields: Any) -> TrialRecord:
    return TrialRecord("t0", 0, {"lr": 0.1}, epochs=2, **fields)


def test_an_errored_trial_whose_worker_was_killed_says_so() -> None:
    trial = record(info={"ray_gpu_ids": []})
    settle_errored(trial, actor_died("SYSTEM_ERROR", CONNECTION_LOST), {"memory_mb": 2048.0})
    assert trial.status == TrialStatus.FAILED
    assert trial.reason.startswith("its worker process died without a word, most likely killed by the kernel's")
    assert "it used 2,048 MB at its last report; run fewer trials at a time (budget.max_concurrent)" in trial.reason


def test_an_errored_trial_with_another_error_keeps_its_text() -> None:
    trial = record()
    settle_errored(trial, actor_error(NODE_DIED), {"memory_mb": 2048.0})
    assert trial.reason == NODE_DIED


def test_rays_error_is_read_from_the_trials_error_file(tmp_path: Path) -> None:
    # Trial.handle_error appends each failure; on_trial_error comes after the last.
    error_file = tmp_path / "error.txt"
    first = actor_died("SYSTEM_ERROR", CONNECTION_LOST)
    last = actor_died("NODE_OUT_OF_MEMORY", MONITOR_KILL)
    error_file.write_text(
        f"Failure # 1 (occurred at 2026-11-22_10-00-01)\n{first}\nFailure # 2 (occurred at 2026-11-22_10-03-17)\n{last}\n"
    )
    assert ray_error_text(SimpleNamespace(error_file=str(error_file))) == last
    assert ray_error_text(SimpleNamespace(error_file=None)) == ""
    assert ray_error_text(SimpleNamespace(error_file=str(tmp_path / "none.txt"))) == ""
    assert ray_error_text(SimpleNamespace(error_msg="older Ray's text", error_file=None)) == "older Ray's text"
