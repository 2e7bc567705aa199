"""What an epoch costs, as a function of the configuration.

A search's epochs do not all cost the same: a CNN of 48 filters took 17 s an epoch where one
of 16 took 5, and TPE then chose 48 filters for 6 trials of 10. One mean epoch, measured on
the probe's first picks, predicted 188 s of a search that took 260. So the probe spans the
space's cost extremes (``probe_points``: the corners of the parameters named like sizes),
and the forecast prices each simulated trial by its configuration (``CostModel``): the
measured cost of a configuration the probe ran, else a regression of log epoch seconds,
linear in each numeric parameter (in log where the space is log, or where a choice's
values span a factor of 4 or more) and one-hot in the other choices, over the probe's
configurations. With so few points it is a ridge regression, clamped near the measured
range: it interpolates between the corners and does not invent costs beyond them.

The console's time left fits the same model to the trials' own epochs as they report.
Plain Python (a handful of parameters): ``tunekit plan`` imports it without numpy.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tunekit.config.space import Choice, Distribution, Fixed, FloatRange, IntRange, SearchSpace

# Parameter names (as words split on "_") whose larger values make an epoch cost more...
SIZE_WORDS = frozenset(
    {"unit", "filter", "layer", "width", "depth", "channel", "hidden", "neuron", "block", "dim", "head"}
)
# ...and less: a larger batch runs an epoch in fewer steps.
CHEAPER_WORDS = frozenset({"batch"})
# The ridge penalty on features scaled to [0, 1]: light on a parameter named like a size or a
# choice (it shrinks a corner-to-corner effect by ~10% at 4 points), heavy on another number,
# such as a learning rate, whose few random draws in a probe would otherwise take the credit
# for what the sizes cost.
RIDGE = 0.1
RIDGE_UNNAMED = 1.0
CLAMP = 1.25  # a predicted cost stays within this factor of the measured ones
LOG_SPAN = 4.0  # a numeric choice whose values span this factor or more is modelled in log
POOL = 512  # configurations drawn once to price simulated trials


def cost_direction(name: str) -> int:
    """+1 when a parameter of this name makes epochs costlier as it grows (units, filters,
    layers...), -1 when cheaper (batch_size), 0 when its name says nothing of cost."""
    words = {word.rstrip("0123456789").removesuffix("s") for word in name.lower().split("_")}
    if words & CHEAPER_WORDS:
        return -1
    return 1 if words & SIZE_WORDS else 0


@dataclass(frozen=True)
class _Axis:
    """One feature: a numeric parameter scaled to [0, 1], or one value of a choice (one-hot)."""

    name: str
    low: float = 0.0
    high: float = 1.0
    log: bool = False
    value: Any = None  # set for a one-hot axis
    one_hot: bool = False

    def encode(self, config: Mapping[str, Any]) -> float:
        if self.name not in config:  # an inactive conditional parameter: as its smallest
            return 0.0
        value = config[self.name]
        if self.one_hot:
            return 1.0 if value == self.value and type(value) is type(self.value) else 0.0
        if not _is_number(value) or self.high <= self.low:
            return 0.0
        if self.log:
            return (math.log(value) - math.log(self.low)) / (math.log(self.high) - math.log(self.low))
        return (float(value) - self.low) / (self.high - self.low)


def axes_of(space: SearchSpace) -> tuple[_Axis, ...]:
    axes: list[_Axis] = []
    for param in space.params:
        dist = param.distribution
        if isinstance(dist, FloatRange | IntRange):
            axes.append(_Axis(param.name, float(dist.low), float(dist.high), dist.log))
        elif isinstance(dist, Choice) and all(_is_number(v) for v in dist.values):
            low, high = float(min(dist.values)), float(max(dist.values))  # type: ignore[type-var,arg-type]
            axes.append(_Axis(param.name, low, high, low > 0 and high / low >= LOG_SPAN))
        elif isinstance(dist, Choice):
            axes += [_Axis(param.name, value=value, one_hot=True) for value in dist.values[1:]]
    return tuple(axes)


@dataclass(frozen=True)
class CostModel:
    """Seconds of a later epoch for any configuration of a space (see the module's docstring)."""

    space: SearchSpace
    axes: tuple[_Axis, ...]
    intercept: float
    weights: tuple[float, ...]
    measured: Mapping[tuple[tuple[str, Any], ...], float]  # a configuration's key -> its mean epoch seconds
    low: float
    high: float

    def epoch_s(self, config: Mapping[str, Any]) -> float:
        known = self.measured.get(self.space.key(config))
        if known is not None:
            return known
        x = [axis.encode(config) for axis in self.axes]
        guess = math.exp(self.intercept + sum(w * v for w, v in zip(self.weights, x, strict=True)))
        return min(max(guess, self.low), self.high)

    def pool(self, seed: int, size: int = POOL) -> list[float]:
        """The epoch seconds of ``size`` configurations drawn from the space, per parameter at random."""
        rng = random.Random(seed)
        return [self.epoch_s(self.space.random_configuration(rng)) for _ in range(size)]


def fit(space: SearchSpace, samples: Sequence[tuple[Mapping[str, Any], float]]) -> CostModel | None:
    """The cost model of measured (configuration, later epoch seconds) pairs; None without any."""
    samples = [(config, seconds) for config, seconds in samples if seconds > 0]
    if not samples:
        return None
    by_key: dict[tuple[tuple[str, Any], ...], list[float]] = {}
    for config, seconds in samples:
        by_key.setdefault(space.key(config), []).append(seconds)
    measured = {key: statistics.fmean(values) for key, values in by_key.items()}
    axes = axes_of(space)
    rows = [[axis.encode(config) for axis in axes] for config, _ in samples]
    targets = [math.log(seconds) for _, seconds in samples]
    means = [statistics.fmean(column) for column in zip(*rows, strict=True)] if axes else []
    centred = [[v - m for v, m in zip(row, means, strict=True)] for row in rows]
    target_mean = statistics.fmean(targets)
    penalties = [RIDGE if axis.one_hot or cost_direction(axis.name) else RIDGE_UNNAMED for axis in axes]
    weights = _ridge(centred, [t - target_mean for t in targets], penalties)
    intercept = target_mean - sum(w * m for w, m in zip(weights, means, strict=True))
    costs = [seconds for _, seconds in samples]
    return CostModel(space, axes, intercept, tuple(weights), measured, min(costs) / CLAMP, max(costs) * CLAMP)


def _ridge(x: list[list[float]], y: list[float], penalties: list[float]) -> list[float]:
    """Solves (XᵀX + diag(penalties)) w = Xᵀy by Gaussian elimination (a few unknowns)."""
    k = len(penalties)
    a = [[sum(r[i] * r[j] for r in x) + (penalties[i] if i == j else 0.0) for j in range(k)] for i in range(k)]
    b = [sum(r[i] * t for r, t in zip(x, y, strict=True)) for i in range(k)]
    for col in range(k):
        pivot = max(range(col, k), key=lambda row: abs(a[row][col]))
        a[col], a[pivot], b[col], b[pivot] = a[pivot], a[col], b[pivot], b[col]
        for row in range(col + 1, k):
            factor = a[row][col] / a[col][col]
            a[row] = [u - factor * v for u, v in zip(a[row], a[col], strict=True)]
            b[row] -= factor * b[col]
    w = [0.0] * k
    for row in reversed(range(k)):
        w[row] = (b[row] - sum(a[row][j] * w[j] for j in range(row + 1, k))) / a[row][row]
    return w


# ----------------------------------------------------------------- the probe's points


def probe_points(space: SearchSpace, count: int, seed: int) -> list[dict[str, Any]]:
    """``count`` configurations that span the space's cost: the corners of its size-like parameters.

    The first is the costliest corner (every size at its largest, a batch at its smallest), the
    second the cheapest; with several size-like parameters the next ones are mixed corners (each
    parameter's effect is then told apart), with one, points in between. The other parameters
    are drawn at random with ``seed``. Empty when no parameter is named like a size: the
    probe then samples as the search does.
    """
    sized = [p for p in space.params if cost_direction(p.name) and _position(p.distribution, 0.0) is not None]
    if not sized:
        return []
    rng = random.Random(seed)
    points = []
    for index in range(count):
        drawn = space.random_configuration(rng)
        config: dict[str, Any] = {}
        for param in space.params:
            if not param.is_active(config):
                continue
            if param in sized:
                place = _corner(index, sized.index(param), len(sized), rng)
                toward = place if cost_direction(param.name) > 0 else 1.0 - place
                config[param.name] = _position(param.distribution, toward)
            elif param.name in drawn:
                config[param.name] = drawn[param.name]
            else:  # active only under a corner the random draw did not take
                config[param.name] = _first(param.distribution)
        points.append(config)
    return points


def _corner(index: int, which: int, sized: int, rng: random.Random) -> float:
    """Where point ``index`` puts size-like parameter ``which`` along its cost (1 costliest)."""
    if index < 2:
        return 1.0 - index
    if sized > 1:
        return float((which + index) % 2)
    return rng.random()


def _position(dist: Distribution, at: float) -> Any:
    """The value at ``at`` in [0, 1] of a numeric range or choice (in log where the range is log)."""
    if isinstance(dist, Choice):
        if not all(_is_number(v) for v in dist.values):
            return None
        ordered = sorted(dist.values)  # type: ignore[type-var]
        return ordered[round(at * (len(ordered) - 1))]
    if isinstance(dist, Fixed):
        return None
    low, high = float(dist.low), float(dist.high)
    value = math.exp(math.log(low) + at * (math.log(high) - math.log(low))) if dist.log else low + at * (high - low)
    if isinstance(dist, IntRange):
        steps = round((value - dist.low) / dist.step)
        return min(dist.high, dist.low + steps * dist.step)
    if dist.step is not None:
        value = low + round((value - low) / dist.step) * dist.step
    return min(max(value, low), high)


def _first(dist: Distribution) -> Any:
    if isinstance(dist, Choice):
        return dist.values[0]
    return dist.value if isinstance(dist, Fixed) else dist.low


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
