"""Search-space distributions, conditional parameters and their mapping onto Optuna.

A space is an ordered tuple of parameters. Sampling is define-by-run: parameters are
drawn in spec order, and a parameter with ``when`` is drawn only if the parameters it
depends on (drawn earlier) took one of the listed values. Optuna's samplers then see
exactly the parameters each trial really used.

A grid is the list of distinct full configurations: choice values, int ranges with
their step and uniform ranges with a step expand to their values, and a conditional
parameter is expanded only where its condition holds (no configuration carries an
inactive parameter, so none is counted twice).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import yaml

from tunekit.config import _validate as v
from tunekit.errors import SpecError

if TYPE_CHECKING:
    import optuna

Scalar = str | int | float | bool | None

# A grid larger than this is refused: nobody trains 100,000 models on purpose, and
# enumerating far more would stall ``tunekit validate``.
MAX_GRID_POINTS = 100_000
# The config key a repeated grid point's seed travels in (training.seed + repeat index),
# set only when budget.num_samples is a multiple > 1 of the grid size.
REPEAT_SEED_KEY = "seed"

DISTRIBUTION_TYPES = ("uniform", "loguniform", "int", "choice", "fixed")
_KEYS: dict[str, tuple[str, ...]] = {
    "uniform": ("type", "low", "high", "step", "when"),
    "loguniform": ("type", "low", "high", "when"),
    "int": ("type", "low", "high", "step", "log", "when"),
    "choice": ("type", "values", "when"),
    "fixed": ("type", "value", "when"),
}


@dataclass(frozen=True)
class FloatRange:
    """A float in ``[low, high]``; log-uniform when ``log``; on a grid of ``step`` when set."""

    low: float
    high: float
    log: bool = False
    step: float | None = None

    def suggest(self, trial: optuna.Trial, name: str) -> float:
        return trial.suggest_float(name, self.low, self.high, log=self.log, step=self.step)

    def contains(self, value: object) -> bool:
        return _is_number(value) and self.low <= value <= self.high  # type: ignore[operator]


@dataclass(frozen=True)
class IntRange:
    """An integer in ``[low, high]``, both bounds included."""

    low: int
    high: int
    step: int = 1
    log: bool = False

    def suggest(self, trial: optuna.Trial, name: str) -> int:
        return trial.suggest_int(name, self.low, self.high, step=self.step, log=self.log)

    def contains(self, value: object) -> bool:
        return (
            isinstance(value, int)
            and not isinstance(value, bool)
            and self.low <= value <= self.high
            and (value - self.low) % self.step == 0
        )


@dataclass(frozen=True)
class Choice:
    """One of a list of values (numbers, strings, booleans or null)."""

    values: tuple[Scalar, ...]

    def suggest(self, trial: optuna.Trial, name: str) -> Scalar:
        return trial.suggest_categorical(name, list(self.values))

    def contains(self, value: object) -> bool:
        return any(_same(value, option) for option in self.values)


@dataclass(frozen=True)
class Fixed:
    """A constant handed to every trial; never shown to the sampler."""

    value: Any

    def contains(self, value: object) -> bool:
        return _same(value, self.value)


Distribution = FloatRange | IntRange | Choice | Fixed


@dataclass(frozen=True)
class Param:
    name: str
    distribution: Distribution
    # {parent name: allowed parent values}; the parameter exists only when all match.
    when: Mapping[str, tuple[Scalar, ...]] = field(default_factory=dict)

    def is_active(self, config: Mapping[str, Any]) -> bool:
        return all(
            name in config and any(_same(config[name], allowed) for allowed in values)
            for name, values in self.when.items()
        )


@dataclass(frozen=True)
class SearchSpace:
    params: tuple[Param, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def sample(self, trial: optuna.Trial) -> dict[str, Any]:
        """Draws one configuration through Optuna's define-by-run API."""
        config: dict[str, Any] = {}
        for param in self.params:
            if not param.is_active(config):
                continue
            dist = param.distribution
            config[param.name] = dist.value if isinstance(dist, Fixed) else dist.suggest(trial, param.name)
        return config

    def grid(self) -> dict[str, list[Any]]:
        """The values grid search gives each searched (non-fixed) parameter.

        Raises:
            SpecError: a parameter grid search cannot expand (a range without step, a
                log range), or one with more than ``MAX_GRID_POINTS`` values.
        """
        return {p.name: list(_grid_axis(p)) for p in self.params if not isinstance(p.distribution, Fixed)}

    def grid_size(self) -> int:
        """The number of distinct configurations of the grid (conditional parameters counted where active).

        Raises:
            SpecError: as ``grid()``, and when the grid holds more than ``MAX_GRID_POINTS``
                configurations.
        """
        axes = {p.name: _grid_axis(p) for p in self.params}
        size = _count(self.params, axes, MAX_GRID_POINTS)
        if size > MAX_GRID_POINTS:
            conditional = any(p.when for p in self.params)
            total = "more than 100,000" if conditional else f"{math.prod(len(a) for a in axes.values()):,}"
            raise SpecError(
                "space", f"grid search covers at most {MAX_GRID_POINTS:,} configurations, got {total}", got=False
            )
        return size

    def grid_points(self) -> list[dict[str, Any]]:
        """Every distinct configuration of the grid, in spec order (fixed values included)."""
        self.grid_size()  # the checks, before anything is enumerated
        return list(_enumerate(self.params, {p.name: _grid_axis(p) for p in self.params}))

    def configurations(self, limit: int = MAX_GRID_POINTS) -> list[dict[str, Any]] | None:
        """Every configuration the space can produce, or None when it is infinite or above ``limit``.

        Unlike ``grid_points`` this never raises: log int ranges count with every integer.
        """
        axes: dict[str, Sequence[Any]] = {}
        for param in self.params:
            axis = _axis(param.distribution)
            if axis is None or len(axis) > limit:
                return None
            axes[param.name] = axis
        if _count(self.params, axes, limit) > limit:
            return None
        return list(_enumerate(self.params, axes))

    def random_configuration(self, rng: random.Random) -> dict[str, Any]:
        """A configuration drawn uniformly per parameter (log-uniformly for log ranges), no Optuna."""
        config: dict[str, Any] = {}
        for param in self.params:
            if param.is_active(config):
                config[param.name] = _draw(param.distribution, rng)
        return config

    def key(self, config: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
        """What identifies a configuration: its searched values, stepped floats as grid indices.

        Two proposals with the same key train the same model (floats on a step can differ
        in their last bits depending on how a sampler computed them).
        """
        parts: list[tuple[str, Any]] = []
        for param in self.params:
            dist = param.distribution
            if isinstance(dist, Fixed) or param.name not in config:
                continue
            value = config[param.name]
            if isinstance(dist, FloatRange) and dist.step is not None and _is_number(value):
                value = round((value - dist.low) / dist.step)
            parts.append((param.name, (isinstance(value, bool), value)))
        return tuple(parts)

    def check_point(self, point: Mapping[str, Any], path: str) -> dict[str, Any]:
        """Validates a warm-start point; returns the part the sampler must be told."""
        by_name = {p.name: p for p in self.params}
        searched: dict[str, Any] = {}
        for name, value in point.items():
            if name not in by_name:
                raise SpecError(
                    v.join(path, name), f"unknown parameter; the space has {', '.join(self.names)}", got=False
                )
            dist = by_name[name].distribution
            if not dist.contains(value):
                raise SpecError(v.join(path, name), f"must lie in the space ({_describe(dist)})", value)
            if not isinstance(dist, Fixed):
                searched[name] = value
        return searched


def parse_space(raw: object, path: str = "space") -> SearchSpace:
    if not isinstance(raw, Mapping) or not raw:
        raise SpecError(path, "must be a non-empty mapping of parameter names to distributions", raw)
    params: list[Param] = []
    for name, body in raw.items():
        param_path = v.join(path, str(name))
        if not isinstance(name, str) or not name.isidentifier():
            raise SpecError(param_path, "parameter names must be identifiers", name)
        distribution = _parse_distribution(body, param_path)
        when = _parse_when(body.get("when"), v.join(param_path, "when"), name, params)
        params.append(Param(name, distribution, when))
    return SearchSpace(tuple(params))


def _parse_distribution(body: object, path: str) -> Distribution:
    if not isinstance(body, Mapping):
        raise SpecError(path, _not_a_mapping(body), body)
    kind = v.one_of(body.get("type"), v.join(path, "type"), DISTRIBUTION_TYPES)
    v.mapping(body, path, _KEYS[kind])
    if kind in ("uniform", "loguniform"):
        return _parse_float_range(body, path, log=kind == "loguniform")
    if kind == "int":
        return _parse_int_range(body, path)
    if kind == "choice":
        return _parse_choice(body, path)
    return Fixed(v.require(body, "value", path))


def _not_a_mapping(body: object) -> str:
    """What to write instead: a constant written bare (often over an inherited distribution) is
    a fixed one; null only removes a parameter a base spec defines."""
    rule = "must be a mapping such as {type: uniform, low: 0, high: 1}"
    if body is None:
        return f"{rule}; null removes a parameter only over a base spec (extends)"
    if isinstance(body, int | float | bool) or (isinstance(body, str) and "(" not in body):
        constant = yaml.safe_dump(body, default_flow_style=True).removesuffix("\n...\n").strip()
        return f"{rule}; for a constant write {{type: fixed, value: {constant}}}"
    return rule


def _parse_float_range(body: Mapping[str, Any], path: str, *, log: bool) -> FloatRange:
    low = v.number(v.require(body, "low", path), v.join(path, "low"))
    high = v.number(v.require(body, "high", path), v.join(path, "high"))
    if log and low <= 0:
        raise SpecError(v.join(path, "low"), "must be > 0 for loguniform", low)
    if high <= low:
        raise SpecError(v.join(path, "high"), f"must be > low ({low:g})", high)
    step = None
    if body.get("step") is not None:
        step = v.number(body["step"], v.join(path, "step"), above=0)
        span = (high - low) / step
        if not math.isfinite(span) or abs(span - round(span)) > 1e-9:
            raise SpecError(v.join(path, "step"), f"must divide high - low ({high - low:g})", step)
    return FloatRange(low, high, log=log, step=step)


def _parse_int_range(body: Mapping[str, Any], path: str) -> IntRange:
    low = v.integer(v.require(body, "low", path), v.join(path, "low"))
    high = v.integer(v.require(body, "high", path), v.join(path, "high"))
    if high < low:
        raise SpecError(v.join(path, "high"), f"must be >= low ({low}); int bounds are inclusive", high)
    step = v.integer(body.get("step", 1), v.join(path, "step"), minimum=1)
    if (high - low) % step:
        raise SpecError(v.join(path, "step"), f"must divide high - low ({high - low})", step)
    log = v.boolean(body.get("log", False), v.join(path, "log"))
    if log and (low < 1 or step != 1):
        raise SpecError(v.join(path, "log"), "needs low >= 1 and step 1", log)
    return IntRange(low, high, step=step, log=log)


def _parse_choice(body: Mapping[str, Any], path: str) -> Choice:
    values_path = v.join(path, "values")
    values = v.sequence(v.require(body, "values", path), values_path, non_empty=True)
    for index, value in enumerate(values):
        if not isinstance(value, str | int | float | bool) and value is not None:
            raise SpecError(v.join(values_path, index), "must be a number, string, boolean or null", value)
    for index, value in enumerate(values):
        if any(_same(value, earlier) for earlier in values[:index]):
            raise SpecError(v.join(values_path, index), "duplicates an earlier value", value)
    return Choice(tuple(values))


def _parse_when(raw: object, path: str, name: str, earlier: list[Param]) -> dict[str, tuple[Scalar, ...]]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping) or not raw:
        raise SpecError(path, "must map earlier parameters to their allowed values", raw)
    by_name = {p.name: p for p in earlier}
    when: dict[str, tuple[Scalar, ...]] = {}
    for parent, allowed in raw.items():
        parent_path = v.join(path, str(parent))
        if parent not in by_name:
            raise SpecError(parent_path, f"must name a parameter defined above {name}", parent)
        options = tuple(allowed) if isinstance(allowed, list) else (allowed,)
        dist = by_name[parent].distribution
        for option in options:
            if not dist.contains(option):
                raise SpecError(parent_path, f"must be a value {parent} can take ({_describe(dist)})", option)
        when[parent] = options
    return when


def _axis(dist: Distribution) -> Sequence[Any] | None:
    """Every value a distribution can take, or None for a continuous range (or a huge one)."""
    if isinstance(dist, Choice):
        return dist.values
    if isinstance(dist, Fixed):
        return (dist.value,)
    if isinstance(dist, IntRange):
        return range(dist.low, dist.high + 1, dist.step)  # lazy: len() is free
    if dist.step is None:
        return None
    count = round((dist.high - dist.low) / dist.step) + 1
    if count > MAX_GRID_POINTS:
        return None
    # As suggest_float(step=) would: low + k * step, without the float noise (0.1 * 3).
    return tuple(min(dist.high, float(f"{dist.low + k * dist.step:.12g}")) for k in range(count))


def _grid_axis(param: Param) -> Sequence[Any]:
    """A parameter's grid values, or the SpecError saying why grid search cannot expand it."""
    dist, path = param.distribution, f"space.{param.name}"
    if isinstance(dist, FloatRange):
        if dist.log:
            raise SpecError(
                v.join(path, "type"),
                "grid search cannot expand a loguniform range (it has no step); list its values with choice",
                "loguniform",
            )
        if dist.step is None:
            raise SpecError(v.join(path, "step"), "grid search needs a step for uniform ranges (or use choice)", None)
        count = round((dist.high - dist.low) / dist.step) + 1
    elif isinstance(dist, IntRange):
        if dist.log:
            # Expanding would make every integer a point, not the powers the user had in mind.
            raise SpecError(
                v.join(path, "log"), "grid search cannot expand a log int range; list its values with choice", True
            )
        count = (dist.high - dist.low) // dist.step + 1
    else:
        count = 1 if isinstance(dist, Fixed) else len(dist.values)
    axis = _axis(dist) if count <= MAX_GRID_POINTS else None
    if axis is None:
        raise SpecError(
            path,
            f"grid search covers at most {MAX_GRID_POINTS:,} configurations, got {count:,} values here alone",
            got=False,
        )
    return axis


def _count(params: tuple[Param, ...], axes: Mapping[str, Sequence[Any]], cap: int) -> int:
    """How many distinct configurations the axes make, conditions applied; stops above ``cap``.

    Only parameters that a ``when`` refers to are branched on; the others multiply.
    """
    parents = {name for p in params for name in p.when}

    def count(index: int, config: dict[str, Any]) -> int:
        total = 1
        for position in range(index, len(params)):
            param = params[position]
            if not param.is_active(config):
                continue
            axis = axes[param.name]
            if param.name in parents:
                branches = 0
                for value in axis:
                    branches += count(position + 1, {**config, param.name: value})
                    if total * branches > cap:
                        return cap + 1
                return total * branches
            total *= len(axis)
            if total > cap:
                return cap + 1
        return total

    return count(0, {})


def _enumerate(params: tuple[Param, ...], axes: Mapping[str, Sequence[Any]]) -> Iterator[dict[str, Any]]:
    def walk(index: int, config: dict[str, Any]) -> Iterator[dict[str, Any]]:
        if index == len(params):
            yield dict(config)
            return
        param = params[index]
        if not param.is_active(config):
            yield from walk(index + 1, config)
            return
        for value in axes[param.name]:
            config[param.name] = value
            yield from walk(index + 1, config)
        del config[param.name]

    return walk(0, {})


def _draw(dist: Distribution, rng: random.Random) -> Any:
    if isinstance(dist, Fixed):
        return dist.value
    if isinstance(dist, Choice):
        return rng.choice(dist.values)
    if isinstance(dist, IntRange):
        if dist.log:
            return min(dist.high, round(math.exp(rng.uniform(math.log(dist.low), math.log(dist.high)))))
        return rng.choice(range(dist.low, dist.high + 1, dist.step))
    if dist.log:
        return math.exp(rng.uniform(math.log(dist.low), math.log(dist.high)))
    if dist.step is not None:
        return rng.choice(_axis(dist) or (dist.low,))
    return rng.uniform(dist.low, dist.high)


def kind_name(dist: Distribution) -> str:
    """The spec's ``type`` word for a distribution, for messages."""
    if isinstance(dist, FloatRange):
        return "loguniform" if dist.log else "uniform"
    return {IntRange: "int", Choice: "choice", Fixed: "fixed"}[type(dist)]


def space_lines(space: SearchSpace) -> list[str]:
    """The space, a line per parameter: ``units  int 16 to 64, step 16  (when wide is True)``."""
    width = max((len(param.name) for param in space.params), default=0)
    lines = []
    for param in space.params:
        dist = param.distribution
        step = getattr(dist, "step", None)
        shown = f"{kind_name(dist)} {_describe(dist)}" + (f", step {step:g}" if step not in (None, 1) else "")
        when = " and ".join(f"{name} is {' or '.join(map(repr, values))}" for name, values in param.when.items())
        lines.append(f"  {param.name:<{width}}  {shown}" + (f"  (when {when})" if when else ""))
    return lines


def _describe(dist: Distribution) -> str:
    if isinstance(dist, Choice):
        return "one of " + ", ".join(repr(x) for x in dist.values)
    if isinstance(dist, Fixed):
        return f"fixed at {dist.value!r}"
    return f"{dist.low:g} to {dist.high:g}"


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _same(a: object, b: object) -> bool:
    # 1 == True in Python; a choice of [0, 1, true] must keep them apart.
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else a == b
