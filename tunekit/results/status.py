"""``tunekit status DIR``: a running search as its files show it, from any shell or node.

Reads only what the driver writes as the search goes (``trials.csv``, ``spans.csv``,
``epochs.csv``, ``started.json``; rewritten as trials start and at most every 2 s while
they report), so it works from another shell, or another node that mounts the shared
storage, without joining Ray. No pandas, no Ray: it answers in a fraction of a second.
"""

from __future__ import annotations

import json
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from tunekit.config.files import read_recorded_spec
from tunekit.config.objectives import headline_metric
from tunekit.errors import DamagedRecordWarning, NotAnExperimentError
from tunekit.layout import (
    EPOCHS_FILE,
    LEDGER_FILE,
    SPANS_FILE,
    SPEC_FILE,
    TRIALS_FILE,
    TrialStatus,
    unstarted_by_time_budget,
)
from tunekit.results.completion import search_complete
from tunekit.results.load import check_required_tables, missing_study, recorded_spec
from tunekit.storage.buckets import readable, shown
from tunekit.storage.clock import SearchClock, duration, session_running
from tunekit.storage.store import table_rows
from tunekit.worker.heartbeat import read_heartbeat

# The driver moves started.json's session end at least every 5 s while it runs.
_ALIVE_WITHIN_S = 15.0
ENDED_SHOWN = 5
NODE_ID_SHOWN = 8  # characters of a node id: enough to tell a cluster's nodes apart


@dataclass(frozen=True)
class RunningTrial:
    number: str
    trial_id: str
    node_id: str
    pid: str
    attempt: str
    epoch: int  # the epoch it is training now (the last reported one + 1)
    in_epoch_s: float  # active seconds since that epoch began (or the attempt started)


@dataclass(frozen=True)
class Status:
    experiment_dir: Path
    alive: bool  # the driver touched the clock within the last few seconds
    heard_s_ago: float | None
    active_s: float
    sessions: int
    planned: int | None  # the spec's num_samples
    complete: bool  # as ``tunekit resume`` judges it: nothing left to run
    not_started: int  # planned trials the time budget left unstarted
    metric: str
    counts: dict[str, int]
    running: list[RunningTrial]  # on a worker now: its last span is open
    waiting: list[str]  # running trials off their worker (PBT's pause): their numbers
    ended: list[dict[str, str]]
    best: str = ""  # a finished search's best, as ledger.json's summary says it (see _best_line)

    def describe(self) -> str:
        """The text ``tunekit status`` prints."""
        lines = [f"experiment: {shown(self.experiment_dir)}"]
        if self.heard_s_ago is None:
            lines.append("search: not started (no trial has run yet)")
        else:
            lines.append(
                f"search: {self._state()} (session {self.sessions}, driver last heard {self.heard_s_ago:.0f} s ago); "
                f"active {duration(self.active_s)}"
            )
        counts = ", ".join(self._count(status, count) for status, count in self.counts.items() if count)
        planned = f" of {self.planned} planned" if self.planned else ""
        lines.append(f"trials: {counts or 'none yet'}{planned}")
        if self.best:
            lines.append(self.best)
        if self.running:
            lines.append("running:")
            lines.append(f"  {'trial':>5}  {'node':<8}  {'pid':>7}  {'attempt':>7}  {'epoch':>5}  in epoch")
            lines += [
                f"  {r.number:>5}  {r.node_id[:NODE_ID_SHOWN] or '-':<8}  {r.pid or '-':>7}  {r.attempt:>7}"
                f"  {r.epoch:>5}  {r.in_epoch_s:.1f} s"
                for r in self.running
            ]
        if self.waiting:
            lines.append(
                f"paused (off their worker until PBT's next meeting or a free slot): trials {', '.join(self.waiting)}"
            )
        if self.ended:
            lines.append(f"last ended (newest first, at most {ENDED_SHOWN}):")
            lines.append(
                f"  {'trial':>5}  {'status':<9}  {'epochs':>6}  {self.metric:>12}  {'node':<8}  {'attempts':>8}  reason"
            )
            lines += [
                f"  {row.get('number', ''):>5}  {row.get('status', ''):<9}  {row.get('epochs', ''):>6}"
                f"  {_number(row.get('final_metric', '')):>12}  {(row.get('node_id') or '-')[:NODE_ID_SHOWN]:<8}"
                f"  {row.get('attempts', ''):>8}  {row.get('reason', '')}"
                for row in self.ended
            ]
        return "\n".join(lines)

    def _count(self, status: str, count: int) -> str:
        if status == TrialStatus.RUNNING and not self.alive:
            # trials.csv still says running: their driver was killed before it could say otherwise.
            return f"{count} interrupted (running when their driver died; `tunekit resume` trains them on)"
        if status == TrialStatus.RUNNING and self.waiting:
            return f"{count} running ({len(self.waiting)} of them paused)"
        return f"{count} {status}"

    def _state(self) -> str:
        if self.complete and self.not_started:
            return f"finished: the time budget ran out, {self.not_started} not started"
        if self.complete:
            return "finished"
        return "running" if self.alive else "not running (`tunekit resume` continues it)"


def read_status(experiment_dir: str | Path) -> Status:
    """What the experiment's files say about its search, now.

    Raises:
        NotAnExperimentError: the directory holds no ``spec.yaml``.
    """
    directory = readable(experiment_dir)
    if not (directory / SPEC_FILE).is_file():
        raise NotAnExperimentError(shown(directory), SPEC_FILE)
    check_required_tables(directory)
    if warning := missing_study(directory):
        warnings.warn(warning, DamagedRecordWarning, stacklevel=2)
    spec = read_recorded_spec(directory / SPEC_FILE)
    trials = table_rows(directory / TRIALS_FILE)
    clock = SearchClock.read(directory)
    now = time.time()
    heard = now - clock.sessions[-1][1] if clock and clock.sessions else None
    # Ended by its driver (an exit, a signal) is not running, however recent; a killed
    # driver's session stops being heard from.
    alive = heard is not None and heard < _ALIVE_WITHIN_S and session_running(directory) is not False
    active = (clock.active_seconds if clock else 0.0) + (heard if alive and heard else 0.0)
    counts = {status.value: 0 for status in TrialStatus if status is not TrialStatus.LOST}
    for row in trials:
        counts[row.get("status", "")] = counts.get(row.get("status", ""), 0) + 1
    running = [row for row in trials if row.get("status") == TrialStatus.RUNNING] if alive else []
    ended = [row for row in trials if row.get("status") != TrialStatus.RUNNING]
    ended.sort(key=lambda row: _float(row.get("ended_at")) or 0.0, reverse=True)
    planned = (spec.get("budget") or {}).get("num_samples")
    complete = isinstance(planned, int) and search_complete(directory, str(spec.get("name")), planned, trials)
    endings = [(row.get("status"), row.get("reason")) for row in trials]
    not_started = unstarted_by_time_budget(planned, endings) if isinstance(planned, int) else 0
    return Status(
        directory,
        alive,
        heard,
        active,
        len(clock.sessions) if clock else 0,
        planned,
        complete,
        not_started,
        headline_metric(recorded_spec(spec)).name,
        counts,
        *_on_workers(directory, running, active),
        ended[:ENDED_SHOWN],
        _best_line(directory) if complete and not alive else "",
    )


def _on_workers(directory: Path, rows: list[dict[str, str]], active_now: float) -> tuple[list[RunningTrial], list[str]]:
    """Each running trial's node, worker, attempt and epoch, from its open span and last epoch;
    and the running trials whose last span is closed: PBT paused them, and they hold no worker."""
    spans: dict[str, dict[str, str]] = {}
    for span in table_rows(directory / SPANS_FILE):
        spans[span["trial_id"]] = span  # rows are in span order: the last one is the current
    paused: list[dict[str, str]] = []
    on_workers: list[dict[str, str]] = []
    for row in rows:
        (paused if spans.get(row["trial_id"], {}).get("end") else on_workers).append(row)
    last_epoch: dict[str, tuple[int, float]] = {}
    for epoch in table_rows(directory / EPOCHS_FILE):
        number, at = int(epoch["epoch"]), _float(epoch.get("time")) or 0.0
        if number >= last_epoch.get(epoch["trial_id"], (0, 0.0))[0]:
            last_epoch[epoch["trial_id"]] = (number, at)
    found = []
    for row in on_workers:
        span = dict(spans.get(row["trial_id"], {}))
        if not span.get("node_id"):  # before its first report: the worker's heartbeat says where
            # Of any age: the worker writes it as the trial starts, and not again before a long
            # epoch's batches, however long its data, model and TensorFlow's import take.
            beat = read_heartbeat(directory / row["trial_id"], max_age=None)
            if beat is not None and beat.node_id:
                span["node_id"], span["pid"] = beat.node_id, str(beat.pid or "")
        began = _float(span.get("start")) or 0.0
        reported, at = last_epoch.get(row["trial_id"], (0, 0.0))
        since = max(began, at) if reported else began
        found.append(
            RunningTrial(
                number=row.get("number") or row["trial_id"],
                trial_id=row["trial_id"],
                node_id=span.get("node_id") or "",
                pid=span.get("pid") or "",
                attempt=span.get("attempt") or row.get("attempts") or "",
                epoch=reported + 1,
                in_epoch_s=max(0.0, active_now - since),
            )
        )
    return found, [row.get("number") or row["trial_id"] for row in paused]


def _best_line(directory: Path) -> str:
    """``best: trial 0 (b832722a) model_params=610, val_accuracy=0.852778; front of 3``: the
    best as ``ledger.json``'s summary records it (the figures every report renders), "" without one."""
    try:
        summary = json.loads((directory / LEDGER_FILE).read_text()).get("summary") or {}
    except (OSError, ValueError, AttributeError):
        return ""
    best = summary.get("best")
    if not isinstance(best, dict):
        return ""
    values = best.get("values") or {summary.get("metric", "metric"): best.get("metric")}
    scores = ", ".join(f"{name}={value:.6g}" for name, value in values.items() if isinstance(value, int | float))
    front = len((summary.get("pareto") or {}).get("front") or [])
    return f"best: trial {best.get('number')} ({best.get('trial_id')}) {scores}" + (
        f"; front of {front}" if front else ""
    )


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:
        return None


def _number(text: str) -> str:
    value = _float(text)
    return "" if value is None else f"{value:.6g}"
