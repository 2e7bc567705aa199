"""Warm starts from earlier experiments: their finished trials become the new study's history.

``search.warm_start_from`` names experiment directories. Their COMPLETE and PRUNED trials
(with every intermediate value) are added to the new study before its first trial, so
TPE models the space from the start. With several objectives (``ObjectiveMap``) the earlier
study's COMPLETE trials are used, their values matched to this study's objectives by name,
and each of this spec's constraints taken from the earlier trial or computed from its values.
A trial is used only when its configuration is one the new space can produce: the same
parameters, each within its range or choices (on its step), conditional parameters present
exactly where active; values an earlier space fixed count as that trial's values.
A trial PBT moved onto other trials' weights and values is skipped too: no one configuration
earned its value. Everything else is skipped, and why is counted.

History trials carry ``HISTORY_ATTR``. They are not Ray trials: the searcher never maps
them (``OptunaStudySearcher._numbers``), so they count toward no budget, are never
repeats of this search's trials, and never reach ``trials.csv``, MLflow or the best trial.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
import yaml
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState

from tunekit.config.objectives import Constraint, MetricSpec, history_selection, selection_of
from tunekit.config.space import Choice, Distribution, Fixed, FloatRange, IntRange, SearchSpace, parse_space
from tunekit.config.spec import ExperimentSpec
from tunekit.config.warm_start import recorded_objectives
from tunekit.layout import RAY_TRIAL_ATTR, SPEC_FILE, WARM_START_FILE, TrialStatus
from tunekit.search.attrs import DUPLICATE_ATTR, FINAL_RESULT_ATTR, HISTORY_ATTR, PBT_STEPS_ATTR, WARM_START_ATTR
from tunekit.search.plan import pick_best, study_storage
from tunekit.storage.store import write_json

# Study trials a search told without training them: not evidence of their own.
_REPEAT_ATTRS = (DUPLICATE_ATTR, HISTORY_ATTR)
_USED_STATES = (TrialState.COMPLETE, TrialState.PRUNED)


@dataclass
class HistorySummary:
    """How many earlier trials became history, and why the others did not."""

    sources: tuple[str, ...]
    used: int = 0
    skipped: Counter[str] = field(default_factory=Counter)  # reason -> trials
    # The best history trial (complete before pruned, as tunekit's best): source, number,
    # metric, status, epochs, config. What "best including history" reports, and often
    # what Optuna's study.best_trial is.
    best: dict[str, Any] | None = None

    def describe(self) -> str:
        """One console line: "warm start: 10 trials of 1 earlier experiment used, 2 skipped (...)"."""
        experiments = f"{len(self.sources)} earlier experiment" + ("" if len(self.sources) == 1 else "s")
        trials = f"{self.used} trial" + ("" if self.used == 1 else "s")
        text = f"warm start: {trials} of {experiments} used as history"
        if not self.skipped:
            return text
        reasons = ", ".join(f"{count} {reason}" for reason, count in self.skipped.most_common())
        return f"{text}, {sum(self.skipped.values())} skipped ({reasons})"

    def to_dict(self) -> dict[str, Any]:
        return {"sources": list(self.sources), "used": self.used, "skipped": dict(self.skipped), "best": self.best}

    @classmethod
    def recorded(cls, experiment_dir: Path) -> HistorySummary | None:
        """The summary a warm start left in ``experiment_dir``, or None when it had none."""
        path = experiment_dir / WARM_START_FILE
        if not path.is_file():
            return None
        record = json.loads(path.read_text())
        return cls(tuple(record["sources"]), int(record["used"]), Counter(record["skipped"]), record.get("best"))


@dataclass(frozen=True)
class ObjectiveMap:
    """How an earlier multi-objective study's trials become this one's: values by objective name."""

    earlier: tuple[str, ...]  # the earlier study's objective names, in its order
    objectives: tuple[MetricSpec, ...]
    constraints: tuple[Constraint, ...] = ()

    def outcome(self, frozen: FrozenTrial) -> tuple[dict[str, Any] | None, str]:
        """``create_trial``'s values and constraints for ``frozen``, or None and why it cannot be used."""
        if frozen.state != TrialState.COMPLETE or frozen.values is None:
            return None, "pruned (with several objectives only complete trials carry values)"
        by_name = dict(zip(self.earlier, frozen.values, strict=True))
        constraints: dict[str, float] = {}
        for constraint in self.constraints:
            if constraint.text in frozen.constraints:
                constraints[constraint.text] = frozen.constraints[constraint.text]
            elif constraint.name in by_name:
                constraints[constraint.text] = constraint.violation(by_name[constraint.name])
            else:
                return None, f"without {constraint.name}, which the constraint '{constraint.text}' needs"
        return {"values": [by_name[o.name] for o in self.objectives], "constraints": constraints}, ""


def add_history(study: optuna.Study, spec: ExperimentSpec, experiment_dir: Path | None) -> HistorySummary:
    """Adds the earlier experiments' fitting trials to ``study``; records and returns the counts.

    The summary goes to the study's user attrs and, when ``experiment_dir`` is given, to
    ``WARM_START_FILE`` there (the MLflow parent run reads it).
    """
    summary = HistorySummary(spec.search.warm_start_from)
    trials: list[FrozenTrial] = []
    earlier_by_origin: dict[str, FrozenTrial] = {}  # the earlier trials used, for the best's record
    for source in spec.search.warm_start_from:
        earlier_space, earlier = _earlier_study(Path(source))
        objectives = None
        if spec.multi_objective:
            names = tuple(name for name, _ in recorded_objectives(Path(source)))
            objectives = ObjectiveMap(names, spec.objectives, spec.constraints)
        for frozen in earlier:
            origin = f"{source}#{frozen.number}"
            history, reason = history_trial(frozen, earlier_space, spec.space, origin, objectives)
            if history is None:
                summary.skipped[reason] += 1
            else:
                trials.append(history)
                earlier_by_origin[origin] = frozen
    study.add_trials(trials)
    summary.used = len(trials)
    summary.best = _best_of_history(trials, spec, earlier_by_origin)
    study.set_user_attr(WARM_START_ATTR, summary.to_dict())
    if experiment_dir is not None:
        write_json(experiment_dir / WARM_START_FILE, summary.to_dict(), indent=2)
    return summary


def _best_of_history(
    trials: list[FrozenTrial], spec: ExperimentSpec, earlier_by_origin: Mapping[str, FrozenTrial]
) -> dict[str, Any] | None:
    """The best history trial by tunekit's rule (complete before pruned; with several objectives,
    the ``select`` rule's pick among the feasible front), as warm_start.json records it: where
    it ran (its experiment, number and Ray trial id there), its epochs, configuration and, with
    several objectives, each objective's value and the rule that picked it."""
    statuses = {TrialState.COMPLETE: TrialStatus.COMPLETED, TrialState.PRUNED: TrialStatus.PRUNED}
    rule = ""
    if spec.multi_objective:
        best = _selected_history(trials, spec)
        rule = f"select: {history_selection(spec.objectives, selection_of(spec)).describe()}"
    else:
        best = pick_best([(statuses[t.state], t.value, t) for t in trials], spec.metric.mode)
    if best is None:
        return None
    origin = str(best.user_attrs[HISTORY_ATTR])
    source, _, number = origin.rpartition("#")
    earlier = earlier_by_origin.get(origin)
    final = (earlier.user_attrs.get(FINAL_RESULT_ATTR) if earlier is not None else None) or {}
    epochs = int(final.get("epoch") or max(best.intermediate_values, default=0))
    names = [o.name for o in spec.objectives]
    return {
        "source": source,
        "number": int(number),
        "trial_id": str(earlier.user_attrs.get(RAY_TRIAL_ATTR, "")) if earlier is not None else "",
        "metric": best.values[0] if spec.multi_objective else best.value,
        "values": dict(zip(names, best.values, strict=True)) if spec.multi_objective else {},
        "rule": rule,
        "status": str(statuses[best.state]),
        "epochs": epochs,
        "config": dict(best.params),
    }


def _selected_history(trials: list[FrozenTrial], spec: ExperimentSpec) -> FrozenTrial | None:
    """The ``select`` rule over history trials: its pick among the feasible front. A
    ``subject_to`` metric history does not carry holds where the earlier trial's same constraint held."""
    from tunekit.search.pareto import select_from_front

    feasible = [t for t in trials if all(v <= 0 for v in t.constraints.values())]
    names = [o.name for o in spec.objectives]
    candidates = [(t, dict(zip(names, t.values, strict=True))) for t in feasible]
    rule = history_selection(spec.objectives, selection_of(spec))

    def meets(trial: FrozenTrial, constraint: Constraint) -> bool:
        return constraint.text in trial.constraints and trial.constraints[constraint.text] <= 0

    return select_from_front(candidates, spec.objectives, rule, meets)[1]


def _earlier_study(directory: Path) -> tuple[SearchSpace, list[FrozenTrial]]:
    raw = yaml.safe_load((directory / SPEC_FILE).read_text())
    study = optuna.load_study(study_name=str(raw["name"]), storage=study_storage(directory))
    return parse_space(raw.get("space"), "space"), study.get_trials(deepcopy=False)


def history_trial(
    frozen: FrozenTrial,
    earlier_space: SearchSpace,
    space: SearchSpace,
    origin: str,
    objectives: ObjectiveMap | None = None,
) -> tuple[FrozenTrial | None, str]:
    """``frozen`` as a history trial of a study over ``space``, or None and why it does not fit.

    ``objectives``: the study has several (the earlier one too); without, one value each.
    """
    if any(attr in frozen.user_attrs for attr in _REPEAT_ATTRS):
        return None, "not trained by that search (a repeat or its own history)"
    if frozen.state not in _USED_STATES:
        return None, f"{frozen.state.name.lower()} (only complete and pruned trials are used)"
    if frozen.user_attrs.get(PBT_STEPS_ATTR):
        # Its value came from weights PBT copied from other trials, under changed values:
        # no one configuration of it earned that value.
        return None, "changed by PBT while it trained"
    if objectives is not None:
        outcome, reason = objectives.outcome(frozen)
        if outcome is None:
            return None, reason
    elif frozen.value is None:
        return None, "without a value"
    else:
        outcome = {"value": frozen.value}
    config = ran_configuration(frozen.params, earlier_space)
    reason = misfit(config, space)
    if reason:
        return None, reason
    searched = {
        p.name: p.distribution for p in space.params if p.name in config and not isinstance(p.distribution, Fixed)
    }
    history = optuna.trial.create_trial(
        state=frozen.state,
        **outcome,
        params={name: _internal_type(dist, config[name]) for name, dist in searched.items()},
        distributions={name: optuna_distribution(dist) for name, dist in searched.items()},
        intermediate_values=dict(frozen.intermediate_values),
        user_attrs={HISTORY_ATTR: origin},
    )
    return history, ""


def ran_configuration(params: Mapping[str, Any], space: SearchSpace) -> dict[str, Any]:
    """The configuration a trial of ``space`` ran: its sampled params and the fixed values active for it."""
    config: dict[str, Any] = {}
    for param in space.params:
        if not param.is_active(config):
            continue
        if isinstance(param.distribution, Fixed):
            config[param.name] = param.distribution.value
        elif param.name in params:
            config[param.name] = params[param.name]
    return config


def misfit(config: Mapping[str, Any], space: SearchSpace) -> str:
    """Why ``space`` could not have produced ``config`` ("" when it could), for the skip counts."""
    active: dict[str, Any] = {}
    for param in space.params:
        present = param.name in config
        if not param.is_active(active):
            if present:
                return f"with {param.name}, inactive here"
            continue
        if not present:
            return f"without {param.name}"
        if not _contains(param.distribution, config[param.name]):
            return f"with {param.name} outside this space"
        active[param.name] = config[param.name]
    unknown = sorted(set(config) - set(space.names))
    return f"with {unknown[0]}, not in this space" if unknown else ""


def _contains(dist: Distribution, value: Any) -> bool:
    if not dist.contains(value):
        return False
    if isinstance(dist, FloatRange) and dist.step is not None:
        steps = (float(value) - dist.low) / dist.step
        return abs(steps - round(steps)) < 1e-8
    return True


def optuna_distribution(dist: Distribution) -> BaseDistribution:
    """The Optuna distribution ``SearchSpace.sample`` asks for this parameter with."""
    if isinstance(dist, FloatRange):
        return FloatDistribution(dist.low, dist.high, log=dist.log, step=dist.step)
    if isinstance(dist, IntRange):
        return IntDistribution(dist.low, dist.high, log=dist.log, step=dist.step)
    if isinstance(dist, Choice):
        return CategoricalDistribution(dist.values)
    raise TypeError(f"a fixed value is not sampled, so it has no Optuna distribution: {dist}")


def _internal_type(dist: Distribution, value: Any) -> Any:
    # An int an earlier choice held is a float to a uniform range, as suggest_float returns it.
    return float(value) if isinstance(dist, FloatRange) else value
