"""The Pareto front: non-dominated sorting, crowding distance, feasibility and hypervolume.

Pure functions on plain numbers (stdlib and ``tunekit.config`` only), so every place
that ranks trials by several objectives shares them, as ``tunekit.search.plan.pick_best``
is shared for one: MO-ASHA (``tunekit.search.moasha``) promotes at each rung by this
order, the recorder marks feasibility with it, and ``tunekit.results.pareto`` computes
the experiment's front and each trial's rank from it, once.

Every vector is "smaller is better": ``to_minimize`` flips the objectives a spec maximises.
Ranks start at 1: rank 1 is the Pareto front, rank 2 the front once rank 1 is removed,
and so on (Deb et al.'s NSGA-II fronts).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from tunekit.config.objectives import Constraint, MetricSpec, Selection

Vector = Sequence[float]


def to_minimize(values: Mapping[str, float | None], objectives: Sequence[MetricSpec]) -> tuple[float, ...] | None:
    """The objectives' values as one smaller-is-better vector; None when one is missing."""
    vector = []
    for objective in objectives:
        value = values.get(objective.name)
        if value is None or not math.isfinite(value):
            return None
        vector.append(-value if objective.mode == "max" else value)
    return tuple(vector)


def dominates(a: Vector, b: Vector) -> bool:
    """``a`` is no worse than ``b`` in every objective and better in one (all minimised)."""
    return all(x <= y for x, y in zip(a, b, strict=True)) and any(x < y for x, y in zip(a, b, strict=True))


def nondominated_ranks(points: Sequence[Vector]) -> list[int]:
    """Each point's front, from 1 (non-dominated); equal points share a front.

    Why two ways: comparing every pair is quadratic, and MO-ASHA ranks a whole rung each time
    a trial reaches it (0.7 s of the driver per decision at 1,000 trials); with two
    objectives a sweep gives the same fronts in n log n.
    """
    if points and len(points[0]) == 2:
        return _ranks_of_pairs(points)
    return _ranks_by_every_pair(points)


def _ranks_of_pairs(points: Sequence[Vector]) -> list[int]:
    """Fronts of two-objective points by a sweep (Jensen 2003). In lexicographic order, a point
    is dominated by exactly the earlier distinct points whose second value is no larger, and
    its front is one past the last front holding one of them. ``lowest[k]``, the smallest
    second value of front k + 1 so far, never decreases with k, so a bisection finds that front."""
    lowest: list[float] = []
    front_of: dict[tuple[float, ...], int] = {}
    for vector in sorted({tuple(point) for point in points}):
        front = bisect.bisect_right(lowest, vector[1])
        if front == len(lowest):
            lowest.append(vector[1])
        else:
            lowest[front] = vector[1]
        front_of[vector] = front + 1
    return [front_of[tuple(point)] for point in points]


def _ranks_by_every_pair(points: Sequence[Vector]) -> list[int]:
    """Fronts by comparing every pair (Deb et al.'s fast non-dominated sort), for any number of objectives."""
    count = len(points)
    dominated_by = [0] * count  # how many points dominate each one
    beats: list[list[int]] = [[] for _ in range(count)]
    for i in range(count):
        for j in range(i + 1, count):
            if dominates(points[i], points[j]):
                beats[i].append(j)
                dominated_by[j] += 1
            elif dominates(points[j], points[i]):
                beats[j].append(i)
                dominated_by[i] += 1
    ranks = [0] * count
    current = [i for i in range(count) if dominated_by[i] == 0]
    rank = 1
    while current:
        following = []
        for i in current:
            ranks[i] = rank
            for j in beats[i]:
                dominated_by[j] -= 1
                if dominated_by[j] == 0:
                    following.append(j)
        current, rank = following, rank + 1
    return ranks


def crowding_distances(points: Sequence[Vector]) -> list[float]:
    """NSGA-II's crowding distance of each point within one front: the boundary points of
    every objective are infinite, the others add their neighbours' gap over the range."""
    count = len(points)
    if count <= 2:
        return [math.inf] * count
    distance = [0.0] * count
    for axis in range(len(points[0])):
        order = sorted(range(count), key=lambda i: (points[i][axis], i))
        low, high = points[order[0]][axis], points[order[-1]][axis]
        distance[order[0]] = distance[order[-1]] = math.inf
        if high == low:
            continue
        for position in range(1, count - 1):
            gap = points[order[position + 1]][axis] - points[order[position - 1]][axis]
            distance[order[position]] += gap / (high - low)
    return distance


def promotion_order(points: Sequence[Vector], feasible: Sequence[bool] | None = None) -> list[int]:
    """Indices best first, as MO-ASHA ranks a rung (Syne Tune's MOASHA, Schmucker et al. 2021):
    feasible before infeasible, then by front, then the less crowded first. Equally crowded
    points (a front's boundaries are all infinite) go by the first objective, as Syne Tune
    seeds its front's order with the best in the first dimension; then by index."""
    feasible = feasible if feasible is not None else [True] * len(points)
    ranks, crowding = [0] * len(points), [0.0] * len(points)
    # Feasible and infeasible points are sorted apart: an infeasible point never pushes a
    # feasible one off its front.
    for group in ([i for i in range(len(points)) if feasible[i]], [i for i in range(len(points)) if not feasible[i]]):
        for i, rank in zip(group, nondominated_ranks([points[i] for i in group]), strict=True):
            ranks[i] = rank
        fronts: dict[int, list[int]] = {}
        for i in group:
            fronts.setdefault(ranks[i], []).append(i)
        for members in fronts.values():
            for i, distance in zip(members, crowding_distances([points[i] for i in members]), strict=True):
                crowding[i] = distance
    return sorted(range(len(points)), key=lambda i: (not feasible[i], ranks[i], -crowding[i], points[i][0], i))


def is_feasible(values: Mapping[str, float | None], constraints: Sequence[Constraint]) -> bool:
    """Every constraint holds; a metric never measured breaks its constraint."""
    return all(c.holds(values.get(c.name)) for c in constraints)


T = TypeVar("T")


def select_from_front(
    candidates: Sequence[tuple[T, Mapping[str, float | None]]],
    objectives: Sequence[MetricSpec],
    selection: Selection,
    meets: Callable[[T, Constraint], bool] | None = None,
) -> tuple[list[T], T | None]:
    """The non-dominated ``candidates`` (each with its metric values; already feasible and
    finished), and the one ``selection`` picks among them: best by its metric among those
    meeting ``subject_to`` (``meets`` decides a constraint its values cannot), or None."""
    ranked = [(item, values, v) for item, values in candidates if (v := to_minimize(values, objectives)) is not None]
    ranks = nondominated_ranks([v for _, _, v in ranked])
    front = [(item, values) for (item, values, _), rank in zip(ranked, ranks, strict=True) if rank == 1]

    def holds(item: T, values: Mapping[str, float | None], constraint: Constraint) -> bool:
        if values.get(constraint.name) is None and meets is not None:
            return meets(item, constraint)
        return constraint.holds(values.get(constraint.name))

    sign = 1.0 if selection.mode == "max" else -1.0
    picked = [
        (sign * float(value), item)
        for item, values in front
        if (value := values.get(selection.metric)) is not None
        and all(holds(item, values, c) for c in selection.subject_to)
    ]
    chosen = max(picked, key=lambda pair: pair[0])[1] if picked else None
    return [item for item, _ in front], chosen


def hypervolume_2d(points: Sequence[Vector], reference: Vector) -> float:
    """The area two-objective points (minimised) dominate up to ``reference``; points beyond it add nothing."""
    inside = sorted((p[0], p[1]) for p in points if p[0] < reference[0] and p[1] < reference[1])
    area, best_second = 0.0, reference[1]
    for first, second in inside:
        if second < best_second:
            area += (reference[0] - first) * (best_second - second)
            best_second = second
    return area
