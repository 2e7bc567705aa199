"""The per-trial deadline's rules: when a silent trial is overdue, and the reason it ends with."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from tunekit.config.spec import parse_spec
from tunekit.driver.deadline import AUTO_FLOOR_S, START_UP_S, TrialDeadline
from tunekit.errors import SpecError


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _wait(deadline: TrialDeadline, clock: _Clock, trial: Any, seconds: float) -> None:
    """``seconds`` pass with Ray's loop stepping every second or so, as it does."""
    end = clock.now + seconds
    while clock.now < end:
        clock.now = min(end, clock.now + 1.0)
        deadline.on_step_begin(0, [trial])


def _trial(trial_id: str = "t0") -> Any:
    # The parts of Ray's Trial the deadline reads: no actor, so nothing is killed.
    return SimpleNamespace(
        trial_id=trial_id,
        status="RUNNING",
        latest_checkpoint_result=None,
        temporary_state=SimpleNamespace(ray_actor=None),
    )


def _deadline(timeout_s: float | str) -> tuple[TrialDeadline, _Clock, Any]:
    clock = _Clock()
    recorder = SimpleNamespace(trials={"t0": SimpleNamespace(reason=None)})
    return TrialDeadline(timeout_s, recorder, clock), clock, recorder  # type: ignore[arg-type]


def test_a_fixed_deadline_counts_from_each_epoch_and_a_start_may_take_longer() -> None:
    deadline, clock, recorder = _deadline(20.0)
    trial = _trial()
    deadline.on_trial_start(0, [], trial)
    _wait(deadline, clock, trial, START_UP_S - 1.0)  # a start on a loaded machine: not the trial's fault
    assert recorder.trials["t0"].reason is None
    deadline.on_trial_result(0, [], trial, {"epoch": 1})
    _wait(deadline, clock, trial, 20.0)
    assert recorder.trials["t0"].reason is None  # 20 s is within 20 s
    _wait(deadline, clock, trial, 0.5)
    assert recorder.trials["t0"].reason == (
        "epoch 2 did not end within 20 s of the end of epoch 1 (training.trial_timeout_s: 20); its worker was killed"
    )


def test_a_trial_silent_from_its_start_is_named_by_its_first_epoch() -> None:
    deadline, clock, recorder = _deadline(5.0)
    trial = _trial()
    deadline.on_trial_start(0, [], trial)
    _wait(deadline, clock, trial, START_UP_S + 1.0)
    assert recorder.trials["t0"].reason == (
        "epoch 1 did not end within 300 s of its start (training.trial_timeout_s: 5, a start may take 300 s); "
        "its worker was killed"
    )
    late, clock, recorder = _deadline(400.0)
    late.on_trial_start(0, [], trial)
    _wait(late, clock, trial, 401.0)
    assert recorder.trials["t0"].reason.startswith("epoch 1 did not end within 400 s of its start (training.")


def test_auto_waits_for_the_first_epoch_then_allows_ten_of_the_longest_with_a_floor() -> None:
    deadline, clock, recorder = _deadline("auto")
    trial = _trial()
    deadline.on_trial_start(0, [], trial)
    _wait(deadline, clock, trial, 10_000.0)  # start-up: no deadline yet
    assert recorder.trials["t0"].reason is None
    deadline.on_trial_result(0, [], trial, {"epoch": 1})
    _wait(deadline, clock, trial, 60.0)
    deadline.on_trial_result(0, [], trial, {"epoch": 2})  # the longest epoch: 60 s
    _wait(deadline, clock, trial, 599.0)
    assert recorder.trials["t0"].reason is None
    _wait(deadline, clock, trial, 2.0)
    assert recorder.trials["t0"].reason == (
        "epoch 3 did not end within 600 s of the end of epoch 2 (training.trial_timeout_s: auto, "
        "10 times its longest epoch, >= 300 s); its worker was killed"
    )
    short, clock, _ = _deadline("auto")
    short.on_trial_start(0, [], trial)
    short.on_trial_result(0, [], trial, {"epoch": 1})
    clock.now += 0.1
    short.on_trial_result(0, [], trial, {"epoch": 2})
    assert short.deadline_s(short._watched["t0"]) == AUTO_FLOOR_S


def test_a_driver_that_was_away_does_not_count_its_absence_against_the_trials() -> None:
    deadline, clock, recorder = _deadline(20.0)
    trial = _trial()
    deadline.on_trial_start(0, [], trial)
    deadline.on_trial_result(0, [], trial, {"epoch": 1})
    deadline.on_step_begin(0, [trial])
    clock.now += 120.0  # the driver paused (SIGSTOP, swapped out) between two steps
    deadline.on_step_begin(0, [trial])
    assert recorder.trials["t0"].reason is None
    clock.now += 21.0
    deadline.on_step_begin(0, [trial])
    assert recorder.trials["t0"].reason is not None


def test_an_ended_trial_or_one_not_running_is_not_watched() -> None:
    deadline, clock, recorder = _deadline(1.0)
    trial = _trial()
    deadline.on_trial_start(0, [], trial)
    deadline.on_trial_result(0, [], trial, {"epoch": 1})
    trial.status = "PAUSED"
    clock.now += 2.0
    deadline.on_step_begin(0, [trial])
    assert recorder.trials["t0"].reason is None
    deadline.on_trial_complete(0, [], trial)
    trial.status = "RUNNING"
    deadline.on_step_begin(0, [trial])
    assert recorder.trials["t0"].reason is None


RAW: dict[str, Any] = {
    "name": "unit",
    "trainable": "python: __main__.build_data, __main__.build_model",
    "metric": {"name": "acc", "mode": "max"},
    "budget": {"num_samples": 2, "max_epochs": 2},
    "space": {"lr": {"type": "uniform", "low": 0.0, "high": 1.0}},
}


def test_the_spec_takes_auto_or_seconds() -> None:
    assert parse_spec(RAW, None, locate_trainable=False).training.trial_timeout_s == "auto"
    given = parse_spec({**RAW, "training": {"trial_timeout_s": 90}}, None, locate_trainable=False)
    assert given.training.trial_timeout_s == 90.0 and given.raw["training"]["trial_timeout_s"] == 90.0
    for bad in (0, -1, "soon"):
        with pytest.raises(SpecError) as raised:
            parse_spec({**RAW, "training": {"trial_timeout_s": bad}}, None, locate_trainable=False)
        assert str(raised.value) == f"training.trial_timeout_s: must be auto or a number of seconds > 0, got {bad!r}"
