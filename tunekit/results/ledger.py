"""Where a search's compute went: a pure function over a loaded experiment's tables.

``compute_ledger(results)`` answers, from ``trials.csv``, ``epochs.csv`` and ``spans.csv`` alone:

* per ASHA rung, how many trials trained in it, how many epochs and how many slot-hours;
* the share of slot-hours spent on trials ASHA later pruned;
* when the best value so far came within ``tolerance`` (relative) of the final best,
  and the slot-hours spent until then;
* each trial's samples/s, peak memory and slot-hours;
* with a price per slot-hour, what the search and reaching that best cost.

Slot-hours are the hours trials held their resources, counted in the unit a trial
holds: its GPUs when it has any, else its CPUs (a 1-CPU trial running 36 s is 0.01
CPU-hours). A trial held its slot during its spans (``spans.csv``: each attempt, each
stretch between PBT's pauses, each session of a resumed search), never between them.
Within a span, its time is cut into epochs at the moments it reported them
(``epochs.csv``'s ``time``): an epoch costs what passed since the previous report in
that span, or since the span began (start-up, restore), and the span's last reported
epoch also takes whatever came after (the final export, or work a kill lost). So the
rungs add up to the trials' time exactly. All times are active seconds
(``tunekit.storage.clock``); an experiment older than spans takes each trial's start to end.

This module is part of ``tunekit.results.summary``'s one computation: renderers take the
ledger from a ``Summary``.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from tunekit.layout import TrialStatus, finite
from tunekit.results.pareto import selectable_trials
from tunekit.search.forecast import read_prediction, slot_units
from tunekit.search.plan import spec_milestones

if TYPE_CHECKING:
    import pandas as pd

    from tunekit.results.load import ExperimentResults
    from tunekit.storage.clock import SearchClock

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
    spans = trial_spans(results)
    epoch_costs = _epoch_costs(spans, epochs)  # (trial id, epoch) -> seconds
    trial_seconds = {trial_id: sum(end - start for start, end in pairs) for trial_id, pairs in spans.items()}
    hours = units / 3600
    total = sum(trial_seconds.values()) * hours
    pruned = sum(trial_seconds.get(str(r.trial_id), 0.0) for r in _rows(trials) if r.status == TrialStatus.PRUNED)
    final_best, reached_at = _time_to_best(results, tolerance)
    to_best = None if reached_at is None else _slot_seconds_until(spans, reached_at) * hours
    return Ledger(
        slot_unit=unit,
        slot_hours=total,
        epochs=len(epochs.drop_duplicates(["trial_id", "epoch"])) if len(epochs) else 0,
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


def trial_spans(results: ExperimentResults) -> dict[str, list[tuple[float, float]]]:
    """Each trial's closed spans in active seconds, from ``spans.csv`` (running ones up to their last report).

    An experiment older than ``spans.csv`` has one span per trial, its start to its end.
    """
    trials, epochs = results.trials, _timed(results.epochs, _EPOCH_TIMES)
    last_report = epochs.groupby("trial_id")["time"].max().to_dict() if len(epochs) else {}
    table = results.spans
    spans: dict[str, list[tuple[float, float]]] = {str(r.trial_id): [] for r in _rows(trials)}
    if not table.empty:
        for row in _rows(table):
            start, end = float(row.start), finite(row.end)
            if end is None:  # still running when the tables were written
                end = max(start, float(last_report.get(row.trial_id, start)))
            spans.setdefault(str(row.trial_id), []).append((start, end))
        return spans
    timed = _timed(trials, _TRIAL_TIMES)
    origin = results.started_at
    if origin is None and not timed.empty:
        origin = float(timed["started_at"].min())
    for trial in _rows(timed):
        start = float(trial.started_at) - (origin or 0.0)
        ended = finite(trial.ended_at)
        end = float(last_report.get(trial.trial_id, start)) if ended is None else ended - (origin or 0.0)
        spans[str(trial.trial_id)] = [(start, max(start, end))]
    return spans


def _epoch_costs(spans: dict[str, list[tuple[float, float]]], epochs: pd.DataFrame) -> dict[tuple[str, int], float]:
    """Seconds each trial spent per epoch; epoch 0 holds a span before a trial's first report."""
    reports: dict[str, list[tuple[float, int]]] = {}
    for row in _rows(epochs):
        reports.setdefault(str(row.trial_id), []).append((float(row.time), int(row.epoch)))
    costs: dict[tuple[str, int], float] = {}
    for trial_id, pairs in spans.items():
        done = sorted(reports.get(trial_id, []))
        last_epoch = 0
        for start, end in sorted(pairs):
            previous = start
            for at, epoch in done:
                if start - _SLACK_S <= at <= end + _SLACK_S:
                    costs[(trial_id, epoch)] = costs.get((trial_id, epoch), 0.0) + max(0.0, at - previous)
                    previous, last_epoch = max(previous, at), epoch
            tail = max(0.0, end - previous)
            costs[(trial_id, last_epoch)] = costs.get((trial_id, last_epoch), 0.0) + tail
    return costs


# Times are rounded to milliseconds in the tables: a report belongs to a span it touches.
_SLACK_S = 0.002


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
    epochs, metric, mode, final = results.epochs, results.metric, results.mode, results.best_metric
    if results.spec.multi_objective:  # the best is select's pick: only trials it could pick count
        eligible = selectable_trials(results.trials, results.spec)
        epochs = epochs[epochs["trial_id"].astype(str).isin(eligible)] if not epochs.empty else epochs
    if epochs.empty or metric not in epochs.columns or "time" not in epochs.columns:
        return None, None
    points = sorted(
        (float(row.time), value)
        for row in epochs[["time", metric]].itertuples(index=False)
        if (value := finite(row[1])) is not None
    )
    if not points:
        return None, None
    sign = 1.0 if mode == "max" else -1.0
    final = final if final is not None else max(points, key=lambda p: sign * p[1])[1]
    margin = tolerance * abs(final)
    reached = next((at for at, value in points if sign * (final - value) <= margin), None)
    return final, reached


def _slot_seconds_until(spans: dict[str, list[tuple[float, float]]], until: float) -> float:
    """Trial-seconds spent before ``until`` (active seconds since the search's start)."""
    return sum(max(0.0, min(end, until) - start) for pairs in spans.values() for start, end in pairs)


# -------------------------------------------------------------- predicted vs actual


def predicted_vs_actual(
    results: ExperimentResults, ledger: Ledger, clock: SearchClock | None
) -> list[dict[str, Any]] | None:
    """Rows of (figure, predicted, actual, error %) when a prediction was filed with the experiment.

    Like with like: the prediction is for the experiment's current budget (a grown search
    is predicted again from the probe's measurement, for all its trials) and for as many
    sessions as it had (each after the first starts Ray and its workers again:
    ``restart_seconds``), and the actual wall time is the search's active seconds up to its
    last trial's end, on the same clock as the ledger's ``wall_seconds``, so a stop and a
    resume add no idle hours and the actual never exceeds the search's whole active time.
    """
    prediction = prediction_for_budget(results)
    trials = results.trials
    if prediction is None or trials.empty or "ended_at" not in trials.columns:
        return None
    ended = trials["ended_at"].dropna()
    launched = finite(prediction.get("launched_at"))
    wall = None
    if not ended.empty and launched is not None:
        last_end = float(ended.max())
        wall = clock.active_at(last_end) if clock is not None and clock.sessions else last_end - launched
    predicted_wall = finite(prediction.get("predicted_wall_seconds"))
    predicted_slots = finite(prediction.get("slot_hours"))
    restarts = len(clock.sessions) - 1 if clock is not None and clock.sessions else 0
    measurement = prediction.get("measurement")
    if restarts > 0 and isinstance(measurement, dict):
        if predicted_wall is not None:
            predicted_wall += restarts * restart_seconds(measurement)
        if predicted_slots is not None:  # every slot's new worker imports TensorFlow again
            units, _ = slot_units(results.spec)
            slots = finite(prediction.get("concurrency")) or 1.0
            predicted_slots += restarts * slots * units * _new_worker_seconds(measurement) / 3600
    predicted_trials = finite(prediction.get("trials"))
    # A search stopped before it ran all its trials is not yet what was predicted: no error.
    partial = predicted_trials is not None and len(trials) < predicted_trials
    pairs = [
        ("trials", predicted_trials, float(len(trials))),
        ("wall seconds", predicted_wall, wall),
        ("epochs", finite(prediction.get("predicted_epochs")), float(ledger.epochs)),
        (f"{ledger.slot_unit}-hours", predicted_slots, ledger.slot_hours),
    ]
    rows = [
        {
            "figure": name,
            "predicted": predicted,
            "actual": actual,
            "error_percent": None if partial and name != "trials" else _error(predicted, actual),
        }
        for name, predicted, actual in pairs
    ]
    rows[0]["sessions"] = restarts + 1  # the trials row: the prediction counts a start-up per session
    rows[0]["partial"] = partial
    return rows


def prediction_for_budget(results: ExperimentResults) -> dict[str, Any] | None:
    """The filed prediction, made again for the spec's budget when the search grew since.

    ``repredicted`` says so: the measurement is the probe's, the budget today's.
    """
    from tunekit.search.forecast import Measurement, predict

    prediction = read_prediction(results.experiment_dir)
    if prediction is None:
        return None
    budget = results.spec.budget
    if finite(prediction.get("trials")) == budget.num_samples or not isinstance(prediction.get("measurement"), dict):
        return prediction
    measurement = Measurement.from_dict(prediction["measurement"])
    first = prediction.get("trials")
    return {**prediction, **predict(results.spec, measurement).to_dict(), "repredicted_from_trials": first}


def restart_seconds(measurement: dict[str, Any]) -> float:
    """What a session after the first costs before its trials train again, by the probe's
    measurement: Ray's start, and a new worker's first epoch over a reused one's (its
    TensorFlow import). A grown search's report was 35% under without it: its second
    session's 14 s of start-up were in the actual wall and nowhere in the prediction."""
    return (finite(measurement.get("startup_s")) or 0.0) + _new_worker_seconds(measurement)


def _new_worker_seconds(measurement: dict[str, Any]) -> float:
    """A new worker's first epoch over a reused one's, by the probe: its TensorFlow import,
    paid in each slot at every session after the first (while the trial holds the slot)."""
    new_worker = finite(measurement.get("new_worker_first_epoch_s")) or 0.0
    reused = finite(measurement.get("reused_first_epoch_s")) or 0.0
    return max(0.0, new_worker - reused)


def _error(predicted: float | None, actual: float | None) -> float | None:
    if predicted is None or actual is None or actual == 0:
        return None
    return 100 * (predicted - actual) / actual


# --------------------------------------------------------------- ledger.json


def flat_metrics(ledger: Ledger, comparison: list[dict[str, Any]] | None) -> dict[str, float]:
    """The ledger's numbers as MLflow metrics of the parent run (names stay the same across searches)."""
    values: dict[str, float | None] = {
        "ledger_slot_hours": ledger.slot_hours,
        "ledger_pruned_share": ledger.pruned_share,
        "ledger_seconds_to_best": ledger.seconds_to_best,
        "ledger_slot_hours_to_best": ledger.slot_hours_to_best,
    }
    # The per-rung table stays in ledger.json (an artifact of the parent run): as metrics it
    # would add three columns per rung to the runs table.
    for row, key in zip(comparison or [], ("trials", "wall_seconds", "epochs", "slot_hours"), strict=False):
        values |= {f"predicted_{key}": row["predicted"], f"actual_{key}": row["actual"]}
    return {key: number for key, value in values.items() if (number := finite(value)) is not None}


# ------------------------------------------------------------------------ text


def describe(ledger: Ledger, comparison: list[dict[str, Any]] | None = None) -> str:
    """The ledger (and predicted against actual) as the lines ``tunekit report`` prints."""
    unit = f"{ledger.slot_unit}-h"
    lines = [f"compute: {ledger.slot_hours:.4f} {ledger.slot_unit}-hours over {ledger.epochs} epochs"]
    lines.append(f"{'rung':>5}  {'epochs':>7}  {'trials':>6}  {'epochs':>6}  {unit:>8}  {'share':>5}")
    for stretch in ledger.rungs:
        share = stretch.slot_hours / ledger.slot_hours if ledger.slot_hours else math.nan
        name = "final" if stretch.rung is None else str(stretch.rung)
        single = stretch.first_epoch == stretch.last_epoch
        span = str(stretch.first_epoch) if single else f"{stretch.first_epoch}-{stretch.last_epoch}"
        lines.append(
            f"{name:>5}  {span:>7}  {stretch.trials:>6}  {stretch.epochs:>6}  {stretch.slot_hours:>8.4f}  {share:>5.0%}"
        )
    if ledger.pruned_share is not None:
        lines.append(f"spent on trials later pruned: {ledger.pruned_share:.0%}")
    if ledger.seconds_to_best is not None and ledger.final_best is not None:
        lines.append(
            f"within {ledger.tolerance:.1%} of the final best ({ledger.final_best:.4g}) after "
            f"{ledger.seconds_to_best:.1f} active s and {ledger.slot_hours_to_best or 0.0:.4f} {ledger.slot_unit}-hours"
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
        if row["figure"] == "trials":  # said once, above the figures it qualifies
            sessions = f" in {row['sessions']} sessions" if row.get("sessions", 1) > 1 else ""
            partial = " (the figures below are compared once all have run)" if row.get("partial") else ""
            lines.append(
                f"predicted for {_number(row['predicted'])} trials; {_number(row['actual'])} ran{sessions}{partial}"
            )
            continue
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
