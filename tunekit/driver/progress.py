"""Live progress on the terminal.

Start-up is shown phase by phase (starting Ray, waiting for the first workers, the first
trial and its first epoch), because on a small machine it takes longer than the first
trials. Then, on a TTY, one redrawn status line (trials done, running, pruned, failed, the
best so far, elapsed time and an estimate of the time left); otherwise (logs) one plain
line per ended trial, with its reason. A failed trial always gets its own line, with the
condensed reason and where its full traceback is.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Generic, TextIO, TypeVar

from tunekit.driver.records import epochs_text, reason_beside_epochs
from tunekit.driver.trial_costs import TrialCosts
from tunekit.layout import ENDED_STATUSES, ERROR_FILE, TrialStatus, stopped_for_good
from tunekit.storage.buckets import shown
from tunekit.worker import heartbeat

if TYPE_CHECKING:
    from tunekit.config.spec import ExperimentSpec
    from tunekit.driver.recorder import EpochRow, Recorder, TrialRecord
    from tunekit.search.pbt import ExploitStep

QUIET_LOG_S = 10.0  # in a log (no TTY), the longest stretch without a line
# How often the status line's time left is estimated again; in between it counts down.
# The estimate reads every trial, and the line is drawn as every trial ends: in a search
# of thousands of short trials that scan grew with the search (benchmarks/scale.py).
ESTIMATE_EVERY_S = 1.0
# The simulated epochs per trial weigh as much as this many ended trials in the time left:
# the first trials to end are the ones ASHA cut at its first rung, so their mean alone made
# the first estimates far too low (4 s left of a 70-s search).
EXPECTED_WEIGHS_AS_TRIALS = 4
T = TypeVar("T")
_STEPS_SHOWN = 2  # running trials whose step the status line names, at most
_SILENT_BEAT_S = 3 * heartbeat.WRITE_EVERY_S  # a step older than this is said with its age


class ConsoleProgress:
    """A recorder listener that shows start-up, trials running, pruned, finished and failed, and the best so far.

    Called from the driver's main thread only (Ray Tune's callbacks and ``tunekit.driver.runner``).
    """

    def __init__(self, spec: ExperimentSpec, stream: TextIO | None = None, *, live: bool | None = None) -> None:
        from tunekit.config.objectives import headline_metric
        from tunekit.search.forecast import trial_epochs

        self._metric = headline_metric(spec).name
        self._spec = spec
        self._front: tuple[int, str] = (-1, "")  # (trials ended when computed, its text)
        self._num_samples = spec.budget.num_samples
        self._trial_epochs = trial_epochs(spec)
        self._stream = stream or sys.stdout
        self._live = _isatty(self._stream) if live is None else live
        self._started = time.monotonic()
        self._last_draw = 0.0
        self._last_line = time.monotonic()
        self._drawn = False
        self._recorder: Recorder | None = None
        self._experiment_dir: Path | None = None
        self._first_trial_seen = False
        self._first_epoch_seen = False
        self._resumed_epochs = 0
        self._exploits_shown = 0
        self._first_epoch_at: float | None = None
        self._stopping = False  # a signal is stopping the search: no time is left to estimate
        # This session's time budget (a plain resume's is what the last one left), counted as Ray
        # Tune counts it: from when it starts the experiment, after Ray and the Tuner are up.
        self._time_budget = spec.budget.time_budget_s
        self._time_budget_began: float | None = None
        self._costs = TrialCosts(spec.space)
        self._epoch_began: dict[str, float] = {}  # trial id -> when its current epoch began (monotonic)
        # (trial id, attempt) said to run on a node: PBT's later restarts of one attempt are not news.
        self._attempts_placed: set[tuple[str, int]] = set()
        # Each reads every running trial (_read_steps opens their heartbeat files); in a log every
        # ended trial's line carries a status line, so they are computed at most every second.
        # Looked up at each call (a replaced time_left is the one used).
        self._estimate = _AtMostEverySecond(lambda: self.time_left())
        self._steps = _AtMostEverySecond(lambda: self._read_steps())

    # ----------------------------------------------------------------- start-up

    def header(self, experiment_dir: Path, tracking_uri: str | None) -> None:
        """The first lines: where the results go, before anything slow starts."""
        self._experiment_dir = experiment_dir
        self._line(f"experiment: {shown(experiment_dir)}")  # a bucket experiment by its URI
        self._line(f"tracking: {tracking_uri}" if tracking_uri else "tracking: off")

    def phase(self, text: str) -> None:
        """One start-up step, as it begins."""
        self._line(f"[{self._elapsed()}] {text}")

    def session_time_budget(self, seconds: float | None) -> None:
        """The seconds this session's time budget has: a plain resume's is what was left."""
        self._time_budget = seconds

    def search_stopping(self) -> None:
        """A signal is stopping the search: the status line stops estimating the time left (it
        read "running 0; ... about 11 s left" after a Ctrl-C)."""
        self._stopping = True

    # ----------------------------------------------------------------- listener

    def experiment_started(self, recorder: Recorder) -> None:
        self._time_budget_began = time.monotonic()
        self._recorder = recorder
        self._experiment_dir = recorder.experiment_dir
        self._resumed_epochs = len(recorder.epochs)
        self._exploits_shown = len(recorder.exploits)  # a resume's earlier steps were shown before

    def trial_started(self, record: TrialRecord) -> None:
        if self._recorder is not None:  # the slots the time left shares the work among
            self._costs.slots = max(self._costs.slots, len(self._recorder.running()))
        self._costs.started(record)
        self._epoch_began[record.trial_id] = time.monotonic()
        if not self._first_trial_seen:
            self._first_trial_seen = True
            continues = f", continuing after epoch {record.checkpoint_epoch}" if record.checkpoint_epoch else ""
            # Its worker may have imported TensorFlow before the trial (tunekit.worker.preload), or be importing it.
            self.phase(f"first trial started (trial {_name(record)}{continues})")
        workers = record.span_workers
        if len(workers) >= 2 and workers[-2].get("attempt") != record.attempts:
            # A retry after its worker or node died (or a resume): say which trial, where it was, which attempt.
            attempt_before = workers[-2].get("attempt")
            # Its last span that reported: PBT's pauses split an attempt into spans, and the last
            # one may have ended before its first report.
            before = next(
                (
                    w
                    for w in reversed(workers[:-1])
                    if w.get("attempt") == attempt_before and (w.get("node_id") or w.get("pid"))
                ),
                workers[-2],
            )
            where = (
                f"node {_node(before.get('node_id'))}, worker pid {before.get('pid') or '?'}"
                if before.get("node_id") or before.get("pid")
                else "a worker that had not reported yet"
            )
            starts = (
                f"starts from its last checkpoint (epoch {record.checkpoint_epoch})"
                if record.checkpoint_epoch
                else "trains again from its first epoch (it had no checkpoint yet)"
            )
            attempt = f"trial {_name(record)}: attempt {record.attempts}"
            self._notice(f"{attempt} {starts}; attempt {attempt_before} ran on {where}")

    def epoch_reported(self, record: TrialRecord, row: EpochRow) -> None:
        self._costs.epoch(record, row)
        self._epoch_began[record.trial_id] = time.monotonic()
        if self._first_epoch_at is None:
            self._first_epoch_at = time.monotonic()
        if not self._first_epoch_seen:
            self._first_epoch_seen = True
            self.phase(f"first epoch reported (trial {_name(record)}); training")
        placed = (record.trial_id, row.attempt)
        if row.attempt > 1 and row.resumed_from_epoch is not None and record.span_workers:
            if placed in self._attempts_placed:
                return
            self._attempts_placed.add(placed)
            worker = record.span_workers[-1]
            self._notice(
                f"trial {_name(record)}: attempt {row.attempt} runs on node {_node(worker.get('node_id'))} "
                f"(worker pid {worker.get('pid') or '?'}), resumed from epoch {row.resumed_from_epoch}"
            )

    def trial_ended(self, record: TrialRecord) -> None:
        self._costs.ended(record)
        self._epoch_began.pop(record.trial_id, None)
        if stopped_for_good(record.status, record.reason):
            self._stopping = True  # the time budget or the failure guard ended the search: no time left to estimate
        if self._recorder is None:
            return
        if self._live and record.status != TrialStatus.FAILED:
            self._draw(force=True)
            return
        reason = reason_beside_epochs(record)
        detail = f" ({reason})" if reason else ""
        value = self._finals_text(record)
        where = ""
        if record.status == TrialStatus.FAILED and self._experiment_dir is not None:
            error_file = self._experiment_dir / record.trial_id / ERROR_FILE
            if error_file.is_file():
                where = f", see {error_file}"
        ended = f"{record.status} after {epochs_text(record.epochs)}"
        text = f"[{self._elapsed()}] trial {_name(record)} {ended}{value}{detail}"
        if self._live:  # a failed trial on a TTY: its own line above the status line
            self._line(f"{_condense(text, 200)}{where}")
            self._draw(force=True)
        else:
            self._line(f"{text}{where} | {self.status_line()}")

    def _notice(self, text: str) -> None:
        """A line of its own, above the status line on a TTY."""
        self._line(f"[{self._elapsed()}] {text}")
        if self._live:
            self._draw(force=True)

    def warning(self, message: str) -> None:
        self._line(f"tunekit: warning: {message}")
        if self._live:
            self._draw(force=True)

    def tick(self, recorder: Recorder) -> None:
        self._recorder = recorder
        for step in recorder.exploits[self._exploits_shown :]:
            self._notice(_exploit_text(step, recorder))
        self._exploits_shown = len(recorder.exploits)
        if self._live:
            self._draw(force=False)
        elif time.monotonic() - self._last_line >= QUIET_LOG_S:
            self._line(f"[{self._elapsed()}] {self.status_line()}")

    def experiment_ended(self, recorder: Recorder) -> None:
        self.finish()

    def finish(self) -> None:
        if self._live and self._drawn:
            self._draw(force=True)
            self._stream.write("\n")
            self._stream.flush()
            self._drawn = False

    # ----------------------------------------------------------------- text

    def status_line(self) -> str:
        if self._recorder is None:  # before Ray's first callback
            return f"done 0/{self._num_samples}; starting"
        counts = self._recorder.counts()
        done = sum(counts[status] for status in ENDED_STATUSES)
        if self._spec.multi_objective:
            best_text = self._front_text(done)
        else:
            best = self._recorder.best()
            # Until a trial completes, the best is the leading other trial: its status is said, as
            # a running one's latest value can still fall.
            status = "" if best is None or best.status == TrialStatus.COMPLETED else f", {best.status}"
            best_text = f"best {self._metric} " + (
                "-" if best is None else f"{best.final_metric:.4f} (trial {best.number}{status})"
            )
        # Stopped trials (a signal, a time budget) count as done: named when there are any.
        stopped = f", stopped {counts[TrialStatus.STOPPED]}" if counts[TrialStatus.STOPPED] else ""
        line = (
            f"done {done}/{self._num_samples}: completed {counts[TrialStatus.COMPLETED]}, "
            f"pruned {counts[TrialStatus.PRUNED]}{stopped}, failed {counts[TrialStatus.FAILED]}; "
            f"running {counts[TrialStatus.RUNNING]}; {best_text}"
        )
        # Every trial recorded and none running: the search is over, nothing is left. Otherwise
        # the estimate is made at most once a second: a search of thousands of short trials
        # draws this line as each ends, often with none running.
        over = not counts[TrialStatus.RUNNING] and len(self._recorder.trials) >= self._num_samples
        left = None if over or self._stopping else self._counting_down()
        if left is not None and self._time_budget is not None:  # the search stops then, whatever is left to run
            began = self._time_budget_began if self._time_budget_began is not None else self._started
            budget_left = self._time_budget - (time.monotonic() - began)
            if budget_left <= 0:  # Ray stops the running trials at its next step
                return line + "; the time budget ran out" + self._steps_text()
            left = min(left, budget_left)
        return line + (f"; about {_duration(left)} left" if left is not None else "") + self._steps_text()

    def _finals_text(self, record: TrialRecord) -> str:
        """`` val_accuracy=0.9644``; with several objectives each one's, `` model_params=9610 val_accuracy=0.9644``."""
        if self._spec.multi_objective:
            shown = [
                f"{o.name}={_value(record.finals[o.name])}" for o in self._spec.objectives if o.name in record.finals
            ]
            return "".join(" " + text for text in shown)
        return "" if record.final_metric is None else f" {self._metric}={record.final_metric:.4f}"

    def _front_text(self, done: int) -> str:
        """Several objectives: the front's size and the select rule's pick so far, e.g.
        ``front 3, selected trial 5 (val_accuracy 0.9611, model_params 9034)``; recomputed
        only when a trial has ended since (sorting is quadratic in the completed trials)."""
        if self._recorder is None:
            return ""
        if self._front[0] != done:
            self._front = (done, front_text(list(self._recorder.trials.values()), self._spec))
        return self._front[1]

    def _steps_text(self) -> str:
        # Read at most once a second; a trial that ended since is left out at once.
        steps = self._steps.get()[1]
        if not steps or self._recorder is None:
            return ""
        running = {record.trial_id for record in self._recorder.running()}
        shown = [text for trial_id, text in steps if trial_id in running]
        return "; " + ", ".join(shown) if shown else ""

    def _read_steps(self) -> list[tuple[str, str]]:
        """Where running trials are inside an epoch longer than the heartbeat's period: (trial id, text).

        A worker writes its heartbeat at most every ``heartbeat.WRITE_EVERY_S`` whatever its
        epochs' length, so a trial whose epoch began more recently is not shown: its beat may
        be the next short epoch's first batch ("epoch 2 step 1/4" flickered by 0.1-s epochs).
        """
        if self._recorder is None or self._experiment_dir is None:
            return []
        shown = []
        now = time.monotonic()
        for record in self._recorder.running():
            if now - self._epoch_began.get(record.trial_id, 0.0) < heartbeat.WRITE_EVERY_S:
                continue
            beat = heartbeat.read_heartbeat(self._experiment_dir / record.trial_id)
            if beat is not None and beat.epoch > record.epochs:  # not an epoch already reported
                # A beat several periods old: a long batch, or a worker that died (Ray retries it
                # once it knows): said as it is, not as the current step.
                age = time.time() - beat.at
                quiet = f" (last heard {age:.0f} s ago)" if age > _SILENT_BEAT_S else ""
                shown.append((record.trial_id, f"trial {_name(record)} {beat.describe()}{quiet}"))
            if len(shown) == _STEPS_SHOWN:
                break
        return shown

    def time_left(self) -> float | None:
        """Seconds left: the trials and epochs still to come, at what they cost so far.

        The simulation of asynchronous ASHA that ``tunekit plan --probe`` runs
        (``forecast.trial_epochs``) says how long trials train: a trial still to come trains
        its mean, weighed with what ended trials actually trained as they accumulate
        (``EXPECTED_WEIGHS_AS_TRIALS``); a running trial, what the simulated trials that
        got as far trained beyond it. A running trial's epochs cost what its own cost so far
        (or its configuration's, by the cost model of the trials measured); each trial to
        come costs a trial's fixed seconds and its epochs at the mean cost of the latest
        measured configurations (``tunekit.driver.trial_costs``), shared by the slots the
        search has filled at once; until both are measured, the wall time per epoch so far.
        The trials to come cannot start faster than new trials started lately
        (``trial_costs.START_PACE_TRIALS``): a search bound by its driver is priced at that pace.
        """
        if self._recorder is None or self._first_epoch_at is None or self._stopping:
            return None
        recorded = len(self._recorder.trials)
        trained = len(self._recorder.epochs) - self._resumed_epochs - 1  # epochs since the first one
        running = self._recorder.running()
        if trained < 1 or (not running and recorded >= self._num_samples):
            return None
        ended, ended_epochs = self._recorder.ended_epochs()
        expected = EXPECTED_WEIGHS_AS_TRIALS * self._trial_epochs.mean
        per_trial = (ended_epochs + expected) / (ended + EXPECTED_WEIGHS_AS_TRIALS)
        waiting = max(0, self._num_samples - recorded)
        running_epochs = [self._trial_epochs.left_after(r.epochs) for r in running]
        start_pace = self._costs.start_pace_s()
        starting = waiting * start_pace if start_pace is not None else 0.0  # the driver's floor
        epoch_s, fixed_s = self._costs.epoch_s(), self._costs.fixed_s()
        if epoch_s is None or fixed_s is None:
            # The wall time per epoch so far: the slots' first epochs come in together, so it
            # means something only once each slot has reported a second (a search of several
            # objectives printed "about 1 s left" of 60 as its second epoch came in).
            if trained < 2 * max(1, self._costs.slots):
                return None
            pace = (time.monotonic() - self._first_epoch_at) / trained
            return max(0.0, (waiting * per_trial + sum(running_epochs)) * pace, starting)
        future_s = self._costs.future_epoch_s() or epoch_s
        running_work = [
            (self._costs.trial_epoch_s(r) or epoch_s) * left for r, left in zip(running, running_epochs, strict=True)
        ]
        work = waiting * (fixed_s + future_s * per_trial) + sum(running_work)
        # The slots share the work; the longest running trial is a floor the sharing cannot beat.
        return max(work / max(1, self._costs.slots), max(running_work, default=0.0), starting)

    def _counting_down(self) -> float | None:
        """``time_left``, estimated at most every ``ESTIMATE_EVERY_S`` and counted down in between."""
        at, left = self._estimate.get()
        return None if left is None else max(0.0, left - (time.monotonic() - at))

    # ----------------------------------------------------------------- output

    def _line(self, text: str) -> None:
        prefix = "\r\x1b[2K" if self._live and self._drawn else ""
        self._stream.write(f"{prefix}{text}\n")
        self._stream.flush()
        self._drawn = False
        self._last_line = time.monotonic()

    def _draw(self, *, force: bool) -> None:
        if self._recorder is None:
            return
        now = time.monotonic()
        if not force and now - self._last_draw < 1.0:
            return
        self._last_draw = now
        self._stream.write(f"\r\x1b[2K[{self._elapsed()}] {self.status_line()}")
        self._stream.flush()
        self._drawn = True

    def _elapsed(self) -> str:
        seconds = int(time.monotonic() - self._started)
        return f"{seconds // 60:02d}:{seconds % 60:02d}"


class _AtMostEverySecond(Generic[T]):
    """``compute()``'s value, computed again once ``ESTIMATE_EVERY_S`` has passed; with when it was."""

    def __init__(self, compute: Callable[[], T]) -> None:
        self._compute = compute
        self._last: tuple[float, T] | None = None

    def get(self) -> tuple[float, T]:
        now = time.monotonic()
        if self._last is None or now - self._last[0] >= ESTIMATE_EVERY_S:
            self._last = (now, self._compute())
        return self._last


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _name(record: TrialRecord) -> str:
    return str(record.number) if record.number is not None else record.trial_id


def _node(node_id: str | None) -> str:
    """A node id shortened as `tunekit status` shows it (enough to tell a cluster's nodes apart)."""
    from tunekit.results.status import NODE_ID_SHOWN

    return (node_id or "?")[:NODE_ID_SHOWN]


def front_text(records: list[TrialRecord], spec: ExperimentSpec) -> str:
    """The Pareto front of the completed feasible trials, and the select rule's pick on it."""
    from tunekit.config.objectives import selection_of
    from tunekit.search.pareto import select_from_front

    finished = [(r, r.finals) for r in records if r.status == TrialStatus.COMPLETED and r.feasible]
    front, chosen = select_from_front(finished, spec.objectives, selection_of(spec))
    if chosen is None:  # as the report says it: no trial on the front meets the rule
        return f"front {len(front)}, none meets the select rule" if front else "front 0"
    values = ", ".join(f"{o.name} {_value(chosen.finals.get(o.name))}" for o in spec.objectives)
    return f"front {len(front)}, selected trial {_name(chosen)} ({values})"


def _exploit_text(step: ExploitStep, recorder: Recorder) -> str:
    """One PBT exploit step: who took whose checkpoint, and what changed."""

    def number(trial_id: str) -> str:
        record = recorder.trials.get(trial_id)
        return _name(record) if record is not None else trial_id

    changed = [
        f"{key} {_value(step.old.get(key))} -> {_value(value)}"
        for key, value in step.new.items()
        if step.old.get(key) != value
    ]
    return (
        f"PBT: trial {number(step.trial_id)} at epoch {step.epoch} took trial {number(step.source_trial_id)}'s "
        f"epoch-{step.source_epoch} checkpoint" + (f"; {', '.join(changed)}" if changed else "; same configuration")
    )


def _value(value: object) -> str:
    """4 significant digits (a learning rate), a large whole number whole (26120 model params, not 2.612e+04)."""
    if isinstance(value, float):
        return f"{value:.0f}" if value.is_integer() and abs(value) >= 1e4 else f"{value:.4g}"
    return str(value)


def _condense(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
