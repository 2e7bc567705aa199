"""The trials' actors need no runtime environment on tunekit's own local Ray, whose workers
inherit Ray Tune's variables from the raylet: unless a variable changed since, or the Ray is
another (its address), when they get Ray Tune's own (tunekit.compat.ray_workers)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tunekit.compat import ray_workers
from tunekit.compat.ray_workers import TUNE_TRIAL_ENV, local_workers_inherit, runtime_env_on


@pytest.fixture(autouse=True)
def no_local_ray_after() -> Iterator[None]:
    yield
    local_workers_inherit(None, None)


def test_actors_on_tunekits_local_ray_take_no_runtime_env_while_their_variables_are_the_workers() -> None:
    tune = {"env_vars": {"PL_DISABLE_FORK": "1", "AWS_ACCESS_KEY_ID": "key-1"}}
    assert runtime_env_on("10.0.0.1:6379", tune) == tune  # no local Ray of tunekit's
    local_workers_inherit("127.0.0.1:5000", {"PL_DISABLE_FORK": "1", "AWS_ACCESS_KEY_ID": "key-1", "HOME": "/h"})
    assert runtime_env_on("127.0.0.1:5000", tune) == {}
    assert runtime_env_on("127.0.0.1:5001", tune) == tune  # a Ray someone else started since
    rotated = {"env_vars": {"PL_DISABLE_FORK": "1", "AWS_ACCESS_KEY_ID": "key-2"}}
    assert runtime_env_on("127.0.0.1:5000", rotated) == rotated  # the workers still have key-1
    local_workers_inherit(None, None)  # tunekit shut its Ray down
    assert runtime_env_on("127.0.0.1:5000", tune) == tune
    assert ray_workers._LOCAL_WORKERS is None


def test_the_raylet_gets_ray_tunes_own_trial_variables() -> None:
    from ray.tune.execution.class_cache import DEFAULT_ENV_VARS

    assert TUNE_TRIAL_ENV == DEFAULT_ENV_VARS
