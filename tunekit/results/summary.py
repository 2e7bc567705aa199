"""Every derived figure of an experiment, computed once from its records.

Which trial is best and the configuration that produced its model, how many trials ended
how, the epochs spent, the search's active time and its downtime, the best including a
warm start's inherited history, and (through ``tunekit.results.ledger``) slot-hours, time
to best and predicted against actual. The console summary, ``tunekit report`` in text, JSON
and HTML, ``ExperimentResults``, ``ledger.json`` and the MLflow parent run's metrics all
render a ``Summary``; none of them computes a figure of its own. ``tunekit check`` holds
the records against it.

Scopes, as every renderer names them:

* ``best``: the best trial of this experiment (trained to the end if any trial was), with
  its final configuration: after PBT's exploit steps, the one its saved model was trained
  under. ``initial_config`` and ``lineage`` tell how it got there.
* ``best_including_history``: the better of ``best`` and the best trial a warm start
  inherited from earlier experiments (as Optuna's ``study.best_trial`` may show it).
* Times are active seconds (``tunekit.clock``): the gaps between a stop and a resume are
  ``downtime_seconds``, never part of a trial's or the search's time.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunekit.clock import SearchClock
from tunekit.config.spec import MetricMode
from tunekit.layout import (
    ENDED_STATUSES,
    NEW_PREFIX,
    OLD_PREFIX,
    PARAM_PREFIX,
    WARM_START_FILE,
    TrialStatus,
    finite,
)
from tunekit.search.plan import pick_best

if TYPE_CHECKING:
    import pandas as pd

    from tunekit.results.ledger import Ledger
    from tunekit.results.load import ExperimentResults

THIS_EXPERIMENT = "this experiment"
INHERITED = "inherited history"


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Summary:
    """The experiment's derived figures (see the module's docstring for each scope)."""

    metric: str
    mode: MetricMode
    trials_run: int
    trials_planned: int
    counts: dict[str, int]  # ended status (and running) -> trials
    epochs_spent: int
    epochs_full_budget: int
    active_seconds: float | None  # the search's running time, every session added up
    downtime_seconds: float  # stopped between sessions
    sessions: int
    best: BestTrial | None
    best_including_history: BestTrial | None
    ledger: Ledger
    predicted_vs_actual: list[dict[str, Any]] | None

    def to_dict(self) -> dict[str, Any]:
        record = asdict(self)
        record["ledger"] = self.ledger.to_dict()
        return record

    def flat_metrics(self) -> dict[str, float]:
        """The figures as the MLflow parent run's metrics (names stay the same across searches)."""
        from tunekit.results.ledger import flat_metrics

        values: dict[str, float | None] = {
            **{f"trials_{status}": float(self.counts.get(status, 0)) for status in ENDED_STATUSES},
            "epochs_spent": float(self.epochs_spent),
            "epochs_full_budget": float(self.epochs_full_budget),
            "wall_seconds": self.active_seconds,
            "downtime_seconds": self.downtime_seconds,
        }
        numbers = {key: number for key, value in values.items() if (number := finite(value)) is not None}
        return numbers | flat_metrics(self.ledger, self.predicted_vs_actual)

    def time_lines(self) -> list[str]:
        """``active time 1m 05s in 2 sessions; stopped for 9h 12m between them``."""
        if self.active_seconds is None:
            return []
        line = f"active time {duration(self.active_seconds)}"
        if self.sessions > 1:
            line += f" in {self.sessions} sessions; stopped for {duration(self.downtime_seconds)} between them"
        return [line]


def summarize(
    results: ExperimentResults, tolerance: float | None = None, price_per_hour: float | None = None
) -> Summary:
    """Every derived figure of ``results``; ``tolerance`` and ``price_per_hour`` are the ledger's."""
    from tunekit.results.ledger import DEFAULT_TOLERANCE, compute_ledger, predicted_vs_actual

    trials, spec = results.trials, results.spec
    clock = SearchClock.read(results.experiment_dir)
    counts = {str(s): int(c) for s, c in trials["status"].value_counts().items()} if not trials.empty else {}
    ledger = compute_ledger(results, DEFAULT_TOLERANCE if tolerance is None else tolerance, price_per_hour)
    return Summary(
        metric=results.metric,
        mode=results.mode,
        trials_run=len(trials),
        trials_planned=spec.budget.num_samples,
        counts=counts,
        epochs_spent=ledger.epochs,
        epochs_full_budget=spec.budget.num_samples * spec.budget.max_epochs,
        active_seconds=active_seconds(clock, trials),
        downtime_seconds=0.0 if clock is None else clock.downtime_seconds,
        sessions=0 if clock is None else len(clock.sessions),
        best=results.best,
        best_including_history=_best_including_history(results),
        ledger=ledger,
        predicted_vs_actual=predicted_vs_actual(results, ledger, clock),
    )


def active_seconds(clock: SearchClock | None, trials: pd.DataFrame) -> float | None:
    """The search's running time: its sessions added up (an experiment older than them: first start to last end)."""
    if clock is not None and clock.sessions:
        return clock.active_seconds
    if trials.empty or "started_at" not in trials or trials["ended_at"].dropna().empty:
        return None
    return float(trials["ended_at"].max() - trials["started_at"].min())


# ------------------------------------------------------------------------ the best


def best_trial(trials: pd.DataFrame, exploits: pd.DataFrame, mode: MetricMode) -> BestTrial | None:
    """The best trial of the tables (trained to the end if any was) with its final configuration."""
    if trials.empty:
        return None
    candidates = [(str(row["status"]), finite(row["final_metric"]), row) for _, row in trials.iterrows()]
    row = pick_best(candidates, mode)
    if row is None:
        return None
    initial = {
        column[len(PARAM_PREFIX) :]: plain(row[column])
        for column in trials.columns
        if column.startswith(PARAM_PREFIX) and not is_missing(row[column])
    }
    trial_id = str(row["trial_id"])
    lineage = lineage_of(trial_id, exploits)
    return BestTrial(
        trial_id=trial_id,
        number=None if is_missing(row["number"]) else int(row["number"]),
        config=dict(lineage[-1].config) if lineage else initial,
        metric=float(row["final_metric"]),
        epochs=int(row["epochs"]),
        status=str(row["status"]),
        initial_config=initial,
        lineage=lineage,
    )


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


def _best_including_history(results: ExperimentResults) -> BestTrial | None:
    """The better of this experiment's best and the best inherited by a warm start."""
    own, inherited = results.best, inherited_best(results.experiment_dir)
    if inherited is None:
        return own
    candidates = [(own.status, own.metric, own)] if own is not None else []
    candidates.append((inherited.status, inherited.metric, inherited))
    return pick_best(candidates, results.mode)


def inherited_best(experiment_dir: Path) -> BestTrial | None:
    """The best history trial a warm start added to the study, as ``warm_start.json`` recorded it."""
    try:
        record = json.loads((experiment_dir / WARM_START_FILE).read_text()).get("best")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(record, dict) or finite(record.get("metric")) is None:
        return None
    return BestTrial(
        trial_id=str(record["source"]),
        number=record.get("number"),
        config=dict(record.get("config") or {}),
        metric=float(record["metric"]),
        epochs=int(record.get("epochs") or 0),
        status=str(record.get("status") or TrialStatus.COMPLETED),
        initial_config=dict(record.get("config") or {}),
        scope=INHERITED,
        source=str(record["source"]),
    )


# ------------------------------------------------------------------------ helpers


def is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def plain(value: Any) -> Any:
    # numpy scalars out of pandas -> plain Python values a config can hold
    return value.item() if hasattr(value, "item") else value


def config_text(config: dict[str, Any]) -> str:
    """``units=64, learning_rate=0.00123456``: whole values, so the line can be copied into a spec."""
    return ", ".join(f"{key}={value}" for key, value in config.items())


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def duration(seconds: float | None) -> str:
    """``1h 02m``, ``3m 05s``, ``-`` for no value."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m {secs:02d}s"
