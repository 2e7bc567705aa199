"""Where a search's compute went: a pure function over a loaded experiment's tables.

``compute_ledger(results)`` answers, from ``trials.csv`` and ``epochs.csv`` alone:

* per ASHA rung, how many trials trained in it, how many epochs and how many slot-hours;
* the share of slot-hours spent on trials ASHA later pruned;
* when the best value so far came within ``tolerance`` (relative) of the final best,
  and the slot-hours spent until then;
* each trial's samples/s, peak memory and slot-hours;
* with a price per slot-hour, what the search and reaching that best cost.

Slot-hours are the hours trials held their resources, counted in the unit a trial
holds: its GPUs when it has any, else its CPUs (a 1-CPU trial running 36 s is 0.01
CPU-hours). A trial's time is cut into its epochs at the moments it reported them
(``epochs.csv``'s ``time``): an epoch costs what passed since the previous report
(training, validation, checkpoint), a trial's first epoch also its start-up, and its
last one whatever came after (the final export), so the rungs add up to the trials'
wall time. Times count from the search's start (``started.json``); an experiment
without it counts from its first trial's start.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunekit.errors import TunekitError
from tunekit.layout import LEDGER_FILE, TrialStatus, finite
from tunekit.search.forecast import read_prediction, slot_units
from tunekit.search.plan import spec_milestones

if TYPE_CHECKING:
    import pandas as pd

    from tunekit.results.load import ExperimentResults

DEFAULT_TOLERANCE = 0.01  # 1 % of the final best, relative
logger = logging.getLogger("tunekit")


@dataclass(frozen=True)
class RungCost:
    rung: int | None  # None for the stretch after the last rung (training to max_epochs)
    first_epoch: int
    last_epoch: int
    trials: int  # trials that trained at least one epoch in this stretch
    epochs: int
    slot_hours: float


@dataclass(frozen=True)
class TrialCost:
    number: int | None
    trial_id: str
    status: str
    epochs: int
    slot_hours: float
    samples_per_second: float | None
    peak_memory_mb: float | None


@dataclass(frozen=True)
class Ledger:
    slot_unit: str  # "CPU" or "GPU"
    slot_hours: float
    epochs: int
    rungs: list[RungCost]
    pruned_share: float | None  # of slot-hours, on trials that ended pruned
    tolerance: float
    final_best: float | None  # the search's best trial's final value
    seconds_to_best: float | None  # since the search's start, until within tolerance of final_best
    slot_hours_to_best: float | None
    trials: list[TrialCost] = field(default_factory=list)
    price_per_hour: float | None = None
    cost: float | None = None
    cost_to_best: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


def compute_ledger(
    results: ExperimentResults, tolerance: float = DEFAULT_TOLERANCE, price_per_hour: float | None = None
) -> Ledger:
    """The ledger of a loaded experiment (see the module's docstring for each figure)."""
    trials, epochs = _timed(results.trials, _TRIAL_TIMES), _timed(results.epochs, _EPOCH_TIMES)
    units, unit = slot_units(results.spec)
    origin = results.started_at
    if origin is None and not trials.empty:
        origin = float(trials["started_at"].min())
    epoch_costs = _epoch_costs(trials, epochs, origin or 0.0)  # (trial id, epoch) -> seconds
    trial_seconds: dict[str, float] = {}
    for (trial_id, _epoch), seconds in epoch_costs.items():
        trial_seconds[trial_id] = trial_seconds.get(trial_id, 0.0) + seconds
    hours = units / 3600
    total = sum(trial_seconds.values()) * hours
    pruned = sum(trial_seconds.get(str(r.trial_id), 0.0) for r in _rows(trials) if r.status == TrialStatus.PRUNED)
    final_best, reached_at = _time_to_best(results, tolerance)
    to_best = None if reached_at is None else _slot_seconds_until(trials, epochs, origin or 0.0, reached_at) * hours
    return Ledger(
        slot_unit=unit,
        slot_hours=total,
        epochs=len(epoch_costs) - sum(1 for _t, e in epoch_costs if e == 0),
        rungs=_rung_costs(results, epoch_costs, hours),
        pruned_share=pruned * hours / total if total > 0 else None,
        tolerance=tolerance,
        final_best=final_best,
        seconds_to_best=reached_at,
        slot_hours_to_best=to_best,
        trials=_trial_costs(trials, epochs, trial_seconds, hours),
        price_per_hour=price_per_hour,
        cost=None if price_per_hour is None else total * price_per_hour,
        cost_to_best=None if price_per_hour is None or to_best is None else to_best * price_per_hour,
    )


# ------------------------------------------------------------------------ costs

_TRIAL_TIMES = ("trial_id", "number", "status", "epochs", "started_at", "ended_at")
_EPOCH_TIMES = ("trial_id", "epoch", "time")


def _timed(table: pd.DataFrame, columns: tuple[str, ...]) -> pd.DataFrame:
    """The table, or none of it when it lacks the times (an experiment older than them): nothing to count."""
    return table if all(column in table.columns for column in columns) else table.iloc[0:0]


def _rows(table: pd.DataFrame) -> list[Any]:
    return [] if table.empty else list(table.itertuples(index=False))


def _epoch_costs(trials: pd.DataFrame, epochs: pd.DataFrame, origin: float) -> dict[tuple[str, int], float]:
    """Seconds each trial spent per epoch; epoch 0 holds a trial that never reported one."""
    reports: dict[str, list[tuple[int, float]]] = {}
    for row in _rows(epochs):
        reports.setdefault(str(row.trial_id), []).append((int(row.epoch), float(row.time)))
    costs: dict[tuple[str, int], float] = {}
    for trial in _rows(trials):
        trial_id = str(trial.trial_id)
        start = float(trial.started_at) - origin
        end = _ended(trial, origin)
        previous = start
        done = sorted(reports.get(trial_id, []))
        for epoch, at in done:
            costs[(trial_id, epoch)] = max(0.0, at - previous)
            previous = max(previous, at)
        tail = max(0.0, end - previous) if end is not None else 0.0
        last = done[-1][0] if done else 0
        costs[(trial_id, last)] = costs.get((trial_id, last), 0.0) + tail
    return costs


def _ended(trial: Any, origin: float) -> float | None:
    ended = finite(trial.ended_at)
    return None if ended is None else ended - origin


def _segment(epoch: int, milestones: list[int]) -> int | None:
    """The rung whose stretch holds ``epoch`` (epochs after the rung before, up to its own)."""
    for index, milestone in enumerate(milestones):
        if epoch <= milestone:
            return index
    return None


def _rung_costs(results: ExperimentResults, costs: dict[tuple[str, int], float], hours: float) -> list[RungCost]:
    milestones = spec_milestones(results.spec)
    bounds = [0, *milestones, results.spec.budget.max_epochs]
    stretches: list[RungCost] = []
    for index in range(len(bounds) - 1):
        rung = index if index < len(milestones) else None
        inside = {key: s for key, s in costs.items() if _segment(max(key[1], 1), milestones) == rung}
        stretches.append(
            RungCost(
                rung=rung,
                first_epoch=bounds[index] + 1,
                last_epoch=bounds[index + 1],
                trials=len({trial_id for trial_id, epoch in inside if epoch > 0}),
                epochs=sum(1 for _t, epoch in inside if epoch > 0),
                slot_hours=sum(inside.values()) * hours,
            )
        )
    return stretches


def _trial_costs(
    trials: pd.DataFrame, epochs: pd.DataFrame, seconds: dict[str, float], hours: float
) -> list[TrialCost]:
    memory_column = next((c for c in ("peak_memory_mb", "memory_mb") if c in epochs.columns), None)
    peaks = (
        epochs.groupby("trial_id")[memory_column].max().to_dict() if memory_column is not None and len(epochs) else {}
    )
    costs = []
    for row in sorted(_rows(trials), key=lambda r: (finite(r.number) is None, finite(r.number) or 0.0)):
        number = finite(row.number)
        costs.append(
            TrialCost(
                number=None if number is None else int(number),
                trial_id=str(row.trial_id),
                status=str(row.status),
                epochs=int(finite(row.epochs) or 0),
                slot_hours=seconds.get(str(row.trial_id), 0.0) * hours,
                samples_per_second=finite(getattr(row, "samples_per_second", None)),
                peak_memory_mb=finite(peaks.get(row.trial_id)),
            )
        )
    return costs


# ------------------------------------------------------------------ time to best


def _time_to_best(results: ExperimentResults, tolerance: float) -> tuple[float | None, float | None]:
    """The final best, and when the best so far first came within tolerance of it.

    The final best is the search's answer (its best trial's final value; the best value
    of any epoch when no trial has one); the best so far counts every epoch of every
    trial, as ``plots.best_so_far`` draws it.
    """
    epochs, metric = results.epochs, results.metric
    if epochs.empty or metric not in epochs.columns or "time" not in epochs.columns:
        return None, None
    points = sorted(
        (float(row.time), value)
        for row in epochs[["time", metric]].itertuples(index=False)
        if (value := finite(row[1])) is not None
    )
    if not points:
        return None, None
    sign = 1.0 if results.mode == "max" else -1.0
    final = results.best_metric if results.best_metric is not None else max(points, key=lambda p: sign * p[1])[1]
    margin = tolerance * abs(final)
    reached = next((at for at, value in points if sign * (final - value) <= margin), None)
    return final, reached


def _slot_seconds_until(trials: pd.DataFrame, epochs: pd.DataFrame, origin: float, until: float) -> float:
    """Trial-seconds spent before ``until`` (seconds since the search's start)."""
    last_report = epochs.groupby("trial_id")["time"].max().to_dict() if len(epochs) else {}
    total = 0.0
    for trial in _rows(trials):
        start = float(trial.started_at) - origin
        end = _ended(trial, origin)
        if end is None:  # still running when the tables were written: up to its last report
            end = float(last_report.get(trial.trial_id, start))
        total += max(0.0, min(end, until) - start)
    return total


# -------------------------------------------------------------- predicted vs actual


def predicted_vs_actual(results: ExperimentResults, ledger: Ledger) -> list[dict[str, Any]] | None:
    """Rows of (figure, predicted, actual, error %) when a prediction was filed with the experiment."""
    prediction = read_prediction(results.experiment_dir)
    trials = results.trials
    if prediction is None or trials.empty or "ended_at" not in trials.columns:
        return None
    ended = trials["ended_at"].dropna()
    launched = finite(prediction.get("launched_at"))
    wall = None if ended.empty or launched is None else float(ended.max()) - launched
    pairs = [
        ("wall seconds", finite(prediction.get("predicted_wall_seconds")), wall),
        ("epochs", finite(prediction.get("predicted_epochs")), float(ledger.epochs)),
        (f"{ledger.slot_unit}-hours", finite(prediction.get("slot_hours")), ledger.slot_hours),
    ]
    return [
        {"figure": name, "predicted": predicted, "actual": actual, "error_percent": _error(predicted, actual)}
        for name, predicted, actual in pairs
    ]


def _error(predicted: float | None, actual: float | None) -> float | None:
    if predicted is None or actual is None or actual == 0:
        return None
    return 100 * (predicted - actual) / actual


# --------------------------------------------------------------- ledger.json


def write_ledger(experiment_dir: Path, tolerance: float = DEFAULT_TOLERANCE) -> dict[str, Any]:
    """Writes ``ledger.json`` (the ledger, predicted against actual, and flat ``metrics``) and returns it."""
    from tunekit.results.load import load

    results = load(experiment_dir)
    ledger = compute_ledger(results, tolerance)
    comparison = predicted_vs_actual(results, ledger)
    record = {**ledger.to_dict(), "predicted_vs_actual": comparison, "metrics": flat_metrics(ledger, comparison)}
    partial = experiment_dir / f"{LEDGER_FILE}.partial"
    partial.write_text(json.dumps(record, indent=2))
    partial.replace(experiment_dir / LEDGER_FILE)
    return record


def flat_metrics(ledger: Ledger, comparison: list[dict[str, Any]] | None) -> dict[str, float]:
    """The ledger's numbers as MLflow metrics of the parent run (names stay the same across searches)."""
    values: dict[str, float | None] = {
        "ledger_slot_hours": ledger.slot_hours,
        "ledger_pruned_share": ledger.pruned_share,
        "ledger_seconds_to_best": ledger.seconds_to_best,
        "ledger_slot_hours_to_best": ledger.slot_hours_to_best,
    }
    for stretch in ledger.rungs:
        name = "final" if stretch.rung is None else f"rung{stretch.rung}"
        values |= {
            f"ledger_{name}_trials": stretch.trials,
            f"ledger_{name}_epochs": stretch.epochs,
            f"ledger_{name}_slot_hours": stretch.slot_hours,
        }
    for row, key in zip(comparison or [], ("wall_seconds", "epochs", "slot_hours"), strict=False):
        values |= {f"predicted_{key}": row["predicted"], f"actual_{key}": row["actual"]}
    return {key: number for key, value in values.items() if (number := finite(value)) is not None}


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


# ------------------------------------------------------------------------ text


def describe(ledger: Ledger, comparison: list[dict[str, Any]] | None = None) -> str:
    """The ledger (and predicted against actual) as the lines ``tunekit report`` prints."""
    unit = f"{ledger.slot_unit}-h"
    lines = [f"compute: {ledger.slot_hours:.4f} {ledger.slot_unit}-hours over {ledger.epochs} epochs"]
    lines.append(f"{'rung':>5}  {'epochs':>7}  {'trials':>6}  {'epochs':>6}  {unit:>8}  {'share':>5}")
    for stretch in ledger.rungs:
        share = stretch.slot_hours / ledger.slot_hours if ledger.slot_hours else math.nan
        name = "final" if stretch.rung is None else str(stretch.rung)
        span = f"{stretch.first_epoch}-{stretch.last_epoch}"
        lines.append(
            f"{name:>5}  {span:>7}  {stretch.trials:>6}  {stretch.epochs:>6}  {stretch.slot_hours:>8.4f}  {share:>5.0%}"
        )
    if ledger.pruned_share is not None:
        lines.append(f"spent on trials later pruned: {ledger.pruned_share:.0%}")
    if ledger.seconds_to_best is not None and ledger.final_best is not None:
        lines.append(
            f"within {ledger.tolerance:.1%} of the final best ({ledger.final_best:.4g}) after "
            f"{ledger.seconds_to_best:.1f} s and {ledger.slot_hours_to_best or 0.0:.4f} {ledger.slot_unit}-hours"
        )
    if ledger.cost is not None:
        to_best = "" if ledger.cost_to_best is None else f", reaching that best {ledger.cost_to_best:.4f}"
        lines.append(f"cost at {ledger.price_per_hour:g} per {ledger.slot_unit}-hour: {ledger.cost:.4f}{to_best}")
    rates = [t.samples_per_second for t in ledger.trials if t.samples_per_second is not None]
    peaks = [t.peak_memory_mb for t in ledger.trials if t.peak_memory_mb is not None]
    if rates:
        lines.append(f"samples/s per trial: median {_median(rates):,.0f} (from {min(rates):,.0f} to {max(rates):,.0f})")
    if peaks:
        lines.append(f"peak memory per trial: median {_median(peaks):,.0f} MB (largest {max(peaks):,.0f} MB)")
    for row in comparison or []:
        error = row["error_percent"]
        lines.append(
            f"predicted {row['figure']}: {_number(row['predicted'])} against {_number(row['actual'])} actual"
            + ("" if error is None else f" ({error:+.0f}%)")
        )
    return "\n".join(lines)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"
