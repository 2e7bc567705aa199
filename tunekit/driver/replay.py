"""What a restored recorder rebuilds from its records: the last session's clock, and the
schedulers' state (ASHA's and MO-ASHA's rungs, PBT's exploit steps).

Ray hands the recorder back its saved records (``Recorder.set_state``); the clock and the
schedulers are not trusted to Ray's older pickle but taken again from what the records, the
experiment's files and the study hold, so a resumed search decides as the first session would
have, and its active time counts every moment the last session is known to have run.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tunekit.compat.ray_saved_state import saved_stop_decisions
from tunekit.config.spec import ExperimentSpec
from tunekit.driver.records import EpochRow, TrialRecord
from tunekit.driver.saved_records import revived
from tunekit.layout import EPOCH_KEY, TrialStatus
from tunekit.search.moasha import RecordingMOASHA
from tunekit.search.pbt import ExploitStep, RecordingPBT
from tunekit.search.schedulers import RecordingASHA
from tunekit.storage.clock import SearchClock

_GOES_ON = (TrialStatus.RUNNING, TrialStatus.STOPPED)  # a resume trains these on


def restored_clock(experiment_dir: Path, state: Mapping[str, Any]) -> SearchClock:
    """The clock as the last session left it: started.json, touched up to the end, beats Ray's older pickle."""
    on_disk = SearchClock.read(experiment_dir)
    if on_disk is not None and on_disk.sessions:
        return on_disk
    saved = state.get("clock")
    if isinstance(saved, dict):
        saved = SearchClock(saved["started_at"], [list(pair) for pair in saved["sessions"]])
    return saved or SearchClock.new()


def last_session_reaches_its_records(
    clock: SearchClock, trials: Iterable[TrialRecord], epochs: Sequence[EpochRow]
) -> None:
    """The last session ran at least until the latest moment the saved records know of: Ray may
    have saved a report made after started.json was last touched."""
    reported = [row.at for row in epochs]
    spanned = [moment or 0.0 for record in trials for span in record.spans for moment in span]
    latest = max(reported + spanned, default=0.0)
    if clock.sessions and latest > clock.active_seconds:
        clock.sessions[-1][1] += latest - clock.active_seconds


def replay_schedulers(
    scheduler: Any,
    searcher: Any,
    spec: ExperimentSpec,
    experiment_dir: Path,
    trials: Mapping[str, TrialRecord],
    epochs: Sequence[EpochRow],
    clock: SearchClock,
    saved_exploits: Sequence[Any],
) -> list[ExploitStep]:
    """Gives the restored scheduler what it saw live, from the records; returns PBT's exploit steps
    (those Ray saved, then those only the study has), which the study keeps too."""
    pruned = {r.trial_id for r in trials.values() if r.status == TrialStatus.PRUNED}
    pruned |= saved_stop_decisions(experiment_dir)  # ASHA's, waiting on a checkpoint when Ray saved
    if isinstance(scheduler, RecordingASHA):
        scheduler.replay(metric_by_epoch(epochs, spec.metric.name), pruned)
    if isinstance(scheduler, RecordingMOASHA):
        scheduler.replay(_metrics_by_epoch(epochs), pruned)
    exploits = list(map(revived(ExploitStep), saved_exploits))
    if isinstance(scheduler, RecordingPBT):
        exploits += _steps_only_the_study_has(searcher, trials, clock, exploits)
        goes_on = [r.trial_id for r in trials.values() if r.status in _GOES_ON]
        started_all = len(trials) >= spec.budget.num_samples
        scheduler.replay(metric_by_epoch(epochs, spec.metric.name), exploits, goes_on, started_all)
        numbers = {r.trial_id: r.number for r in trials.values()}
        steps: dict[str, list[dict[str, Any]]] = {}
        for step in exploits:
            steps.setdefault(step.trial_id, []).append(step.for_study(numbers.get))
        searcher.keep_exploit_steps(steps)
    return exploits


def _steps_only_the_study_has(
    searcher: Any, trials: Mapping[str, TrialRecord], clock: SearchClock, exploits: Sequence[ExploitStep]
) -> list[ExploitStep]:
    """PBT's steps the study lists beyond those Ray saved (taken after its last save): they
    stand, and the scheduler takes one again where Ray's state of its trial predates it."""
    ids = {r.number: r.trial_id for r in trials.values()}
    last_heard = clock.sessions[-1][1] if clock.sessions else time.time()
    later = []
    saved = Counter(step.trial_id for step in exploits)
    for trial_id, listed in searcher.exploit_steps().items():
        for step in listed[saved[trial_id] :]:
            source = ids.get(step.get("source"), str(step.get("source")))
            old, new = dict(step.get("old", {})), dict(step.get("new", {}))
            epoch, source_epoch = int(step["epoch"]), int(step.get("source_epoch", 0))
            at = float(step.get("time") or last_heard)  # a study written before steps kept their time
            later.append(ExploitStep(trial_id, epoch, source, source_epoch, old, new, at))
    return sorted(later, key=lambda step: step.wall_time)


def metric_by_epoch(epochs: Sequence[EpochRow], metric: str) -> dict[str, dict[int, float]]:
    """{trial id: {epoch: ``metric``}}, from the recorded epochs: what schedulers replay."""
    values: dict[str, dict[int, float]] = {}
    for row in epochs:
        if metric in row.metrics:
            values.setdefault(row.trial_id, {})[row.epoch] = row.metrics[metric]
    return values


def _metrics_by_epoch(epochs: Sequence[EpochRow]) -> dict[str, dict[int, dict[str, float]]]:
    """{trial id: {epoch: every metric}}, from the recorded epochs: what MO-ASHA replays."""
    values: dict[str, dict[int, dict[str, float]]] = {}
    for row in epochs:
        values.setdefault(row.trial_id, {})[row.epoch] = {**row.metrics, EPOCH_KEY: row.epoch}
    return values
