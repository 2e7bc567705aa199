"""A search's life from the outside: exit codes, signals, resources that can never be placed,
start-up progress, a warm Ray reused across runs in one process, and the CLI's rough edges.

The in-process tests share the one Ray that ``tunekit.run`` starts and keeps (the warm
notebook path), and shut it down at the end of the module. The signal tests drive real
``tunekit`` processes.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import TUNEKIT, cli_env, run_tunekit

import tunekit
from tunekit.compat.ray_workers import idle_local_workers
from tunekit.driver.session import _DRIVER_ENV
from tunekit.layout import ERROR_FILE

REPO = Path(__file__).resolve().parents[2]
DEFAULT_SPEC = REPO / "search_spaces" / "digits_mlp.yaml"
TEST_TRAINABLES = REPO / "tests" / "trainables"
SMALL = [
    "tracking.enabled=false",
    "budget.num_samples=2",
    "budget.max_epochs=1",
    "scheduler.type=fifo",
]


# --------------------------------------------------------------------------- the CLI


# ----------------------------------------------------------- one warm Ray, in this process


@pytest.fixture(scope="module")
def warm_ray() -> Iterator[None]:
    import ray

    if ray.is_initialized():
        pytest.skip("a Ray session from another test module is still up")
    yield
    tunekit.shutdown()
    assert not ray.is_initialized()


def _run_small(tmp_path: Path, name: str, *extra: str, **kwargs: Any) -> tunekit.ExperimentResults:
    return tunekit.run(
        DEFAULT_SPEC,
        overrides=[*SMALL, *extra],
        storage=tmp_path,
        name=name,
        progress=False,
        **kwargs,
    )


@pytest.mark.slow
def test_second_run_reuses_ray_and_nothing_leaks(warm_ray: None, tmp_path: Path) -> None:
    import ray
    from ray.util.placement_group import placement_group_table

    env_before = dict(os.environ)
    handlers_before = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)]
    first = _run_small(tmp_path, "first", PRELOAD_PROBE)
    assert ray.is_initialized()  # kept for the next run
    session = (ray.get_runtime_context().get_job_id(), ray.get_runtime_context().get_node_id())
    # tunekit's driver settings are undone; Ray's own (PYTHONBREAKPOINT, ...) stay with its session
    assert {k: os.environ.get(k) for k in _DRIVER_ENV} == {k: env_before.get(k) for k in _DRIVER_ENV}
    env_between = dict(os.environ)
    assert [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)][:2] == handlers_before[:2]
    assert ray.available_resources().get("CPU") == ray.cluster_resources()["CPU"]
    assert [p for p in placement_group_table().values() if p["state"] != "REMOVED"] == []

    # Idle workers, with TensorFlow imported as they started, wait for the next search.
    deadline, idle = time.monotonic() + 60, set[int]()
    while len(idle) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
        idle = idle_local_workers()
    second = _run_small(tmp_path, "second", PRELOAD_PROBE)
    # the same driver job on the same node: Ray was reused, not restarted (no timing: CI is noisy)
    assert (ray.get_runtime_context().get_job_id(), ray.get_runtime_context().get_node_id()) == session
    assert dict(os.environ) == env_between
    assert len(first.trials) == len(second.trials) == 2
    assert set(second.trials["status"]) == {"completed"}
    assert ray.available_resources().get("CPU") == ray.cluster_resources()["CPU"]
    assert [p for p in placement_group_table().values() if p["state"] != "REMOVED"] == []
    # Every trial's worker had imported TensorFlow before the trial began (tunekit.worker.preload):
    # the first search's workers started with Ray, the second's while no search ran.
    notes = {run: _preload_notes(tmp_path / run) for run in ("first", "second")}
    assert all(note["preload"] is not None for run in notes.values() for note in run), notes
    assert {note["pid"] for note in notes["second"]} <= idle, (notes["second"], idle)


PRELOAD_PROBE = f"trainable={TEST_TRAINABLES / 'preload_probe.py'}"


def _preload_notes(experiment_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) for path in sorted(experiment_dir.glob("*/preload.json"))]


@pytest.mark.slow
def test_a_trial_no_node_can_place_fails_at_once(warm_ray: None, tmp_path: Path) -> None:
    started = time.monotonic()
    with pytest.raises(tunekit.ResourceError) as raised:
        _run_small(tmp_path, "gpu", "resources.gpu=1")
    assert str(raised.value) == "resources.gpu: 1 per trial, but the cluster has 0 GPUs (run tunekit doctor)"
    assert raised.value.experiment_dir is None and not (tmp_path / "gpu").exists()  # nothing ran, nothing kept
    with pytest.raises(tunekit.ResourceError) as raised:
        _run_small(tmp_path, "cpu", "resources.cpu=3")
    assert str(raised.value) == "resources.cpu: 3 per trial, but the largest node has 2 CPUs"
    assert time.monotonic() - started < 30


@pytest.mark.slow
def test_the_command_exits_1_with_one_line(warm_ray: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tunekit.cli import main as cli_main

    args = [
        "run",
        str(DEFAULT_SPEC),
        "--set",
        "resources.cpu=3",
        "--set",
        "tracking.enabled=false",
    ]
    assert cli_main([*args, "--storage", str(tmp_path), "--name", "big"]) == 1
    printed = capsys.readouterr()
    assert printed.err == "tunekit: error: resources.cpu: 3 per trial, but the largest node has 2 CPUs\n"
    assert not (tmp_path / "big").exists()


@pytest.mark.slow
def test_every_trial_failing_raises_no_result_with_the_first_reason(warm_ray: None, tmp_path: Path) -> None:
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with pytest.raises(tunekit.NoResultError) as raised:
        _run_small(
            tmp_path,
            "broken",
            f"trainable={TEST_TRAINABLES / 'broken_model.py'}",
            "tracking.enabled=true",
            f"tracking.uri={uri}",
        )
    directory = tmp_path / "broken"
    # nothing of MLflow stays behind for the next run in this process
    assert mlflow.active_run() is None and "MLFLOW_RUN_ID" not in os.environ
    client = mlflow.MlflowClient(uri)
    experiment = client.get_experiment_by_name("digits-mlp")
    assert experiment is not None
    parents = client.search_runs([experiment.experiment_id], "tags.`tunekit.role` = 'experiment'")
    assert [r.info.status for r in parents] == ["FINISHED"] or [r.info.status for r in parents] == ["FAILED"]
    assert raised.value.experiment_dir == directory
    trials = tunekit.load(directory).trials  # the results are still there
    assert list(trials["status"]) == ["failed", "failed"]
    first = trials.sort_values("ended_at").iloc[0]
    message = (
        "no trial reported val_accuracy: 2 failed (first: ValueError: Input 0 of layer 'dense' is incompatible: "
        "expected shape (None, 64), found (None, 63))"
    )
    error_file = directory / str(first["trial_id"]) / ERROR_FILE
    if error_file.is_file():
        message += f", see {error_file}"
    assert str(raised.value) == message


@pytest.mark.slow
def test_a_time_budget_that_ends_before_the_first_epoch_raises_no_result(warm_ray: None, tmp_path: Path) -> None:
    # On the warm Ray, with workers that imported TensorFlow before the search, a first epoch
    # (the actor, the data, the model, tracing its steps) came 0.77 s after the call on a quiet
    # machine (benchmarks.warm): 0.1 s ends before it.
    with pytest.raises(tunekit.NoResultError) as raised:
        _run_small(tmp_path, "budget", "budget.time_budget_s=0.1")
    assert str(raised.value) == (
        "no trial reported val_accuracy: the time budget of 0.1 s ran out before any trial finished an epoch"
    )
    assert raised.value.experiment_dir == tmp_path / "budget"


@pytest.mark.slow
def test_a_run_from_another_directory_restarts_ray_and_says_so(
    warm_ray: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The working directory is on the workers' PYTHONPATH, fixed when Ray starts.
    monkeypatch.chdir(tmp_path)
    trainable = f"trainable={REPO / 'trainables' / 'digits_mlp.py'}"
    # A trial that fits (resources are checked before a Ray starts), then one that cannot, on the reused Ray.
    for name, extra in (("moved", "budget.num_samples=1"), ("again", "resources.gpu=1")):
        stream = io.StringIO()
        with contextlib.nullcontext() if name == "moved" else pytest.raises(tunekit.ResourceError):
            tunekit.run(
                DEFAULT_SPEC, overrides=[*SMALL, trainable, extra], storage=tmp_path, name=name, progress=stream
            )
        phases = [line.split("] ", 1)[1] for line in stream.getvalue().splitlines() if line.startswith("[")]
        if name == "moved":
            assert phases[0] == (
                "restarting Ray: the workers' environment changed (working directory, PYTHONPATH or the code "
                "shipped to nodes)"
            )
        else:
            assert phases == ["reusing the Ray this process started"]


@pytest.mark.slow
def test_a_ray_the_caller_started_is_used_and_never_shut_down(warm_ray: None, tmp_path: Path) -> None:
    import ray

    from tunekit.driver.session import ray_init_options

    tunekit.shutdown()
    ray.init("local", num_cpus=2, num_gpus=1, **ray_init_options())  # one logical GPU
    try:
        with pytest.raises(tunekit.ResourceError) as raised:
            _run_small(tmp_path, "gpus", "resources.gpu=2")
        assert str(raised.value) == "resources.gpu: 2 per trial, but the largest node has 1 GPU"
        tunekit.shutdown()
        assert ray.is_initialized()
    finally:
        ray.shutdown()


# --------------------------------------------------------------- signals, real processes


def _start(args: list[str], log: Path) -> subprocess.Popen[str]:
    # In a process group of its own, as `timeout` or a shell's job runs it: _stop can signal the group.
    return subprocess.Popen(
        [TUNEKIT, *args],
        cwd=REPO,
        env=cli_env(),
        stdout=log.open("w"),
        stderr=subprocess.PIPE,
        text=True,
        process_group=0,
    )


def _wait_for(log: Path, text: str, process: subprocess.Popen[str], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text():
        assert process.poll() is None, log.read_text()
        assert time.monotonic() < deadline, f"no {text!r} in:\n{log.read_text()}"
        time.sleep(0.1)


def _stop(process: subprocess.Popen[str], number: int, *, group: bool = False) -> tuple[int, float, str]:
    """Signals the process (or its whole process group), and waits up to 10 s for its end."""
    sent = time.monotonic()
    if group:
        os.killpg(process.pid, number)
    else:
        process.send_signal(number)
    try:
        _, stderr = process.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise
    return process.returncode, time.monotonic() - sent, stderr


def _trials(directory: Path) -> list[dict[str, str]]:
    import csv

    with (directory / "trials.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.slow
def test_sigterm_in_start_up_and_in_training_stops_in_seconds_and_resume_finishes(tmp_path: Path) -> None:
    # One search stopped twice, as a scheduler's SIGTERM would: while Ray starts, then while
    # one trial trains and the other waits for resources (2 CPUs a trial on 2 cores).
    directory = tmp_path / "term"
    overrides = [
        "tracking.enabled=false",
        "budget.num_samples=2",
        "budget.max_epochs=2",
        "resources.cpu=2",
        "scheduler.type=fifo",
    ]
    sets = [arg for o in overrides for arg in ("--set", o)]
    resume_line = f"tunekit: interrupted by SIGTERM; `tunekit resume {directory}` continues the search"

    run = ["run", str(DEFAULT_SPEC), *sets, "--storage", str(tmp_path), "--name", "term"]
    log = tmp_path / "run.log"
    process = _start(run, log)
    _wait_for(log, "starting Ray", process)
    code, took, stderr = _stop(process, signal.SIGTERM)
    assert (code, took < 10) == (143, True), (code, took, stderr)
    # Nothing had started: nothing is kept, and the same command starts the search again.
    assert (
        stderr.splitlines()[-1]
        == "tunekit: interrupted by SIGTERM during start-up; nothing started and nothing was kept"
    )
    assert "Traceback" not in stderr
    assert not directory.exists()

    log = tmp_path / "again.log"
    process = _start(run, log)
    _wait_for(log, "first epoch reported", process)
    # To the whole process group, as `timeout` sends it: the local Ray's processes are in a
    # group of their own and keep running while the driver stops the search (before, they
    # died under it, and Ray's client aborted the driver after 60 s without its GCS).
    code, took, stderr = _stop(process, signal.SIGTERM, group=True)
    assert (code, took < 10) == (143, True), (code, took, stderr)
    assert stderr.splitlines() == [
        "",
        "tunekit: SIGTERM received: stopping the search and saving its state (again to force)",
        resume_line,
    ]

    resumed = run_tunekit("resume", str(directory), timeout=180)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    # A resume's start-up is told as a run's is: no silence until the first trial ends.
    assert "first trial started (trial" in resumed.stdout and "first epoch reported" in resumed.stdout, resumed.stdout
    trials = _trials(directory)
    assert len(trials) == 2
    assert {t["status"] for t in trials} == {"completed"}, trials
    assert "Traceback" not in resumed.stderr


@pytest.mark.slow
def test_a_second_signal_exits_at_once(tmp_path: Path) -> None:
    # Ctrl-C twice: the first starts Tune's graceful stop, the second ends the process.
    log = tmp_path / "run.log"
    sets = [arg for o in [*SMALL, "budget.num_samples=1"] for arg in ("--set", o)]
    process = _start(
        [
            "run",
            str(DEFAULT_SPEC),
            *sets,
            "--storage",
            str(tmp_path),
            "--name",
            "twice",
        ],
        log,
    )
    _wait_for(log, "waiting for the first trial workers", process)
    ray_processes = psutil.Process(process.pid).children(recursive=True)
    assert ray_processes
    process.send_signal(signal.SIGINT)
    time.sleep(0.3)
    code, took, stderr = _stop(process, signal.SIGINT)
    assert (code, took < 5) == (130, True), (code, took, stderr)
    # the local Ray it started goes with it (workers importing TensorFlow would linger)
    _, alive = psutil.wait_procs(ray_processes, timeout=5)
    assert alive == []
    assert [line for line in stderr.splitlines() if line] == [
        "tunekit: SIGINT received: stopping the search and saving its state (again to force)",
        f"tunekit: second SIGINT: exiting now; `tunekit resume {tmp_path / 'twice'}` continues from Ray's last "
        "saved state",
    ]
