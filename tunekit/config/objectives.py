"""Several objectives: ``metric:`` as a list, ``constraints:`` and the ``select:`` rule.

``metric: {name: val_accuracy, mode: max}`` stays the one-objective form. A list of up
to ``MAX_OBJECTIVES`` of them makes the search multi-objective: the study has one
direction per objective, ASHA promotes by non-dominated sorting (MO-ASHA), and the
result is a Pareto front. ``constraints`` (``"model_params <= 50000"``) mark trials
infeasible; ``select`` names the one trial of the front whose model is exported.

Pure parsing: stdlib and ``tunekit.config._validate`` only, so the results and the
search packages read the same types.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, get_args

from tunekit.config import _validate as v
from tunekit.errors import SpecError

MetricMode = Literal["max", "min"]
Comparison = Literal["<=", ">="]
METRIC_MODES: tuple[MetricMode, ...] = get_args(MetricMode)
MAX_OBJECTIVES = 4
# Measured by tunekit in every trial that names them (tunekit.worker.measures): usable
# as objectives, in constraints and in select without user code.
MEASURED = ("model_params", "model_size_mb", "latency_ms", "peak_memory_mb")
# Schedulers that rank trials by one number; what to use instead with several objectives.
SINGLE_METRIC_SCHEDULERS = {
    "pbt": "use asha (MO-ASHA early stopping) or fifo",
    "hyperband": "use asha (MO-ASHA early stopping, one bracket) or fifo",
}
_CONSTRAINT = re.compile(r"^\s*(?P<name>[A-Za-z_][\w./-]*)\s*(?P<op><=|>=)\s*(?P<limit>[-+0-9.eE]+)\s*$")
_CONSTRAINT_RULE = "must read 'NAME <= NUMBER' or 'NAME >= NUMBER'"


@dataclass(frozen=True)
class MetricSpec:
    name: str
    mode: MetricMode


@dataclass(frozen=True)
class Constraint:
    """``name <= limit`` or ``name >= limit``, as written (``text``)."""

    name: str
    op: Comparison
    limit: float
    text: str

    def violation(self, value: float | None) -> float:
        """How far ``value`` breaks the constraint: <= 0 when it holds (Optuna's convention).

        A value never measured breaks it by infinity: an infeasible trial, never on the front.
        """
        if value is None:
            return float("inf")
        return value - self.limit if self.op == "<=" else self.limit - value

    def holds(self, value: float | None) -> bool:
        return self.violation(value) <= 0


@dataclass(frozen=True)
class Selection:
    """``select:``: the front trial whose model is exported, best by ``metric`` among those
    meeting ``subject_to``. The default picks by the first objective."""

    metric: str
    mode: MetricMode
    subject_to: tuple[Constraint, ...] = ()

    def describe(self) -> str:
        verb = "maximize" if self.mode == "max" else "minimize"
        rule = f"{verb} {self.metric} among the Pareto front"
        if self.subject_to:
            rule += " subject to " + ", ".join(c.text for c in self.subject_to)
        return rule

    def to_raw(self) -> dict[str, Any]:
        key = "maximize" if self.mode == "max" else "minimize"
        raw: dict[str, Any] = {key: self.metric}
        if self.subject_to:
            raw["subject_to"] = [c.text for c in self.subject_to]
        return raw


def parse_objectives(raw: object) -> tuple[MetricSpec, ...]:
    """``metric:`` as one mapping or a list of them; each name once, at most ``MAX_OBJECTIVES``."""
    if not isinstance(raw, list):
        return (_one_metric(raw, "metric"),)
    if not raw:
        raise SpecError("metric", "must name at least one objective", raw)
    if len(raw) > MAX_OBJECTIVES:
        raise SpecError("metric", f"takes at most {MAX_OBJECTIVES} objectives", len(raw))
    objectives: list[MetricSpec] = []
    for index, item in enumerate(raw):
        objective = _one_metric(item, v.join("metric", index))
        earlier = [i for i, seen in enumerate(objectives) if seen.name == objective.name]
        if earlier:
            raise SpecError(f"metric[{index}].name", f"repeats metric[{earlier[0]}].name", objective.name)
        objectives.append(objective)
    return tuple(objectives)


def _one_metric(raw: object, path: str) -> MetricSpec:
    section = v.mapping(raw, path, ("name", "mode"))
    name = v.string(v.require(section, "name", path), f"{path}.name")
    _check_known(name, f"{path}.name")
    mode = v.one_of(v.require(section, "mode", path), f"{path}.mode", METRIC_MODES)
    return MetricSpec(name, mode)


def _check_known(name: str, path: str) -> None:
    """A near miss of a metric tunekit measures is a typo, not a metric of the model's own.

    Any other name must be reported by the model (a Keras metric, a callback); the trial
    checks that at its first epoch and names what was reported instead.
    """
    if name in MEASURED:
        return
    close = difflib.get_close_matches(name, MEASURED, n=1, cutoff=0.75)
    if close:
        raise SpecError(
            path,
            f"unknown metric; tunekit measures {', '.join(MEASURED)} (did you mean {close[0]!r}?)",
            name,
        )


def check_scheduler(objectives: Sequence[MetricSpec], section: object) -> None:
    """Several objectives with a scheduler that ranks trials by one number: refused, with what to use."""
    scheduler = section.get("type") if isinstance(section, Mapping) else None
    if len(objectives) > 1 and isinstance(scheduler, str) and scheduler in SINGLE_METRIC_SCHEDULERS:
        raise SpecError(
            "scheduler.type",
            f"ranks trials by one metric and cannot take {len(objectives)} objectives; "
            f"{SINGLE_METRIC_SCHEDULERS[scheduler]}",
            scheduler,
        )


def parse_constraints(
    raw: object, objectives: Sequence[MetricSpec], path: str = "constraints"
) -> tuple[Constraint, ...]:
    """``["model_params <= 50000", ...]``; only with several objectives (see ``check_multi``)."""
    if raw is None:
        return ()
    entries = v.sequence(raw, path)
    parsed: list[Constraint] = []
    for index, entry in enumerate(entries):
        where = v.join(path, index)
        if not isinstance(entry, str):
            raise SpecError(where, _CONSTRAINT_RULE, entry)
        match = _CONSTRAINT.match(entry)
        if match is None:
            raise SpecError(where, _CONSTRAINT_RULE, entry)
        limit = v.number(match["limit"], where)
        _check_known(match["name"], where)
        op: Comparison = "<=" if match["op"] == "<=" else ">="
        parsed.append(Constraint(match["name"], op, limit, f"{match['name']} {op} {limit:g}"))
    _check_multi(objectives, path, entries)
    return tuple(parsed)


def parse_selection(raw: object, objectives: Sequence[MetricSpec]) -> Selection | None:
    """``select: {maximize: NAME, subject_to: [...]}`` (or ``minimize``); None: by the first objective."""
    if raw is None:
        return None
    section = v.mapping(raw, "select", ("maximize", "minimize", "subject_to"))
    _check_multi(objectives, "select", dict(section))
    given = [key for key in ("maximize", "minimize") if key in section]
    if len(given) != 1:
        raise SpecError(
            "select", f"needs exactly one of maximize or minimize, got {' and '.join(given) or 'neither'}", got=False
        )
    name = v.string(section[given[0]], f"select.{given[0]}")
    names = [o.name for o in objectives]
    if name not in names:
        raise SpecError(f"select.{given[0]}", f"must be one of the objectives ({', '.join(names)})", name)
    mode: MetricMode = "max" if given[0] == "maximize" else "min"
    return Selection(name, mode, parse_constraints(section.get("subject_to"), objectives, "select.subject_to"))


def default_selection(objectives: Sequence[MetricSpec]) -> Selection:
    """The rule when ``select`` is left out: the first objective's best among front trials."""
    return Selection(objectives[0].name, objectives[0].mode)


def _check_multi(objectives: Sequence[MetricSpec], path: str, value: object) -> None:
    if len(objectives) < 2:
        raise SpecError(
            path, "needs several objectives (metric: a list of 2 to 4); with one, set no constraints", value
        )


def tracked_metrics(
    objectives: Sequence[MetricSpec], constraints: Sequence[Constraint], selection: Selection | None
) -> tuple[str, ...]:
    """Every metric the search records a final value of per trial: objectives first, then those constraints name."""
    names = [o.name for o in objectives]
    for constraint in (*constraints, *(selection.subject_to if selection else ())):
        if constraint.name not in names:
            names.append(constraint.name)
    return tuple(names)


def objectives_raw(objectives: Sequence[MetricSpec]) -> dict[str, Any] | list[dict[str, Any]]:
    """``metric`` as spec.yaml records it: the single form for one objective."""
    plain = [{"name": o.name, "mode": o.mode} for o in objectives]
    return plain[0] if len(plain) == 1 else plain


def raw_extras(constraints: Sequence[Constraint], selection: Selection | None) -> Mapping[str, Any]:
    """The ``constraints`` and ``select`` sections as spec.yaml records them (absent when unset)."""
    extras: dict[str, Any] = {}
    if constraints:
        extras["constraints"] = [c.text for c in constraints]
    if selection is not None:
        extras["select"] = selection.to_raw()
    return extras


class _Selecting(Protocol):
    """What ``selection_of`` reads of an ``ExperimentSpec`` (which imports this module)."""

    @property
    def objectives(self) -> tuple[MetricSpec, ...]: ...

    @property
    def select(self) -> Selection | None: ...


def selection_of(spec: _Selecting) -> Selection:
    """The rule that picks the best trial of a spec's front: its ``select``, else the first objective's."""
    return spec.select or default_selection(spec.objectives)


def headline_metric(spec: _Selecting) -> MetricSpec:
    """The one metric every figure named "final" or "best" reports: a trial's final and best
    metric, the best trial's, status, plots, MLflow's ``best_<metric>``. A single-objective
    search's metric; with several objectives, the metric of the rule that picks the best trial
    (``select``, else the first objective), so each such figure agrees with that pick."""
    rule = selection_of(spec)
    return MetricSpec(rule.metric, rule.mode)


def history_selection(objectives: Sequence[MetricSpec], rule: Selection) -> Selection:
    """The search's ``rule`` as trials of an earlier experiment can follow it (the best of a
    warm start's history, and that best against this search's): by the first objective when
    the rule's metric is not an objective, since a reported metric history does not carry."""
    if rule.metric not in [o.name for o in objectives]:
        rule = dataclasses.replace(default_selection(objectives), subject_to=rule.subject_to)
    return rule
