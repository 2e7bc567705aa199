"""``tunekit sync``: an experiment's records sent to MLflow after the fact, through the live tracker's writer.

The records (``trials.csv``, ``epochs.csv``, ``exploits.csv``, ``started.json``) are read
back into the events the tracker queues during a search, and one ``MlflowWriter`` sends
them, in this thread, with its retries. So a synced experiment holds what a tracked search
would have: the parent run found by its experiment-directory tag (or created), one child
per trial found by its Ray trial id (or created), the same params and tags, each epoch
at ``step=epoch``, the spec, ``ledger.json`` and the best trial's model as artifacts, and
``tracking.json`` in the directory. Epochs MLflow holds are not sent again, and the
parent's metrics only fill steps MLflow lacks (``fill_only``), so a second sync adds
nothing and a search whose server went away halfway is completed.

CSV cells are read as text, never converted: a param logged from the cell ``0.001``
is the same string the live tracker logged from the float, and MLflow refuses a param
whose value changes. An empty cell is a parameter the trial did not have (a conditional
one), as the live tracker leaves it out.
"""

from __future__ import annotations

import logging
import os
import queue
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tunekit.config.objectives import headline_metric
from tunekit.config.spec import ExperimentSpec, parse_spec
from tunekit.errors import NotAnExperimentError, TunekitError
from tunekit.layout import (
    EPOCH_COLUMNS,
    EPOCHS_FILE,
    EXPLOITS_FILE,
    INFO_PREFIX,
    NEW_PREFIX,
    OLD_PREFIX,
    PARAM_PREFIX,
    SPEC_FILE,
    TRIALS_FILE,
    TrialStatus,
    finite,
    number_or_none,
)
from tunekit.storage.buckets import Bucket, is_uri, local_path, mirror_cache, redacted, shown
from tunekit.storage.clock import SearchClock
from tunekit.storage.lease import DriverLease
from tunekit.storage.mirror import mirrored
from tunekit.storage.store import table_rows
from tunekit.tracking.duplicates import retire_duplicates
from tunekit.tracking.events import (
    STOP,
    EpochEvent,
    ExploitEvent,
    InfoEvent,
    ProgressEvent,
    RunEvent,
    TrackerEvent,
    TrialEndEvent,
    TrialEvent,
)
from tunekit.tracking.experiment import ui_url
from tunekit.tracking.tracker import DEFAULT_FLUSH_TIMEOUT_S, FLUSH_TIMEOUT_ENV
from tunekit.tracking.writer import MlflowWriter

logger = logging.getLogger("tunekit")

Row = dict[str, str]


@dataclass(frozen=True)
class SyncResult:
    """Where the experiment's runs are now.

    Attributes:
        tracking_uri: the tracking URI, credentials removed.
        experiment_id: the MLflow experiment.
        parent_run_id: the experiment's parent run.
        trials: the experiment's trials, each of which MLflow now holds as a child run (a sync
            sends only what MLflow lacked: a second one sends nothing).
        ui_url: the runs table in the MLflow UI, for a tracking server.
    """

    tracking_uri: str
    experiment_id: str
    parent_run_id: str
    trials: int
    ui_url: str | None


def sync(experiment_dir: str | Path, tracking_uri: str | None = None) -> SyncResult:
    """Sends an experiment's records to MLflow: one parent run, one child run per trial.

    Idempotent: runs MLflow holds are found again and only what they lack is sent, so a
    second sync adds nothing, and a search that logged only part of itself is completed.

    Args:
        experiment_dir: the experiment directory, or a bucket experiment's URI.
        tracking_uri: where to send (default: the spec's ``tracking.uri``, else MLflow's default).

    Raises:
        NotAnExperimentError: the directory holds no spec.yaml.
        LeaseHeldError: a driver is writing the experiment now (a search runs, or another sync).
        TunekitError: MLflow cannot be used, or did not take everything.
    """
    location = str(experiment_dir)
    if is_uri(location):  # a bucket's: synced from this machine's cache, its records written back
        bucket = Bucket(location)
        if not bucket.exists():
            raise NotAnExperimentError(redacted(location), SPEC_FILE)
        with DriverLease(location, "sync"):
            directory = bucket.pull(mirror_cache(bucket, "driver", fresh=True))
            with mirrored(directory):
                return _sync(directory, _recorded_spec(directory), tracking_uri)
    directory = local_path(location)
    spec = _recorded_spec(directory)
    with DriverLease(directory, "sync"):  # it writes the ledger and tracking.json: one writer at a time
        return _sync(directory, spec, tracking_uri)


def _sync(directory: Path, spec: ExperimentSpec, tracking_uri: str | None) -> SyncResult:
    events: queue.SimpleQueue[TrackerEvent] = queue.SimpleQueue()
    clock = _search_clock(directory)
    trials = table_rows(directory / TRIALS_FILE)
    _refresh_ledger(directory)  # the parent's summary metrics render the one computation of them
    for event in record_events(spec, directory, trials, clock):
        events.put(event)
    events.put(STOP)
    flush_timeout = float(os.environ.get(FLUSH_TIMEOUT_ENV, DEFAULT_FLUSH_TIMEOUT_S))
    writer = MlflowWriter(
        spec,
        directory,
        events,
        flush_timeout,
        clock.started_at,
        tracking_uri=tracking_uri,
        fill_only=True,
        warn=lambda message: None,  # the one problem is raised below, as one line
    )
    writer.run()
    runs = writer.runs
    if writer.problem is not None or runs.parent_id is None or runs.experiment_id is None:
        raise TunekitError(f"sync of {shown(directory)}: {writer.problem or 'MLflow did not open a parent run'}")
    if runs.sender is not None:  # the runs MLflow holds twice for this search, retired
        kept = {trial_id: trial.run_id for trial_id, trial in runs.trials.items() if trial.run_id is not None}
        retire_duplicates(runs.sender.client, runs.experiment_id, runs.parent_id, kept)
    link = ui_url(writer.uri, runs.experiment_id)
    return SyncResult(writer.uri, runs.experiment_id, runs.parent_id, len(trials), link)


def record_events(
    spec: ExperimentSpec, experiment_dir: Path, trials: list[Row], clock: SearchClock
) -> Iterator[RunEvent]:
    """The events a tracker would have queued for these records, in the order it would have."""
    started = clock.started_at
    epochs = table_rows(experiment_dir / EPOCHS_FILE)
    for row in trials:
        status = TrialStatus(row["status"])
        yield TrialEvent(
            row["trial_id"],
            _integer(row["number"]),
            _present(row, PARAM_PREFIX),
            number_or_none(row["started_at"]) or started,
            _integer(row["attempts"]) or 1,
            status == TrialStatus.RUNNING,
        )
        info = _present(row, INFO_PREFIX) | ({"node_id": row["node_id"]} if row.get("node_id") else {})
        if info:
            yield InfoEvent(row["trial_id"], info)
    for epoch in epochs:
        metrics = {
            key: number
            for key, text in epoch.items()
            if key not in EPOCH_COLUMNS and (number := finite(number_or_none(text))) is not None
        }
        at = clock.wall_at(number_or_none(epoch["time"]) or 0.0)
        yield EpochEvent(epoch["trial_id"], int(epoch["epoch"]), metrics, int(at * 1000))
    yield from _exploit_events(experiment_dir / EXPLOITS_FILE, trials)
    ended = [row for row in trials if TrialStatus(row["status"]).is_finished()]
    ended.sort(key=lambda row: number_or_none(row["ended_at"]) or started)
    for row in ended:
        yield TrialEndEvent(
            row["trial_id"],
            TrialStatus(row["status"]),
            row["reason"],
            _integer(row["rung"]),
            _integer(row["epochs"]) or 0,
            _integer(row["attempts"]) or 1,
            number_or_none(row["ended_at"]) or started,
            number_or_none(row["wall_seconds"]) or 0.0,
            _integer(row.get("kept_epoch")),
        )
    yield from _progress_events(spec, trials, ended, clock)


def _progress_events(
    spec: ExperimentSpec, trials: list[Row], ended: list[Row], clock: SearchClock
) -> Iterator[ProgressEvent]:
    """The best value after each ended trial, in the order they ended, then the summary."""
    started, active = clock.started_at, (clock.active_seconds if clock.sessions else None)
    from tunekit.search.plan import pick_best  # the rule the recorder picks the best by

    counts: Counter[str] = Counter(TrialStatus(row["status"]) for row in trials)
    epochs_spent = sum(_integer(row["epochs"]) or 0 for row in trials)
    end = max((number_or_none(row["ended_at"]) or started for row in ended), default=started)
    best: Row | None = None
    for index, row in enumerate(ended, 1):
        # The running best against the trial that ended, as the recorder keeps it (one pass, not
        # a scan of every ended trial per trial); ties go to the lower trial number.
        pair = sorted(
            (r for r in (best, row) if r is not None),
            key=lambda r: (_integer(r["number"]) is None, _integer(r["number"]) or 0),
        )
        best = pick_best(
            [(r["status"], number_or_none(r["final_metric"]), r) for r in pair], headline_metric(spec).mode
        )
        final = index == len(ended)
        yield ProgressEvent(
            ended=index,
            best=None if best is None else number_or_none(best["final_metric"]),
            best_trial=None if best is None else best["trial_id"],
            counts=dict(counts),
            epochs_spent=epochs_spent,
            wall_seconds=end - started if active is None else active,
            final=final,
            interrupted=counts[TrialStatus.RUNNING] > 0,
            at=end if final else number_or_none(row["ended_at"]),
            sessions=tuple((start, stop) for start, stop in clock.sessions) if final else (),
        )
    if not ended:  # no trial ended: the parent still ends, as a search that ran none does
        yield ProgressEvent(0, None, None, dict(counts), epochs_spent, active or 0.0, True, bool(trials), at=end)


def _exploit_events(path: Path, trials: list[Row]) -> Iterator[ExploitEvent]:
    """PBT's steps per trial, each in the words the live tracker tags them with."""
    rows = table_rows(path)
    if not rows:
        return
    import yaml

    from tunekit.search.pbt import ExploitStep  # its describe() words the tags

    numbers = {row["trial_id"]: _integer(row["number"]) for row in trials}
    steps: dict[str, list[str]] = {}
    for row in rows:
        step = ExploitStep(
            row["trial_id"],
            int(row["epoch"]),
            row["source_trial_id"],
            int(row["source_epoch"]),
            {k[len(OLD_PREFIX) :]: yaml.safe_load(v) for k, v in row.items() if k.startswith(OLD_PREFIX) and v},
            {k[len(NEW_PREFIX) :]: yaml.safe_load(v) for k, v in row.items() if k.startswith(NEW_PREFIX) and v},
        )
        steps.setdefault(step.trial_id, []).append(step.describe(numbers.get))
    for trial_id in sorted(steps):
        yield ExploitEvent(trial_id, tuple(steps[trial_id]))


# ---------------------------------------------------------------------- reading


def _recorded_spec(directory: Path) -> ExperimentSpec:
    import yaml

    path = directory / SPEC_FILE
    if not path.is_file():
        raise NotAnExperimentError(directory, SPEC_FILE)
    # As the experiment recorded it: the trainable is not looked for (it may have moved).
    return parse_spec(yaml.safe_load(path.read_text()), directory, locate_trainable=False)


def _search_clock(directory: Path) -> SearchClock:
    """The search's clock (``started.json``); for a directory older than it, one from the first trial's start."""
    clock = SearchClock.read(directory)
    if clock is not None:
        return clock
    starts = [number_or_none(row["started_at"]) for row in table_rows(directory / TRIALS_FILE)]
    return SearchClock(min((s for s in starts if s is not None), default=0.0))


def _refresh_ledger(directory: Path) -> None:
    """Writes ``ledger.json`` from the records, as the search's end does (the tracker logs it and its metrics)."""
    from tunekit.results.summary import write_ledger

    try:
        write_ledger(directory)
    except (TunekitError, OSError, ValueError, KeyError) as error:
        logger.warning("no compute ledger for %s: %s", directory, error)


def _present(row: Row, prefix: str) -> dict[str, object]:
    return {key[len(prefix) :]: value for key, value in row.items() if key.startswith(prefix) and value != ""}


def _integer(text: str | None) -> int | None:
    number = number_or_none(text)
    return None if number is None else int(number)
