"""The local Ray tunekit starts: its workers' environment comes from the raylet (a job runtime
environment had Ray start two more; Ray Tune's trial actors need none of their own either), and
tunekit prestarts, for Ray Tune's trial actors, as many
workers as the search runs trials at once, each with TensorFlow imported as it started and its
runtime still unread (each trial configures its devices), and the objects of those imports frozen.
Ray's dashboard, autoscaler monitor and log monitor it does not start."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import psutil
import pytest
import ray

from tunekit.compat.ray_workers import idle_local_workers, trial_actors_in_their_runtime_env
from tunekit.config.spec import load_spec
from tunekit.driver import session

REPO = Path(__file__).resolve().parents[2]


def _probe_class() -> type:
    """Made here, so that Ray sends the class by value (this test module is no worker's to import)."""

    class _Probe:
        """Stands for a trial's actor: its actor class made as Ray Tune makes a trainable's."""

        def look(self) -> tuple[int, str | None, str | None, str | None, str, bool, bool, bool, bool]:
            import gc

            tensorflow_runtime_started = None
            if "tensorflow" in sys.modules:
                from tensorflow.python.eager import context

                tensorflow_runtime_started = context.context()._context_handle is not None
            return (
                os.getpid(),
                os.environ.get("TF_CPP_MIN_LOG_LEVEL"),
                os.environ.get("RAY_CHDIR_TO_TRIAL_DIR"),
                os.environ.get("PL_DISABLE_FORK"),  # Ray Tune's own variable, from the raylet
                ray.get_runtime_context().get_runtime_env_string(),
                (os.getcwd() in sys.path),
                "tunekit.worker.preload" in sys.modules and "tensorflow" in sys.modules,
                tensorflow_runtime_started is False,
                # the imports' objects frozen, out of the collector's sight, and the collector on again
                gc.isenabled() and gc.get_freeze_count() > 100_000,
            )

    return _Probe


def test_the_first_trials_run_in_workers_tunekit_prestarted_with_tensorflow_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the workers import the trainable from the launch directory
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    spec = load_spec(REPO / "search_spaces" / "digits_mlp.yaml")  # 2 trials at a time, 1 CPU each
    try:
        with session.ray_session(None, spec):
            deadline, idle = time.monotonic() + 60, set[int]()
            while len(idle) < 2 and time.monotonic() < deadline:
                time.sleep(0.2)
                idle = idle_local_workers()
            from ray.tune.execution.class_cache import _ActorClassCache

            trial_actors_in_their_runtime_env()
            actor_class = _ActorClassCache().get(_probe_class())
            probes = [actor_class.options(num_cpus=1).remote() for _ in range(2)]
            looks = ray.get([probe.look.remote() for probe in probes])
            time.sleep(1)
            idle_after = idle_local_workers()
            ray_processes = _command_lines(psutil.Process().children(recursive=True))
    finally:
        session.shutdown()
    assert len(idle) == 2 and {pid for pid, *_ in looks} == idle, (looks, idle)
    # TensorFlow imported, its runtime (threads, devices) still for the trial to configure
    # (a worker for an actor with a runtime environment starts through one more Python process)
    assert [look[1:] for look in looks] == [("2", "0", "1", "{}", True, True, True, True)] * 2
    # no daemon tunekit has no use for: Ray would start the dashboard even off, and wait for it (compat.ray_node)
    daemons = ("dashboard/dashboard.py", "autoscaler/_private/monitor.py", "_private/log_monitor.py")
    assert not [line for line in ray_processes if any(daemon in line for daemon in daemons)], ray_processes
    assert [line for line in ray_processes if "raylet/raylet" in line], ray_processes  # the node itself
    assert idle_after == set()  # no worker beyond the trials': not one per CPU
    assert "TF_CPP_MIN_LOG_LEVEL" not in os.environ  # the driver's own environment is as it was


def _command_lines(processes: list[psutil.Process]) -> list[str]:
    lines = []
    for process in processes:
        try:
            lines.append(" ".join(process.cmdline()))
        except psutil.Error:  # it ended meanwhile
            continue
    return lines
