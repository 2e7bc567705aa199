"""A restore that passed over a damaged checkpoint is said on the console: the worker's note in
its first report after the restore becomes one warning naming the trial (no Ray, no TensorFlow)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ray.tune.schedulers import FIFOScheduler

from tunekit.driver.listener import Listener
from tunekit.driver.recorder import Recorder
from tunekit.layout import CHECKPOINT_NOTE, EPOCH_KEY, INFO_KEY

from .test_recorder_state import Numbers
from .test_trial_endings import spec


class Warnings(Listener):
    def __init__(self) -> None:
        self.said: list[str] = []

    def warning(self, message: str) -> None:
        self.said.append(message)


def test_a_restore_that_passed_over_a_damaged_checkpoint_is_one_console_warning(tmp_path: Path) -> None:
    console = Warnings()
    recorder = Recorder(spec(), tmp_path, searcher=Numbers(), scheduler=FIFOScheduler(), listeners=[console])
    trial: Any = SimpleNamespace(trial_id="t3", config={"lr": 0.1})
    recorder.on_trial_start(0, [], trial)
    note = (
        f"checkpoint {tmp_path}/t3/checkpoint_000002/weights.npz: fails its checksum (SHA-256 0123456789ab..., "
        "written ba9876543210...); restored checkpoint_000001 (epoch 4) instead"
    )
    info = {"metrics": ["acc"], CHECKPOINT_NOTE: note}
    recorder.on_trial_result(0, [], trial, {EPOCH_KEY: 5, "acc": 0.5, INFO_KEY: info})
    recorder.on_trial_result(0, [], trial, {EPOCH_KEY: 6, "acc": 0.6, INFO_KEY: {"metrics": ["acc"]}})
    assert console.said == [f"trial 3: {note}"]
