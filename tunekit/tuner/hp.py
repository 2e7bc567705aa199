"""KerasTuner's ``hp`` API over tunekit's search space: a ``build_model(hp)`` runs unchanged.

``HyperParameters`` answers ``hp.Int``, ``hp.Float``, ``hp.Choice``, ``hp.Boolean``,
``hp.Fixed``, ``hp.conditional_scope`` and the ``parent_name``/``parent_values`` keywords
as ``keras_tuner.HyperParameters`` does: a value for an active parameter, None for one
whose conditions do not hold, the default for one never given a value. It does not import
keras-tuner (nor TensorFlow).

The space a ``build_model(hp)`` declares is found by ``tunekit.tuner.discover``; a spec trainable's
names are checked here too (``NameChecked``, ``CheckedConfig``).
"""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tunekit.errors import FatalTrialError, SpecError

_SAMPLINGS = ("linear", "log", "reverse_log")
# A range with more values than this is treated as continuous (never listed).
MAX_LISTED_VALUES = 10_000


@dataclass(frozen=True)
class Declared:
    """One ``hp.Int/Float/Choice/Boolean/Fixed`` call: the parameter as KerasTuner describes it.

    Attributes:
        name: the parameter's name (with name scopes).
        kind: ``Int``, ``Float``, ``Choice``, ``Boolean`` or ``Fixed``, KerasTuner's class names.
        args: the call's settings (``min_value``, ``max_value``, ``step``, ``sampling``,
            ``values``, ``ordered``, ``value``), as ``search_space_summary`` shows them.
        default: what a trial that is not given a value gets.
        conditions: ``(parent name, allowed values)`` pairs, all of which must hold.
    """

    name: str
    kind: str
    args: Mapping[str, Any]
    default: Any
    conditions: tuple[tuple[str, tuple[Any, ...]], ...] = ()

    def values(self) -> tuple[Any, ...] | None:
        """Every value the parameter takes, or None for a continuous (or wide) range."""
        a = self.args
        if self.kind == "Choice":
            return tuple(a["values"])
        if self.kind == "Boolean":
            return (False, True)
        if self.kind == "Fixed":
            return (a["value"],)
        if self.kind == "Int" and a["sampling"] != "log" and a["step"] is None:
            count = a["max_value"] - a["min_value"] + 1
            return tuple(range(a["min_value"], a["max_value"] + 1)) if count <= MAX_LISTED_VALUES else None
        if a["step"] is None:
            return None
        return _stepped(a["min_value"], a["max_value"], a["step"], a["sampling"] == "log", self.kind == "Int")

    def to_spec(self) -> dict[str, Any]:
        """The parameter as a spec's ``space`` entry (``when`` left to the caller)."""
        a = self.args
        if self.kind == "Fixed":
            return {"type": "fixed", "value": a["value"]}
        if self.kind in ("Choice", "Boolean"):
            return {"type": "choice", "values": list(self.values() or ())}
        low, high, step, sampling = a["min_value"], a["max_value"], a["step"], a["sampling"]
        if sampling == "log" and step is not None:  # KerasTuner multiplies by the step: a list of values
            return {"type": "choice", "values": list(self.values() or ())}
        if self.kind == "Int":
            if sampling == "log":
                return {"type": "int", "low": low, "high": high, "log": True}
            step = step or 1
            return {"type": "int", "low": low, "high": low + (high - low) // step * step, "step": step}
        if sampling == "log":
            return {"type": "loguniform", "low": low, "high": high}
        if step is not None:
            values = _stepped(low, high, step, False, False)
            return {"type": "uniform", "low": low, "high": values[-1], "step": step}
        return {"type": "uniform", "low": low, "high": high}

    def describe(self) -> str:
        """KerasTuner's summary line: ``{'default': ..., 'conditions': [...], ...}``."""
        shown = {"default": self.default, "conditions": [{p: list(v)} for p, v in self.conditions], **self.args}
        return repr(shown)


def _stepped(low: float, high: float, step: float, log: bool, integer: bool) -> tuple[Any, ...]:
    values: list[Any] = []
    index = 0
    while True:
        value = low * step**index if log else low + index * step
        if value > high * (1 + 1e-12):
            break
        values.append(round(value) if integer else float(f"{value:.12g}"))
        index += 1
    return tuple(values)


class UnknownParameterError(FatalTrialError, KeyError):
    """The model's code read a parameter the search space does not have (a spec/code mismatch)."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0]) if self.args else ""


def unknown_parameter_message(name: str, known: Sequence[str], where: str = "build_model") -> str:
    """``build_model reads 'units_2', which the space lacks; the space has: ...; did you mean 'units_two'?``"""
    text = f"{where} reads {name!r}, which the space lacks; the space has: {', '.join(known) or 'nothing'}"
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return text + (f"; did you mean {close[0]!r}?" if close else "")


class HyperParameters:
    """KerasTuner's ``HyperParameters``: a trial's values, and the space its calls declare.

    Args:
        values: the values to hand out (a trial's configuration); a parameter without one
            gets its default.
        known: the names of the search space; a call declaring another name then raises
            ``UnknownParameterError`` when ``strict``, else gets its default and is noted
            in ``unknown``.
        strict: see ``known``.

    Attributes:
        values: the active parameters' values, as KerasTuner's ``hp.values``.
        declared: every parameter the calls declared, in call order.
        unknown: names declared that ``known`` lacks.
    """

    def __init__(
        self, values: Mapping[str, Any] | None = None, *, known: Sequence[str] | None = None, strict: bool = False
    ) -> None:
        self._given = dict(values or {})
        self._known = None if known is None else tuple(known)
        self._strict = strict
        self._conditions: list[tuple[str, tuple[Any, ...]]] = []
        self._scopes: list[str] = []
        self.values: dict[str, Any] = {}
        self.declared: dict[str, Declared] = {}
        self.unknown: list[str] = []

    # ----------------------------------------------------------------- KerasTuner's API
    def Int(
        self,
        name: str,
        min_value: int,
        max_value: int,
        step: int | None = None,
        sampling: str = "linear",
        default: int | None = None,
        parent_name: str | None = None,
        parent_values: Any = None,
    ) -> Any:
        """An integer in ``[min_value, max_value]``, both included; ``step`` multiplies under log sampling."""
        full = self._name(name)
        min_value, max_value = _integer(full, "min_value", min_value), _integer(full, "max_value", max_value)
        step = None if step is None else _integer(full, "step", step)
        self._check_range(full, min_value, max_value, step, sampling)
        args = {"min_value": min_value, "max_value": max_value, "step": step, "sampling": sampling}
        chosen = min_value if default is None else int(default)
        return self._retrieve(full, "Int", args, chosen, parent_name, parent_values)

    def Float(
        self,
        name: str,
        min_value: float,
        max_value: float,
        step: float | None = None,
        sampling: str = "linear",
        default: float | None = None,
        parent_name: str | None = None,
        parent_values: Any = None,
    ) -> Any:
        """A float in ``[min_value, max_value]``; ``sampling`` linear, log or reverse_log."""
        full = self._name(name)
        min_value, max_value = float(min_value), float(max_value)
        step = None if step is None else float(step)
        self._check_range(full, min_value, max_value, step, sampling)
        args = {"min_value": min_value, "max_value": max_value, "step": step, "sampling": sampling}
        chosen = min_value if default is None else float(default)
        return self._retrieve(full, "Float", args, chosen, parent_name, parent_values)

    def Choice(
        self,
        name: str,
        values: Sequence[Any],
        ordered: bool | None = None,
        default: Any = None,
        parent_name: str | None = None,
        parent_values: Any = None,
    ) -> Any:
        """One of ``values`` (numbers, strings or booleans, all of one type)."""
        full = self._name(name)
        options = list(values)
        if not options:
            raise SpecError(f"hp.{full}", "Choice needs at least one value", got=False)
        if len({type(v) for v in options if v is not None}) > 1:
            raise SpecError(f"hp.{full}", "Choice values must all be of one type", options)
        if default is not None and default not in options:
            raise SpecError(f"hp.{full}.default", "must be one of the values", default)
        numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in options)
        args = {"values": options, "ordered": numeric if ordered is None else ordered}
        chosen = default if default is not None else (None if None in options else options[0])
        return self._retrieve(full, "Choice", args, chosen, parent_name, parent_values)

    def Boolean(
        self, name: str, default: bool = False, parent_name: str | None = None, parent_values: Any = None
    ) -> Any:
        """True or False."""
        return self._retrieve(self._name(name), "Boolean", {}, bool(default), parent_name, parent_values)

    def Fixed(self, name: str, value: Any, parent_name: str | None = None, parent_values: Any = None) -> Any:
        """A constant, recorded with the trial but never searched."""
        return self._retrieve(self._name(name), "Fixed", {"value": value}, value, parent_name, parent_values)

    @contextlib.contextmanager
    def conditional_scope(self, parent_name: str, parent_values: Any) -> Iterator[None]:
        """Parameters declared inside exist only while ``parent_name`` takes one of ``parent_values``.

        As in KerasTuner, the code inside runs whatever the parent's value; a parameter
        declared there returns None when the condition does not hold.
        """
        parent = self._name(parent_name)
        if parent not in self.declared:
            raise ValueError(f"`HyperParameter` named: {parent} not defined.")  # KerasTuner's words
        self._conditions.append((parent, _as_tuple(parent_values)))
        try:
            yield
        finally:
            self._conditions.pop()

    @contextlib.contextmanager
    def name_scope(self, name: str) -> Iterator[None]:
        """Prefixes the names declared inside with ``name/``, as KerasTuner does."""
        self._scopes.append(name)
        try:
            yield
        finally:
            self._scopes.pop()

    def get(self, name: str) -> Any:
        """The value of an active parameter; ValueError for an inactive one, KeyError for an unknown one."""
        full = self._name(name)
        if full in self.values:
            return self.values[full]
        if full in self.declared:
            raise ValueError(f"{full} is currently inactive.")
        raise KeyError(f"{full} does not exist.")

    def __getitem__(self, name: str) -> Any:
        return self.get(name)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._name(name) in self.values

    def is_active(self, name: str) -> bool:
        """Whether the parameter's conditions hold for the values so far."""
        declared = self.declared.get(self._name(name))
        return declared is not None and self._holds(declared.conditions)

    @property
    def space(self) -> list[Declared]:
        """The declared parameters, KerasTuner's ``hp.space``."""
        return list(self.declared.values())

    def __repr__(self) -> str:
        return f"HyperParameters(values={self.values!r})"

    # ----------------------------------------------------------------- internals
    def _name(self, name: str) -> str:
        return "/".join([*self._scopes, name]) if self._scopes else name

    def _check_range(self, name: str, low: float, high: float, step: float | None, sampling: str) -> None:
        if sampling not in _SAMPLINGS:
            raise SpecError(f"hp.{name}.sampling", f"must be one of {', '.join(_SAMPLINGS)}", sampling)
        if high < low:
            raise SpecError(f"hp.{name}.max_value", f"must be >= min_value ({low:g})", high)
        if sampling != "linear" and low <= 0:
            raise SpecError(f"hp.{name}.min_value", f"must be > 0 for sampling={sampling}", low)
        if step is not None and (step <= 0 or (sampling == "log" and step <= 1)):
            rule = "must be > 1 with sampling=log (it multiplies)" if sampling == "log" else "must be > 0"
            raise SpecError(f"hp.{name}.step", rule, step)

    def _retrieve(
        self,
        name: str,
        kind: str,
        args: dict[str, Any],
        default: Any,
        parent_name: str | None,
        parent_values: Any,
    ) -> Any:
        conditions = list(self._conditions)
        if parent_name is not None:
            parent = self._name(parent_name)
            if parent not in self.declared:
                raise ValueError(f"`HyperParameter` named: {parent} not defined.")
            conditions.append((parent, _as_tuple(parent_values)))
        if name not in self.declared:
            if self._known is not None and name not in self._known:
                if self._strict:
                    raise UnknownParameterError(unknown_parameter_message(name, self._known))
                self.unknown.append(name)
            self.declared[name] = Declared(name, kind, args, default, tuple(conditions))
        if not self._holds(tuple(conditions)):
            return None  # KerasTuner's rule: an inactive parameter has no value to rely on
        if name not in self.values:
            value = self._given.get(name, default)
            self.values[name] = _typed(kind, value)
        return self.values[name]

    def _holds(self, conditions: tuple[tuple[str, tuple[Any, ...]], ...]) -> bool:
        return all(parent in self.values and among(self.values[parent], allowed) for parent, allowed in conditions)


def _as_tuple(values: Any) -> tuple[Any, ...]:
    return tuple(values) if isinstance(values, list | tuple | set | frozenset) else (values,)


def among(value: Any, allowed: tuple[Any, ...]) -> bool:
    """Whether ``value`` is one of ``allowed``, True and 1 told apart."""
    return any(type(value) is type(a) and value == a if isinstance(a, bool) else value == a for a in allowed)


def _integer(name: str, key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
        raise SpecError(f"hp.{name}.{key}", "must be an integer", value)
    return int(value)


def _typed(kind: str, value: Any) -> Any:
    """Values read back from a table (ints as floats, numpy scalars) as the parameter's own type."""
    if value is None:
        return None
    if kind == "Int":
        return int(value)
    if kind == "Float":
        return float(value)
    if kind == "Boolean":
        return bool(value)
    if hasattr(value, "item"):  # a numpy scalar
        return value.item()
    return value


# --------------------------------------------------------------------------- discovery


# --------------------------------------------------------------------------- a spec's builders, checked


class CheckedConfig(dict[str, Any]):
    """A trial's configuration whose missing keys say why: not in the space (a spec/code mismatch,
    fatal), or a conditional parameter inactive in this trial (this trial's failure).

    Every key the builder looks at (an item, ``get``, ``in``, or all of them by iterating) joins
    ``reads``: the search's end warns of space keys no completed trial read (``tunekit.results.unread``).
    """

    def __init__(self, config: Mapping[str, Any], space: Sequence[str], where: str, reads: set[str]) -> None:
        super().__init__(config)
        self.space = tuple(space)
        self.where = where
        self.reads = reads

    def __getitem__(self, key: str) -> Any:
        self.reads.add(key)
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self.reads.add(key)
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        self.reads.add(str(key))
        return super().__contains__(key)

    def __iter__(self) -> Iterator[str]:  # a loop reads every key; dict(config) then reads each item
        self.reads.update(super().keys())
        return super().__iter__()

    def items(self) -> Any:
        self.reads.update(super().keys())
        return super().items()

    def copy(self) -> CheckedConfig:  # the copy's reads count too
        return CheckedConfig(dict(dict.items(self)), self.space, self.where, self.reads)

    def __missing__(self, key: str) -> Any:
        if key in self.space:
            raise KeyError(
                f"{self.where} reads {key!r}, a conditional parameter this trial does not have (its `when` "
                f"does not hold); read it with config.get({key!r})"
            )
        raise UnknownParameterError(unknown_parameter_message(str(key), self.space, self.where))

    def __reduce__(self) -> Any:  # a plain dict once it leaves the builder (pickling reads nothing)
        return (dict, (dict(dict.items(self)),))


@dataclass(frozen=True)
class NameChecked:
    """A builder whose reads are checked against the space's names (``tunekit.contract.load_builders``).

    ``build_model(config, ctx)`` gets a ``CheckedConfig``; ``build_model(hp)`` or
    ``build_model(hp, ctx)`` gets a strict ``HyperParameters`` over the trial's values.
    """

    function: Callable[..., Any]
    space: tuple[str, ...]
    where: str
    # The space names read so far, shared by a trial's builders (``load_builders``).
    reads: set[str] = field(default_factory=set, compare=False, repr=False)

    def __call__(self, config: Mapping[str, Any], ctx: Any) -> Any:
        if takes_hp(self.function):
            hp = HyperParameters(config, known=self.space, strict=True)
            try:
                return self.function(hp, ctx) if positional_count(self.function) >= 2 else self.function(hp)
            finally:
                self.reads.update(hp.declared)
        return self.function(CheckedConfig(config, self.space, self.where, self.reads), ctx)


def takes_hp(function: Callable[..., Any]) -> bool:
    """Whether a builder is KerasTuner-style: its first parameter is named ``hp``."""
    import inspect

    try:
        parameters = list(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return False
    return bool(parameters) and parameters[0] == "hp"


def positional_count(function: Callable[..., Any]) -> int:
    import inspect

    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(p.kind in kinds for p in inspect.signature(function).parameters.values())
