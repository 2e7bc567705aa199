"""Experiments in object storage, on a real S3 API (moto's server on 127.0.0.1): an unusable URI
is refused before anything starts. (A search in a bucket that loses a node, is killed and is
resumed from another folder: tests/e2e/test_cluster.py.) Each "machine" is its own working
directory and tunekit cache."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tunekit.testing import S3Server, cli_sets, free_port

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
DEFAULT_SPEC = REPO / "search_spaces" / "digits_mlp.yaml"
TUNEKIT = [sys.executable, "-m", "tunekit.cli"]
SAMPLES = 6
SEARCH = [
    f"trainable={REPO / 'tests' / 'trainables' / 'slow_digits.py'}",
    "data.epoch_seconds=0.4",
    f"budget.num_samples={SAMPLES}",
    "budget.max_epochs=4",
    "scheduler.grace_period=1",
    "scheduler.reduction_factor=2",
    "tracking.enabled=false",
]


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    server = S3Server(tmp_path_factory.mktemp("moto")).start()
    server.make_bucket("exps")
    yield server
    server.stop()


def _machine(s3: S3Server, name: str) -> tuple[Path, dict[str, str]]:
    """A working directory and an environment of their own: the tunekit cache outside pytest's
    folders (the suite's check of every experiment written there would read a cache as one)."""
    folder = Path(tempfile.mkdtemp(prefix=f"tunekit-{name}-"))
    return folder, {**os.environ, **s3.env, "TUNEKIT_CACHE": str(folder / "cache")}


def _tunekit(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TUNEKIT, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _bucket_file(s3: S3Server, key: str) -> bytes | None:
    from pyarrow import fs

    filesystem = fs.S3FileSystem(
        access_key="testing", secret_key="testing", endpoint_override=s3.endpoint, scheme="http", region="us-east-1"
    )
    try:
        with filesystem.open_input_stream(key) as stream:
            return bytes(stream.read())
    except (FileNotFoundError, OSError):
        return None


@pytest.mark.parametrize(
    ("storage", "env_change", "said"),
    [
        ("zz://exps/team", {}, "storage zz://exps/team: unknown scheme 'zz://'; fix: a local folder, or a URI"),
        (
            "s3://no-such-bucket/team",
            {},
            "storage s3://no-such-bucket/team: no such bucket 'no-such-bucket'; fix: create it",
        ),
        (
            "s3://exps/team",
            {"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""},
            "storage s3://exps/team: access denied, and no credentials were found; fix: set AWS_ACCESS_KEY_ID",
        ),
        (
            "s3://exps/team",
            {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}"},
            "storage s3://exps/team: its endpoint refused the connection; fix: check the endpoint",
        ),
    ],
    ids=["unknown scheme", "no such bucket", "no credentials", "endpoint refuses"],
)
def test_an_unusable_storage_uri_is_refused_in_one_line_before_anything_starts(
    s3: S3Server, storage: str, env_change: dict[str, str], said: str
) -> None:
    cwd, env = _machine(s3, "refused")
    env = {key: value for key, value in {**env, **env_change}.items() if value}
    began = time.monotonic()
    done = _tunekit(["run", str(DEFAULT_SPEC), "--storage", storage, "--name", "x", *cli_sets(SEARCH)], cwd, env)
    assert time.monotonic() - began < 45  # bounded: no Ray, no retries without end
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith(f"tunekit: error: {said}"), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and done.stdout == ""
    assert sorted(p.name for p in cwd.iterdir()) == []  # nothing written: no folder named after a scheme
    assert _bucket_file(s3, "exps/team/x/spec.yaml") is None


def test_resuming_a_uri_that_holds_no_experiment_says_so(s3: S3Server) -> None:
    cwd, env = _machine(s3, "none")
    done = _tunekit(["resume", "s3://exps/team/nothing-here"], cwd, env, timeout=120)
    assert (done.returncode, done.stderr.strip()) == (
        1,
        "tunekit: error: s3://exps/team/nothing-here: not a tunekit experiment (no spec.yaml)",
    )
