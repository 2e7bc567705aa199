"""The record of a search, without Ray: trial and epoch rows, the rules of how a trial
ended and why, and the CSV tables they are written as.

``tunekit.driver.recorder`` feeds these from Ray's callbacks; everything here is plain
Python, so the status and reason rules are tested with made-up records.
"""

from __future__ import annotations

import csv
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tunekit.config.objectives import tracked_metrics
from tunekit.config.spec import ExperimentSpec
from tunekit.errors import describe_error
from tunekit.layout import (
    EPOCH_COLUMNS,
    FEASIBLE_COLUMN,
    FINAL_PREFIX,
    INFO_PREFIX,
    PARAM_PREFIX,
    SPAN_COLUMNS,
    TRIAL_COLUMNS,
    TrialStatus,
    finite,
)
from tunekit.search.pareto import is_feasible
from tunekit.search.plan import rung_of


@dataclass
class TrialRecord:
    trial_id: str
    number: int | None
    params: dict[str, Any]
    status: TrialStatus = TrialStatus.RUNNING
    reason: str = ""
    epochs: int = 0
    final_metric: float | None = None
    best_metric: float | None = None
    rung: int | None = None
    started_at: float = field(default_factory=time.time)
    ended_at: float | None = None
    samples_per_second: float | None = None
    node_id: str = ""
    attempts: int = 1
    info: dict[str, Any] = field(default_factory=dict)
    rated_epochs: int = 0  # epochs averaged into samples_per_second
    stopped_by_model: int | None = None  # the epoch at which the model's own callbacks ended training
    restored_weights: bool = False  # the model's callbacks put back earlier weights at the end
    # Several objectives: the last value of each objective and constrained metric, and
    # whether every constraint holds on them (None before the first epoch).
    finals: dict[str, float] = field(default_factory=dict)
    feasible: bool | None = None
    # Each stretch the trial held its slot, [start, end] on the search's active clock
    # (tunekit.clock); the last end is None while it runs. A retry, a resume and a PBT
    # pause each end one. The trial's time is their sum, never a gap between them.
    spans: list[list[float | None]] = field(default_factory=list)
    # Who ran each span, in the same order: {"attempt", "node_id", "pid"} (node and pid from
    # the span's first report), so a worker process or a lost node maps to its trial.
    span_workers: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.status = TrialStatus(self.status)  # a plain string from a state saved before the enum

    def begin_span(self, now: float) -> None:
        self.close_span(now)
        self.spans.append([now, None])
        # A state saved before span_workers existed: its older spans have no worker recorded.
        self.span_workers += [{}] * (len(self.spans) - 1 - len(self.span_workers))
        self.span_workers.append({"attempt": self.attempts, "node_id": "", "pid": None})

    def note_worker(self, node_id: str, pid: int | None) -> None:
        """The node and worker process of the running span, as its reports tell them."""
        if not self.span_workers or len(self.span_workers) != len(self.spans):
            return
        worker = self.span_workers[-1]
        worker["node_id"] = node_id or worker.get("node_id", "")
        worker["pid"] = pid if pid is not None else worker.get("pid")

    def close_span(self, now: float) -> None:
        if self.spans and self.spans[-1][1] is None:
            start = self.spans[-1][0] or 0.0
            self.spans[-1][1] = max(start, now)

    def active_seconds(self, now: float) -> float:
        """Seconds the trial ran, over all its spans (an open one up to ``now``)."""
        return sum((now if end is None else end) - (start or 0.0) for start, end in self.spans)


@dataclass
class EpochRow:
    trial_id: str
    epoch: int
    metrics: dict[str, float]
    attempt: int
    resumed_from_epoch: int | None
    at: float  # active seconds since the search started (tunekit.clock)


# ------------------------------------------------------------------ how trials end


def apply_epoch(record: TrialRecord, row: EpochRow, spec: ExperimentSpec) -> None:
    """Counts a reported epoch into its trial: epochs, final and best metric, samples/s."""
    record.epochs = row.epoch
    value = finite(row.metrics.get(spec.metric.name))
    if value is not None:
        record.final_metric = value
        better = record.best_metric is None or (
            value > record.best_metric if spec.metric.mode == "max" else value < record.best_metric
        )
        if better:
            record.best_metric = value
    if spec.multi_objective:
        for name in tracked_metrics(spec.objectives, spec.constraints, spec.select):
            if (number := finite(row.metrics.get(name))) is not None:
                record.finals[name] = number
        record.feasible = is_feasible(record.finals, spec.constraints)
    rate = row.metrics.get("samples_per_second")
    if rate is not None:
        record.rated_epochs += 1
        seen = record.samples_per_second or 0.0
        record.samples_per_second = seen + (rate - seen) / record.rated_epochs


def settle_ended(record: TrialRecord, spec: ExperimentSpec, *, pruned: bool, elapsed: float) -> None:
    """Status and reason of a trial whose function returned.

    Args:
        record: the trial; a reason already set means it reported its own failure.
        spec: the budget (max epochs, time budget) and the scheduler (rungs).
        pruned: the scheduler stopped it early.
        elapsed: seconds since the search started.
    """
    if record.reason:
        record.status = TrialStatus.FAILED
    elif record.epochs >= spec.budget.max_epochs:
        record.status = TrialStatus.COMPLETED
        record.reason = f"trained all {epochs_text(record.epochs)}" + _restored(record)
    elif record.stopped_by_model is not None and record.epochs == record.stopped_by_model:
        # EarlyStopping and the like: the model decided it was done, a normal ending.
        record.status = TrialStatus.COMPLETED
        record.reason = f"stopped by the model at epoch {record.epochs}" + _restored(record)
    elif pruned:
        record.status = TrialStatus.PRUNED
        record.rung = rung_of(record.epochs, spec)
        scheduler = "MO-ASHA" if spec.multi_objective else "ASHA"
        record.reason = f"pruned by {scheduler} at rung {record.rung} (epoch {record.epochs})"
    else:
        # Neither finished nor pruned: the search stopped around it.
        record.status = TrialStatus.STOPPED
        budget = spec.budget.time_budget_s
        if budget is not None and elapsed >= budget:
            record.reason = f"the search's time budget of {budget:g} s ran out after {epochs_text(record.epochs)}"
        else:
            record.reason = f"the search was stopped after {epochs_text(record.epochs)}"


def epochs_text(count: int) -> str:
    return f"{count} epoch" if count == 1 else f"{count} epochs"


def _restored(record: TrialRecord) -> str:
    # The final metrics were measured on the restored weights, the model that was saved.
    return "; the model restored its best weights" if record.restored_weights else ""


def settle_errored(record: TrialRecord, traceback: str) -> None:
    """A trial whose worker raised: its own reported reason, else the traceback's last line."""
    record.status = TrialStatus.FAILED
    if not record.reason:
        record.reason = describe_error(traceback, limit=300) or "the trial's worker failed"


# -------------------------------------------------------------------------- tables


def write_trials_csv(path: Path, records: list[TrialRecord], now: float) -> None:
    """``trials.csv``; ``now`` is the search's active clock, for the spans of running trials."""
    param_names = sorted({name for r in records for name in r.params})
    info_names = sorted({name for r in records for name in r.info if name != "node_id"})
    final_names = list(dict.fromkeys(name for r in records for name in r.finals))
    columns = [
        *TRIAL_COLUMNS,
        *(f"{FINAL_PREFIX}{name}" for name in final_names),
        *([FEASIBLE_COLUMN] if final_names else []),
        *(f"{PARAM_PREFIX}{name}" for name in param_names),
        *(f"{INFO_PREFIX}{name}" for name in info_names),
    ]
    rows = []
    for r in sorted(records, key=lambda r: (r.number is None, r.number, r.started_at)):
        # TRIAL_COLUMNS are TrialRecord attributes, by construction, but for the one it adds up
        row = {column: getattr(r, column) for column in TRIAL_COLUMNS if column != "wall_seconds"}
        row["wall_seconds"] = round(r.active_seconds(now), 3)
        if final_names:
            row.update({f"{FINAL_PREFIX}{name}": r.finals.get(name) for name in final_names})
            row[FEASIBLE_COLUMN] = r.feasible
        row.update({f"{PARAM_PREFIX}{name}": r.params.get(name) for name in param_names})
        row.update({f"{INFO_PREFIX}{name}": _cell(r.info.get(name)) for name in info_names})
        rows.append(row)
    _write_csv(path, columns, rows)


def write_spans_csv(path: Path, records: list[TrialRecord]) -> None:
    """``spans.csv``: one row per stretch a trial ran, on the active clock (end empty while running)."""
    rows = [
        {
            "trial_id": r.trial_id,
            "span": index,
            "start": _seconds(start),
            "end": _seconds(end),
            **_worker_cells(r, index - 1),
        }
        for r in records
        for index, (start, end) in enumerate(r.spans, start=1)
    ]
    _write_csv(path, list(SPAN_COLUMNS), rows)


def _worker_cells(record: TrialRecord, index: int) -> dict[str, Any]:
    worker = record.span_workers[index] if index < len(record.span_workers) else {}
    return {"attempt": worker.get("attempt"), "node_id": worker.get("node_id") or None, "pid": worker.get("pid")}


def _seconds(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def write_epochs_csv(path: Path, rows: list[EpochRow]) -> None:
    metric_names = sorted({name for row in rows for name in row.metrics})
    columns = [*EPOCH_COLUMNS, *metric_names]
    values = [
        {
            "trial_id": r.trial_id,
            "epoch": r.epoch,
            "attempt": r.attempt,
            "resumed_from_epoch": r.resumed_from_epoch,
            "time": round(r.at, 3),
            **r.metrics,
        }
        for r in rows
    ]
    _write_csv(path, columns, values)


def _write_csv(path: Path, columns: list[str], rows: list[dict[str, Any]]) -> None:
    partial = path.with_suffix(".csv.partial")
    with partial.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    partial.replace(path)  # readers never see half a table


def _cell(value: Any) -> Any:
    """Lists (device names, GPU ids) as one ';'-joined CSV cell."""
    return ";".join(str(v) for v in value) if isinstance(value, list) else value


def params_of(config: dict[str, Any]) -> dict[str, Any]:
    """A trial's parameters: its config without tunekit's private keys (``_``-prefixed)."""
    return {key: value for key, value in config.items() if not key.startswith("_")}
