"""A stopped search's Tuner restored from its experiment directory, mended before ``fit``.

``Tuner.restore`` puts back what Ray saved: its trials, its search algorithm and tunekit's
searcher, scheduler and recorder as pickled. Before ``fit`` a resume mends what that
state does not know, each fix beside its cause:

- the directory: the experiment may have been copied or moved since (``_resumed_from``,
  ``tunekit.search.growth.RestoredSearch``);
- trials the study ended after Ray's last save (a killed driver) or the time budget
  stopped (``tunekit.driver.late_endings``): they stay ended;
- the budget of a grown search, and the trials Ray saved as ended but its limiter as live.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tunekit.compat.ray_saved_state import (
    end_saved_trials,
    finished_trials,
    forget_saved_concurrency,
    forget_saved_stopper,
    saved_trials,
)
from tunekit.compat.ray_tune import restored_run_config, restored_tune_config
from tunekit.config.spec import ExperimentSpec
from tunekit.driver.late_endings import late_endings
from tunekit.driver.study_catch_up import catch_up_study
from tunekit.layout import STUDY_FILE
from tunekit.search.trial_names import name_trials_by
from tunekit.storage.buckets import location_of


def restored_tuner(
    spec: ExperimentSpec, experiment_dir: Path, listeners: list[Any], trainable: Any
) -> tuple[Any, Any, Any]:
    """The experiment's restored Tuner, its recorder (with this process's ``listeners``) and stopper.

    A restored Tuner whose pickled spec has another budget than ``spec`` (a grown search,
    also when an earlier resume that grew it was stopped before Ray saved anything) runs
    with ``spec``'s (``_grow``).
    """
    from ray import tune

    from tunekit.driver.deadline import TrialDeadline
    from tunekit.driver.fencing import fenced
    from tunekit.driver.recorder import Recorder
    from tunekit.driver.stopper import FailureGuard

    # A bucket experiment is restored from the bucket (its trials' checkpoints are there), not the cache.
    tuner = tune.Tuner.restore(
        location_of(experiment_dir), trainable=trainable, resume_unfinished=True, resume_errored=True
    )
    # Ray restores searcher, scheduler and callbacks from its pickle; listeners
    # (console, tracker) are per process and are attached again here.
    run_config = restored_run_config(tuner)
    recorder = next(c for c in run_config.callbacks or [] if isinstance(c, Recorder))
    _resumed_from(recorder, experiment_dir)
    # The deadline is this session's, with the resume's spec (its --set may change it).
    others = [c for c in run_config.callbacks or [] if not isinstance(c, TrialDeadline)]
    run_config.callbacks = fenced([*others, TrialDeadline(spec.training.trial_timeout_s, recorder)])
    # Ray would restore its saved stopper over this run's (see forget_saved_stopper).
    saved_stopper = forget_saved_stopper(experiment_dir)
    guard = run_config.stop if isinstance(run_config.stop, FailureGuard) else None
    if guard is not None:
        guard.resumed(next((s for s in saved_stopper.others if isinstance(s, FailureGuard)), None))
    recorder.listeners = [*listeners, *([guard] if guard is not None else [])]
    # A bucket's journal whose torn tail the resume cut back, behind the tables: see study_catch_up.
    if any(catch_up_study(recorder.searcher.study, recorder.spec, experiment_dir)):
        recorder.warn(f"{STUDY_FILE} was behind the tables: it took the endings and epochs they hold")
    saved = saved_trials(experiment_dir)  # Ray's state, read once: a file of every trial's state
    endings = late_endings(recorder.searcher.study, saved, experiment_dir, spec.space, spec.metric.name)
    ended_in_ray = {e.trial_id for e in endings.values() if not e.unsaved}
    if endings:  # ended after Ray's last save (a killed driver), or by the time budget: they stay ended
        end_saved_trials(experiment_dir, ended_in_ray)
        recorder.searcher.count_unsaved_trials({e.trial_id: e.number for e in endings.values() if e.unsaved})
        recorder.adopt_late_endings(endings)
    finished = finished_trials(saved) | ended_in_ray
    if recorder.spec.budget != spec.budget:
        _grow(tuner, recorder, spec, experiment_dir, finished)
    else:
        _limit_restored_search(tuner, recorder.searcher, spec, experiment_dir, finished)
        if saved_stopper.time_left_s is not None:  # it goes on: a moment at least, since 0 would read as none
            restored_tune_config(tuner).time_budget_s = max(saved_stopper.time_left_s, 0.001)
    return tuner, recorder, run_config.stop


def _resumed_from(recorder: Any, experiment_dir: Path) -> None:
    """Points the restored recorder, searcher and scheduler at ``experiment_dir``.

    Ray pickled them with the directory the search ran in; an experiment copied or moved
    since (from a cluster's storage, say) and resumed in its new place wrote its tables,
    clock and study into the old one.
    """
    recorder.experiment_dir = experiment_dir
    recorder.searcher.resumed_from(experiment_dir)
    name_trials_by(recorder.searcher.trial_number)  # the trials this session adds, trial-<number>
    if hasattr(recorder.scheduler, "experiment_dir"):  # RecordingPBT copies checkpoints in it
        recorder.scheduler.experiment_dir = experiment_dir


def _grow(tuner: Any, recorder: Any, spec: ExperimentSpec, experiment_dir: Path, finished: set[str]) -> None:
    """Gives a restored Tuner ``spec``'s budget; the searcher, study, rungs and runs stay.

    Ray restores the first run's ``num_samples``, concurrency and time budget from its
    saved state; each is replaced here before ``fit`` (see ``tunekit.search.growth``).
    """
    searcher = recorder.searcher  # the same object as config.search_alg: one pickle
    searcher.grow(spec)
    recorder.spec = spec  # its tables and the console's progress count to the new total
    _limit_restored_search(tuner, searcher, spec, experiment_dir, finished)
    restored_tune_config(tuner).time_budget_s = spec.budget.time_budget_s  # in full, from the resume
    forget_saved_concurrency(experiment_dir)


def _limit_restored_search(
    tuner: Any, searcher: Any, spec: ExperimentSpec, experiment_dir: Path, finished: set[str]
) -> None:
    """The restored search proposes up to ``spec``'s budget, counts only trials that can still
    end, and creates its new trials in ``experiment_dir`` (``tunekit.search.growth``).

    Ray restores its ``ConcurrencyLimiter`` with the trials it saved as live; one that Ray's
    state holds as ended (``finished``) never ends again, and would hold its slot for good.
    """
    from tunekit.search.growth import RestoredSearch

    config = restored_tune_config(tuner)
    config.search_alg = RestoredSearch(
        searcher, spec.budget.num_samples, spec.budget.max_concurrent, experiment_dir, finished
    )
    config.max_concurrent_trials = None  # the limit is inside RestoredSearch; Ray would warn twice
    config.num_samples = spec.budget.num_samples
