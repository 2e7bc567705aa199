"""The search space a ``build_model(hp)`` declares, found before launch by calling it.

tunekit's searcher proposes a whole configuration before a trial starts, so the space must be
known before launch. ``discover`` calls ``build_model`` with every parameter at its default,
then again with one discrete parameter (a choice, a boolean, an int of at most
``ENUMERATED_INT_VALUES`` values) set to each of its other values; a call that declared
parameters not seen before is the start of the same walk over those new parameters, until
nothing new appears or ``MAX_BUILDS`` builds ran. A parameter first declared only under some
values of a discrete parameter (``units_2`` only when ``num_layers`` is 3) becomes conditional
on them (``when``), so TPE samples it only where it is used, as Optuna's define-by-run does.
Conditions written with ``conditional_scope`` or ``parent_name`` are kept as written. Limits: a
branch taken only for values of a float (or of a wide int range) other than its bounds is not
explored, and a parameter found only through such a branch is sampled in every trial; a
parameter no explored build declares is not searched (a trial that declares it gets its
default, and the trial's log says so).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tunekit.tuner.hp import Declared, HyperParameters, among

# Ints (and stepped floats) with at most this many values are tried at every value while the
# space is explored (a layer count); wider ones at their bounds only.
ENUMERATED_INT_VALUES = 8
# Builds ``discover`` may run; a space that needs more is explored as far as this.
MAX_BUILDS = 200


@dataclass
class Discovery:
    """The space ``discover`` found: parameters in order, each with its conditions.

    Attributes:
        params: every parameter, in the order a spec must list them (parents first).
        when: each conditional parameter's ``{parent: allowed values}``.
        builds: how many times ``build_model`` ran.
        notes: what the exploration could not settle, one line each.
    """

    params: dict[str, Declared] = field(default_factory=dict)
    when: dict[str, dict[str, tuple[Any, ...]]] = field(default_factory=dict)
    builds: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.params)

    def to_space(self) -> dict[str, dict[str, Any]]:
        """The spec's ``space`` mapping (``when`` included), for ``tunekit.run``."""
        space: dict[str, dict[str, Any]] = {}
        for name, declared in self.params.items():
            entry = declared.to_spec()
            if self.when.get(name):
                entry["when"] = {spec_name(p): list(v) for p, v in self.when[name].items()}
            space[spec_name(name)] = entry
        return space


def spec_name(name: str) -> str:
    """A parameter's name in the spec, which takes identifiers only (``block/units`` is ``block__units``)."""
    if name.isidentifier():
        return name
    safe = re.sub(r"\W", "_", name.replace("/", "__"))
    return safe if safe.isidentifier() else f"p_{safe}"


def discover(build: Callable[[HyperParameters], Any], max_builds: int = MAX_BUILDS) -> Discovery:
    """The search space ``build`` declares, found by calling it (see the module's docstring).

    Raises:
        SpecError: ``build`` declares no parameter, or declares one badly (a bad range).
        Whatever ``build`` raises with every parameter at its default: the model's own error.
    """
    found = Discovery()
    tried: set[tuple[tuple[str, Any], ...]] = set()

    def run(assigned: dict[str, Any]) -> HyperParameters:
        hp = HyperParameters(assigned)
        tried.add(_key(assigned))
        found.builds += 1
        build(hp)
        return hp

    base = run({})
    for declared in base.declared.values():
        _add(found, declared, {})
    # (assignment, the implicit conditions that assignment stands for)
    # (assignment, the implicit conditions it stands for, its build's hp, the names to vary):
    # a build that found new parameters varies only those; two older parents that open a
    # branch only together are not explored.
    frontier: list[tuple[dict[str, Any], dict[str, tuple[Any, ...]], HyperParameters, set[str]]] = [
        ({}, {}, base, set(base.declared))
    ]
    while frontier:
        assigned, context, hp, vary = frontier.pop(0)
        for name, declared in list(hp.declared.items()):
            if name not in vary or name in assigned or name not in hp.values or declared.kind == "Fixed":
                continue
            options = _options(declared)
            every = declared.values()
            complete = every is not None and len(options) == len(every)
            appeared: dict[str, list[Any]] = {}
            children = []
            for value in options:
                if among(value, (hp.values[name],)):
                    continue
                child = {**assigned, name: value}
                if _key(child) in tried:
                    continue
                if found.builds >= max_builds:
                    found.notes.append(
                        f"explored {max_builds} builds of the model; parameters declared only in other branches "
                        "are not searched (their default is used)"
                    )
                    return found
                child_hp = run(child)
                new = [n for n in child_hp.declared if n not in found.params]
                for new_name in new:
                    appeared.setdefault(new_name, []).append(value)
                if new:
                    children.append((child, value, child_hp, set(new)))
            for new_name, values in appeared.items():
                if new_name in found.params:
                    continue
                declared_new = next(c[2].declared[new_name] for c in children if new_name in c[2].declared)
                implicit = dict(context)
                if complete:
                    implicit[name] = tuple(values)
                else:
                    found.notes.append(
                        f"{new_name} is declared only for some values of {name}, which cannot all be tried; "
                        "it is sampled in every trial"
                    )
                _add(found, declared_new, implicit)
            for child, value, child_hp, fresh in children:
                frontier.append((child, {**context, name: (value,)} if complete else dict(context), child_hp, fresh))
    return found


def _options(declared: Declared) -> tuple[Any, ...]:
    """The values tried for a parameter while exploring: all of a discrete one, else its bounds."""
    values = declared.values()
    if values is not None and (declared.kind in ("Choice", "Boolean") or len(values) <= ENUMERATED_INT_VALUES):
        return values
    low = declared.args["min_value"]
    return (low, values[-1] if values else declared.args["max_value"])


def _add(found: Discovery, declared: Declared, implicit: Mapping[str, tuple[Any, ...]]) -> None:
    found.params[declared.name] = declared
    when: dict[str, tuple[Any, ...]] = {}
    for parent, allowed in [*implicit.items(), *declared.conditions]:
        if parent in when:
            allowed = tuple(v for v in when[parent] if among(v, allowed))
        when[parent] = allowed
    if when:
        found.when[declared.name] = when


def _key(assigned: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted((k, (type(v).__name__, v)) for k, v in assigned.items()))
