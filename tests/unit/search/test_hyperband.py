"""Hyperband (ASHA's brackets): the spec, the plan, and the scheduler driven with made-up metrics."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from ray.tune.schedulers import TrialScheduler

from tunekit.config.spec import load_spec
from tunekit.errors import SpecError
from tunekit.layout import EPOCH_KEY
from tunekit.search.plan import plan_budget, rung_of
from tunekit.search.schedulers import RecordingHyperband

REPO = Path(__file__).resolve().parents[3]
DEFAULT = REPO / "search_spaces" / "digits_mlp.yaml"  # grace 2, rf 3, 20 epochs: rungs at 2, 6, 18


def test_hyperband_takes_three_brackets_by_default_and_at_most_one_more_than_the_rungs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(REPO)
    spec = load_spec(DEFAULT, ["scheduler.type=hyperband"])
    assert (spec.scheduler.brackets, spec.raw["scheduler"]["brackets"]) == (3, 3)
    assert "brackets" not in load_spec(DEFAULT).raw["scheduler"]  # ASHA's records no brackets
    with pytest.raises(SpecError) as caught:
        load_spec(DEFAULT, ["scheduler.type=hyperband", "scheduler.brackets=5"])
    assert str(caught.value) == (
        "scheduler.brackets: must be <= 4: one more than the rungs (grace_period 2, reduction_factor 3 "
        "and budget.max_epochs 20 give rungs at epochs 2, 6, 18), got 5"
    )
    few = load_spec(DEFAULT, ["scheduler.type=hyperband", "budget.max_epochs=6"])  # one rung, at epoch 2
    assert few.scheduler.brackets == 2
    with pytest.raises(SpecError, match=r"scheduler\.type: ranks trials by one metric and cannot take 2 objectives"):
        load_spec(
            DEFAULT,
            ["scheduler.type=hyperband", "metric=[{name: val_accuracy, mode: max}, {name: val_loss, mode: min}]"],
        )


def test_the_plan_of_hyperband_adds_up_each_brackets_trials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    spec = load_spec(DEFAULT, ["scheduler.type=hyperband"])
    plan = plan_budget(spec)
    # 8 trials a bracket: bracket 0 keeps 8, 3, 1, 1; bracket 1 8, 8, 3, 1; bracket 2 8, 8, 8, 3.
    assert [(r.epoch, r.trials) for r in plan.rungs] == [(2, 24), (6, 19), (18, 12), (20, 5)]
    assert plan.planned_epochs == 24 * 2 + 19 * 4 + 12 * 12 + 5 * 2
    assert plan.describe().splitlines()[-2] == (
        "hyperband: 3 brackets (trials compared first: 8 from epoch 2, 8 from epoch 6, 8 from epoch 18)"
    )
    every = plan_budget(load_spec(DEFAULT, ["scheduler.type=hyperband", "scheduler.brackets=4"]))
    assert every.describe().splitlines()[-2].endswith("6 from epoch 18, 6 never stopped)")
    one = plan_budget(load_spec(DEFAULT, ["scheduler.type=hyperband", "scheduler.brackets=1"]))
    assert (one.rungs, one.planned_epochs) == (plan_budget(load_spec(DEFAULT)).rungs, 118)  # ASHA's
    assert [rung_of(e, spec) for e in (1, 2, 6, 20)] == [None, 0, 1, 2]  # numbered over ASHA's rungs


def hyperband(numbers: dict[str, int]) -> RecordingHyperband:
    return RecordingHyperband(
        numbers.get, time_attr=EPOCH_KEY, metric="acc", mode="max", max_t=9, grace_period=1, reduction_factor=3,
        brackets=3,
    )  # fmt: skip


def report(scheduler: RecordingHyperband, trial_id: str, epoch: int, acc: float) -> str:
    trial = SimpleNamespace(trial_id=trial_id)
    return scheduler.on_trial_result(None, trial, {EPOCH_KEY: epoch, "acc": acc})  # type: ignore[arg-type]


def test_a_trial_goes_to_its_numbers_bracket_and_is_judged_only_at_its_rungs() -> None:
    trials = {f"t{n}": n for n in range(6)}
    scheduler = hyperband(trials)
    for trial_id in trials:
        scheduler.on_trial_add(None, SimpleNamespace(trial_id=trial_id))  # type: ignore[arg-type]
    # Bracket 0 (t0, t3) compares at epochs 1 and 3; bracket 1 (t1, t4) at 3; bracket 2 (t2, t5) never.
    assert report(scheduler, "t0", 1, 0.9) == TrialScheduler.CONTINUE
    assert report(scheduler, "t3", 1, 0.1) == TrialScheduler.STOP
    assert report(scheduler, "t1", 1, 0.9) == TrialScheduler.CONTINUE
    assert report(scheduler, "t4", 1, 0.1) == TrialScheduler.CONTINUE  # bracket 1 has no rung at epoch 1
    assert report(scheduler, "t1", 3, 0.9) == TrialScheduler.CONTINUE
    assert report(scheduler, "t4", 3, 0.1) == TrialScheduler.STOP
    assert report(scheduler, "t2", 3, 0.9) == TrialScheduler.CONTINUE
    assert report(scheduler, "t5", 3, 0.1) == TrialScheduler.CONTINUE  # the bracket that stops nothing
    assert scheduler.stopped == {"t3", "t4"}


def test_a_resumed_hyperband_refills_each_trials_own_bracket() -> None:
    numbers = {"t0": 0, "t1": 1, "t3": 3, "t4": 4}
    scheduler = hyperband(numbers)
    scheduler.replay({"t0": {1: 0.9, 3: 0.8}, "t1": {1: 0.9, 3: 0.9}}, stopped=set())
    for trial_id in ("t3", "t4"):
        scheduler.on_trial_add(None, SimpleNamespace(trial_id=trial_id))  # type: ignore[arg-type]
    assert report(scheduler, "t3", 1, 0.5) == TrialScheduler.STOP  # below t0's value at bracket 0's first rung
    assert report(scheduler, "t4", 1, 0.5) == TrialScheduler.CONTINUE  # bracket 1 never saw epoch 1
    assert report(scheduler, "t4", 3, 0.5) == TrialScheduler.STOP  # below t1's 0.9 at bracket 1's rung
