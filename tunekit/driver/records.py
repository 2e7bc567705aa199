"""The record of a search, without Ray: trial and epoch rows, the rules of how a trial
ended and why, and the CSV tables they are written as.

``tunekit.driver.recorder`` feeds these from Ray's callbacks; everything here is plain
Python, so the status and reason rules are tested with made-up records.
"""

from __future__ import annotations

import csv
import io
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tunekit.config.objectives import headline_metric, tracked_metrics
from tunekit.config.spec import ExperimentSpec
from tunekit.driver.worker_deaths import last_rss_mb, worker_death_reason
from tunekit.errors import describe_error
from tunekit.layout import (
    ABORTED_REASON,
    ENDED_STATUSES,
    EPOCH_COLUMNS,
    FEASIBLE_COLUMN,
    FINAL_PREFIX,
    INFO_PREFIX,
    PARAM_PREFIX,
    SEARCH_STATUSES,
    SPAN_COLUMNS,
    TIME_BUDGET_REASON,
    TRIAL_COLUMNS,
    TrialStatus,
    finite,
    first_best_epoch,
    number_or_none,
)
from tunekit.search.pareto import is_feasible
from tunekit.search.plan import rung_of
from tunekit.storage.store import write_text


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
    checkpoint_epoch: int = 0  # the last epoch reported with a checkpoint: where a retry starts
    # A trial that trained to its end: the epoch its exported model and final_metric come
    # from (training.keep: the last, or the best); None for any other ending.
    kept_epoch: int | None = None
    # Several objectives: the last value of each objective and constrained metric, and
    # whether every constraint holds on them (None before the first epoch).
    finals: dict[str, float] = field(default_factory=dict)
    feasible: bool | None = None
    # Each stretch the trial held its slot, [start, end] on the search's active clock
    # (tunekit.storage.clock); the last end is None while it runs. A retry, a resume and a PBT
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
    at: float  # active seconds since the search started (tunekit.storage.clock)


# ------------------------------------------------------------------ how trials end


def apply_epoch(record: TrialRecord, row: EpochRow, spec: ExperimentSpec) -> None:
    """Counts a reported epoch into its trial: epochs, final and best metric (``headline_metric``'s), samples/s."""
    record.epochs = row.epoch
    headline = headline_metric(spec)
    value = finite(row.metrics.get(headline.name))
    if value is not None:
        record.final_metric = value
        better = record.best_metric is None or (
            value > record.best_metric if headline.mode == "max" else value < record.best_metric
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


def apply_kept(record: TrialRecord, kept_epoch: Any, kept_value: Any) -> None:
    """The trial's last report named the epoch its model keeps (tunekit.worker.keep): that
    epoch's value is the trial's figure, whichever epoch came last."""
    record.kept_epoch = int(kept_epoch)
    if (value := finite(kept_value)) is not None:
        record.final_metric = value


def kept_after_the_driver_died(
    record: TrialRecord, values: Mapping[int, float], spec: ExperimentSpec, written: str | None
) -> None:
    """A trial that completed after Ray's last save, adopted on resume without its last report:
    its kept epoch as the dead driver wrote it in trials.csv, else by ``training.keep``'s rule
    over ``values`` (its epochs' values of the metric)."""
    kept = finite(number_or_none(written))
    if kept is None and spec.training.keep == "last":
        apply_kept(record, record.epochs, None)  # its figure is its last epoch's already
        return
    if kept is None:
        kept = first_best_epoch(values, headline_metric(spec).mode)
    if kept is not None:
        apply_kept(record, kept, values.get(int(kept)))


def settle_ended(
    record: TrialRecord, spec: ExperimentSpec, *, pruned: bool, elapsed: float, aborted: bool = False
) -> None:
    """Status and reason of a trial whose function returned.

    Args:
        record: the trial; a reason already set means it reported its own failure.
        spec: the budget (max epochs, time budget) and the scheduler (rungs).
        pruned: the scheduler stopped it early.
        elapsed: seconds since the search started.
        aborted: the failure guard stopped the whole search.
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
        scheduler = "MO-ASHA" if spec.multi_objective else "Hyperband" if spec.scheduler.type == "hyperband" else "ASHA"
        record.reason = f"pruned by {scheduler} at rung {record.rung} (epoch {record.epochs})"
    else:
        # Neither finished nor pruned: the search stopped around it.
        record.status = TrialStatus.STOPPED
        budget = spec.budget.time_budget_s
        if budget is not None and elapsed >= budget:
            record.reason = f"{TIME_BUDGET_REASON}{budget:g} s ran out after {epochs_text(record.epochs)}"
        elif aborted:
            record.reason = f"{ABORTED_REASON} after {epochs_text(record.epochs)}"
        else:
            record.reason = f"the search was stopped after {epochs_text(record.epochs)}"


def epochs_text(count: int) -> str:
    return f"{count} epoch" if count == 1 else f"{count} epochs"


def reason_beside_epochs(record: TrialRecord) -> str:
    """What a trial's reason adds to a line that already says "<status> after N epochs".

    "pruned by ASHA at rung 1 (epoch 4)" becomes "by ASHA at rung 1", "trained all 20 epochs"
    nothing, "the search was stopped after 0 epochs" "the search was stopped"; a failure's
    reason (its error) is kept whole.
    """
    if record.status == TrialStatus.FAILED:
        return record.reason
    epochs = epochs_text(record.epochs)
    reason = record.reason.removeprefix(f"trained all {epochs}").removeprefix("; ")
    for said in (f" after {epochs}", f" (epoch {record.epochs})", f" at epoch {record.epochs}"):
        reason = reason.replace(said, "")
    return reason.removeprefix(f"{record.status} ")


def _restored(record: TrialRecord) -> str:
    # The final metrics were measured on the restored weights, the model that was saved.
    return "; the model restored its best weights" if record.restored_weights else ""


def settle_errored(record: TrialRecord, traceback: str, last_result: Mapping[str, Any] | None = None) -> None:
    """A trial whose worker raised: its own reported reason, a worker killed for memory named as
    such (``tunekit.driver.worker_deaths``; ``last_result``, its last report, gives the worker's
    memory then), else the traceback's last line."""
    record.status = TrialStatus.FAILED
    if not record.reason:
        killed = worker_death_reason(traceback, last_rss_mb(last_result, record.info))
        record.reason = killed or describe_error(traceback, limit=300) or "the trial's worker failed"


# -------------------------------------------------------------------------- tables
#
# A search of thousands of trials rewrites its tables every few seconds. Each table keeps
# every row rendered as a CSV line and renders again only the rows whose record changed
# (and running trials, whose wall seconds grow), or all of them when its columns change;
# a write joins the lines. So a write costs bytes, not Python work per row and column, and
# the driver's cost per trial stays flat as the search grows (benchmarks/scale.py).


class TrialTally:
    """Trials per status, the running records and the ended ones' epochs, kept as records change.

    Why: the console reads them every redraw, and its scans of every record were most of
    its cost at thousands of trials (7.5 ms per scan at 10,000 records).
    """

    def __init__(self, records: Iterable[TrialRecord] = ()) -> None:
        self._counts: dict[str, int] = {status: 0 for status in SEARCH_STATUSES}
        self._status: dict[str, TrialStatus] = {}  # the status each trial is counted under
        self._running: dict[str, TrialRecord] = {}
        self._ended_epochs: dict[str, int] = {}  # trial id -> the epochs it is counted with
        self._ended_epoch_total = 0
        for record in records:
            self.count(record)

    def count(self, record: TrialRecord) -> None:
        """Follows ``record`` (new, or changed since it was last counted)."""
        counted = self._status.get(record.trial_id)
        if counted != record.status:
            if counted is not None:
                self._counts[counted] -= 1
            self._counts[record.status] += 1
            self._status[record.trial_id] = record.status
            if record.status == TrialStatus.RUNNING:
                self._running[record.trial_id] = record
            else:
                self._running.pop(record.trial_id, None)
        self._ended_epoch_total -= self._ended_epochs.pop(record.trial_id, 0)
        if record.status in ENDED_STATUSES:
            self._ended_epochs[record.trial_id] = record.epochs
            self._ended_epoch_total += record.epochs

    def counts(self) -> dict[str, int]:
        """Trials per status (every status present, 0 where none)."""
        return dict(self._counts)

    def running(self) -> list[TrialRecord]:
        return list(self._running.values())

    def ended_epochs(self) -> tuple[int, int]:
        """How many trials have ended, and the epochs they trained together."""
        return len(self._ended_epochs), self._ended_epoch_total


class _Lines:
    """CSV lines by key, in the order keys were first rendered, and the file they are written to."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.columns: list[str] = []
        self.lines: dict[Any, str] = {}
        self._buffer = io.StringIO()
        self._writer = csv.writer(self._buffer)

    def reset(self, columns: list[str]) -> None:
        """New columns: every row is rendered again."""
        self.columns = columns
        self.lines.clear()

    def render(self, rows: list[list[Any]]) -> str:
        self._buffer.seek(0)
        self._buffer.truncate()
        self._writer.writerows(rows)
        return self._buffer.getvalue()

    def write(self, order: Iterable[Any] | None = None) -> None:
        header = self.render([self.columns])
        body = "".join(map(self.lines.__getitem__, order) if order is not None else self.lines.values())
        write_text(self.path, header + body)  # readers never see half a table


class TrialsTable:
    """``trials.csv``: one row per trial, in trial-number order."""

    def __init__(self, path: Path) -> None:
        self._lines = _Lines(path)
        self._names: tuple[list[str], list[str], list[str]] = ([], [], [])  # params, info, finals
        self._order: list[str] = []
        # Trials whose row was last rendered with an open span: their wall seconds move on
        # without a change. A trial starts or stops running only through a change, so these
        # and the changed ones are all a write renders, not a scan of every record.
        self._running: set[str] = set()

    def write(self, records: Mapping[str, TrialRecord], changed: set[str], now: float) -> None:
        """Writes the table; ``changed`` names the trials whose records changed since the last write
        (every trial the first time), ``now`` is the search's active clock, for running trials' spans."""
        names = self._column_names(records, changed)
        lines = self._lines
        if names != self._names or not lines.columns:
            self._names = names
            lines.reset(_trial_columns(*names))
        fresh = [key for key in records if key not in lines.lines]
        rendered = {key for key in {*changed, *fresh, *self._running} if key in records}
        for key in rendered:
            lines.lines[key] = lines.render([_trial_cells(records[key], now, *names)])
        self._running = {key for key in rendered if _running(records[key])}
        self._order_with(records, fresh)
        lines.write(self._order)

    def _order_with(self, records: Mapping[str, TrialRecord], fresh: list[str]) -> None:
        """Rows in trial-number order; new trials, numbered after the last row, go at the end."""
        if not fresh and len(self._order) == len(self._lines.lines):
            return
        added = sorted((records[key] for key in fresh), key=_row_order)
        if added and len(self._order) + len(added) == len(self._lines.lines) and self._ends_before(records, added[0]):
            self._order += [r.trial_id for r in added]
        else:
            self._order = [r.trial_id for r in sorted(records.values(), key=_row_order)]

    def _ends_before(self, records: Mapping[str, TrialRecord], first_added: TrialRecord) -> bool:
        """The table's last row comes before ``first_added`` (or there is none)."""
        if not self._order:
            return True
        last = records.get(self._order[-1])
        return last is not None and _row_order(last) <= _row_order(first_added)

    def _column_names(
        self, records: Mapping[str, TrialRecord], changed: set[str]
    ) -> tuple[list[str], list[str], list[str]]:
        # Names only ever join a search; a record not changed since the last write adds none.
        seen = self._lines.lines
        looked = [r for key, r in records.items() if key in changed or key not in seen]
        params, info, finals = (list(names) for names in self._names)
        params = sorted({*params, *(name for r in looked for name in r.params)})
        info = sorted({*info, *(name for r in looked for name in r.info if name != "node_id")})
        finals = list(dict.fromkeys([*finals, *(name for r in looked for name in r.finals)]))
        return params, info, finals


def _row_order(record: TrialRecord) -> tuple[bool, int, float]:
    return record.number is None, record.number if record.number is not None else -1, record.started_at


def _running(record: TrialRecord) -> bool:
    return bool(record.spans) and record.spans[-1][1] is None


def _trial_columns(param_names: list[str], info_names: list[str], final_names: list[str]) -> list[str]:
    return [
        *TRIAL_COLUMNS,
        *(f"{FINAL_PREFIX}{name}" for name in final_names),
        *([FEASIBLE_COLUMN] if final_names else []),
        *(f"{PARAM_PREFIX}{name}" for name in param_names),
        *(f"{INFO_PREFIX}{name}" for name in info_names),
    ]


def _trial_cells(
    r: TrialRecord, now: float, param_names: list[str], info_names: list[str], final_names: list[str]
) -> list[Any]:
    # TRIAL_COLUMNS are TrialRecord attributes, by construction, but for the one it adds up
    cells = [
        round(r.active_seconds(now), 3) if column == "wall_seconds" else getattr(r, column) for column in TRIAL_COLUMNS
    ]
    if final_names:
        cells += [r.finals.get(name) for name in final_names]
        cells.append(r.feasible)
    cells += [r.params.get(name) for name in param_names]
    cells += [_cell(r.info.get(name)) for name in info_names]
    return cells


class SpansTable:
    """``spans.csv``: one row per stretch a trial ran, on the active clock (end empty while running)."""

    def __init__(self, path: Path) -> None:
        self._lines = _Lines(path)
        self._lines.reset(list(SPAN_COLUMNS))

    def write(self, records: Mapping[str, TrialRecord], changed: set[str]) -> None:
        lines = self._lines
        for key in {*changed, *(key for key in records if key not in lines.lines)}:
            if key in records:
                lines.lines[key] = lines.render(_span_rows(records[key]))
        lines.write(key for key in records)


def _span_rows(r: TrialRecord) -> list[list[Any]]:
    return [
        [r.trial_id, index, _seconds(start), _seconds(end), *_worker_cells(r, index - 1)]
        for index, (start, end) in enumerate(r.spans, start=1)
    ]


def _worker_cells(record: TrialRecord, index: int) -> list[Any]:
    worker = record.span_workers[index] if index < len(record.span_workers) else {}
    return [worker.get("attempt"), worker.get("node_id") or None, worker.get("pid")]


def _seconds(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


class EpochsTable:
    """``epochs.csv``: one row per trial per epoch, in the order they were reported."""

    def __init__(self, path: Path) -> None:
        self._lines = _Lines(path)
        self._metric_names: list[str] = []

    def write(self, rows: list[EpochRow], changed: set[int]) -> None:
        """``changed``: the indices of rows replaced since the last write (an epoch trained again)."""
        lines = self._lines
        fresh = range(len(lines.lines), len(rows))
        names = sorted({*self._metric_names, *(name for i in fresh for name in rows[i].metrics)})
        if names != self._metric_names or not lines.columns:
            self._metric_names = names
            lines.reset([*EPOCH_COLUMNS, *names])
            changed, fresh = set(), range(len(rows))
        for index in [*changed, *fresh]:
            r = rows[index]
            cells = [r.trial_id, r.epoch, r.attempt, r.resumed_from_epoch, round(r.at, 3)]
            lines.lines[index] = lines.render([[*cells, *(r.metrics.get(name) for name in names)]])
        lines.write(range(len(rows)))


def _cell(value: Any) -> Any:
    """Lists (device names, GPU ids) as one ';'-joined CSV cell."""
    return ";".join(str(v) for v in value) if isinstance(value, list) else value


def params_of(config: dict[str, Any]) -> dict[str, Any]:
    """A trial's parameters: its config without tunekit's private keys (``_``-prefixed)."""
    return {key: value for key, value in config.items() if not key.startswith("_")}
