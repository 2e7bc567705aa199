"""Run bookkeeping for the writer: the parent run, one child run per trial, and what each still has to send.

Events are applied to in-memory state first (``Pending`` per run); ``sync`` then sends
whatever is pending. A failed call leaves its work pending, so the next attempt picks up
where the last one stopped. Resuming reattaches to the runs MLflow already holds: the
parent by its experiment-directory tag, children by their Ray trial id.

``fill_only`` (``tunekit sync``): MLflow's metric histories are append-only, so a value
sent again is a second point. A live search appends the parent's summary at every end (a
resumed search's new counts are its newest points); a sync only fills the steps MLflow
lacks, on the parent as on every child, so syncing twice adds nothing.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, assert_never

from tunekit.config.objectives import headline_metric
from tunekit.config.spec import ExperimentSpec
from tunekit.layout import (
    ENDED_STATUSES,
    EXPLOITS_FILE,
    LEDGER_FILE,
    PARETO_FILE,
    SPEC_FILE,
    TRACKING_FILE,
    TrialStatus,
    finite,
)
from tunekit.results.best import NO_BEST, no_best_reason
from tunekit.storage.buckets import shown
from tunekit.tracking.artifacts import log_best_model, log_spec
from tunekit.tracking.batches import BatchSender, Disabled, side_by_side
from tunekit.tracking.client import MetricPoint
from tunekit.tracking.events import (
    EpochEvent,
    ExploitEvent,
    InfoEvent,
    ProgressEvent,
    RunEvent,
    TrialEndEvent,
    TrialEvent,
)
from tunekit.tracking.experiment import environment_tags, open_experiment, ui_url
from tunekit.tracking.record import TrackingRecord
from tunekit.tracking.tags import (
    INFO_TAGS,
    NOTE_TAG,
    PARENT_RUN_TAG,
    RUN_NAME_TAG,
    TAG_ATTEMPTS,
    TAG_BEST_TRIAL,
    TAG_BEST_TRIAL_NUMBER,
    TAG_EPOCHS,
    TAG_EXPERIMENT_DIR,
    TAG_KEPT_EPOCH,
    TAG_OUTCOME,
    TAG_PARETO_RANK,
    TAG_PBT_EXPLOITS,
    TAG_PBT_STEP_PREFIX,
    TAG_REASON,
    TAG_ROLE,
    TAG_RUNG,
    TAG_SESSIONS,
    TAG_STATUS,
    TAG_TRIAL_ID,
    TAG_TRIAL_NUMBER,
    TAG_WALL_SECONDS,
)
from tunekit.tracking.values import (
    MAX_TAG_LENGTH,
    brief,
    budget_tags,
    logger,
    metric_key,
    outcome,
    param_key,
    param_value,
    run_name,
    run_status,
    spec_params,
    tag_value,
    warm_start_params,
)

# Trials' runs are sent over this many connections at once. MLflow's REST API takes one run
# per request, at least 3 per trial (create, a batch of values, end), so one connection's
# throughput is bound by the round trip: through a proxy adding 10 ms per request, 1, 2 and
# 3 connections sent 10.7, 21.6 and 28.7 trials a second; on loopback (PostgreSQL behind
# the server) 32, 42 and 41. Where the server shares the search's cores, more connections
# only move CPU from the search to the server (scale benchmark, 2 cores: the same wall).
SEND_LANES = 2
_LOST_REASON = "started just before the driver stopped and not in Ray's last saved state; not resumed"


@dataclass
class Pending:
    """What one run still has to send; cleared piece by piece as MLflow accepts it."""

    params: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    metrics: list[MetricPoint] = field(default_factory=list)
    status: tuple[str, int | None] | None = None  # MLflow run status, end time in ms
    reopen: bool = False

    def empty(self) -> bool:
        return not (self.params or self.tags or self.metrics or self.status or self.reopen)


@dataclass
class TrialRun:
    trial_id: str
    number: int | None = None
    started_at: float = field(default_factory=time.time)
    run_id: str | None = None
    name: str = ""  # its run's name once it ended (``run_name``): the parent's description names the best
    steps: dict[int, float] | None = field(default_factory=dict)  # epochs MLflow holds, their value; None: ask
    pending: Pending = field(default_factory=Pending)


@dataclass(frozen=True)
class _Pick:
    """Several objectives: the summary's ``select`` choice; no trial when the rule chose none."""

    trial_id: str | None
    metric: float | None
    values: dict[str, float]  # every objective's final value
    rule: str  # how it was chosen ("select: maximize ... among the Pareto front ...")


class RunBook:
    """The experiment's runs and their pending values; only the writer thread uses it (its
    ``sync`` hands trials to lanes, each trial's ``TrialRun`` to one lane).

    Args:
        spec: the experiment's spec.
        experiment_dir: its directory (tags the parent run; holds spec.yaml and tracking.json).
        started: when the search started (the parent run's start time).
        fill_only: send a parent metric only at a step MLflow does not hold for it yet.
    """

    def __init__(self, spec: ExperimentSpec, experiment_dir: Path, started: float, *, fill_only: bool = False) -> None:
        self.spec = spec
        self.experiment_dir = experiment_dir
        self.sender: BatchSender | None = None  # set once connected
        self.trials: dict[str, TrialRun] = {}
        # Trials with something to send, in the order they first had (an ordered set): a sync
        # looks at these, not at every trial of the search.
        self._changed: dict[str, None] = {}
        self._started = started
        self._experiment_id: str | None = None
        self._parent_id: str | None = None
        self._children: dict[str, str] | None = None  # trial id -> run id, found on resume
        self._parent = Pending()
        self._spec_pending = False
        self._model_trial: str | None = None
        self._last_best: tuple[int, float | None] | None = None
        self._last_best_ms = 0  # the timestamp of the parent's last best point
        self._summary_keys: set[str] = set()  # the parent's summary metrics (one point per session)
        self._fill_only = fill_only
        self._parent_found = False  # the parent existed before this session: its metrics may too
        self._record: TrackingRecord | None = None  # tracking.json, once the parent is open
        self._parent_ended = False  # this session's end of the parent run went through

    def forget_trials(self) -> None:
        """Tracking is off for this search: nothing of the trials is sent any more."""
        self.trials.clear()
        self._changed.clear()

    def unsent_metrics(self) -> int:
        return sum(len(self.trials[trial_id].pending.metrics) for trial_id in self._changed)

    @property
    def parent_id(self) -> str | None:
        return self._parent_id

    @property
    def experiment_id(self) -> str | None:
        return self._experiment_id

    # ------------------------------------------------------------------- events

    def apply(self, event: RunEvent) -> None:
        """Records what ``event`` asks MLflow to hold; nothing is sent until ``sync``."""
        match event:
            case EpochEvent():
                self._trial(event.trial_id).pending.metrics.extend(
                    MetricPoint(metric_key(key), value, event.timestamp_ms, event.step)
                    for key, value in sorted(event.metrics.items())
                )
            case TrialEvent():
                trial = self._trial(event.trial_id)
                trial.number, trial.started_at = event.number, event.started_at
                trial.pending.params.update({param_key(k): param_value(v) for k, v in event.params.items()})
                if event.number is not None:
                    trial.pending.tags[TAG_TRIAL_NUMBER] = str(event.number)
                if event.running:  # a new trial, or one Ray restarts (after a lost worker, on resume)
                    trial.pending.tags.update({TAG_STATUS: str(TrialStatus.RUNNING), TAG_ATTEMPTS: str(event.attempts)})
                    trial.pending.tags[RUN_NAME_TAG] = run_name(self._label(trial), TrialStatus.RUNNING, 0)
                    trial.pending.status = None
                    trial.pending.reopen = trial.run_id is not None
            case InfoEvent():
                tags = {INFO_TAGS[key]: tag_value(value) for key, value in event.info.items() if key in INFO_TAGS}
                self._trial(event.trial_id).pending.tags.update(tags)
            case TrialEndEvent():
                trial = self._trial(event.trial_id)
                trial.name = run_name(self._label(trial), event.status, event.epochs)
                trial.pending.tags.update(
                    {
                        TAG_STATUS: str(event.status),
                        TAG_OUTCOME: outcome(event.status, event.rung, event.epochs, event.reason),
                        TAG_EPOCHS: str(event.epochs),
                        TAG_ATTEMPTS: str(event.attempts),
                        TAG_WALL_SECONDS: f"{event.wall_seconds:.3f}",
                        RUN_NAME_TAG: trial.name,
                        **({TAG_RUNG: str(event.rung)} if event.rung is not None else {}),
                        **({TAG_KEPT_EPOCH: str(event.kept_epoch)} if event.kept_epoch is not None else {}),
                        **({TAG_REASON: event.reason[:MAX_TAG_LENGTH]} if event.reason else {}),
                    }
                )
                trial.pending.status = (run_status(event.status), int(event.ended_at * 1000))
            case ExploitEvent():
                steps = {f"{TAG_PBT_STEP_PREFIX}{i}": text[:MAX_TAG_LENGTH] for i, text in enumerate(event.steps, 1)}
                self._trial(event.trial_id).pending.tags.update({TAG_PBT_EXPLOITS: str(len(event.steps)), **steps})
            case ProgressEvent():
                self._apply_progress(event)
            case _:
                assert_never(event)

    def _apply_progress(self, event: ProgressEvent) -> None:
        now = int((time.time() if event.at is None else event.at) * 1000)
        # Several objectives, at the end: the summary's select pick is the parent's best (the
        # recorder's best so far is the best of the rule's metric, on the front or not), or none
        # when the rule chose none.
        pick = self._summary_pick() if event.final else None
        best = finite(event.best) if pick is None else pick.metric
        if pick is not None:
            event = replace(event, best_trial=pick.trial_id)
        point = (event.ended, best)
        if best is not None and point != self._last_best:
            # Later than the last point, so MLflow's latest value is this one: at the same step
            # and millisecond it would keep the larger (the running best over the pick).
            stamp = max(now, self._last_best_ms + 1)
            self._parent.metrics.append(
                MetricPoint(metric_key(f"best_{headline_metric(self.spec).name}"), best, stamp, event.ended)
            )
            self._last_best, self._last_best_ms = point, stamp
        best_run = self.trials.get(event.best_trial) if event.best_trial else None
        if event.best_trial:
            self._parent.tags[TAG_BEST_TRIAL] = event.best_trial
        if best_run is not None and best_run.number is not None:
            self._parent.tags[TAG_BEST_TRIAL_NUMBER] = str(best_run.number)
        if not event.final:
            return
        if event.best_trial and best is not None:
            name = best_run.name if best_run is not None and best_run.name else f"trial {event.best_trial}"
            values = pick.values if pick is not None and pick.values else {headline_metric(self.spec).name: best}
            scores = ", ".join(f"{objective} {value:.4g}" for objective, value in values.items())
            chosen = f" ({pick.rule})" if pick is not None and pick.rule else ""
            self._parent.tags[NOTE_TAG] = f"Best trial: {name}, {scores}{chosen}."
        else:  # the running best named mid-search is not the search's best
            self._parent.tags.update({TAG_BEST_TRIAL: NO_BEST, TAG_BEST_TRIAL_NUMBER: NO_BEST})
            reason = no_best_reason(len(self.spec.objectives) > 1)
            self._parent.tags[NOTE_TAG] = f"No best trial: {reason}."
        # ledger.json, which tunekit.results.summary.LedgerFile wrote just before, renders the
        # one computation of every figure; the recorder's counts stand in when it could not.
        summary = _ledger_metrics(self.experiment_dir / LEDGER_FILE) or self._recorded_figures(event)
        if event.sessions:
            self._parent.tags[TAG_SESSIONS] = json.dumps([list(pair) for pair in event.sessions])
        # At the session's number, not a time: MLflow's latest point is the highest step, then the
        # latest timestamp, and a driver whose clock ran ahead would stay "latest" over every later one.
        session = len(event.sessions)
        self._parent.metrics.extend(MetricPoint(key, value, now, session) for key, value in summary.items())
        self._summary_keys = set(summary)
        # A search that ended with no trial reporting the metric failed (the command exits 1);
        # one whose select rule chose no trial of its front did not.
        status = "KILLED" if event.interrupted else "FINISHED" if finite(event.best) is not None else "FAILED"
        self._parent.status = (status, now)
        self._model_trial = event.best_trial if best is not None else None

    def _summary_pick(self) -> _Pick | None:
        """Several objectives: puts the summary's Pareto rank on every trial's run and returns
        its ``select`` choice (the parent's best). None with one objective or no ledger."""
        summary = _ledger_summary(self.experiment_dir / LEDGER_FILE)
        pareto = summary.get("pareto")
        if not isinstance(pareto, dict):
            return None
        ranks = {**pareto.get("unranked", {}), **{t: str(r) for t, r in pareto.get("ranks", {}).items()}}
        for trial_id, rank in ranks.items():
            self._trial(trial_id).pending.tags[TAG_PARETO_RANK] = rank
        best = summary.get("best") or {}
        values = {
            str(name): number
            for name, value in (best.get("values") or {}).items()
            if (number := finite(value)) is not None
        }
        trial_id = str(best["trial_id"]) if best.get("trial_id") else None
        return _Pick(trial_id, finite(best.get("metric")), values, str(best.get("rule") or ""))

    def _recorded_figures(self, event: ProgressEvent) -> dict[str, float]:
        budget = self.spec.budget
        return {
            **{f"trials_{status}": float(event.counts.get(status, 0)) for status in ENDED_STATUSES},
            "epochs_spent": float(event.epochs_spent),
            "epochs_full_budget": float(budget.num_samples * budget.max_epochs),
            "wall_seconds": round(event.wall_seconds, 3),
        }

    @staticmethod
    def _label(trial: TrialRun) -> int | str:
        return trial.number if trial.number is not None else trial.trial_id

    def _trial(self, trial_id: str) -> TrialRun:
        """The trial's run bookkeeping, for a change to send: it joins the next sync."""
        self._changed[trial_id] = None
        trial = self.trials.get(trial_id)
        if trial is None:
            trial = self.trials[trial_id] = TrialRun(trial_id)
            trial.pending.tags.update({TAG_TRIAL_ID: trial_id, TAG_ROLE: "trial", **environment_tags()})
            if self._children is not None:  # resumed: MLflow may hold this trial already
                trial.run_id = self._children.get(trial_id)
                trial.steps = None if trial.run_id else {}
        return trial

    # -------------------------------------------------------------------- sync

    def sync(self) -> None:
        """Sends everything pending. Idempotent: a failed call leaves its work pending."""
        if self._parent_id is None:
            self.open_parent()
        due = [trial for trial_id in self._changed if not (trial := self.trials[trial_id]).pending.empty()]
        errors = side_by_side(self._sync_trial, due, SEND_LANES)
        for trial_id in list(self._changed):  # a trial stays changed while it has something to send
            if self.trials[trial_id].pending.empty():
                del self._changed[trial_id]
        if errors:
            raise next((error for error in errors if isinstance(error, Disabled)), errors[0])
        self._sync_parent()

    def open_parent(self) -> None:
        """Finds or creates the experiment and its parent run (found again on resume), and writes tracking.json."""
        sender = self._sender()
        client = sender.client
        name = self.spec.tracking.experiment or self.spec.name
        experiment_id = open_experiment(client, name)
        self._experiment_id = experiment_id
        # A bucket experiment is its URI, whichever machine's cache the driver works in.
        directory = shown(self.experiment_dir)
        # The parent of this search: the run its tracking.json names, else its directory; and
        # its start (a search made again in a directory whose earlier search was deleted is
        # another search, with a parent of its own).
        recorded = TrackingRecord.read(self.experiment_dir)
        named = recorded.parent_run_id if recorded is not None else None
        parents = [
            run
            for run in client.search_runs(experiment_id, f"tags.`{TAG_ROLE}` = 'experiment'")
            if (run.run_id == named or run.tags.get(TAG_EXPERIMENT_DIR) == directory)
            and abs(run.start_ms - self._started * 1000) <= 1
        ]
        parents.sort(key=lambda run: run.run_id != named)  # the recorded one first
        if parents:
            run = parents[0]
            parent_id = self._parent_id = run.run_id
            self._parent_found = True
            self._children = {
                child.tags[TAG_TRIAL_ID]: child.run_id
                for child in client.search_runs(experiment_id, f"tags.`{PARENT_RUN_TAG}` = '{parent_id}'")
                if TAG_TRIAL_ID in child.tags
            }
            for trial in self.trials.values():  # events that came before the lookup
                if trial.run_id is None and trial.trial_id in self._children:
                    trial.run_id, trial.steps = self._children[trial.trial_id], None
            if run.status != "RUNNING":
                client.set_running(parent_id)
        else:
            self._parent_id = client.create_run(
                experiment_id,
                start_ms=int(self._started * 1000),
                name=self.experiment_dir.name,
                tags={TAG_ROLE: "experiment", TAG_EXPERIMENT_DIR: directory, **environment_tags()},
            )
        params = spec_params(self.spec)
        if parents:  # MLflow params never change; a grown search's new budget goes to tags
            params = {key: value for key, value in params.items() if not key.startswith("budget.")}
        self._parent.params.update(params)
        self._parent.tags.update(budget_tags(self.spec))
        self._parent.params.update(warm_start_params(self.experiment_dir))
        self._spec_pending = (self.experiment_dir / SPEC_FILE).is_file()
        self._write_tracking_file(name, sender.uri, experiment_id, self._parent_id)

    def _write_tracking_file(self, name: str, uri: str, experiment_id: str, parent_id: str) -> None:
        # Until this session's last sync goes through, MLflow may lack some of the files' records.
        self._record = TrackingRecord(uri, name, experiment_id, parent_id, ui_url(uri, experiment_id))
        self._save_record(self._record)

    def record_holds_everything(self) -> None:
        """After the last sync went through: ``tracking.json`` says MLflow holds the whole search."""
        if self._record is not None and self._parent_ended and not self._changed:
            self._save_record(self._record.completed())

    def _save_record(self, record: TrackingRecord) -> None:
        try:
            record.write(self.experiment_dir)
        except OSError as error:  # a convenience for `tunekit report` and the CLI: the runs are in MLflow anyway
            logger.info("tunekit: could not write %s: %s", TRACKING_FILE, brief(error))

    def _sync_trial(self, trial: TrialRun) -> None:
        sender = self._sender()
        client = sender.client
        pending = trial.pending
        if trial.run_id is None:
            # MLflow refuses a run name beside a different mlflow.runName tag: the tag is the name.
            name = pending.tags.pop(RUN_NAME_TAG, None) or run_name(self._label(trial), TrialStatus.RUNNING, 0)
            trial.run_id = client.create_run(
                self._require(self._experiment_id),
                start_ms=int(trial.started_at * 1000),
                name=name,
                tags={PARENT_RUN_TAG: self._require(self._parent_id), **pending.tags},
            )
            pending.tags.clear()
            pending.reopen = False
        if pending.reopen:
            client.set_running(trial.run_id)
            pending.reopen = False
        headline = metric_key(headline_metric(self.spec).name)
        if pending.metrics and trial.steps is None:  # reattached on resume: which epochs does MLflow hold?
            trial.steps = dict(client.metric_history(trial.run_id, headline))
        sent = _epochs_to_send(pending.metrics, headline, trial.steps or {})
        pending.metrics[:] = [m for m in pending.metrics if m.step in sent]
        sender.send(trial.run_id, pending.params, pending.tags, pending.metrics)
        if trial.steps is not None:
            trial.steps.update(sent)
        if pending.status is not None:
            status, end_ms = pending.status
            client.set_terminated(trial.run_id, status, end_ms)
            pending.status = None

    def _sync_parent(self) -> None:
        sender = self._sender()
        parent_id = self._require(self._parent_id)
        pending = self._parent
        if self._fill_only and self._parent_found:
            self._drop_held_points(parent_id, pending.metrics)
        sender.send(parent_id, pending.params, pending.tags, pending.metrics)
        if self._spec_pending:
            log_spec(sender.client, parent_id, self.experiment_dir / SPEC_FILE, self.spec.tracking.uri)
            self._spec_pending = False
        if pending.status is not None:
            # The ledger; with several objectives the front as a table; with PBT its exploit
            # steps (load_from_mlflow reads them for the configuration the best model ended with).
            for name in (LEDGER_FILE, PARETO_FILE, EXPLOITS_FILE):
                if (self.experiment_dir / name).is_file():
                    sender.client.log_artifact(parent_id, str(self.experiment_dir / name))
            self._retire_lost_trials()
            if self._model_trial is not None:
                self._log_best_model(self._model_trial)
                self._model_trial = None
            status, end_ms = pending.status
            sender.client.set_terminated(parent_id, status, end_ms)
            pending.status = None
            self._parent_ended = True

    def _drop_held_points(self, run_id: str, metrics: list[MetricPoint]) -> None:
        """Removes the points MLflow already holds, step and value, for their key (``fill_only``).

        A point at a held step with another value stays: a search stopped and resumed logs its
        running best at each count of ended trials again, and the resumed session's values,
        later, are the ones MLflow must show as latest. A summary point goes after every step
        MLflow holds for its key (``_latest_summary``).
        """
        client = self._sender().client
        held = {key: client.metric_history(run_id, key) for key in {m.key for m in metrics}}
        summary = [_latest_summary(m, held[m.key]) for m in metrics if m.key in self._summary_keys]
        running = [m for m in metrics if m.key not in self._summary_keys and (m.step, m.value) not in held[m.key]]
        metrics[:] = running + [m for m in summary if m is not None]

    def _log_best_model(self, trial_id: str) -> None:
        trial = self.trials.get(trial_id)
        run_id = trial.run_id if trial else (self._children or {}).get(trial_id)
        if run_id is not None:
            log_best_model(self._sender().client, self.spec, self.experiment_dir, trial_id, run_id)

    def _retire_lost_trials(self) -> None:
        """Moves the runs of trials a killed driver started but Ray never saved to deleted runs.

        Ray resumes from its last experiment checkpoint: a trial started after it is not
        resumed, does not count toward ``num_samples`` and its Optuna trial is closed as
        FAIL. Its run, tagged ``lost`` and KILLED, goes to MLflow's deleted runs (restorable
        there), so the experiment keeps one active run per trial of ``trials.csv``.
        """
        if not self._children:
            return  # a fresh search: every run is one of this session's trials
        client = self._sender().client
        for trial_id, run_id in list(self._children.items()):
            if trial_id in self.trials:
                continue
            client.set_tag(run_id, TAG_STATUS, str(TrialStatus.LOST))
            client.set_tag(run_id, TAG_REASON, _LOST_REASON)
            client.set_terminated(run_id, "KILLED")
            client.delete_run(run_id)
            del self._children[trial_id]  # a retry after an error goes on with the rest

    def _sender(self) -> BatchSender:
        if self.sender is None:
            raise Disabled("no MLflow client")
        return self.sender

    @staticmethod
    def _require(run_id: str | None) -> str:
        # Set by open_parent, which sync runs first; a gap here is a bug in this module.
        if run_id is None:
            raise RuntimeError("tunekit tracking: the parent run is not open")
        return run_id


def _epochs_to_send(metrics: list[MetricPoint], headline: str, held: dict[int, float]) -> dict[int, float]:
    """The epochs to send, with their headline value: those MLflow lacks, and those trained again to
    another value after a restart (MLflow's latest is then the last attempt's, as in the tables)."""
    values = {m.step: m.value for m in metrics if m.key == headline}
    again = {step for step, value in values.items() if step in held and repr(value) != repr(held[step])}
    return {m.step: values.get(m.step, float("nan")) for m in metrics if m.step not in held or m.step in again}


def _ledger_summary(path: Path) -> dict[str, Any]:
    """The ``summary`` figures of a ``ledger.json``; empty when the search wrote none."""
    try:
        summary = json.loads(path.read_text()).get("summary", {})
    except (OSError, ValueError, AttributeError):
        return {}
    return summary if isinstance(summary, dict) else {}


def _ledger_metrics(path: Path) -> dict[str, float]:
    """The flat metrics of a ``ledger.json``; none when the search wrote no ledger."""
    try:
        metrics = json.loads(path.read_text()).get("metrics", {})
    except (OSError, ValueError, AttributeError):
        return {}
    return {str(key): number for key, value in metrics.items() if (number := finite(value)) is not None}


def _latest_summary(point: MetricPoint, held: list[tuple[int, float]]) -> MetricPoint | None:
    """A summary point as MLflow must show it, latest: None when its latest step holds only this
    value already; else after every step it holds, whatever their times (a session on a host
    whose clock ran ahead logged its own with a later timestamp)."""
    last = max((step for step, _ in held), default=-1)
    if last >= 0 and {value for step, value in held if step == last} == {point.value}:
        return None
    return point if point.step > last else point._replace(step=last + 1)
