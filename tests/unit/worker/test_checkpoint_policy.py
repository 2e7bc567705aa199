"""When a trial checkpoints: at ASHA's rungs, under PBT every epoch, and at least every checkpoint_every_s."""

from __future__ import annotations

from typing import Any

import pytest

from tunekit.config.spec import parse_spec
from tunekit.errors import SpecError
from tunekit.worker.checkpoints import CheckpointPolicy


def spec(scheduler: dict[str, Any], **training: Any) -> Any:
    raw = {
        "name": "unit",
        "trainable": "not.looked.for",
        "metric": {"name": "acc", "mode": "max"},
        "budget": {"num_samples": 4, "max_epochs": 20, "max_concurrent": 4},
        "scheduler": scheduler,
        "training": training,
        "space": {"learning_rate": {"type": "uniform", "low": 0.0, "high": 1.0}},
    }
    return parse_spec(raw, None, locate_trainable=False)


def due_epochs(policy: CheckpointPolicy, seconds_per_epoch: float, epochs: int = 19) -> list[int]:
    """The epochs a trial of ``epochs`` (its last, always checkpointed, excluded) checkpoints."""
    due, last = [], 0.0
    for epoch in range(1, epochs + 1):
        if policy.due(epoch, epoch * seconds_per_epoch - last):
            due.append(epoch)
            last = epoch * seconds_per_epoch
    return due


def test_an_asha_trial_checkpoints_at_its_rungs_and_when_the_last_checkpoint_is_30_s_old() -> None:
    policy = CheckpointPolicy.for_spec(spec({"type": "asha", "grace_period": 2, "reduction_factor": 3}))
    assert policy.milestones == {2, 6, 18}
    assert due_epochs(policy, 0.1) == [2, 6, 18]
    assert due_epochs(policy, 12.0) == [2, 5, 6, 9, 12, 15, 18]  # 30 s since the last one, or a rung


def test_pbt_and_checkpoint_every_s_0_checkpoint_every_epoch_and_fifo_only_by_time() -> None:
    pbt = {"type": "pbt", "perturbation_interval": 2, "mutate": ["learning_rate"]}
    assert due_epochs(CheckpointPolicy.for_spec(spec(pbt)), 0.1) == list(range(1, 20))
    every = CheckpointPolicy.for_spec(spec({"type": "asha"}, checkpoint_every_s=0))
    assert due_epochs(every, 0.1) == list(range(1, 20))
    fifo = CheckpointPolicy.for_spec(spec({"type": "fifo"}, checkpoint_every_s=1))
    assert due_epochs(fifo, 0.3) == [4, 8, 12, 16]


def test_a_negative_checkpoint_period_names_the_key() -> None:
    with pytest.raises(SpecError) as raised:
        spec({"type": "fifo"}, checkpoint_every_s=-1)
    assert "training.checkpoint_every_s" in str(raised.value)


class Optimizer:
    learning_rate = 0.5  # as a restored checkpoint left it (the source trial's, or lowered by a callback)


@pytest.mark.parametrize(
    ("saved", "config", "built_with", "expected"),
    [
        (0.001, 0.002, 0.002, 0.002),  # a PBT mutation: the new rate
        (0.001, 0.002, 0.004, 0.004),  # under training.scale_lr: the scaled rate the model trains with
        (0.002, 0.002, 0.004, 0.5),  # no mutation (a retry, a resume): the restored rate stays
    ],
)
def test_a_restore_sets_the_rate_the_trainable_was_given_when_the_trial_s_rate_changed(
    saved: float, config: float, built_with: float, expected: float
) -> None:
    from tunekit.worker.checkpoints import _apply_new_learning_rate

    optimizer = Optimizer()
    _apply_new_learning_rate(
        optimizer, {"learning_rate": saved}, {"learning_rate": config}, {"learning_rate": built_with}
    )
    assert optimizer.learning_rate == expected
