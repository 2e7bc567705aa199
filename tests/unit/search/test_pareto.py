"""Non-dominated sorting, crowding distance, feasibility, MO-ASHA's order and hypervolume on hand-computed cases."""

from __future__ import annotations

import math

import pytest

from tunekit.config.objectives import Constraint, MetricSpec
from tunekit.search.pareto import (
    crowding_distances,
    dominates,
    hypervolume_2d,
    is_feasible,
    nondominated_ranks,
    promotion_order,
    to_minimize,
)


def test_dominance_needs_one_strictly_better() -> None:
    assert dominates((1, 1), (2, 1))
    assert not dominates((1, 1), (1, 1))
    assert not dominates((1, 3), (2, 1)) and not dominates((2, 1), (1, 3))


def test_fronts_by_hand() -> None:
    # a(1,5) b(2,3) c(4,1) are mutually non-dominated; d(3,4) is dominated by b only;
    # e(5,5) by everyone but itself and d dominates it too; f(2,3) equals b.
    points = [(1, 5), (2, 3), (4, 1), (3, 4), (5, 5), (2, 3)]
    assert nondominated_ranks(points) == [1, 1, 1, 2, 3, 1]


def test_a_chain_is_one_front_per_point() -> None:
    assert nondominated_ranks([(3, 3), (1, 1), (2, 2)]) == [3, 1, 2]
    assert nondominated_ranks([]) == []


def test_two_objectives_are_sorted_by_a_sweep_into_the_same_fronts_as_every_pair_compared(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import random

    from tunekit.search import pareto

    draw = random.Random(3)
    for _ in range(300):  # with ties, repeats, negative zero and a single front or chain
        points = [
            (draw.choice([draw.random(), draw.randint(0, 3)]), draw.choice([draw.random(), draw.randint(0, 3), -0.0]))
            for _ in range(draw.randint(0, 60))
        ]
        assert nondominated_ranks(points) == pareto._ranks_by_every_pair(points), points
    three = [(draw.random(), draw.random(), draw.random()) for _ in range(40)]
    assert nondominated_ranks(three) == pareto._ranks_by_every_pair(three)
    # MO-ASHA ranks a whole rung at each decision: with two objectives no pair is compared
    # (0.7 s a decision at 1,000 trials that way, 2 ms by the sweep).
    monkeypatch.setattr(pareto, "dominates", lambda a, b: pytest.fail("a pair compared"))
    rung = [(draw.random(), draw.random()) for _ in range(500)]
    assert sorted(promotion_order(rung)) == list(range(500))


def test_crowding_by_hand() -> None:
    # Sorted on both axes the order is a(0,4) b(1,2) c(3,1) d(4,0); ranges are 4 and 4.
    # b: (3-0)/4 + (4-1)/4 = 1.5; c: (4-1)/4 + (2-0)/4 = 1.25; a and d are boundaries.
    assert crowding_distances([(0, 4), (1, 2), (3, 1), (4, 0)]) == [math.inf, 1.5, 1.25, math.inf]
    assert crowding_distances([(0, 1), (1, 0)]) == [math.inf, math.inf]


def test_maximised_objectives_are_flipped() -> None:
    objectives = (MetricSpec("val_accuracy", "max"), MetricSpec("model_params", "min"))
    assert to_minimize({"val_accuracy": 0.9, "model_params": 100.0}, objectives) == (-0.9, 100.0)
    assert to_minimize({"val_accuracy": 0.9}, objectives) is None
    assert to_minimize({"val_accuracy": math.nan, "model_params": 1.0}, objectives) is None


def test_promotion_order_front_then_crowding_then_feasibility() -> None:
    # Front 1: a b c d (crowding inf, 1.5, 1.25, inf); e(4,4) is on front 2.
    points = [(0, 4), (1, 2), (3, 1), (4, 0), (4, 4)]
    assert promotion_order(points) == [0, 3, 1, 2, 4]
    # a infeasible goes last, behind front 2; without it, front 1 is b c d, whose
    # boundaries are now b and d, with c in the middle.
    assert promotion_order(points, [False, True, True, True, True]) == [1, 3, 2, 4, 0]


CONSTRAINTS = (
    Constraint("model_params", "<=", 1000.0, "model_params <= 1000"),
    Constraint("val_accuracy", ">=", 0.5, "val_accuracy >= 0.5"),
)


@pytest.mark.parametrize(
    ("values", "feasible"),
    [
        ({"model_params": 1000.0, "val_accuracy": 0.5}, True),  # on both limits
        ({"model_params": 1001.0, "val_accuracy": 0.9}, False),
        ({"model_params": 10.0, "val_accuracy": 0.4}, False),
        ({"val_accuracy": 0.9}, False),  # model_params never measured
    ],
)
def test_feasibility(values: dict[str, float], feasible: bool) -> None:
    assert is_feasible(values, CONSTRAINTS) is feasible


def test_hypervolume_by_hand() -> None:
    # Reference (4, 4): (1,3) adds 3x1, (2,2) adds 2x1, (3,1) adds 1x1; (3,3) is dominated.
    assert hypervolume_2d([(1, 3), (2, 2), (3, 1), (3, 3)], (4, 4)) == 6.0
    assert hypervolume_2d([(5, 1)], (4, 4)) == 0.0
