"""Which trial is best, and the configuration that produced its model.

One rule for every place that names a best trial: trials that trained to the end beat
pruned ones (``tunekit.search.plan.pick_best``), failed trials never win, and the
configuration is the trial's final one: after PBT's exploit steps (``exploits.csv``), the
one its saved model was trained under, with the steps that led there one field away.
``tunekit.results.summary`` builds every report on it; ``ExperimentResults.best`` is it.

With several objectives "best" is the ``select`` rule's choice among the Pareto front
(``tunekit.results.pareto``): the front trials meeting ``select.subject_to``, best by
``select``'s metric (by default the first objective). That one model is exported and
registered; ``BestTrial.rule`` says which rule chose it.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunekit.config.objectives import headline_metric, selection_of
from tunekit.config.spec import ExperimentSpec, MetricMode
from tunekit.layout import INFO_PREFIX, NEW_PREFIX, OLD_PREFIX, PARAM_PREFIX, WARM_START_FILE, TrialStatus, finite
from tunekit.results.pareto import final_values, pareto_of
from tunekit.search.plan import pick_best

if TYPE_CHECKING:
    import pandas as pd

THIS_EXPERIMENT = "this experiment"
INHERITED = "inherited history"
NO_BEST = "none"  # the parent run's best-trial tags when the search has no best


def no_best_reason(several_objectives: bool) -> str:
    """Why a search has no best trial: the console, the reports and the MLflow parent say the same."""
    if several_objectives:
        return "no trial on the Pareto front meets the select rule"
    return "no trial reported the metric"


@dataclass(frozen=True)
class ExploitChange:
    """One PBT exploit step of a trial: at ``epoch`` it took ``source_number``'s checkpoint and ``config``."""

    epoch: int
    source_trial_id: str
    source_number: int | None
    source_epoch: int
    config: dict[str, Any]
    changed: dict[str, list[Any]]  # parameter -> [before, after], only those that changed


@dataclass(frozen=True)
class BestTrial:
    """The best trial and the configuration that produced its model.

    ``config`` is the trial's final configuration: its starting one (``initial_config``)
    unless PBT exploit steps (``lineage``) moved it. ``source`` names the experiment the
    trial ran in: this one, or for an inherited best the earlier experiment and number.
    """

    trial_id: str
    number: int | None
    config: dict[str, Any]
    metric: float
    epochs: int
    status: str
    initial_config: dict[str, Any] = field(default_factory=dict)
    lineage: tuple[ExploitChange, ...] = ()
    scope: str = THIS_EXPERIMENT
    source: str = ""
    # Several objectives: the rule that chose this trial among the front, and its final values.
    rule: str = ""
    values: dict[str, float] = field(default_factory=dict)
    # What it trained on, in words ("mixed_bfloat16, 2 replicas on ..., global batch 128"); "" when
    # unknown or one CPU device in float32 (see ran_on).
    ran_on: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def best_trial(
    trials: pd.DataFrame, exploits: pd.DataFrame, mode: MetricMode, spec: ExperimentSpec | None = None
) -> BestTrial | None:
    """The best trial of the tables (trained to the end if any was) with its final configuration.

    With a multi-objective ``spec``: the ``select`` rule's choice among the Pareto front.
    """
    if trials.empty:
        return None
    rule = ""
    if spec is not None and spec.multi_objective:
        row, rule = selected(trials, spec)
    else:
        candidates = [(str(row["status"]), finite(row["final_metric"]), row) for _, row in trials.iterrows()]
        row = pick_best(candidates, mode)
    if row is None:
        return None
    whole = _integer_params(spec)
    initial = {
        name: _as_int(plain(row[column])) if name in whole else plain(row[column])
        for column in trials.columns
        if column.startswith(PARAM_PREFIX) and not is_missing(row[column])
        for name in (column[len(PARAM_PREFIX) :],)
    }
    trial_id = str(row["trial_id"])
    lineage = lineage_of(trial_id, exploits)
    values = final_values(row) if rule else {}
    # Several objectives: the select rule's metric, from its own final column (trials.csv's
    # final_metric holds the same since cde467b; before, the first objective's).
    metric = values[headline_metric(spec).name] if rule and spec is not None else float(row["final_metric"])
    return BestTrial(
        trial_id=trial_id,
        number=None if is_missing(row["number"]) else int(row["number"]),
        config=dict(lineage[-1].config) if lineage else initial,
        metric=metric,
        epochs=int(row["epochs"]),
        status=str(row["status"]),
        initial_config=initial,
        lineage=lineage,
        rule=rule,
        values=values,
        ran_on=ran_on(row),
    )


def ran_on(row: Any) -> str:
    """A trial's ``info.*`` columns in words: precision, replicas and their devices, the global
    batch and, under ``training.scale_lr``, the learning rate it trained with; "" for a trial on
    one CPU device in float32 (the default search's: nothing to add to its config)."""

    info = {
        name: value
        for name in ("precision", "replicas", "device_names", "batch_size", "scaled_learning_rate")
        if not is_missing(value := row.get(f"{INFO_PREFIX}{name}")) and value != ""
    }
    precision, replicas, devices = info.get("precision"), info.get("replicas"), info.get("device_names")
    scaled = info.get("scaled_learning_rate")
    if precision == "float32" and replicas in (1, 1.0) and "GPU" not in str(devices or "") and scaled is None:
        return ""
    parts = [str(precision)] if precision is not None else []
    if replicas is not None:
        on = f" on {str(devices).replace(';', ', ')}" if devices is not None else ""
        parts.append(f"{int(replicas)} replica{'s' if int(replicas) != 1 else ''}{on}")
    if "batch_size" in info:
        parts.append(f"global batch {int(info['batch_size'])}")
    if scaled is not None:
        parts.append(f"learning rate {float(scaled):.6g} (scaled by training.scale_lr)")
    return ", ".join(parts)


def selected(trials: pd.DataFrame, spec: ExperimentSpec) -> tuple[Any, str]:
    """The row of the front trial the ``select`` rule picks (None when no front trial meets
    ``subject_to``), and the rule in words."""
    selection = selection_of(spec)
    rule = "select: " + selection.describe() + ("" if spec.select else " (the default: the first objective)")
    front = pareto_of(trials, spec)
    on_front = {t.trial_id for t in front.front} if front is not None else set()
    sign = 1.0 if selection.mode == "max" else -1.0
    best, best_value = None, -math.inf
    for _, row in trials.iterrows():
        values = final_values(row)
        value = finite(values.get(selection.metric))
        if str(row["trial_id"]) not in on_front or value is None:
            continue
        if all(c.holds(values.get(c.name)) for c in selection.subject_to) and sign * value > best_value:
            best, best_value = row, sign * value
    return best, rule


def lineage_of(trial_id: str, exploits: pd.DataFrame) -> tuple[ExploitChange, ...]:
    """A trial's PBT exploit steps in order, each with the whole configuration it went on with."""
    if exploits.empty or "trial_id" not in exploits.columns:
        return ()
    steps = exploits[exploits["trial_id"].astype(str) == trial_id].sort_values("epoch", kind="stable")
    names = [column[len(NEW_PREFIX) :] for column in exploits.columns if column.startswith(NEW_PREFIX)]
    changes = []
    for _, step in steps.iterrows():
        new = {name: plain(step[NEW_PREFIX + name]) for name in names if not is_missing(step[NEW_PREFIX + name])}
        old = {name: plain(step[OLD_PREFIX + name]) for name in names if not is_missing(step[OLD_PREFIX + name])}
        source_number = finite(step["source_number"])
        changes.append(
            ExploitChange(
                epoch=int(step["epoch"]),
                source_trial_id=str(step["source_trial_id"]),
                source_number=None if source_number is None else int(source_number),
                source_epoch=int(step["source_epoch"]),
                config=new,
                changed={name: [old.get(name), value] for name, value in new.items() if old.get(name) != value},
            )
        )
    return tuple(changes)


def describe_lineage(best: BestTrial) -> list[str]:
    """The text report's lines: the starting configuration and each exploit step."""
    if not best.lineage:
        return []
    lines = ["started as: " + config_text(best.initial_config)]
    for step in best.lineage:
        who = f"trial {step.source_number}" if step.source_number is not None else step.source_trial_id
        changed = ", ".join(f"{name} {_short(old)} -> {_short(new)}" for name, (old, new) in step.changed.items())
        lines.append(f"epoch {step.epoch}: copied {who} (epoch {step.source_epoch}); {changed or 'no change'}")
    return lines


def inherited_best(experiment_dir: Path) -> BestTrial | None:
    """The best history trial a warm start added to the study, as ``warm_start.json`` recorded it."""
    try:
        record = json.loads((experiment_dir / WARM_START_FILE).read_text()).get("best")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(record, dict) or finite(record.get("metric")) is None:
        return None
    values = {
        str(name): number
        for name, value in (record.get("values") or {}).items()
        if (number := finite(value)) is not None
    }
    return BestTrial(
        trial_id=str(record.get("trial_id") or record["source"]),  # a record before 2026-11-27 names no trial id
        number=record.get("number"),
        config=dict(record.get("config") or {}),
        metric=float(record["metric"]),
        epochs=int(record.get("epochs") or 0),
        status=str(record.get("status") or TrialStatus.COMPLETED),
        initial_config=dict(record.get("config") or {}),
        scope=INHERITED,
        source=str(record["source"]),
        rule=str(record.get("rule") or ""),
        values=values,
    )


# ------------------------------------------------------------------------ helpers


def is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _integer_params(spec: ExperimentSpec | None) -> set[str]:
    """Parameters whose values are integers. pandas reads an integer column with a gap (a
    grown grid's first pass has no seed) as floats: a best config said ``seed=1.0``."""
    from tunekit.config.space import REPEAT_SEED_KEY, Choice, IntRange

    names = {REPEAT_SEED_KEY}
    for param in spec.space.params if spec is not None else ():
        dist = param.distribution
        if isinstance(dist, IntRange) or (
            isinstance(dist, Choice) and all(isinstance(v, int) and not isinstance(v, bool) for v in dist.values)
        ):
            names.add(param.name)
    return names


def _as_int(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


def plain(value: Any) -> Any:
    # numpy scalars out of pandas -> plain Python values a config can hold
    return value.item() if hasattr(value, "item") else value


def config_text(config: dict[str, Any]) -> str:
    """``learning_rate=0.00123456, units=64``: whole values, so the line can be copied into a
    spec; by name, so a PBT trial's final configuration reads in the order its start does."""
    return ", ".join(f"{key}={config[key]}" for key in sorted(config))


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
