"""MO-ASHA driven directly with made-up results (no Ray runtime): promotion by front and crowding,
constraints, the last epoch, and a replay after a resume."""

from __future__ import annotations

import copy
from typing import Any

from ray.tune.schedulers import TrialScheduler

from tunekit.config.spec import parse_spec
from tunekit.search.moasha import RecordingMOASHA

RAW: dict[str, Any] = {
    "name": "mo",
    "trainable": "python: __main__.build_data, __main__.build_model",
    "metric": [{"name": "val_accuracy", "mode": "max"}, {"name": "model_params", "mode": "min"}],
    "budget": {"num_samples": 8, "max_epochs": 9},
    "scheduler": {"type": "asha", "grace_period": 1, "reduction_factor": 3},
    "space": {"units": {"type": "choice", "values": [8, 16]}},
}
STOP, GO = TrialScheduler.STOP, TrialScheduler.CONTINUE


def scheduler(**changes: Any) -> RecordingMOASHA:
    raw = copy.deepcopy(RAW)
    raw.update(changes)
    return RecordingMOASHA(parse_spec(raw, None, locate_trainable=False))


def at(epoch: int, accuracy: float, params: float) -> dict[str, Any]:
    return {"epoch": epoch, "val_accuracy": accuracy, "model_params": params}


def test_rungs_are_ashas() -> None:
    assert sorted(scheduler().rungs) == [1, 3]


def test_a_rung_promotes_the_top_third_by_front_then_crowding() -> None:
    moasha = scheduler()
    # a is alone at rung 1: it goes on. b dominates a: b is first of 2 (0/2 <= 1/3).
    assert moasha.decide("a", at(1, 0.5, 100)) == GO
    assert moasha.decide("b", at(1, 0.6, 90)) == GO
    # c is dominated by b and a: third of three (2/3 > 1/3).
    assert moasha.decide("c", at(1, 0.4, 200)) == STOP
    # d trades accuracy for size and is on the front with b: b and d are both boundaries
    # (infinite crowding), ties go by the first objective, so d is second of four (1/4 <= 1/3).
    assert moasha.decide("d", at(1, 0.3, 10)) == GO
    # e, the fifth, is dominated by d: at best third of five (2/5 > 1/3).
    assert moasha.decide("e", at(1, 0.2, 20)) == STOP
    assert moasha.stopped == set()  # decide() alone records nothing of Ray's


def test_a_newcomer_on_the_front_goes_on_when_it_leads_the_first_objective() -> None:
    moasha = scheduler()
    assert moasha.decide("small", at(1, 0.6, 2778)) == GO
    # Non-dominated with "small" (more accurate, larger): both boundaries; accuracy decides.
    assert moasha.decide("large", at(1, 0.8, 50826)) == GO
    # "smaller" extends the front at its other end: both ends are infinitely uncrowded,
    # so it is second of three (1/3 <= 1/3) and "small", now in the middle, would be last.
    assert moasha.decide("smaller", at(1, 0.5, 1000)) == GO
    # "middle" is on the front too, but between two others: third of four at best (2/4 > 1/3).
    assert moasha.decide("middle", at(1, 0.55, 2000)) == STOP


def test_an_infeasible_trial_ranks_behind_every_feasible_one() -> None:
    moasha = scheduler(constraints=["model_params <= 100"])
    assert moasha.decide("a", at(1, 0.5, 100)) == GO
    # b would dominate a, but breaks the constraint: second of two (1/2 > 1/3).
    assert moasha.decide("b", at(1, 0.9, 150)) == STOP


def test_the_last_epoch_and_epochs_between_rungs_go_on() -> None:
    moasha = scheduler()
    assert moasha.decide("a", at(9, 0.1, 1000)) == GO
    assert moasha.rungs[1] == {}  # the last epoch is the trial's end, never a rung entry
    # A trial first seen past a rung (resumed from a checkpoint) is recorded there, as Ray's ASHA does.
    assert moasha.decide("b", at(2, 0.1, 1000)) == GO
    assert moasha.rungs[1] == {"b": ((-0.1, 1000.0), True)}


def test_replay_refills_the_rungs() -> None:
    moasha = scheduler()
    moasha.replay({"a": {1: at(1, 0.5, 100), 3: at(3, 0.7, 100)}, "b": {1: at(1, 0.2, 300)}}, {"b"})
    assert moasha.rungs[1] == {"a": ((-0.5, 100.0), True), "b": ((-0.2, 300.0), True)}
    assert moasha.rungs[3] == {"a": ((-0.7, 100.0), True)}
    assert moasha.stopped == {"b"}
    # c at rung 3 is dominated by a: second of two.
    assert moasha.decide("c", at(3, 0.6, 200)) == STOP
