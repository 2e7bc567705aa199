"""Small readers that turn raw YAML values into typed values or a precise SpecError.

Every reader takes the spec path of the value so messages read
``budget.max_epochs: must be an integer >= 1, got 0``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeVar

from tunekit.errors import SpecError

_Word = TypeVar("_Word", bound=str)

# PyYAML follows YAML 1.1, where `1e-4` (no dot) is a string. Users mean a number.
_FLOAT_TEXT = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


def mapping(value: object, path: str, keys: Sequence[str]) -> Mapping[str, Any]:
    """Checks that ``value`` is a mapping whose keys all belong to ``keys``."""
    if not isinstance(value, Mapping):
        raise SpecError(path, "must be a mapping", value)
    for key in value:
        if not isinstance(key, str):
            raise SpecError(path, "keys must be strings", key)
        if key not in keys:
            raise SpecError(join(path, key), f"unknown key; valid keys are {', '.join(keys)}", got=False)
    return value


_PLAIN_KEY = re.compile(r"[\w-]+")


def join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    if not _PLAIN_KEY.fullmatch(key):
        return f"{path}[{key!r}]"  # keeps the message on one line and its path readable
    return f"{path}.{key}" if path else key


def require(section: Mapping[str, Any], key: str, path: str) -> Any:
    if key not in section or section[key] is None:
        raise SpecError(join(path, key), "is required", got=False)
    return section[key]


def string(value: object, path: str, *, pattern: re.Pattern[str] | None = None, rule: str = "") -> str:
    if not isinstance(value, str) or not value:
        raise SpecError(path, "must be a non-empty string", value)
    if pattern is not None and not pattern.fullmatch(value):
        raise SpecError(path, rule, value)
    return value


def one_of(value: object, path: str, options: Sequence[_Word]) -> _Word:
    """``value`` as the member of ``options`` it equals (a Literal type's values keep their type)."""
    if not isinstance(value, str) or value not in options:
        raise SpecError(path, f"must be one of {', '.join(options)}", value)
    return options[options.index(value)]


def boolean(value: object, path: str) -> bool:
    if not isinstance(value, bool):
        raise SpecError(path, "must be true or false", value)
    return value


def integer(value: object, path: str, *, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        rule = "must be an integer" if minimum is None else f"must be an integer >= {minimum}"
        raise SpecError(path, rule, value)
    if minimum is not None and value < minimum:
        raise SpecError(path, f"must be an integer >= {minimum}", value)
    return value


def count_or_auto(value: object, path: str) -> int | Literal["auto"]:
    """``auto``, or an integer >= 1 (``training.steps_per_execution``)."""
    if value == "auto":
        return "auto"
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    raise SpecError(path, "must be auto or an integer >= 1", value)


def number(value: object, path: str, *, above: float | None = None, at_least: float | None = None) -> float:
    """A finite int or float (or a YAML-1.1 string such as ``1e-4``), optionally bounded."""
    parsed = float(value) if isinstance(value, str) and _FLOAT_TEXT.fullmatch(value.strip()) else value
    if isinstance(parsed, bool) or not isinstance(parsed, int | float):
        raise SpecError(path, "must be a finite number", value)
    try:
        parsed = float(parsed)  # an int beyond float's range overflows here
    except OverflowError:
        raise SpecError(path, "must be a finite number", value) from None
    if not math.isfinite(parsed):
        raise SpecError(path, "must be a finite number", value)
    if above is not None and parsed <= above:
        raise SpecError(path, f"must be > {above:g}", value)
    if at_least is not None and parsed < at_least:
        raise SpecError(path, f"must be >= {at_least:g}", value)
    return float(parsed)


def sequence(value: object, path: str, *, non_empty: bool = False) -> list[Any]:
    if not isinstance(value, list):
        raise SpecError(path, "must be a list", value)
    if non_empty and not value:
        raise SpecError(path, "must not be empty", value)
    return value
