"""A search's end and start-up, told without running one: resources no node can place, this
machine's fit, why a search gave no result, the console's start-up progress. No Ray, no TensorFlow.

Real searches, signals and a warm Ray: tests/e2e/test_lifecycle.py.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tunekit.config.resources import local_fit_warning, unplaceable
from tunekit.config.sections import ResourcesSpec
from tunekit.config.spec import load_spec
from tunekit.driver.progress import ConsoleProgress
from tunekit.driver.records import EpochRow, TrialRecord
from tunekit.driver.resumable import stand_in_for_rotated_checkpoints
from tunekit.driver.signals import StopSignals
from tunekit.errors import SearchInterrupted
from tunekit.layout import CHECKPOINT_STATE, ERROR_FILE, TrialStatus
from tunekit.results.completion import no_result_reason
from tunekit.worker.checkpoints import restore_checkpoint

REPO = Path(__file__).resolve().parents[3]
DEFAULT_SPEC = REPO / "search_spaces" / "digits_mlp.yaml"


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


def _record(
    trial_id: str,
    number: int,
    status: str,
    reason: str = "",
    metric: float | None = None,
) -> Any:
    return SimpleNamespace(
        trial_id=trial_id,
        number=number,
        status=status,
        reason=reason,
        epochs=0 if metric is None else 1,
        checkpoint_epoch=0,
        final_metric=metric,
        best_metric=metric,
        started_at=100.0 + number,
        ended_at=200.0 + number,
        attempts=1,
        spans=[[100.0 + number, 200.0 + number]],
        span_workers=[{"attempt": 1, "node_id": "", "pid": None}],
    )


def test_no_result_reason(tmp_path: Path) -> None:
    spec = load_spec(DEFAULT_SPEC, ["budget.time_budget_s=5"])
    failed = [
        _record("b", 1, "failed", "ValueError: late"),
        _record("a", 0, "failed", "ValueError: bad shape"),
    ]
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
        self.exploits: list[Any] = []

    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(("running", "completed", "pruned", "stopped", "failed"), 0)
        for record in self.trials.values():
            counts[record.status] += 1
        return counts

    def best(self) -> Any:
        done = [r for r in self.trials.values() if r.final_metric is not None]
        return max(done, key=lambda r: r.final_metric) if done else None

    def running(self) -> list[Any]:
        return [r for r in self.trials.values() if r.status == "running"]

    def ended_epochs(self) -> tuple[int, int]:
        ended = [r for r in self.trials.values() if r.status != "running"]
        return len(ended), sum(r.epochs for r in ended)


def _drive_console(console: ConsoleProgress, experiment_dir: Path) -> None:
    recorder = _FakeRecorder(experiment_dir)
    console.header(experiment_dir, "sqlite:///mlflow.db")
    console.phase("starting Ray (local)")
    console.experiment_started(recorder)  # type: ignore[arg-type]
    ok = _record("t0", 0, "running")
    recorder.trials["t0"] = ok
    console.trial_started(ok)
    recorder.epochs.append(object())
    console.epoch_reported(ok, EpochRow("a", 1, {}, 1, 0, 1.0))
    ok.status, ok.final_metric, ok.epochs, ok.reason = (
        "completed",
        0.9,
        7,
        "stopped by the model at epoch 7",
    )
    console.trial_ended(ok)
    bad = _record("t1", 1, "failed", "ValueError: " + "x" * 300)
    recorder.trials["t1"] = bad
    (experiment_dir / "t1").mkdir()
    (experiment_dir / "t1" / ERROR_FILE).write_text("Traceback ...")
    console.trial_ended(bad)
    console.finish()


def test_console_plain_lines_show_start_up_reasons_and_the_error_file(
    tmp_path: Path,
) -> None:
    spec = load_spec(DEFAULT_SPEC, ["budget.num_samples=2"])
    stream = io.StringIO()
    _drive_console(ConsoleProgress(spec, stream), tmp_path)
    lines = stream.getvalue().splitlines()
    assert lines[:3] == [
        f"experiment: {tmp_path}",
        "tracking: sqlite:///mlflow.db",
        "[00:00] starting Ray (local)",
    ]
    assert lines[3] == "[00:00] first trial started (trial 0)"
    assert lines[4] == "[00:00] first epoch reported (trial 0); training"
    assert lines[5] == (
        "[00:00] trial 0 completed after 7 epochs val_accuracy=0.9000 (stopped by the model) | "
        "done 1/2: completed 1, pruned 0, failed 0; running 0; best val_accuracy 0.9000 (trial 0)"
    )
    assert lines[6].startswith("[00:00] trial 1 failed after 0 epochs (ValueError: xxx")
    assert lines[6].endswith(f", see {tmp_path / 't1' / ERROR_FILE} | " + lines[6].rsplit(" | ", 1)[1])
    assert "\r" not in stream.getvalue() and "\x1b" not in stream.getvalue()


def test_console_on_a_terminal_redraws_one_line_but_prints_failures(
    tmp_path: Path,
) -> None:
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


# ------------------------------------------------------------------ signals in start-up


def test_a_start_up_interruption_that_code_swallowed_is_raised_again(tmp_path: Path) -> None:
    # Python swallows a signal handler's raise in some places (an at-fork hook inside
    # ray.init, a __del__); a broad except stands in for them here.
    assert not StopSignals.exit_in_start_up  # a library caller's setting: it raises, never exits
    before = signal.getsignal(signal.SIGTERM)
    swallowed = False
    with (
        pytest.raises(SearchInterrupted, match="interrupted by SIGTERM during start-up") as raised,
        StopSignals(tmp_path),
    ):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
        except BaseException:
            swallowed = True
        started = time.monotonic()
        while time.monotonic() - started < 5:  # the start-up carrying on regardless
            time.sleep(0.01)
    assert swallowed
    assert time.monotonic() - started < 2  # raised again within about a second
    assert raised.value.signal_number == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) == before


def test_console_names_a_retried_trial_its_nodes_and_attempts() -> None:
    spec = load_spec(DEFAULT_SPEC)
    out = io.StringIO()
    console = ConsoleProgress(spec, out, live=False)
    record = TrialRecord("t1", 3, {})
    record.begin_span(0.0)
    record.note_worker("aaaaaaaa1111", 4242)
    record.epochs, record.checkpoint_epoch = 3, 2  # epoch 3 was reported without a checkpoint
    record.close_span(5.0)  # its node died
    record.attempts = 2
    record.begin_span(6.0)
    console.trial_started(record)
    record.note_worker("bbbbbbbb2222", 5151)
    console.epoch_reported(record, EpochRow("t1", 3, {}, 2, 2, 8.0))
    record.close_span(9.0)  # PBT paused it and restarts it: the same attempt, nothing to say
    record.begin_span(10.0)
    console.trial_started(record)
    record.note_worker("bbbbbbbb2222", 5152)
    console.epoch_reported(record, EpochRow("t1", 5, {}, 2, 4, 11.0))
    young = TrialRecord("t2", 4, {}, epochs=1)  # died before its first checkpoint was due
    young.begin_span(0.0)
    young.note_worker("aaaaaaaa1111", 4243)
    young.attempts = 2
    young.begin_span(6.0)
    console.trial_started(young)
    paused = TrialRecord("t3", 5, {}, epochs=4)  # PBT paused it; its restart had not reported when its driver died
    paused.begin_span(0.0)
    paused.note_worker("cccccccc3333", 99)
    paused.begin_span(3.0)
    paused.checkpoint_epoch, paused.attempts = 4, 2
    paused.begin_span(6.0)
    console.trial_started(paused)
    lines = [line.split("] ", 1)[1] for line in out.getvalue().splitlines() if "attempt" in line]
    assert lines == [
        "trial 3: attempt 2 starts from its last checkpoint (epoch 2); attempt 1 ran on node aaaaaaaa, worker pid 4242",
        "trial 3: attempt 2 runs on node bbbbbbbb (worker pid 5151), resumed from epoch 2",
        "trial 4: attempt 2 trains again from its first epoch (it had no checkpoint yet); "
        "attempt 1 ran on node aaaaaaaa, worker pid 4243",
        "trial 5: attempt 2 starts from its last checkpoint (epoch 4); attempt 1 ran on node cccccccc, worker pid 99",
    ]


def test_a_resume_shows_the_same_start_up_milestones_as_a_run(tmp_path: Path) -> None:
    spec = load_spec(DEFAULT_SPEC, ["budget.num_samples=2"])
    out = io.StringIO()
    console = ConsoleProgress(spec, out, live=False)
    recorder = _FakeRecorder(tmp_path)
    unfinished = _record("t0", 0, "running")
    unfinished.epochs, unfinished.checkpoint_epoch = 4, 3  # trained before the stop; epoch 4 had no checkpoint
    recorder.trials["t0"] = unfinished
    recorder.epochs.extend([object()] * 4)
    console.experiment_started(recorder)  # type: ignore[arg-type]
    console.trial_started(unfinished)
    console.epoch_reported(unfinished, EpochRow("t0", 4, {}, 1, None, 1.0))
    lines = [line.split("] ", 1)[1] for line in out.getvalue().splitlines()]
    assert lines == [
        "first trial started (trial 0, continuing after epoch 3)",
        "first epoch reported (trial 0); training",
    ]


def test_each_pbt_exploit_step_gets_a_line_once(tmp_path: Path) -> None:
    spec = load_spec(DEFAULT_SPEC, ["budget.num_samples=2"])
    out = io.StringIO()
    console = ConsoleProgress(spec, out, live=False)
    recorder = _FakeRecorder(tmp_path)
    recorder.trials = {"a": _record("a", 0, "running"), "b": _record("b", 1, "running")}
    console.experiment_started(recorder)  # type: ignore[arg-type]
    old = {"learning_rate": 0.001, "units": 64}
    new = {"learning_rate": 0.0012, "units": 128}
    # tunekit.search.pbt.ExploitStep's fields (importing it imports Ray)
    recorder.exploits.append(
        SimpleNamespace(trial_id="a", epoch=4, source_trial_id="b", source_epoch=4, old=old, new=new)
    )
    console.tick(recorder)  # type: ignore[arg-type]
    console.tick(recorder)  # type: ignore[arg-type]
    lines = [line.split("] ", 1)[1] for line in out.getvalue().splitlines() if "PBT" in line]
    assert lines == [
        "PBT: trial 0 at epoch 4 took trial 1's epoch-4 checkpoint; learning_rate 0.001 -> 0.0012, units 64 -> 128"
    ]


def test_a_long_epoch_shows_its_step_and_a_quiet_log_gets_a_status_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tunekit.driver import progress
    from tunekit.worker import heartbeat

    spec = load_spec(DEFAULT_SPEC, ["budget.num_samples=2"])
    recorder = _FakeRecorder(tmp_path)
    running = _record("t0", 0, "running")
    running.epochs = 2  # reported two epochs; the third is in progress
    recorder.trials["t0"] = running
    (tmp_path / "t0").mkdir()
    monkeypatch.setattr(heartbeat, "WRITE_EVERY_S", 0.0)
    writer = heartbeat.HeartbeatWriter(tmp_path / "t0")
    writer.batch_began(3, "train", 120, 400)

    live = io.StringIO()
    console = ConsoleProgress(spec, live, live=True)
    console.header(tmp_path, None)
    console.experiment_started(recorder)  # type: ignore[arg-type]
    console.tick(recorder)  # type: ignore[arg-type]
    assert live.getvalue().endswith("running 1; best val_accuracy -; trial 0 epoch 3 step 120/400")
    writer.batch_began(3, "train", 130, 400)
    assert console.status_line().endswith("step 120/400")  # heartbeats are read at most once a second
    running.status = "completed"  # ended since that read: its step is not shown a moment longer
    assert "step" not in console.status_line()
    running.status = "running"
    monkeypatch.setattr(progress, "ESTIMATE_EVERY_S", 0.0)

    writer.batch_began(2, "train", 5, 400)  # an epoch already reported: a stale beat, not shown
    assert not console.status_line().endswith("step 5/400")
    writer.batch_began(3, "validate", 7, None)
    assert console.status_line().endswith("; trial 0 epoch 3 validation step 7")
    # An epoch that began less than a heartbeat's period ago is not shown: with short epochs
    # the beat is any epoch's first batch ("epoch 2 step 1/4" flickered by 0.1-s epochs).
    monkeypatch.setattr(heartbeat, "WRITE_EVERY_S", 5.0)
    console.epoch_reported(running, EpochRow("t0", 2, {"val_accuracy": 0.9}, 1, None, 1.0))
    assert "step" not in console.status_line()
    monkeypatch.setattr(heartbeat, "WRITE_EVERY_S", -1.0)  # as if the epoch had run longer than that
    assert console.status_line().endswith("; trial 0 epoch 3 validation step 7")
    # A beat several periods old (a worker that died, a long batch) is said with its age, not as now.
    real_time = time.time
    monkeypatch.setattr(progress.time, "time", lambda: real_time() + 20.4)
    assert console.status_line().endswith("; trial 0 epoch 3 validation step 7 (last heard 20 s ago)")
    monkeypatch.setattr(progress.time, "time", real_time)
    writer.remove()
    assert console.status_line().endswith("running 1; best val_accuracy -")

    log = io.StringIO()
    console = ConsoleProgress(spec, log, live=False)
    console.experiment_started(recorder)  # type: ignore[arg-type]
    console.tick(recorder)  # type: ignore[arg-type]
    assert log.getvalue() == ""  # not quiet for long yet
    monkeypatch.setattr(progress, "QUIET_LOG_S", 0.0)
    console.tick(recorder)  # type: ignore[arg-type]
    assert log.getvalue() == "[00:00] done 0/2: completed 0, pruned 0, failed 0; running 1; best val_accuracy -\n"
    running.status = "stopped"  # a signal stopped it: done, and named as such
    assert "done 1/2: completed 0, pruned 0, stopped 1, failed 0; running 0" in console.status_line()
    # No trial completed yet: the leading trial's status is said (a running one's value can still fall).
    running.status, running.final_metric = "running", 0.75
    assert console.status_line().endswith("; running 1; best val_accuracy 0.7500 (trial 0, running)")
    running.status = "completed"
    assert console.status_line().endswith("; running 0; best val_accuracy 0.7500 (trial 0)")


def test_the_heartbeat_is_written_at_most_every_period_and_goes_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tunekit.worker import heartbeat

    clock = [1000.0]
    monkeypatch.setattr(heartbeat.time, "monotonic", lambda: clock[0])
    writer = heartbeat.HeartbeatWriter(tmp_path)
    writer.batch_began(1, "train", 1, 10)
    assert heartbeat.read_heartbeat(tmp_path) is None  # a short epoch writes nothing
    clock[0] += heartbeat.WRITE_EVERY_S
    writer.batch_began(1, "train", 9, 10)
    clock[0] += 1.0
    writer.batch_began(1, "train", 10, 10)  # within the period: not written
    beat = heartbeat.read_heartbeat(tmp_path)
    assert beat is not None and (beat.epoch, beat.step, beat.steps) == (1, 9, 10)
    assert heartbeat.read_heartbeat(tmp_path, now=beat.at + heartbeat.STALE_AFTER_S + 1) is None


def test_with_several_objectives_the_status_line_shows_the_front_and_the_select_rule_s_pick() -> None:
    from tunekit.driver.progress import front_text

    spec = load_spec(REPO / "search_spaces" / "digits_mlp_pareto.yaml")  # select: max val_accuracy, params <= 20000

    def record(number: int, accuracy: float, params: float, status: str = "completed", feasible: bool = True) -> Any:
        trial = TrialRecord(f"t{number}", number, {})
        trial.status, trial.feasible = TrialStatus(status), feasible
        trial.finals = {"val_accuracy": accuracy, "model_params": params}
        return trial

    records = [
        record(0, 0.97, 40000.0),  # front, but breaks the select rule's subject_to
        record(1, 0.95, 9034.0),  # front: the pick
        record(2, 0.90, 8000.0),  # front
        record(3, 0.93, 9500.0),  # dominated by 1
        record(4, 0.99, 1000.0, status="pruned"),  # not completed: not on the front
        record(5, 0.99, 1000.0, feasible=False),  # infeasible: never on the front
    ]
    assert front_text(records, spec) == "front 3, selected trial 1 (val_accuracy 0.95, model_params 9034)"
    # Nothing meets model_params <= 20000: said as the report says it; a size shown whole.
    assert front_text(records[:1], spec) == "front 1, none meets the select rule"
    records[1].finals["model_params"] = 26120.0
    records[2].finals["model_params"] = 26000.0
    assert front_text(records[1:3], spec) == "front 2, none meets the select rule"
    records[1].finals["model_params"] = 19999.0
    assert front_text(records[1:2], spec) == "front 1, selected trial 1 (val_accuracy 0.95, model_params 19999)"
    from tunekit.driver.progress import _value

    assert [_value(v) for v in (26120.0, 9610.0, 0.0034856, 1482.5)] == ["26120", "9610", "0.003486", "1482"]


def test_the_status_line_estimates_time_left_once_a_second_and_counts_down_between(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The estimate reads every trial; drawn as each of thousands of short trials ends, it must not."""
    console = ConsoleProgress(load_spec(DEFAULT_SPEC), io.StringIO(), live=False)
    recorder = _FakeRecorder(tmp_path)
    recorder.trials["t0"] = _record("t0", 0, "running")
    console.experiment_started(recorder)  # type: ignore[arg-type]
    estimates: list[float] = []

    def estimate() -> float:
        estimates.append(time.monotonic())
        return 100.0

    monkeypatch.setattr(console, "time_left", estimate)
    lines = [console.status_line() for _ in range(50)]
    assert len(estimates) == 1 and all("left" in line for line in lines)
    recorder.trials["t0"].status = "completed"  # none running, trials to come: the same estimate
    assert "left" in console.status_line() and len(estimates) == 1
    for number in range(1, console._num_samples):  # every trial recorded, none running: over
        recorder.trials[f"t{number}"] = _record(f"t{number}", number, "completed")
    assert "left" not in console.status_line() and len(estimates) == 1


def test_checkpoints_rotated_away_since_ray_saved_its_state_stand_in_empty_so_the_trial_trains_again(
    tmp_path: Path,
) -> None:
    # Ray's state names checkpoint_000003 (epoch 4); the dead driver's trial went on to its
    # last epoch (8) and rotation kept only the newest two. Resuming from epoch 8 would end
    # the trial without a report and leave epochs 5-7 out of its table.
    trial_dir = tmp_path / "trial_a"
    for index in (6, 7):
        (trial_dir / f"checkpoint_{index:06d}").mkdir(parents=True)
        (trial_dir / f"checkpoint_{index:06d}" / CHECKPOINT_STATE).write_text(f'{{"epoch": {index + 1}}}')
    (tmp_path / "trial_b").mkdir()  # no checkpoint yet: nothing to stand in for
    stand_ins = stand_in_for_rotated_checkpoints(tmp_path)
    assert sorted(p.name for p in stand_ins) == [f"checkpoint_{i:06d}" for i in range(6)]
    named = trial_dir / "checkpoint_000003"
    assert named.is_dir() and not any(named.iterdir())
    checkpoint: Any = SimpleNamespace(as_directory=lambda: contextlib.nullcontext(str(named)))
    assert restore_checkpoint(checkpoint, model=None, train_ds=None, config={}) == (0, "")  # from the first epoch


def test_a_trial_the_time_budget_stopped_ends_the_estimate_of_time_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    console = ConsoleProgress(load_spec(DEFAULT_SPEC), io.StringIO(), live=False)
    monkeypatch.setattr(console, "time_left", lambda: 3.0)
    recorder = _FakeRecorder(tmp_path)
    recorder.trials["t0"] = _record("t0", 0, "running")
    recorder.trials["t1"] = _record("t1", 1, "running")
    console.experiment_started(recorder)  # type: ignore[arg-type]
    assert "left" in console.status_line()
    stopped = recorder.trials["t0"]
    stopped.status, stopped.reason = TrialStatus.STOPPED, "the search's time budget of 14 s ran out after 2 epochs"
    console.trial_ended(stopped)
    assert "left" not in console.status_line()  # it read "about 3 s left" as the search ended


def test_the_time_left_is_at_most_what_the_time_budget_leaves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = load_spec(DEFAULT_SPEC, ["budget.time_budget_s=30"])
    console = ConsoleProgress(spec, io.StringIO(), live=False)
    monkeypatch.setattr(console, "time_left", lambda: 600.0)  # the trials' estimate: ten minutes
    recorder = _FakeRecorder(tmp_path)
    recorder.trials["t0"] = _record("t0", 0, "running")
    console.experiment_started(recorder)  # type: ignore[arg-type]
    assert console.status_line().endswith("about 30 s left") or "about 29 s left" in console.status_line()


def test_a_resumed_session_s_time_left_is_what_its_budget_had_left_counted_from_ray_tune_s_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = load_spec(DEFAULT_SPEC, ["budget.time_budget_s=30"])
    clock = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    console = ConsoleProgress(spec, io.StringIO(), live=False)
    monkeypatch.setattr(console, "time_left", lambda: 600.0)
    console.session_time_budget(12.0)  # a plain resume: the last session left 12 of the 30 s
    clock[0] += 5.0  # Ray's start and the Tuner's: Ray Tune's budget clock has not started yet
    recorder = _FakeRecorder(tmp_path)
    recorder.trials["t0"] = _record("t0", 0, "running")
    console.experiment_started(recorder)  # type: ignore[arg-type]
    clock[0] += 2.0
    assert console.status_line().endswith("about 10 s left")
    clock[0] += 10.0  # spent: Ray stops the running trials at its next step
    line = console.status_line()
    assert line.endswith("; the time budget ran out") and "about" not in line


def test_a_complete_search_s_tables_give_the_same_no_result_reason_as_its_run(tmp_path: Path) -> None:
    # `tunekit resume` of a complete search reads trials.csv's rows (NaN where a cell is empty)
    # where the run read its records: a search whose time budget ran out before any epoch fails
    # the same way.
    import pandas as pd

    def _recorded(rows: list[dict[str, str]]) -> list[Any]:
        table = tmp_path / "trials.csv"
        pd.DataFrame(rows).to_csv(table, index=False)
        return list(pd.read_csv(table).itertuples())

    spec = load_spec(DEFAULT_SPEC, ["budget.time_budget_s=3"])
    stopped = {
        "trial_id": "t0",
        "status": "stopped",
        "epochs": "0",
        "final_metric": "",
        "best_metric": "",
        "started_at": "1.0",
    }
    reason = no_result_reason(spec, tmp_path, _recorded([stopped]), 3.2)
    assert reason == "no trial reported val_accuracy: the time budget of 3 s ran out before any trial finished an epoch"
    done = {**stopped, "status": "completed", "epochs": "20", "final_metric": "0.9611", "best_metric": "0.9611"}
    assert no_result_reason(spec, tmp_path, _recorded([stopped, done]), 30.0) == ""
