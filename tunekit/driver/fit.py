"""The search stage: a search's Ray session, its Tuner (new or restored) and ``fit``, then the verdict.

``tunekit.driver.runner`` runs the stages; this one takes what the prepare stage
(``Prepared``: the spec, the Ray it runs on, the console) and the folder stage (``Experiment``:
the folder, its lease, new or restored) hand on. The session is ``tunekit.driver.session``'s,
the Tuner ``tunekit.driver.tune_run``'s. The driver never imports TensorFlow: trials configure
their own devices in their worker processes (see ``tunekit.worker.devices``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunekit.compat.ray_tune import (
    before_cleanup_after_a_crash,
    one_registry_read_per_trainable,
    restored_tune_config,
)
from tunekit.config.spec import ExperimentSpec
from tunekit.driver.folders import Experiment, has_tune_state
from tunekit.driver.outages import held_if_writable, storage_watched
from tunekit.driver.prepare import Prepared
from tunekit.driver.session import kill_owned_local_ray, search_session, wait_for_warm_workers
from tunekit.driver.signals import StopSignals, quiet_trial_tracebacks
from tunekit.errors import NoResultError, SearchAborted, SearchInterrupted
from tunekit.results.completion import no_result_reason, space_ran_out
from tunekit.storage.buckets import shown
from tunekit.storage.journal import JournalSealer
from tunekit.tracking.preflight import check_complete

if TYPE_CHECKING:
    from tunekit.driver.progress import ConsoleProgress
    from tunekit.driver.recorder import Recorder


@dataclass(frozen=True)
class Fitted:
    """What the fit hands its verdict: the recorder (the search's records, its searcher and
    listeners), the stopper Ray Tune ran with (the failure guard), and the stop signals (one
    received during the search, or after it ended by itself)."""

    recorder: Recorder
    guard: Any  # the FailureGuard, or a restored search's saved stopper
    signals: StopSignals


def search(prepared: Prepared, experiment: Experiment) -> None:
    """The search stage: the console's header, the fit (``_fit``: the Ray session, the Tuner,
    ``fit``), then the verdict (``_verdict``), with a full disk anywhere in the driver or a trial
    (``ENOSPC`` in a table, the journal, Ray's saved state, a checkpoint) or a bucket's outage past
    ``storage.outage_s`` ended by one line (``storage_watched``). Its running trials are held for
    the resume, as after any crash (``_fit``).

    Raises:
        SearchInterrupted: a signal stopped the search, or came after it ended.
        SearchAborted: the failure guard stopped it.
        NoResultError: no trial reported the metric.
    """
    spec, experiment_dir = prepared.spec, experiment.directory
    with storage_watched(spec, experiment_dir, prepared.stream, experiment.lease.token):
        from tunekit.driver.progress import ConsoleProgress

        session_began = time.time()  # the active clock's session starts here, with the console's
        console = ConsoleProgress(spec, prepared.stream) if prepared.stream else None
        if console:
            console.header(experiment_dir, _tracking_uri(spec))
            if prepared.target.note:
                console.phase(prepared.target.note)
        fitted = _fit(prepared, experiment, console, session_began)
        _verdict(spec, experiment_dir, console, fitted)


# What _fit imports once Ray is up: imported while Ray starts (session.ray_session), not before
# it, where Ray Tune's, Optuna's and pandas's imports (0.7 s of CPU, quiet) delayed Ray's start and
# so the first trials' workers.
AFTER_RAY_STARTS = ("ray.tune", "tunekit.driver.tune_run", "tunekit.driver.recorder", "tunekit.search.history")


def _fit(prepared: Prepared, experiment: Experiment, console: ConsoleProgress | None, session_began: float) -> Fitted:
    """The search's Ray session, its Tuner (new, or restored from Ray Tune's saved state) and ``fit``;
    the study's last writes sealed after the tables'."""
    spec, experiment_dir, restore = prepared.spec, experiment.directory, experiment.restore
    # A new search interrupted before fit has nothing to keep: the command removes it as it exits.
    discard = None if restore else experiment_dir
    with (
        StopSignals(experiment_dir, kill_owned_local_ray, discard=discard) as signals,
        search_session(prepared.target.address, spec, experiment_dir, console, signals, AFTER_RAY_STARTS),
    ):
        if restore and not has_tune_state(experiment_dir):
            restore = False  # stopped during start-up, before Ray Tune saved anything: start afresh
        if console:
            console.phase("preparing the study and the Tuner")
        from tunekit.driver.tune_run import tuner_for
        from tunekit.search.history import HistorySummary

        tuner, recorder, guard = tuner_for(spec, experiment_dir, console, restore=restore)
        recorder.session_began = session_began
        if console and spec.budget.time_budget_s:
            # A plain resume goes on with the seconds left; a grown search's budget starts again.
            left = restored_tune_config(tuner).time_budget_s if restore else spec.budget.time_budget_s
            left = left.total_seconds() if isinstance(left, dt.timedelta) else float(left or 0.0)
            console.session_time_budget(left)
            console.phase(f"time budget: {left:.0f} s left of {spec.budget.time_budget_s:g} s")
        _hold_trials_on_stop(signals, recorder, console)
        if console and not restore and (history := HistorySummary.recorded(experiment_dir)):
            console.phase(history.describe())
        if console:
            console.phase("waiting for the first trial workers (each imports TensorFlow)")
        _fit_tuner(tuner, recorder, signals)
        if signals.received is None:
            recorder.settle_study()
        else:  # a signal's stopped trials are the resume's to continue
            recorder.searcher.mark_held(True)
        JournalSealer(experiment_dir).seal()  # the study's last writes, after the tables' last seal
    return Fitted(recorder, guard, signals)


def _hold_trials_on_stop(signals: StopSignals, recorder: Recorder, console: ConsoleProgress | None) -> None:
    """A stop (a signal, an outage) holds the running trials' endings for the resume, and says so."""
    signals.on_stop.append(recorder.searcher.hold_endings)
    if console:
        signals.on_stop.append(console.search_stopping)
    # Told to the study at once, from a thread (not the signal handler, which may have cut a
    # study write short): a second signal exits before the search's end would record it,
    # and `tunekit check` then took the held trials for a bug.
    signals.on_stop.append(
        lambda: threading.Thread(
            target=held_if_writable, args=(recorder.searcher,), name="tunekit-held", daemon=True
        ).start()
    )


def _fit_tuner(tuner: Any, recorder: Recorder, signals: StopSignals) -> None:
    """``tuner.fit()``, once the warm workers are up; the session's records end with it, a crash's too."""
    with (
        signals.fitting(),
        quiet_trial_tracebacks(),
        one_registry_read_per_trainable(),
        before_cleanup_after_a_crash(recorder.searcher.hold_endings),
    ):
        # Inside fitting(): a signal meanwhile stops the search as one during fit does.
        wait_for_warm_workers(lambda: signals.received is not None)
        try:
            tuner.fit()
        except BaseException:
            # A crash is not a verdict: its running trials are the resume's to continue,
            # as a signal's are (the cleanup held their endings), whatever the error.
            with contextlib.suppress(Exception):  # the journal may be what failed
                recorder.searcher.mark_held(True)
            with contextlib.suppress(Exception):
                recorder.end_session()
            raise
        recorder.end_session()


def _verdict(spec: ExperimentSpec, experiment_dir: Path, console: ConsoleProgress | None, fitted: Fitted) -> None:
    """How the search ended, raised as its error when it did not end well; MLflow's record checked
    complete when it did."""
    from tunekit.driver.guard import FailureRules

    recorder, guard, signals = fitted.recorder, fitted.guard, fitted.signals
    if console and (exhausted := space_ran_out(experiment_dir, spec.name)):
        console.phase(f"the search ended early: {exhausted}")
    # A signal after the search ended by itself (``late``) stopped nothing, but ends the command as one.
    if (number := signals.received if signals.received is not None else signals.late) is not None:
        raise SearchInterrupted(
            f"interrupted by {signal.Signals(number).name}; "
            f"`tunekit resume {shown(experiment_dir)}` continues the search",
            experiment_dir,
            number,
        )
    if isinstance(guard, FailureRules) and guard.abort_reason:
        message = guard.abort_message(recorder.searcher.trial_number)
        raise SearchAborted(f"search stopped: {message}", experiment_dir)
    reason = no_result_reason(spec, experiment_dir, list(recorder.trials.values()), recorder.clock.now())
    if reason:
        raise NoResultError(reason, experiment_dir)
    check_complete(spec, experiment_dir, recorder.listeners)


def _tracking_uri(spec: ExperimentSpec) -> str | None:
    """The MLflow tracking URI the search will use (credentials removed), without importing MLflow."""
    if not spec.tracking.enabled:
        return None
    from tunekit.environment import redact_uri

    mlflow = sys.modules.get("mlflow")  # set_tracking_uri in this process counts, when MLflow is loaded
    uri = spec.tracking.uri or (mlflow.get_tracking_uri() if mlflow else None)
    uri = str(uri or os.environ.get("MLFLOW_TRACKING_URI") or "sqlite:///mlflow.db")
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        # MLflow's default store is relative to the working directory: say which file.
        uri = f"sqlite:///{Path.cwd() / uri.removeprefix('sqlite:///')}"
    return redact_uri(uri)
