"""ASHA's rung cutoffs from values kept sorted: the same numbers and decisions as Ray's
``np.nanpercentile`` over every value, without reading every value at each cutoff."""

from __future__ import annotations

import math
import pickle
import random
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from ray.tune.schedulers import ASHAScheduler, TrialScheduler

from tunekit.compat.ray_asha import SortedRung, asha_rungs, percentile_of_sorted
from tunekit.layout import EPOCH_KEY
from tunekit.search.schedulers import RecordingASHA


@pytest.mark.parametrize("rf", [2, 3, 4])
def test_the_percentile_of_sorted_values_is_numpy_s_to_the_last_bit(rf: int) -> None:
    draw = random.Random(rf)
    q = (1 - 1 / rf) * 100
    for size in [*range(1, 40), 97, 256, 1001]:
        values = [draw.choice([draw.random(), draw.randint(0, 5) / 4, -draw.random() * 1e3]) for _ in range(size)]
        assert percentile_of_sorted(sorted(values), q) == np.nanpercentile(values, q), (size, values)
    assert math.isnan(percentile_of_sorted([], q))


def test_a_rung_keeps_its_values_sorted_through_replacements_nans_and_pickling() -> None:
    rung = SortedRung([("a", 0.5), ("b", math.nan)])
    rung["c"] = 0.25
    rung["a"] = 0.75  # replaced: its old value leaves the order
    rung["d"] = 0.25
    assert rung.ordered == [0.25, 0.25, 0.75] and len(rung) == 4
    del rung["c"]
    again = pickle.loads(pickle.dumps(rung))
    assert isinstance(again, SortedRung) and list(again) == ["a", "b", "d"]  # as a dict: "a" kept its place
    assert (again["a"], again["d"], again.ordered) == (0.75, 0.25, [0.25, 0.75])


def _schedulers() -> tuple[ASHAScheduler, RecordingASHA]:
    settings: dict[str, Any] = {"time_attr": EPOCH_KEY, "metric": "acc", "mode": "min", "max_t": 27, "grace_period": 1}
    return ASHAScheduler(**settings, reduction_factor=3), RecordingASHA(**settings, reduction_factor=3)


def test_recording_asha_decides_as_ray_s_asha_over_a_long_search(monkeypatch: pytest.MonkeyPatch) -> None:
    ray_asha, ours = _schedulers()
    draw = random.Random(7)
    trials = [SimpleNamespace(trial_id=f"t{n}", config={}, evaluated_params={}) for n in range(600)]
    decisions: dict[str, list[str]] = {"ray": [], "ours": []}
    # Each trial reports until a scheduler stops it, with ties and the odd NaN.
    for trial in trials:
        ray_asha.on_trial_add(None, trial)  # type: ignore[arg-type]
        ours.on_trial_add(None, trial)  # type: ignore[arg-type]
        for epoch in range(1, 28):
            value = draw.choice([draw.random(), round(draw.random(), 1), math.nan if draw.random() < 0.02 else 0.5])
            result = {EPOCH_KEY: epoch, "acc": value}
            decided = {
                "ray": ray_asha.on_trial_result(None, trial, dict(result)),  # type: ignore[arg-type]
                "ours": ours.on_trial_result(None, trial, dict(result)),  # type: ignore[arg-type]
            }
            for name, decision in decided.items():
                decisions[name].append(decision)
            if TrialScheduler.STOP in decided.values():
                break
    assert decisions["ours"] == decisions["ray"]
    assert decisions["ours"].count(TrialScheduler.STOP) > 300  # a test that stops trials, not only promotes
    assert [repr(r) for _, r in asha_rungs(ours)] == [repr(r) for _, r in asha_rungs(ray_asha)]
    # The cutoff reads the kept order: it never hands the rung's values to numpy again.
    monkeypatch.setattr(np, "nanpercentile", lambda *a, **k: pytest.fail("a cutoff over every value"))
    late = SimpleNamespace(trial_id="late", config={}, evaluated_params={})
    ours.on_trial_add(None, late)  # type: ignore[arg-type]
    assert ours.on_trial_result(None, late, {EPOCH_KEY: 1, "acc": 2.0}) == TrialScheduler.STOP  # type: ignore[arg-type]


def test_replayed_rungs_keep_their_order() -> None:
    _, ours = _schedulers()
    ours.replay({"a": {1: 0.3, 3: 0.2}, "b": {1: 0.1}}, stopped={"b"})
    (_, top), *_, (_, first) = asha_rungs(ours)
    assert isinstance(first, SortedRung) and first.ordered == [-0.3, -0.1]  # signed: acc is minimised
    assert isinstance(top, SortedRung) and top.ordered == []
