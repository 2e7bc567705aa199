"""Which Ray a search runs on (one rule for run and resume), and the cluster it records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tunekit.driver.connect import Target, record_address, resume_target, run_target
from tunekit.errors import ClusterError
from tunekit.layout import CLUSTER_FILE


def test_run_joins_the_address_given_else_ray_address_else_a_private_local_ray(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert run_target(None) == Target(None)  # neither: local, whatever `ray start` recorded here
    assert run_target("auto") == Target("auto")  # the cluster `ray start` recorded, only when asked
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5:6379")
    assert run_target(None) == Target("10.0.0.5:6379")
    assert run_target("10.0.0.6:6379") == Target("10.0.0.6:6379")
    assert run_target("local") == Target(None)  # Ray's own word for a new local instance


def test_resume_joins_the_recorded_cluster_unless_told_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.9:6379")
    record_address(tmp_path, "10.0.0.5:6379")
    assert json.loads((tmp_path / CLUSTER_FILE).read_text()) == {"address": "10.0.0.5:6379"}
    assert resume_target(tmp_path, None, local=False) == Target("10.0.0.5:6379")
    assert resume_target(tmp_path, "10.0.0.6:6379", local=False) == Target(
        "10.0.0.6:6379", "joining 10.0.0.6:6379; the search ran on 10.0.0.5:6379"
    )
    assert resume_target(tmp_path, None, local=True) == Target(
        None, "running on a local Ray (--local); the search ran on 10.0.0.5:6379"
    )
    with pytest.raises(ClusterError) as refused:
        resume_target(tmp_path, "10.0.0.6:6379", local=True)
    assert str(refused.value) == "--address 10.0.0.6:6379 and --local: choose one"


def test_a_search_that_ran_locally_resumes_by_the_run_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    record_address(tmp_path, None)
    assert resume_target(tmp_path, None, local=False) == Target(None)
    assert resume_target(tmp_path / "older", None, local=False) == Target(None)  # no cluster.json


def test_ray_s_worker_and_raylet_lines_reach_driver_log_without_colour_codes() -> None:
    import io

    from ray._private.worker import print_worker_logs

    from tunekit.driver.session import driver_env

    lost: dict[str, Any] = {
        "pid": "raylet",
        "ip": "127.0.0.2",
        "localhost": "127.0.0.1",
        "lines": ["Raylet is terminated."],
    }
    with driver_env():
        log = io.StringIO()
        print_worker_logs(lost, log)
    assert log.getvalue().startswith("(raylet, ip=127.0.0.2) Raylet is terminated.")
    assert "\x1b" not in log.getvalue()  # Ray's default wraps the line in yellow: "\x1b[33m(raylet..."
