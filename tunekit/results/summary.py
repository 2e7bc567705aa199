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
* ``pareto``: with several objectives, the Pareto front of the feasible trials that trained
  to the end and every trial's rank (``tunekit.results.pareto``); ``best`` is then the
  ``select`` rule's choice among the front. None with one objective.
* Times are active seconds (``tunekit.storage.clock``): the gaps between a stop and a resume are
  ``downtime_seconds``, never part of a trial's or the search's time.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunekit.config.objectives import history_selection, selection_of
from tunekit.config.spec import MetricMode
from tunekit.errors import TunekitError
from tunekit.layout import ENDED_STATUSES, LEDGER_FILE, PARETO_FILE, finite, unstarted_by_time_budget
from tunekit.results.best import BestTrial, inherited_best
from tunekit.results.ledger import DEFAULT_TOLERANCE, Ledger, compute_ledger, flat_metrics, predicted_vs_actual
from tunekit.results.load import ExperimentResults
from tunekit.results.pareto import INFEASIBLE, ParetoFront, pareto_of
from tunekit.search.plan import pick_best
from tunekit.storage.clock import SearchClock, duration
from tunekit.storage.store import write_json, write_text

if TYPE_CHECKING:
    import pandas as pd

logger = logging.getLogger("tunekit")


@dataclass(frozen=True)
class Summary:
    """The experiment's derived figures (see the module's docstring for each scope)."""

    metric: str
    mode: MetricMode
    trials_run: int
    trials_planned: int
    counts: dict[str, int]  # ended status (and running) -> trials
    not_started: int | None  # planned trials the time budget left unstarted; None without a time budget
    epochs_spent: int
    epochs_full_budget: int
    active_seconds: float | None  # the search's running time, every session added up
    downtime_seconds: float  # stopped between sessions
    sessions: int
    best: BestTrial | None
    best_including_history: BestTrial | None
    ledger: Ledger
    predicted_vs_actual: list[dict[str, Any]] | None
    pareto: ParetoFront | None = None

    def __repr__(self) -> str:
        from tunekit.results.display import summary_text

        return summary_text(self)

    def _repr_html_(self) -> str:
        from tunekit.results.display import summary_html

        return summary_html(self)

    def to_dict(self) -> dict[str, Any]:
        record = asdict(self)
        record["ledger"] = self.ledger.to_dict()
        return record

    def to_json(self, results: ExperimentResults) -> str:
        """``tunekit report --format json``: every figure, then the trials best first."""
        # Best first, as the table: a script taking the first trial gets the best one.
        # With several objectives each trial carries its pareto_rank (ranked() adds the column).
        trials = json.loads(results.ranked().to_json(orient="records")) if not results.trials.empty else []
        record = {"experiment_dir": str(results.experiment_dir), **self.to_dict(), "trials": trials}
        return json.dumps(record, indent=2, default=str)

    def flat_metrics(self) -> dict[str, float]:
        """The figures as the MLflow parent run's metrics (names stay the same across searches)."""
        values: dict[str, float | None] = {
            **{f"trials_{status}": float(self.counts.get(status, 0)) for status in ENDED_STATUSES},
            "epochs_spent": float(self.epochs_spent),
            "epochs_full_budget": float(self.epochs_full_budget),
            "wall_seconds": self.active_seconds,
            "downtime_seconds": self.downtime_seconds,
        }
        if self.not_started is not None:  # a search without a time budget has no such count
            values["trials_not_started"] = float(self.not_started)
        if self.pareto is not None:
            values["pareto_front_size"] = float(len(self.pareto.front))
            values["trials_infeasible"] = float(sum(1 for why in self.pareto.unranked.values() if why == INFEASIBLE))
        numbers = {key: number for key, value in values.items() if (number := finite(value)) is not None}
        return numbers | flat_metrics(self.ledger, self.predicted_vs_actual)

    def front_lines(self) -> list[str]:
        """The text report's and console's lines on the front: each front trial's objective values, and the rule."""
        pareto = self.pareto
        if pareto is None:
            return []
        limits = f"; constraints {', '.join(pareto.constraints)}" if pareto.constraints else ""
        infeasible = sum(1 for why in pareto.unranked.values() if why == INFEASIBLE)
        lines = [
            f"pareto front: {len(pareto.front)} of {len(pareto.ranks)} feasible completed trials "
            f"({', '.join(pareto.objectives)}{limits}; {infeasible} infeasible)"
        ]
        for trial in pareto.front:
            values = ", ".join(f"{name}={value:.6g}" for name, value in trial.values.items())
            lines.append(f"  trial {trial.number} ({trial.trial_id}): {values}")
        return lines

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
        not_started=None
        if spec.budget.time_budget_s is None
        else unstarted_by_time_budget(spec.budget.num_samples, _endings(trials)),
        epochs_spent=ledger.epochs,
        epochs_full_budget=spec.budget.num_samples * spec.budget.max_epochs,
        active_seconds=active_seconds(clock, trials),
        downtime_seconds=0.0 if clock is None else clock.downtime_seconds,
        sessions=0 if clock is None else len(clock.sessions),
        best=results.best,
        best_including_history=_best_including_history(results),
        ledger=ledger,
        predicted_vs_actual=predicted_vs_actual(results, ledger, clock),
        pareto=pareto_of(trials, spec),
    )


def _endings(trials: pd.DataFrame) -> list[tuple[str | None, str | None]]:
    """Each trial's (status, reason), as ``unstarted_by_time_budget`` reads them."""
    statuses = trials["status"] if "status" in trials else [None] * len(trials)
    reasons = trials["reason"] if "reason" in trials else [None] * len(trials)
    # An empty reason reads as NaN.
    return [
        (status, reason if isinstance(reason, str) else None) for status, reason in zip(statuses, reasons, strict=True)
    ]


def active_seconds(clock: SearchClock | None, trials: pd.DataFrame) -> float | None:
    """The search's running time: its sessions added up (an experiment older than them: first start to last end)."""
    if clock is not None and clock.sessions:
        return clock.active_seconds
    if trials.empty or "started_at" not in trials or trials["ended_at"].dropna().empty:
        return None
    return float(trials["ended_at"].max() - trials["started_at"].min())


def _best_including_history(results: ExperimentResults) -> BestTrial | None:
    """The better of this experiment's best and the best inherited by a warm start."""
    own, inherited = results.best, inherited_best(results.experiment_dir)
    if inherited is None:
        return own
    if results.spec.multi_objective:  # each is its experiment's select pick: the rule's metric decides
        rule = history_selection(results.spec.objectives, selection_of(results.spec))
        picks = [(b.status, b.values.get(rule.metric), b) for b in (own, inherited) if b is not None]
        return pick_best(picks, rule.mode)
    candidates = [(own.status, own.metric, own)] if own is not None else []
    candidates.append((inherited.status, inherited.metric, inherited))
    return pick_best(candidates, results.mode)


# ------------------------------------------------------------------ ledger.json


def write_ledger(experiment_dir: Path, tolerance: float = DEFAULT_TOLERANCE) -> dict[str, Any]:
    """Writes ``ledger.json`` (the summary's figures: ledger, predicted against actual, best,
    counts, times, and their flat ``metrics`` for the MLflow parent) and returns it."""
    from tunekit.results.load import load

    summary = summarize(load(experiment_dir), tolerance)
    figures = summary.to_dict()
    record = {
        **figures.pop("ledger"),
        "predicted_vs_actual": figures.pop("predicted_vs_actual"),
        "summary": figures,
        "metrics": summary.flat_metrics(),
    }
    write_json(experiment_dir / LEDGER_FILE, record, indent=2)
    if summary.pareto is not None:
        write_front(experiment_dir / PARETO_FILE, summary.pareto)
    return record


def write_front(path: Path, pareto: ParetoFront) -> None:
    """The front as a CSV table: trial id, number, each objective's final value."""
    names = [name for trial in pareto.front[:1] for name in trial.values]
    lines = [",".join(["trial_id", "number", *names])]
    for trial in pareto.front:
        number = "" if trial.number is None else str(trial.number)
        lines.append(",".join([trial.trial_id, number, *(repr(trial.values[name]) for name in names)]))
    write_text(path, "\n".join(lines) + "\n")


class LedgerFile:
    """A recorder listener that writes ``ledger.json`` when the search ends.

    It comes before the MLflow tracker among the listeners, so the tracker's writer finds
    the file and logs it, with its metrics, to the parent run. Every other hook is a no-op.
    """

    def __init__(self, experiment_dir: Path) -> None:
        self.experiment_dir = experiment_dir

    def experiment_ended(self, recorder: Any) -> None:
        try:
            write_ledger(self.experiment_dir)
        except (TunekitError, OSError, ValueError, KeyError) as error:
            logger.warning("no compute ledger for %s: %s", self.experiment_dir, error)

    def experiment_started(self, recorder: Any) -> None:
        pass

    def trial_started(self, record: Any) -> None:
        pass

    def epoch_reported(self, record: Any, row: Any) -> None:
        pass

    def trial_ended(self, record: Any) -> None:
        pass

    def tick(self, recorder: Any) -> None:
        pass

    def warning(self, message: str) -> None:
        pass


# ------------------------------------------------------------------------ helpers
