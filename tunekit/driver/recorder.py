"""Driver-side record of a search: Ray events in, trial and epoch tables out.

This is the one place that reads Ray's trial events. It keeps a ``TrialRecord`` per
trial and an ``EpochRow`` per reported epoch (``tunekit.driver.records``, with the rules
of how a trial ended), writes ``trials.csv``, ``epochs.csv`` and ``spans.csv`` into the
experiment directory at most every ``_LIVE_WRITE_EVERY_S`` while anything changed (and at
the session's end), and forwards each change to listeners (the console and the MLflow
tracker), which never touch Ray themselves. A restored recorder takes its clock and its
schedulers' state back from its records (``tunekit.driver.replay``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ray.tune import Callback
from ray.tune.experiment import Trial
from ray.tune.schedulers import TrialScheduler
from ray.tune.stopper import Stopper

from tunekit.compat.ray_tune import checkpoint_epoch
from tunekit.config.objectives import headline_metric
from tunekit.config.spec import ExperimentSpec
from tunekit.driver.guard import FailureRules
from tunekit.driver.late_endings import LateEnding, interrupted_runs
from tunekit.driver.listener import Listener
from tunekit.driver.records import (
    EpochRow,
    EpochsTable,
    SpansTable,
    TrialRecord,
    TrialsTable,
    TrialTally,
    apply_epoch,
    apply_kept,
    kept_after_the_driver_died,
    params_of,
    settle_ended,
    settle_errored,
)
from tunekit.driver.replay import last_session_reaches_its_records, metric_by_epoch, replay_schedulers, restored_clock
from tunekit.driver.saved_records import SavedRecords, records_of
from tunekit.driver.worker_deaths import ray_error_text
from tunekit.layout import (
    CHECKPOINT_NOTE,
    CHECKPOINTED,
    EPOCH_KEY,
    EPOCHS_FILE,
    EXPLOITS_FILE,
    EXPORT_NOTE,
    FAILURE_KEY,
    INFO_KEY,
    KEPT_EPOCH,
    KEPT_VALUE,
    RESTORED_WEIGHTS,
    SPANS_FILE,
    STOPPED_BY_MODEL,
    TRIALS_FILE,
    TrialStatus,
    finite,
)
from tunekit.search.pbt import ExploitStep, RecordingPBT, write_exploits_csv
from tunekit.search.plan import pick_best, rung_of
from tunekit.storage.clock import SearchClock
from tunekit.storage.journal import JournalSealer

logger = logging.getLogger("tunekit")

_TOUCH_EVERY_S = 5.0  # how stale started.json's session end may be when a driver is killed
_LIVE_WRITE_EVERY_S = 2.0  # how stale the tables may be for `tunekit status` while trials report


class Recorder(Callback):
    """Builds the trial and epoch tables from Ray's callbacks and writes them as CSV."""

    # Class-level, so a recorder unpickled from an older experiment's state has them too.
    _written = 0.0  # when the tables were last written
    _unwritten = False  # records changed since then
    _tables: tuple[TrialsTable, EpochsTable, SpansTable] | None = None  # built on first write, never pickled
    # best() among completed trials, kept as they end: the console and the tracker ask as
    # every trial ends, and pick_best over every record made the driver's cost per trial
    # grow with the search (benchmarks/scale.py).
    _best_completed: TrialRecord | None = None

    def __init__(
        self,
        spec: ExperimentSpec,
        experiment_dir: Path,
        searcher: Any,
        scheduler: TrialScheduler,
        listeners: Sequence[Listener] = (),
    ) -> None:
        self.spec = spec
        self.experiment_dir = experiment_dir
        self.searcher = searcher
        self.scheduler = scheduler
        self.listeners = list(listeners)
        self.trials: dict[str, TrialRecord] = {}
        self.epochs: list[EpochRow] = []
        self.clock = SearchClock.new()
        self.export_notes: set[str] = set()
        self.exploits: list[ExploitStep] = []  # PBT's exploit steps, in order (exploits.csv)
        self._row_index: dict[str, dict[int, int]] = {}  # {trial id: {epoch: its row in self.epochs}}
        self._saved = SavedRecords()  # ended trials as Ray saves them, pickled once
        # What changed since the tables were last written: trial ids, and epoch rows replaced.
        self._changed: set[str] = set()
        self._replaced_rows: set[int] = set()
        self._touched = 0.0  # when started.json's session end was last moved
        self._tally = TrialTally()  # what the console reads every redraw, kept as records change
        # When this process's session began (the runner sets it before Ray starts, so the
        # active clock and the console's elapsed time agree); setup's time when unset.
        self.session_began: float | None = None
        self._interrupted: dict[str, TrialRecord] = {}  # see late_endings.interrupted_runs

    # ----------------------------------------------------------------- Ray callbacks

    def on_trial_start(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        record = self.trials.get(trial.trial_id)
        if record is None and trial.trial_id in self._interrupted:  # its run in a killed driver's session
            record = self.trials[trial.trial_id] = self._interrupted.pop(trial.trial_id)
            record.number, record.params = self.searcher.trial_number(trial.trial_id), params_of(trial.config)
        if record is None:
            record = TrialRecord(trial.trial_id, self.searcher.trial_number(trial.trial_id), params_of(trial.config))
            self.trials[trial.trial_id] = record
        else:  # restarted after a worker died, or resumed, or after PBT paused it
            if not (isinstance(self.scheduler, RecordingPBT) and self.scheduler.restarted_after_pause(trial.trial_id)):
                record.attempts += 1
                # Where Ray starts it: after a killed driver, the checkpoint Ray's saved state
                # names, which may be older than the last one the dead driver heard of.
                record.checkpoint_epoch = checkpoint_epoch(trial, EPOCH_KEY)
            record.status = TrialStatus.RUNNING
        record.begin_span(self.clock.now())
        self._changed_record(record)  # `tunekit status` sees it running within _LIVE_WRITE_EVERY_S
        for listener in self.listeners:
            listener.trial_started(record)

    def on_trial_result(
        self, iteration: int, trials: list[Trial], trial: Trial, result: dict[str, Any], **info: Any
    ) -> None:
        record = self._record(trial)
        if result.get(FAILURE_KEY):
            record.reason = str(result[FAILURE_KEY])
            return
        bookkeeping = result.get(INFO_KEY, {})
        if STOPPED_BY_MODEL in bookkeeping:
            record.stopped_by_model = int(bookkeeping[STOPPED_BY_MODEL])
        if bookkeeping.get(RESTORED_WEIGHTS):
            record.restored_weights = True
        if bookkeeping.get(CHECKPOINTED):
            record.checkpoint_epoch = int(result[EPOCH_KEY])
        if bookkeeping.get(CHECKPOINT_NOTE):
            self.warn(f"trial {record.number}: {bookkeeping[CHECKPOINT_NOTE]}")
        if bookkeeping.get(EXPORT_NOTE):
            self._warn_export(record, str(bookkeeping[EXPORT_NOTE]))
        names = bookkeeping.get("metrics", [])
        metrics = {name: float(result[name]) for name in names if name in result}
        if "info" in bookkeeping:
            record.info = {**bookkeeping["info"], "node_ip": result.get("node_ip", "")}
            record.node_id = str(record.info.get("node_id", ""))
        # Ray adds the worker's pid to every result; the node comes with the attempt's first epoch.
        record.note_worker(record.node_id if "info" in bookkeeping else "", result.get("pid"))
        self._changed_record(record)
        row = EpochRow(
            trial.trial_id,
            int(result[EPOCH_KEY]),
            metrics,
            record.attempts,
            bookkeeping.get("resumed_from_epoch"),
            self.clock.now(),
        )
        replaced = self._add_row(row)
        apply_epoch(record, row, self.spec)
        if replaced:
            self._rebest(record)
        if KEPT_EPOCH in bookkeeping:
            apply_kept(record, bookkeeping[KEPT_EPOCH], bookkeeping.get(KEPT_VALUE))
        for listener in self.listeners:
            listener.epoch_reported(record, row)

    def on_trial_complete(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        record = self._record(trial)
        pruned = trial.trial_id in getattr(self.scheduler, "stopped", ())
        settle_ended(record, self.spec, pruned=pruned, elapsed=self.clock.now(), aborted=self._aborted())
        self._end(record)

    def on_trial_error(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        record = self._record(trial)
        settle_errored(record, ray_error_text(trial), getattr(trial, "last_result", None))
        self._end(record)

    def on_trial_recover(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        """A worker died and Ray retries the trial from its checkpoint: this span ends here."""
        record = self._record(trial)
        record.close_span(self.clock.now())
        self._changed_record(record)

    def _warn_export(self, record: TrialRecord, note: str) -> None:
        """One warning line per search: every trial of one model class fails its export alike."""
        first = not self.export_notes
        self.export_notes.add(note)
        if first:
            self.warn(
                f"trial {record.number}: {note}; rebuild such a model with build_model "
                f"and model.load_weights (shown once; see output.log of each trial)"
            )

    def warn(self, message: str) -> None:
        """A warning for the person watching: the console prints it above its status line."""
        logger.info("warning: %s", message)  # for logs; the console shows it to the user
        for listener in self.listeners:
            listener.warning(message)

    def _add_row(self, row: EpochRow) -> bool:
        """One row per trial per epoch: an epoch trained again after a restore replaces its row (True)."""
        places = self._row_index.setdefault(row.trial_id, {})
        index = places.get(row.epoch)
        if index is not None:
            self.epochs[index] = row
            self._replaced_rows.add(index)
            return True
        places[row.epoch] = len(self.epochs)
        self.epochs.append(row)
        return False

    def _rebest(self, record: TrialRecord) -> None:
        """A trial trained an epoch again: its best is over the rows it has now, not the ones replaced."""
        headline = headline_metric(self.spec)
        values = [
            value
            for epoch in range(1, record.epochs + 1)
            if (index := self._row_index.get(record.trial_id, {}).get(epoch)) is not None
            and (value := finite(self.epochs[index].metrics.get(headline.name))) is not None
        ]
        record.best_metric = (max if headline.mode == "max" else min)(values) if values else None

    def on_step_end(self, iteration: int, trials: list[Trial], **info: Any) -> None:
        if isinstance(self.scheduler, RecordingPBT):
            self._close_paused_spans(trials)
        if time.time() - self._touched > _TOUCH_EVERY_S:
            self._touch_clock()
        if self._unwritten and time.time() - self._written > _LIVE_WRITE_EVERY_S:
            self.write_tables()
        if isinstance(self.scheduler, RecordingPBT) and len(self.scheduler.exploits) > len(self.exploits):
            for step in self.scheduler.exploits[len(self.exploits) :]:
                self.searcher.note_exploit(step.trial_id, step.for_study(self.searcher.trial_number))
            self.exploits = list(self.scheduler.exploits)
            self.write_tables()
        for listener in self.listeners:
            listener.tick(self)

    def setup(
        self,
        stop: Stopper | None = None,
        num_samples: int | None = None,
        total_num_samples: int | None = None,
        **info: Any,
    ) -> None:
        self.clock.begin(self.session_began)
        self._touch_clock()
        for listener in self.listeners:
            listener.experiment_started(self)
        if note := self.searcher.lost_note():  # a resume's lost trials
            self.warn(note)

    def on_experiment_end(self, trials: list[Trial], **info: Any) -> None:
        self._reconcile(trials)
        self.searcher.settle_ended(
            {r.trial_id: self._last_result(r) for r in self.trials.values() if r.status.is_finished()}
        )
        self.end_session()
        for listener in self.listeners:
            listener.experiment_ended(self)

    # -------------------------------------------------------------------- queries

    def counts(self) -> dict[str, int]:
        """Trials per status (every status present, 0 where none)."""
        return self._tally.counts()

    def running(self) -> list[TrialRecord]:
        """The running trials' records."""
        return self._tally.running()

    def ended_epochs(self) -> tuple[int, int]:
        """How many trials have ended, and the epochs they trained together."""
        return self._tally.ended_epochs()

    def best(self) -> TrialRecord | None:
        """The best trial so far, by ``pick_best``'s rule: a completed trial once there is one
        (its final metric no longer changes, so it is kept as trials end), else any scored one."""
        kept = self._best_completed
        if kept is not None and kept.status == TrialStatus.COMPLETED:
            return kept
        if kept is not None:  # it runs again (a resumed search reopened it): look afresh
            self._rescan_best()
            if self._best_completed is not None:
                return self._best_completed
        candidates = [(r.status, r.final_metric, r) for r in self.trials.values()]
        return pick_best(candidates, headline_metric(self.spec).mode)

    def _rescan_best(self) -> None:
        self._best_completed = None
        for record in self.trials.values():
            self._keep_best(record)

    def _keep_best(self, record: TrialRecord) -> None:
        """A trial ended: is it the best completed one? Ties go to the lower trial number, as in trials.csv."""
        if record.status != TrialStatus.COMPLETED or finite(record.final_metric) is None:
            return
        pair = [r for r in (self._best_completed, record) if r is not None]
        ordered = sorted(pair, key=lambda r: (r.number is None, r.number))
        self._best_completed = pick_best(
            [(r.status, r.final_metric, r) for r in ordered], headline_metric(self.spec).mode
        )

    # ------------------------------------------------------------------- internals

    def settle_study(self) -> None:
        """After a search that ended by itself (not by a signal, whose stopped trials a resume
        continues): trials it stopped around without telling the searcher close in the study too."""
        ended = [record for record in self.trials.values() if record.status.is_finished()]
        self.searcher.settle_ended({record.trial_id: self._last_result(record) for record in ended})
        self.searcher.mark_held(False)

    def _aborted(self) -> bool:
        """The failure guard (one of the listeners) stopped the whole search."""
        return any(isinstance(listener, FailureRules) and listener.stop_all() for listener in self.listeners)

    def _last_result(self, record: TrialRecord) -> dict[str, Any]:
        """A trial's last report, as the searcher reads it, rebuilt from its record."""
        if record.status == TrialStatus.FAILED:
            return {FAILURE_KEY: record.reason or "failed"}
        result: dict[str, Any] = {EPOCH_KEY: record.epochs}
        if record.final_metric is not None:
            result[headline_metric(self.spec).name] = record.final_metric
        result.update(record.finals)  # several objectives: each one's last value
        if record.stopped_by_model is not None:
            result[INFO_KEY] = {STOPPED_BY_MODEL: record.stopped_by_model}
        return result

    def end_session(self) -> None:
        """This process's session ends: running trials' spans close, the clock stops, tables are written.

        Called when Ray ends the experiment and again by the runner after ``fit`` (an
        interrupted ``fit`` may skip Ray's end); the second call changes nothing.
        """
        now = self.clock.now()
        for record in self.trials.values():
            if record.status == TrialStatus.RUNNING:
                # Ray ended the session around it without a callback: paused by PBT, or
                # waiting to run again, when a signal stopped the search. Nothing runs now.
                settle_ended(record, self.spec, pruned=False, elapsed=now, aborted=self._aborted())
                self._end(record)
            record.close_span(now)
        self._changed.update(self.trials)
        self.clock.end()
        self.write_tables()

    def _close_paused_spans(self, trials: list[Trial]) -> None:
        """PBT pauses trials while it ranks them; a paused trial holds no slot, so its span ends."""
        now = None
        for trial in trials:
            record = self.trials.get(trial.trial_id)
            if record is None or not record.spans or record.spans[-1][1] is not None:
                continue
            if trial.status == Trial.PAUSED:
                now = self.clock.now() if now is None else now
                record.close_span(now)
                self._changed_record(record)

    def _touch_clock(self) -> None:
        self._touched = time.time()
        self.clock.touch(self._touched)
        self.clock.write(self.experiment_dir)

    def _record(self, trial: Trial) -> TrialRecord:
        if trial.trial_id not in self.trials:
            self.on_trial_start(0, [], trial)
        return self.trials[trial.trial_id]

    def _reconcile(self, trials: list[Trial]) -> None:
        """Ray ends some trials without a callback (a failed actor reuse); record them anyway."""
        for trial in trials:
            record = self._record(trial)
            if record.status.is_finished():
                continue
            if trial.status == Trial.ERROR:
                self.on_trial_error(0, trials, trial)
            elif trial.status == Trial.TERMINATED:
                self.on_trial_complete(0, trials, trial)

    def _end(self, record: TrialRecord) -> None:
        record.ended_at = time.time()
        record.close_span(self.clock.now())
        if record.status == TrialStatus.COMPLETED:
            record.rung = rung_of(record.epochs, self.spec)
        self._changed_record(record)
        self._keep_best(record)
        for listener in self.listeners:
            listener.trial_ended(record)

    def _changed_record(self, record: TrialRecord) -> None:
        """Every change to a record ends here: the tables and the status tally follow it."""
        self._changed.add(record.trial_id)
        self._saved.changed(record.trial_id)
        self._unwritten = True
        self._tally.count(record)

    def write_tables(self) -> None:
        """Writes every table; only rows that changed since the last write are rendered again."""
        self._written, self._unwritten = time.time(), False
        self._touch_clock()
        if self._tables is None:  # a new or restored recorder: every row is rendered
            self._tables = (
                TrialsTable(self.experiment_dir / TRIALS_FILE),
                EpochsTable(self.experiment_dir / EPOCHS_FILE),
                SpansTable(self.experiment_dir / SPANS_FILE),
            )
        trials, epochs, spans = self._tables
        changed, self._changed = self._changed, set()
        replaced, self._replaced_rows = self._replaced_rows, set()
        trials.write(self.trials, changed, self.clock.now())
        epochs.write(self.epochs, replaced)
        spans.write(self.trials, changed)
        # After the tables: every trial they name is in the journal that the seal covers.
        self.__dict__.setdefault("_sealer", JournalSealer(self.experiment_dir)).seal()
        if isinstance(self.scheduler, RecordingPBT):
            numbers = {r.trial_id: r.number for r in self.trials.values()}
            params = self.scheduler.params
            write_exploits_csv(self.experiment_dir / EXPLOITS_FILE, self.exploits, numbers, params, self.clock)

    # Ray saves this with every save of its experiment state and hands it back on restore.
    def get_state(self) -> dict[str, Any]:
        records = self._saved.state(self.trials, self._row_index, self.epochs)
        return {"records": records, "clock": self.clock, "exploits": self.exploits}

    def set_state(self, state: dict[str, Any]) -> None:
        self.trials, self.epochs = records_of(state.get("records", state))
        self._tables = None
        self._tally = TrialTally(self.trials.values())
        self._row_index = {}
        for index, row in enumerate(self.epochs):
            self._row_index.setdefault(row.trial_id, {})[row.epoch] = index
        self.clock = restored_clock(self.experiment_dir, state)
        endings: dict[str, LateEnding] = self.__dict__.pop("_late_endings", {})
        for ending in endings.values():
            self._adopt(ending, self.clock.active_seconds)
        self._rescan_best()
        last_session_reaches_its_records(self.clock, self.trials.values(), self.epochs)
        # Trials running when the last session ended stopped with it, whatever Ray saved.
        stopped_at = self.clock.active_seconds
        for record in self.trials.values():
            record.close_span(stopped_at)
        self._interrupted = interrupted_runs(self.experiment_dir, set(self.trials), stopped_at)
        self.exploits = replay_schedulers(
            self.scheduler,
            self.searcher,
            self.spec,
            self.experiment_dir,
            self.trials,
            self.epochs,
            self.clock,
            state.get("exploits", []),
        )

    def adopt_late_endings(self, endings: Mapping[str, LateEnding]) -> None:
        """Trials the killed driver ended after Ray's last save; ``set_state`` ends their records
        as the study did (see ``tunekit.driver.late_endings``). The runner calls this before Ray restores."""
        self._late_endings = dict(endings)

    def _adopt(self, ending: LateEnding, session_end: float) -> None:
        """Ends a restored record as the dead driver did: the epochs and spans it wrote after
        Ray's save (the study's values where it wrote none), then the study's ending.

        ``session_end``: the active seconds the last session ran, as its clock file says.
        """
        record = self.trials.get(ending.trial_id)
        if record is None:  # it started after Ray's save
            record = TrialRecord(ending.trial_id, ending.number, params_of(ending.config))
            record.started_at = float(ending.written.get("started_at") or ending.ended_at or record.started_at)
            self.trials[record.trial_id] = record
        if record.status.is_finished():
            return
        if len(ending.spans) >= len(record.spans):  # the tables were written after Ray's save
            record.spans = [[start, end] for start, end, _ in ending.spans]
            record.span_workers = [dict(worker) for _, _, worker in ending.spans]
        later = {row.epoch: row for row in ending.rows if row.epoch > record.epochs}
        # Epochs only the study heard of were reported after everything written down, and the
        # clock file may lag the tables: they count at the latest moment any of them knows of.
        restored = (self.epochs[index].at for index in self._row_index.get(record.trial_id, {}).values())
        spans = (moment for span in record.spans for moment in span if moment)
        last_known = max([session_end, *restored, *(row.at for row in later.values()), *spans])
        for step, metrics in ending.steps.items():
            if step > record.epochs and step not in later:
                later[step] = EpochRow(record.trial_id, step, dict(metrics), record.attempts, None, last_known)
        for epoch in sorted(later):
            self._add_row(later[epoch])
            apply_epoch(record, later[epoch], self.spec)
        if later and not record.spans:  # it ran between two writes of the tables: when is unknown
            record.begin_span(min(row.at for row in later.values()))
        if ending.state == "FAIL":
            record.status = TrialStatus.FAILED
            record.reason = "failed after Ray last saved the search; the driver died before recording why"
        else:
            if ending.state == "COMPLETE" and record.epochs < self.spec.budget.max_epochs:
                record.stopped_by_model = record.epochs  # the study completes a shorter trial only then
            settle_ended(record, self.spec, pruned=ending.state == "PRUNED", elapsed=session_end)
        if ending.written.get("status") == record.status and ending.written.get("reason"):
            record.reason = ending.written["reason"]  # the dead driver's words: an error, restored weights
        record.ended_at = ending.ended_at or time.time()
        if record.status == TrialStatus.COMPLETED:
            record.rung = rung_of(record.epochs, self.spec)
            values = metric_by_epoch(self.epochs, self.spec.metric.name).get(record.trial_id, {})
            kept_after_the_driver_died(record, values, self.spec, ending.written.get("kept_epoch"))
        self._changed_record(record)

    # Ray pickles callbacks with the tuner; listeners hold consoles and clients, tables a buffer.
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["listeners"] = []
        state.pop("_tables", None)
        state.pop("_late_endings", None)
        state.pop("_interrupted", None)
        state.pop("_saved", None)
        state.pop("_sealer", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        # A recorder pickled by an earlier tunekit (an experiment's tuner.pkl) lacks these.
        self.__dict__.setdefault("_changed", set(self.trials))
        self.__dict__.setdefault("_replaced_rows", set())
        self.__dict__.setdefault("_interrupted", {})
        self.__dict__["_saved"] = SavedRecords()
        if not isinstance(self.__dict__.get("_tally"), TrialTally):  # an earlier tunekit's dict, or none
            for stale in ("_tallied", "_running", "_ended_epochs", "_ended_epoch_total"):
                self.__dict__.pop(stale, None)
            self._tally = TrialTally(self.trials.values())
