"""The axes of the parallel-coordinates figure: each parameter's and the metric's values mapped to [0, 1]."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from tunekit.config.space import Choice, Fixed, FloatRange, IntRange
from tunekit.layout import PARAM_PREFIX

if TYPE_CHECKING:
    import pandas as pd

    from tunekit.results.load import ExperimentResults


class Axis:
    """One vertical axis of the parallel-coordinates plot: maps values to [0, 1]."""

    def __init__(self, column: str, label: str, ticks: list[tuple[float, str]], mapping: Any) -> None:
        self.column = column
        self.label = label
        self.ticks = ticks
        self._mapping = mapping

    def position(self, value: Any) -> float:
        if _missing(value):
            return math.nan
        return float(self._mapping(value))


def param_axis(results: ExperimentResults, column: str) -> Axis:
    name = column[len(PARAM_PREFIX) :]
    dist = next((p.distribution for p in results.spec.space.params if p.name == name), None)
    values = results.trials[column].dropna()
    numeric = not values.empty and all(_is_number(v) for v in values)
    if isinstance(dist, Choice | Fixed) or not numeric:
        categories = list(dist.values) if isinstance(dist, Choice) else []
        for value in values:
            if not any(_same(value, c) for c in categories):
                categories.append(value)
        if not categories:
            categories = ["-"]
        spots = [0.5] if len(categories) == 1 else [i / (len(categories) - 1) for i in range(len(categories))]

        def categorical(value: Any) -> float:
            for spot, category in zip(spots, categories, strict=True):
                if _same(value, category) or str(value) == str(category):
                    return spot
            return math.nan

        return Axis(
            column,
            name,
            [(s, _short(c)) for s, c in zip(spots, categories, strict=True)],
            categorical,
        )
    ranged = dist if isinstance(dist, FloatRange | IntRange) else None
    log = ranged is not None and ranged.log
    low = float(values.min() if ranged is None else ranged.low)
    high = float(values.max() if ranged is None else ranged.high)
    low, high = min(low, float(values.min())), max(high, float(values.max()))
    if log and low <= 0:
        log = False
    scale = (lambda x: math.log10(float(x))) if log else float
    bottom, top = scale(low), scale(high)
    span = (top - bottom) or 1.0

    def numeric_position(value: Any) -> float:
        return (scale(value) - bottom) / span

    ticks = [(numeric_position(v), _short(v)) for v in (low, high)]
    return Axis(column, f"{name}{' (log)' if log else ''}", ticks, numeric_position)


def metric_axis(values: pd.Series, metric: str) -> Axis:
    finite = values.dropna()
    low, high = (float(finite.min()), float(finite.max())) if not finite.empty else (0.0, 1.0)
    span = (high - low) or 1.0

    def position(value: Any) -> float:
        return (float(value) - low) / span if not _missing(value) else math.nan

    ticks = [(position(low), _short(low)), (position(high), _short(high))]
    return Axis("final_metric", metric, ticks, position)


def _is_number(value: Any) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)) or (
        hasattr(value, "dtype") and value.dtype.kind in "iuf"
    )


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) and isinstance(a, bool) == isinstance(b, bool)
    except (TypeError, ValueError):
        return False


def _short(value: Any) -> str:
    if isinstance(value, float) or (hasattr(value, "dtype") and value.dtype.kind == "f"):
        return f"{float(value):.3g}"
    text = str(value)
    return text if len(text) <= 12 else text[:11] + "…"


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))
