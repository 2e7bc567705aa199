"""The local Ray tunekit starts: its workers' environment comes from the raylet, so Ray's
prestarted workers run the first trials (a job runtime environment had Ray start two more)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import ray

from tunekit.config.spec import load_spec
from tunekit.driver import session

REPO = Path(__file__).resolve().parents[2]


def _idle_workers() -> set[int]:
    listing = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, check=True).stdout
    return {int(line.split()[0]) for line in listing.splitlines() if "ray::IDLE" in line}


@ray.remote(num_cpus=1)
class _Probe:
    def look(self) -> tuple[int, str | None, str | None, bool]:
        return (
            os.getpid(),
            os.environ.get("TF_CPP_MIN_LOG_LEVEL"),
            os.environ.get("RAY_CHDIR_TO_TRIAL_DIR"),
            (os.getcwd() in sys.path),
        )


def test_the_first_trials_run_in_ray_s_prestarted_workers_with_tunekit_s_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the workers import the trainable from the launch directory
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    spec = load_spec(REPO / "search_spaces" / "digits_mlp.yaml")
    try:
        with session.ray_session(None, spec):
            deadline, idle = time.monotonic() + 30, set[int]()
            while len(idle) < 2 and time.monotonic() < deadline:  # Ray prestarts one per CPU
                time.sleep(0.2)
                idle = _idle_workers()
            probes = [_Probe.remote() for _ in range(2)]  # type: ignore[attr-defined]
            looks = ray.get([probe.look.remote() for probe in probes])
    finally:
        session.shutdown()
    assert {pid for pid, *_ in looks} <= idle, (looks, idle)
    assert [look[1:] for look in looks] == [("2", "0", True)] * 2
    assert "TF_CPP_MIN_LOG_LEVEL" not in os.environ  # the driver's own environment is as it was
