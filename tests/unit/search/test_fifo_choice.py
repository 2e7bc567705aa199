"""The next trial to run: Ray's FIFO choice, without walking every trial on each step of Ray's loop."""

from __future__ import annotations

import random
from typing import Any

from ray.tune.experiment import Trial
from ray.tune.schedulers import FIFOScheduler

from tunekit.search.schedulers import FIFO, RecordingASHA

from .test_moasha import scheduler as moasha

STATUSES = (Trial.PENDING, Trial.RUNNING, Trial.PAUSED, Trial.TERMINATED, Trial.ERROR)


class FakeTrial:
    status_reads = 0

    def __init__(self, number: int) -> None:
        self.number = number
        self._status = Trial.PENDING

    @property
    def status(self) -> str:
        FakeTrial.status_reads += 1
        return self._status


class Controller:
    """What Ray 2.60's TuneController keeps: its trials in order, and by status in sets."""

    def __init__(self) -> None:
        self._trials: list[FakeTrial] = []
        self._by_status: dict[str, set[FakeTrial]] = {status: set() for status in STATUSES}
        self._pending_trials = self._by_status[Trial.PENDING]
        self._paused_trials = self._by_status[Trial.PAUSED]

    def get_trials(self) -> list[FakeTrial]:
        return self._trials

    def add(self) -> None:
        trial = FakeTrial(len(self._trials))
        self._trials.append(trial)
        self._pending_trials.add(trial)

    def set_status(self, trial: FakeTrial, status: str) -> None:
        self._by_status[trial._status].remove(trial)
        self._by_status[status].add(trial)
        trial._status = status


class Wrapper:
    """Ray hands schedulers a TrialRunnerWrapper around the controller."""

    def __init__(self, controller: Controller) -> None:
        self._tune_controller = controller

    def get_trials(self) -> list[FakeTrial]:
        return self._tune_controller.get_trials()


def test_the_choice_is_ray_s_fifo_choice_through_every_status_change() -> None:
    rng = random.Random(0)
    controller = Controller()
    wrapper = Wrapper(controller)
    schedulers: list[Any] = [FIFO(), RecordingASHA(metric="acc", mode="max", max_t=9), moasha()]
    chosen_any = 0
    for _ in range(2000):
        if rng.random() < 0.2 or not controller._trials:
            controller.add()
        else:
            controller.set_status(rng.choice(controller._trials), rng.choice(STATUSES))
        expected = FIFOScheduler().choose_trial_to_run(controller)  # type: ignore[arg-type]
        FakeTrial.status_reads = 0
        for scheduler in schedulers:
            assert scheduler.choose_trial_to_run(wrapper) is expected
        assert FakeTrial.status_reads == 0  # chosen from the sets: no trial's status is read
        chosen_any += expected is not None
    assert 500 < chosen_any < 2000  # the walk covered both answers
