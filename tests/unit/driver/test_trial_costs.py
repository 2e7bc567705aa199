"""The console's time left learns what each configuration's epochs cost (tunekit.driver.trial_costs)."""

from __future__ import annotations

import pytest

from tunekit.config.space import parse_space
from tunekit.driver.records import EpochRow, TrialRecord
from tunekit.driver.trial_costs import TrialCosts
from tunekit.layout import TrialStatus

SPACE = parse_space({"filters": {"type": "int", "low": 8, "high": 64, "log": True}})


def run(costs: TrialCosts, trial_id: str, filters: int, epoch_s: float, epochs: int, pid: int = 1) -> TrialRecord:
    record = TrialRecord(trial_id, None, {"filters": filters}, status=TrialStatus.RUNNING)
    record.spans, record.span_workers = [[0.0, None]], [{"attempt": 1, "node_id": "n", "pid": pid}]
    costs.started(record)
    for epoch in range(1, epochs + 1):
        record.epochs = epoch
        costs.epoch(record, EpochRow(trial_id, epoch, {}, 1, 0, 2.0 + epoch_s * (epoch - 1)))
    return record


def test_each_running_trial_is_priced_at_its_own_epochs_and_one_to_come_at_the_configurations_mean() -> None:
    costs = TrialCosts(SPACE)
    cheap = run(costs, "a", 8, 0.5, 20)  # 19 cheap epochs...
    costly = run(costs, "b", 64, 1.7, 3)  # ...and 2 costly ones
    assert costs.epoch_s() == pytest.approx(0.5)  # the search-wide median: what priced every trial before
    assert (costs.trial_epoch_s(cheap), costs.trial_epoch_s(costly)) == (pytest.approx(0.5), pytest.approx(1.7))
    assert costs.future_epoch_s() == pytest.approx((0.5 + 1.7) / 2)  # each configuration weighs once


def test_a_trial_not_measured_yet_is_priced_by_what_its_configuration_costs() -> None:
    costs = TrialCosts(SPACE)
    for trial_id, filters, seconds in (("a", 8, 0.5), ("b", 64, 1.7), ("c", 16, 0.75)):
        run(costs, trial_id, filters, seconds, 3)
    starting = run(costs, "d", 64, 0.0, 1)  # one report: no epoch of its own measured yet
    assert costs.trial_epoch_s(starting) == pytest.approx(1.7)  # a configuration measured: its cost
    fresh = run(costs, "e", 45, 0.0, 1)
    assert 0.75 < (costs.trial_epoch_s(fresh) or 0.0) < 1.7 * 1.25  # between the measured 16 and 64, near 64
    assert costs.trial_epoch_s(fresh) == pytest.approx(1.7 * (45 / 64) ** 0.6, rel=0.25)
    without_space = TrialCosts()
    run(without_space, "a", 8, 0.5, 3)
    assert without_space.trial_epoch_s(TrialRecord("z", None, {"filters": 64})) == pytest.approx(0.5)


def test_a_trials_fixed_part_subtracts_its_own_epochs() -> None:
    costs = TrialCosts(SPACE)
    record = run(costs, "a", 64, 2.0, 5)
    run(costs, "b", 8, 0.2, 30, pid=2)
    record.status, record.spans = TrialStatus.COMPLETED, [[0.0, 12.0]]  # 5 epochs of 2 s in 12 s: 2 s fixed
    costs.ended(record)
    assert costs.fixed_s() == pytest.approx(2.0)
