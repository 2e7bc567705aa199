"""A search's life from the outside: exit codes, signals, resources that can never be placed,
start-up progress, a warm Ray reused across runs in one process, and the CLI's rough edges.

The in-process tests share the one Ray that ``tunekit.run`` starts and keeps (the warm
notebook path), and shut it down at the end of the module. The signal tests drive real
``tunekit`` processes.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pytest

import tunekit
from tunekit.config.resources import local_fit_warning, unplaceable
from tunekit.config.spec import ResourcesSpec, load_spec
from tunekit.driver.progress import ConsoleProgress
from tunekit.driver.runner import no_result_reason
from tunekit.driver.session import _DRIVER_ENV
from tunekit.layout import ERROR_FILE, OUTPUT_FILE

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SPEC = REPO / "search_spaces" / "digits_mlp.yaml"
TEST_TRAINABLES = REPO / "tests" / "trainables"
TUNEKIT = str(Path(sys.executable).parent / "tunekit")
SMALL = ["tracking.enabled=false", "budget.num_samples=2", "budget.max_epochs=1", "scheduler.type=fifo"]


def _cli_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONUNBUFFERED"] = "1"
    return env


# ------------------------------------------------------------------ no Ray, no TensorFlow


def test_unplaceable_names_the_resource_the_request_and_the_largest_node() -> None:
    one_cpu_node = [{"CPU": 2.0}]
    assert unplaceable({"cpu": 1, "gpu": 0}, one_cpu_node) is None
    assert unplaceable({"cpu": 1, "gpu": 1}, one_cpu_node, {"CPU": 2.0}) == (
        "resources.gpu: 1 per trial, but the cluster has 0 GPUs (run tunekit doctor)"
    )
    assert unplaceable({"cpu": 3, "gpu": 0}, one_cpu_node) == (
        "resources.cpu: 3 per trial, but the largest node has 2 CPUs"
    )
    # two nodes of 2 GPUs do not make one trial of 4
    two_nodes = [{"CPU": 8.0, "GPU": 2.0}, {"CPU": 8.0, "GPU": 2.0}]
    assert unplaceable({"cpu": 1, "gpu": 4}, two_nodes) == (
        "resources.gpu: 4 per trial, but the largest node has 2 GPUs"
    )
    assert unplaceable({"cpu": 1, "gpu": 0.5}, two_nodes) is None


def test_local_fit_warning_on_this_machine() -> None:
    cpus = os.cpu_count() or 1
    assert local_fit_warning(ResourcesSpec(cpu=1, gpu=0, gpu_memory="growth")) is None
    assert local_fit_warning(ResourcesSpec(cpu=cpus + 1, gpu=0, gpu_memory="growth")) == (
        f"resources.cpu: {cpus + 1} per trial, but this machine has {cpus} CPUs; a local run stops at once "
        "(a cluster joined with --address may have more)"
    )


def _record(trial_id: str, number: int, status: str, reason: str = "", metric: float | None = None) -> Any:
    return SimpleNamespace(
        trial_id=trial_id,
        number=number,
        status=status,
        reason=reason,
        epochs=0 if metric is None else 1,
        final_metric=metric,
        best_metric=metric,
        started_at=100.0 + number,
        ended_at=200.0 + number,
    )


def test_no_result_reason(tmp_path: Path) -> None:
    spec = load_spec(DEFAULT_SPEC, ["budget.time_budget_s=5"])
    failed = [_record("b", 1, "failed", "ValueError: late"), _record("a", 0, "failed", "ValueError: bad shape")]
    assert no_result_reason(spec, tmp_path, failed, 2.0) == (
        "no trial reported val_accuracy: 2 failed (first: ValueError: bad shape)"
    )
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / ERROR_FILE).write_text("Traceback ...")
    assert no_result_reason(spec, tmp_path, failed, 2.0) == (
        f"no trial reported val_accuracy: 2 failed (first: ValueError: bad shape), see {tmp_path / 'a' / ERROR_FILE}"
    )
    stopped = [_record("c", 0, "stopped")]
    assert no_result_reason(spec, tmp_path, stopped, 5.2) == (
        "no trial reported val_accuracy: the time budget of 5 s ran out before any trial finished an epoch"
    )
    assert no_result_reason(spec, tmp_path, [*stopped, _record("d", 1, "completed", metric=0.9)], 9.0) == ""


class _FakeRecorder:
    def __init__(self, experiment_dir: Path) -> None:
        self.experiment_dir = experiment_dir
        self.trials: dict[str, Any] = {}
        self.epochs: list[Any] = []

    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(("running", "completed", "pruned", "stopped", "failed"), 0)
        for record in self.trials.values():
            counts[record.status] += 1
        return counts

    def best(self) -> Any:
        done = [r for r in self.trials.values() if r.final_metric is not None]
        return max(done, key=lambda r: r.final_metric) if done else None


def _drive_console(console: ConsoleProgress, experiment_dir: Path) -> None:
    recorder = _FakeRecorder(experiment_dir)
    console.header(experiment_dir, "sqlite:///mlflow.db")
    console.phase("starting Ray (local)")
    console.experiment_started(recorder)  # type: ignore[arg-type]
    ok = _record("t0", 0, "running")
    recorder.trials["t0"] = ok
    console.trial_started(ok)
    recorder.epochs.append(object())
    console.epoch_reported(ok, object())  # type: ignore[arg-type]
    ok.status, ok.final_metric, ok.epochs, ok.reason = "completed", 0.9, 7, "stopped by the model at epoch 7"
    console.trial_ended(ok)
    bad = _record("t1", 1, "failed", "ValueError: " + "x" * 300)
    recorder.trials["t1"] = bad
    (experiment_dir / "t1").mkdir()
    (experiment_dir / "t1" / ERROR_FILE).write_text("Traceback ...")
    console.trial_ended(bad)
    console.finish()


def test_console_plain_lines_show_start_up_reasons_and_the_error_file(tmp_path: Path) -> None:
    spec = load_spec(DEFAULT_SPEC, ["budget.num_samples=2"])
    stream = io.StringIO()
    _drive_console(ConsoleProgress(spec, stream), tmp_path)
    lines = stream.getvalue().splitlines()
    assert lines[:3] == [f"experiment: {tmp_path}", "tracking: sqlite:///mlflow.db", "[00:00] starting Ray (local)"]
    assert lines[3] == "[00:00] first trial started (trial 0); its worker is importing TensorFlow"
    assert lines[4] == "[00:00] first epoch reported (trial 0); training"
    assert lines[5] == (
        "[00:00] trial 0 completed after 7 epochs val_accuracy=0.9000 (stopped by the model at epoch 7) | "
        "done 1/2: completed 1, pruned 0, failed 0; running 0; best val_accuracy 0.9000 (trial 0)"
    )
    assert lines[6].startswith("[00:00] trial 1 failed after 0 epochs (ValueError: xxx")
    assert lines[6].endswith(f", see {tmp_path / 't1' / ERROR_FILE} | " + lines[6].rsplit(" | ", 1)[1])
    assert "\r" not in stream.getvalue() and "\x1b" not in stream.getvalue()


def test_console_on_a_terminal_redraws_one_line_but_prints_failures(tmp_path: Path) -> None:
    spec = load_spec(DEFAULT_SPEC, ["budget.num_samples=2"])
    stream = io.StringIO()
    _drive_console(ConsoleProgress(spec, stream, live=True), tmp_path)
    text = stream.getvalue()
    assert "\r\x1b[2K[00:00] done 1/2: completed 1" in text
    failed = [line for line in text.split("\n") if "trial 1 failed" in line]
    assert len(failed) == 1
    shown = failed[0].split("\x1b[2K")[-1]
    assert shown.endswith(f"..., see {tmp_path / 't1' / ERROR_FILE}")
    assert len(shown) < 200 + len(f", see {tmp_path / 't1' / ERROR_FILE}") + 1


# --------------------------------------------------------------------------- the CLI


def _fake_experiment(root: Path) -> Path:
    """An experiment directory as a finished search leaves it (tables only, no Ray)."""
    directory = root / "fake"
    directory.mkdir()
    (directory / "spec.yaml").write_text(load_spec(DEFAULT_SPEC).to_yaml())
    long_reason = "ValueError: " + "y" * 100
    (directory / "trials.csv").write_text(
        "trial_id,number,status,reason,epochs,final_metric,best_metric,rung,wall_seconds,samples_per_second,"
        "node_id,attempts,started_at,ended_at,params.units\n"
        "aaaa0001,0,completed,trained all 2 epochs,2,0.9,0.9,,3.0,100,n,1,1.0,4.0,32\n"
        f"aaaa0002,1,failed,{long_reason},0,,,,1.0,,n,1,1.0,2.0,64\n"
    )
    (directory / "epochs.csv").write_text(
        "trial_id,epoch,attempt,resumed_from_epoch,time,val_accuracy\naaaa0001,1,1,,1.0,0.8\naaaa0001,2,1,,2.0,0.9\n"
    )
    (directory / "aaaa0001").mkdir()
    (directory / "aaaa0001" / OUTPUT_FILE).write_text("epoch 1\nepoch 2\n")
    (directory / "aaaa0002").mkdir()
    (directory / "aaaa0002" / OUTPUT_FILE).write_text("building the model\n")
    (directory / "aaaa0002" / ERROR_FILE).write_text("Traceback (most recent call last):\nValueError: yyy\n")
    return directory


def _tunekit(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TUNEKIT, *args], cwd=REPO, env=_cli_env(), capture_output=True, text=True, timeout=timeout, check=False
    )


def test_report_table_has_a_truncated_reason_column(tmp_path: Path) -> None:
    directory = _fake_experiment(tmp_path)
    done = _tunekit("report", str(directory))
    assert done.returncode == 0, done.stderr
    header, best, failed = done.stdout.splitlines()[:3]
    assert header.split()[-1] == "reason"
    assert best.rstrip().endswith("trained all 2 epochs")
    assert failed.rstrip().endswith("ValueError: " + "y" * 45 + "...")


def test_report_into_a_closed_pipe_exits_quietly(tmp_path: Path) -> None:
    directory = _fake_experiment(tmp_path)
    done = subprocess.run(
        f"set -o pipefail; {TUNEKIT} report {directory} --format json | head -c 1; echo; echo status=$?",
        shell=True,
        executable="/bin/bash",
        cwd=REPO,
        env=_cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.stdout.splitlines()[-1] == "status=0"
    assert done.stderr == ""


def test_logs_prints_the_output_then_the_error(tmp_path: Path) -> None:
    directory = _fake_experiment(tmp_path)
    by_number = _tunekit("logs", str(directory), "1")
    assert by_number.returncode == 0, by_number.stderr
    assert by_number.stdout == (
        f"building the model\n--- {directory / 'aaaa0002' / ERROR_FILE}\n"
        "Traceback (most recent call last):\nValueError: yyy\n"
    )
    by_id = _tunekit("logs", str(directory), "aaaa0001")
    assert (by_id.returncode, by_id.stdout) == (0, "epoch 1\nepoch 2\n")
    missing = _tunekit("logs", str(directory), "7")
    assert missing.returncode == 1
    assert missing.stderr == (
        f"tunekit: error: trial 7: not in {directory / 'trials.csv'}; trials: 0 (aaaa0001), 1 (aaaa0002)\n"
    )
    (directory / "aaaa0001" / OUTPUT_FILE).unlink()
    empty = _tunekit("logs", str(directory), "0")
    assert empty.returncode == 1
    assert empty.stderr == (
        f"tunekit: error: trial 0 (aaaa0001): neither {OUTPUT_FILE} nor {ERROR_FILE} in {directory / 'aaaa0001'}\n"
    )


def test_validate_warns_when_this_machine_cannot_run_a_trial() -> None:
    done = _tunekit("validate", str(DEFAULT_SPEC), "--set", "resources.gpu=1", timeout=30)
    assert done.returncode == 0
    assert done.stdout == "ok\n"
    assert done.stderr == (
        "tunekit: warning: resources.gpu: 1 per trial, but this machine has 0 GPUs; a local run stops at once "
        "(a cluster joined with --address may have more)\n"
    )


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
    return tunekit.run(DEFAULT_SPEC, overrides=[*SMALL, *extra], storage=tmp_path, name=name, progress=False, **kwargs)


@pytest.mark.slow
def test_second_run_reuses_ray_and_nothing_leaks(warm_ray: None, tmp_path: Path) -> None:
    import ray
    from ray.util.placement_group import placement_group_table

    env_before = dict(os.environ)
    handlers_before = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)]
    started = time.monotonic()
    first = _run_small(tmp_path, "first")
    first_s = time.monotonic() - started
    assert ray.is_initialized()  # kept for the next run
    # tunekit's driver settings are undone; Ray's own (PYTHONBREAKPOINT, ...) stay with its session
    assert {k: os.environ.get(k) for k in _DRIVER_ENV} == {k: env_before.get(k) for k in _DRIVER_ENV}
    env_between = dict(os.environ)
    assert [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)][:2] == handlers_before[:2]
    assert ray.available_resources().get("CPU") == ray.cluster_resources()["CPU"]
    assert [p for p in placement_group_table().values() if p["state"] != "REMOVED"] == []

    started = time.monotonic()
    second = _run_small(tmp_path, "second")
    second_s = time.monotonic() - started
    assert dict(os.environ) == env_between
    assert len(first.trials) == len(second.trials) == 2
    assert set(second.trials["status"]) == {"completed"}
    assert second_s < 0.8 * first_s, (first_s, second_s)
    assert ray.available_resources().get("CPU") == ray.cluster_resources()["CPU"]
    assert [p for p in placement_group_table().values() if p["state"] != "REMOVED"] == []


@pytest.mark.slow
def test_a_trial_no_node_can_place_fails_at_once(warm_ray: None, tmp_path: Path) -> None:
    started = time.monotonic()
    with pytest.raises(tunekit.ResourceError) as raised:
        _run_small(tmp_path, "gpu", "resources.gpu=1")
    assert str(raised.value) == "resources.gpu: 1 per trial, but the cluster has 0 GPUs (run tunekit doctor)"
    assert raised.value.experiment_dir == tmp_path / "gpu"
    with pytest.raises(tunekit.ResourceError) as raised:
        _run_small(tmp_path, "cpu", "resources.cpu=3")
    assert str(raised.value) == "resources.cpu: 3 per trial, but the largest node has 2 CPUs"
    assert time.monotonic() - started < 30


@pytest.mark.slow
def test_the_command_exits_1_with_one_line(warm_ray: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tunekit.cli import main as cli_main

    args = ["run", str(DEFAULT_SPEC), "--set", "resources.cpu=3", "--set", "tracking.enabled=false"]
    assert cli_main([*args, "--storage", str(tmp_path), "--name", "big"]) == 1
    printed = capsys.readouterr()
    assert printed.err == "tunekit: error: resources.cpu: 3 per trial, but the largest node has 2 CPUs\n"
    assert printed.out.splitlines()[:2] == [f"experiment: {tmp_path / 'big'}", "tracking: off"]


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
    # Even on the warm Ray, new trial workers import TensorFlow for several seconds.
    with pytest.raises(tunekit.NoResultError) as raised:
        _run_small(tmp_path, "budget", "budget.time_budget_s=2")
    assert str(raised.value) == (
        "no trial reported val_accuracy: the time budget of 2 s ran out before any trial finished an epoch"
    )
    assert raised.value.experiment_dir == tmp_path / "budget"


@pytest.mark.slow
def test_a_run_from_another_directory_restarts_ray_and_says_so(
    warm_ray: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The working directory is on the workers' PYTHONPATH, fixed when Ray starts.
    monkeypatch.chdir(tmp_path)
    trainable = f"trainable={REPO / 'trainables' / 'digits_mlp.py'}"
    for name in ("moved", "again"):
        stream = io.StringIO()
        with pytest.raises(tunekit.ResourceError):
            tunekit.run(
                DEFAULT_SPEC,
                overrides=[*SMALL, trainable, "resources.gpu=1"],
                storage=tmp_path,
                name=name,
                progress=stream,
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
    return subprocess.Popen(
        [TUNEKIT, *args],
        cwd=REPO,
        env=_cli_env(),
        stdout=log.open("w"),
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for(log: Path, text: str, process: subprocess.Popen[str], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text():
        assert process.poll() is None, log.read_text()
        assert time.monotonic() < deadline, f"no {text!r} in:\n{log.read_text()}"
        time.sleep(0.1)


def _stop(process: subprocess.Popen[str], number: int) -> tuple[int, float, str]:
    sent = time.monotonic()
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
def test_sigterm_while_training_stops_in_seconds_and_resume_finishes(tmp_path: Path) -> None:
    directory = tmp_path / "term"
    log = tmp_path / "run.log"
    # 2 CPUs a trial on this 2-core machine: one trains, the others wait for resources.
    overrides = ["tracking.enabled=false", "budget.num_samples=2", "budget.max_epochs=2", "resources.cpu=2"]
    overrides += ["scheduler.type=fifo"]
    sets = [arg for o in overrides for arg in ("--set", o)]
    process = _start(["run", str(DEFAULT_SPEC), *sets, "--storage", str(tmp_path), "--name", "term"], log)
    _wait_for(log, "first epoch reported", process)
    code, took, stderr = _stop(process, signal.SIGTERM)
    assert (code, took < 10) == (143, True), (code, took, stderr)
    assert stderr.splitlines() == [
        "",
        "tunekit: SIGTERM received: stopping the search and saving its state (again to force)",
        f"tunekit: interrupted by SIGTERM; `tunekit resume {directory}` continues the search",
    ]
    resumed = _tunekit("resume", str(directory), timeout=180)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    trials = _trials(directory)
    assert len(trials) == 2
    assert {t["status"] for t in trials} == {"completed"}, trials
    assert "Traceback" not in resumed.stderr


@pytest.mark.slow
def test_sigterm_during_start_up_then_resume_starts_the_search(tmp_path: Path) -> None:
    directory = tmp_path / "early"
    log = tmp_path / "run.log"
    sets = [
        arg
        for o in ["tracking.enabled=false", "budget.num_samples=1", "budget.max_epochs=1", "scheduler.type=fifo"]
        for arg in ("--set", o)
    ]
    process = _start(["run", str(DEFAULT_SPEC), *sets, "--storage", str(tmp_path), "--name", "early"], log)
    _wait_for(log, "starting Ray", process)
    code, took, stderr = _stop(process, signal.SIGTERM)
    assert (code, took < 10) == (143, True), (code, took, stderr)
    assert (
        stderr.splitlines()[-1] == f"tunekit: interrupted by SIGTERM; `tunekit resume {directory}` continues the search"
    )
    assert "Traceback" not in stderr
    resumed = _tunekit("resume", str(directory), timeout=180)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert [t["status"] for t in _trials(directory)] == ["completed"]


@pytest.mark.slow
def test_a_second_signal_exits_at_once(tmp_path: Path) -> None:
    # Ctrl-C twice: the first starts Tune's graceful stop, the second ends the process.
    log = tmp_path / "run.log"
    sets = [arg for o in [*SMALL, "budget.num_samples=1"] for arg in ("--set", o)]
    process = _start(["run", str(DEFAULT_SPEC), *sets, "--storage", str(tmp_path), "--name", "twice"], log)
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
