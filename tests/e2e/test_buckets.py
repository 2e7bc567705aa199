"""Experiments in object storage, on a real S3 API (moto's server on 127.0.0.1): an unusable URI
is refused before anything starts. (A search in a bucket that loses a node, is killed and is
resumed from another folder: tests/e2e/test_cluster.py.) Each "machine" is its own working
directory and tunekit cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tunekit.testing.runs import cli_sets
from tunekit.testing.servers import LoopbackProxy, S3Server, free_port

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


def test_a_bucket_search_keeps_every_attempt_s_log_names_its_uri_and_resumes_elsewhere_into_one_mlflow_parent(
    s3: S3Server, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A search in the bucket from one machine, read, listed and grown from another (each its
    own tunekit cache; the readers in this process), tracked in one MLflow store: every trial's
    output.log (a failed one's too) is in the bucket, nothing is left in a tunekit folder on the
    node, no line names a cache, and the grown search goes on under the same parent run, each
    trial's run once."""
    from mlflow import MlflowClient

    import tunekit
    from tunekit.cli import main
    from tunekit.tracking.tags import PARENT_RUN_TAG, TAG_ROLE, TAG_TRIAL_ID

    uri = "s3://exps/logs/digits"
    began = time.time()
    (first, env_a), (second, env_b) = _machine(s3, "first"), _machine(s3, "second")
    tracking = f"sqlite:///{first / 'mlflow.db'}"  # one store both machines reach
    search = [
        f"trainable={REPO / 'tests' / 'trainables' / 'nan_for_small.py'}",  # units=32 fails at its first epoch
        "space.units={type: choice, values: [32, 64]}",
        "search.seed=3",
        "budget.num_samples=3",
        "budget.max_epochs=2",
        "tracking.tensorboard=false",
    ]
    ran = _tunekit(
        ["run", str(DEFAULT_SPEC), "--storage", "s3://exps/logs", "--name", "digits", "--tracking-uri", tracking,
         *cli_sets(search)],
        first, env_a,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert f"experiment: {uri}" in ran.stdout
    for key, value in {**s3.env, "TUNEKIT_CACHE": str(second / "cache")}.items():
        monkeypatch.setenv(key, value)  # this process is the second machine
    monkeypatch.chdir(second)

    def said(*args: str) -> str:
        code = main(list(args))
        out, err = capsys.readouterr()
        assert code == 0, out + err
        assert "/cache/" not in out + err, out + err  # the bucket's URI, never a machine's cache
        return out

    trials = tunekit.load(uri).trials.set_index("number")
    assert set(trials["status"]) == {"completed", "failed"}, trials[["status", "reason"]]
    # Readers pull the records, not the logs: a log is fetched when `tunekit logs` asks for it.
    assert list((second / "cache").rglob("output.log")) == []
    # Nothing left on the node once uploaded: no tunekit folder, and no trial's folder in Ray's session.
    # No folder of tunekit's own on the node (an older tunekit's may be there from before this test).
    old_folder = Path(tempfile.gettempdir()) / "tunekit-trials" / "digits"
    assert not old_folder.exists() or old_folder.stat().st_mtime < began
    ray_sessions = Path(os.environ.get("RAY_TMPDIR") or tempfile.gettempdir()) / "ray"
    left = ray_sessions.glob("session_*/artifacts/*/digits/working_dirs/*/*")
    assert [path for path in left if path.stat().st_mtime >= began] == []
    for number, row in trials.iterrows():  # each attempt's log, from the bucket
        logs = said("logs", uri, str(number))
        assert "--- tunekit: trial started in a worker" in logs
        if row["status"] == "failed":
            assert f"--- {uri}/{row['trial_id']}/error.txt" in logs
            assert "TrialFailure: non-finite loss at epoch 1" in logs
        else:
            assert "tunekit: steps_per_execution" in logs and "error.txt" not in logs
    listed = json.loads(said("ls", "s3://exps/logs", "--format", "json"))
    assert [(r["experiment"], r["status"], r["path"]) for r in listed] == [("digits", "finished", uri)]
    assert list(tunekit.compare(uri).table.index) == ["digits"]
    complete = said("resume", uri)
    assert f"nothing to resume (`tunekit resume {uri} --set budget.num_samples=N` grows it)" in complete

    grown = _tunekit(["resume", uri, "--set", "budget.num_samples=4"], second, env_b)
    assert grown.returncode == 0, grown.stdout[-3000:] + grown.stderr[-3000:]
    for done in (ran, grown):
        assert "/cache/" not in done.stdout + done.stderr, done.stdout + done.stderr
    assert said("check", uri).startswith(f"{uri}: ok")
    client = MlflowClient(tracking_uri=tracking)
    experiment = client.get_experiment_by_name("digits-mlp")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id], max_results=100)
    parents = [r for r in runs if r.data.tags.get(TAG_ROLE) == "experiment"]
    assert len(parents) == 1, [r.data.tags for r in parents]
    children = [r for r in runs if r.data.tags.get(PARENT_RUN_TAG) == parents[0].info.run_id]
    assert sorted(r.data.tags[TAG_TRIAL_ID] for r in children) == sorted(tunekit.load(uri).trials["trial_id"])
    assert len(children) == 4 and not [r for r in children if r.info.status == "RUNNING"]


# ------------------------------------------------------------------ storage faults

OUTAGE_SEARCH = [  # long enough for outages mid-training: 2 trials of 20 epochs, a checkpoint each
    f"trainable={REPO / 'tests' / 'trainables' / 'slow_digits.py'}",
    "data.epoch_seconds=0.4",
    "budget.num_samples=2",
    "budget.max_epochs=20",
    "scheduler.grace_period=20",
    "training.checkpoint_every_s=0",
    "tracking.enabled=false",
]


class Search:
    """``tunekit run`` in a subprocess whose console lines are read as they come."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [*TUNEKIT, *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, text: str, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.lines):
            assert self.process.poll() is None and time.monotonic() < deadline, "\n".join(self.lines[-30:])
            time.sleep(0.3)

    def said(self, text: str) -> list[str]:
        return [line for line in self.lines if text in line]


def _outage(proxy: LoopbackProxy, seconds: float) -> None:
    proxy.stop()
    time.sleep(seconds)
    proxy.start()


def _timed_tunekit(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], float]:
    began = time.monotonic()
    done = _tunekit(args, cwd, env)
    return done, time.monotonic() - began


def test_bucket_outages_are_waited_through_and_past_the_bound_end_the_search_and_a_silent_endpoint_fails_in_time(
    s3: S3Server,
) -> None:
    """One search (storage.outage_s 20 s): a 12 s outage mid-training is waited through (each
    trial waits in its checkpoint upload, the console says the outage once each way, no trial
    fails); then the S3 API stays away: the search ends as interrupted in one line,
    exit 1, no trial failed, and with the API back `tunekit resume` finishes it, `check` passing.

    While that search waits out its last outage (its trials idle), `run` and `doctor` meet a
    silent endpoint (a second proxy that accepts and never answers) and fail in the 20 s their
    message states: the same S3 session, without waiting those 20 s on their own."""
    proxy = LoopbackProxy(s3.port).start()
    silent = LoopbackProxy(s3.port, silent=True).start()
    cwd, env = _machine(s3, "outage")
    env["AWS_ENDPOINT_URL"] = proxy.endpoint
    # The lease's stale window past the outage's bound and the stop: the outage, not the lease's
    # fence (which refuses writes once the lease is unconfirmed that long), ends the search here.
    env["TUNEKIT_LEASE_STALE_S"] = "60"
    silent_cwd, silent_env = _machine(s3, "silent")
    silent_env["AWS_ENDPOINT_URL"] = silent.endpoint
    uri = "s3://exps/outage/x"
    args = ["run", str(DEFAULT_SPEC), "--storage", "s3://exps/outage", "--name", "x"]
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            search = Search([*args, *cli_sets([*OUTAGE_SEARCH, "storage.outage_s=20"])], cwd, env)
            search.wait_for("first epoch reported")
            _outage(proxy, 12)  # a 5 s one passes unseen: the S3 client's own retries ride it out
            search.wait_for("is reachable again after", timeout=60)
            time.sleep(3)
            proxy.stop()  # for good: past the bound
            silent_run = pool.submit(
                _timed_tunekit,
                ["run", str(DEFAULT_SPEC), "--storage", "s3://exps/team", *cli_sets(SEARCH)],
                silent_cwd,
                silent_env,
            )
            silent_doctor = pool.submit(
                _timed_tunekit, ["doctor", "--storage", "s3://exps/team"], silent_cwd, silent_env
            )
            status = search.process.wait(timeout=300)
            (done, done_took), (doctor, doctor_took) = silent_run.result(), silent_doctor.result()
        proxy.start()  # the storage back at its address: the resume's trials upload where they did
        resumed = _tunekit(["resume", uri], cwd, env)
    finally:
        proxy.stop()
        silent.stop()
    said = "storage s3://exps/team: did not answer within 20 s; fix: check the endpoint"
    assert done.returncode == 1 and done.stderr.strip().startswith(f"tunekit: error: {said}"), done.stderr
    assert 20 <= done_took < 28, done_took  # the deadline said, and the command's own start
    assert "did not answer within 20 s" in doctor.stdout, doctor.stdout
    assert doctor_took < 60, doctor_took  # the stack's checks (TensorFlow, Ray) run beside the probe
    errors = search.said("tunekit: error:")
    assert status == 1 and len(errors) == 1, "\n".join(search.lines[-40:])
    assert errors[0].startswith(f"tunekit: error: storage {uri}: unreachable for "), errors
    assert "past storage.outage_s (20 s)" in errors[0]
    assert errors[0].endswith(f"`tunekit resume {uri}` continues it once the storage is back")
    assert not search.said(" failed (")
    # The one traceback allowed is the lease's heartbeat thread's (tunekit.storage.lease, issue 49's item 1).
    tracebacks = len(search.said("Traceback"))
    assert tracebacks <= 2 * len(search.said("Exception in thread tunekit-lease")), "\n".join(search.lines)
    assert all(", failed 0;" in line for line in search.said("| done "))
    assert len(search.said("is unreachable (")) == len(search.said("is reachable again after")) + 1
    env["AWS_ENDPOINT_URL"] = s3.endpoint
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "trials: 2 completed, 0 pruned, 0 stopped, 0 failed" in resumed.stdout, resumed.stdout + resumed.stderr
    # On the machine whose driver the outage stopped: what it recorded while the bucket was away goes first.
    said = resumed.stdout + resumed.stderr
    assert "tunekit: sent " in said and "the trials it ended stay ended" in said, said
    checked = _tunekit(["check", uri], cwd, env, timeout=300)
    assert checked.returncode == 0, checked.stdout + checked.stderr
