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


def test_a_search_that_ran_on_its_caller_s_ray_says_how_to_resume_it_when_tunekit_s_own_cannot_place_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray

    from tunekit.config.spec import load_spec
    from tunekit.driver import session
    from tunekit.errors import ResourceError

    spec = load_spec(Path(__file__).resolve().parents[3] / "search_spaces" / "digits_mlp.yaml", ["resources.gpu=2"])
    record_address(tmp_path, None, callers_ray=True)  # the run: ray.init(num_gpus=2, ...) then tunekit.run
    assert json.loads((tmp_path / CLUSTER_FILE).read_text()) == {"address": None, "callers_ray": True}
    # The resume: tunekit's own local Ray (OWNED_RAY set), with this machine's 2 CPUs and no GPU.
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray, "nodes", lambda: [{"Alive": True, "Resources": {"CPU": 2.0}}])
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 2.0})
    monkeypatch.setattr(session, "OWNED_RAY", {"key": "{}", "local": True})
    with pytest.raises(ResourceError) as refused:
        session.check_cluster_fits(spec, tmp_path)
    assert str(refused.value).startswith(
        "resources.gpu: 2 per trial, but the cluster has 0 GPUs (run tunekit doctor); this search last ran on "
        "a Ray its caller started (with ray.init before tunekit.run): start that Ray the same way (for logical "
        "GPUs, ray.init(..., **tunekit.ray_init_options(logical_gpus=True))) and call tunekit.resume"
    )
    record_address(tmp_path, None)  # it ran on tunekit's own local Ray: the plain message
    with pytest.raises(ResourceError, match=r"0 GPUs \(run tunekit doctor\)$"):
        session.check_cluster_fits(spec, tmp_path)
