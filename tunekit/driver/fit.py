"""A search's fit: its Ray session, its Tuner (new or restored) and ``fit``, then the verdict.

``tunekit.driver.runner`` prepares the search and its folder, and closes it; this runs it.
The driver never imports TensorFlow: trials configure their own devices in their worker
processes (see ``tunekit.worker.devices``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TextIO

from tunekit.compat.ray_tune import (
    before_cleanup_after_a_crash,
    one_registry_read_per_trainable,
    restored_tune_config,
)
from tunekit.config.spec import ExperimentSpec
from tunekit.driver.connect import Target, record_address
from tunekit.driver.folders import has_tune_state
from tunekit.driver.outages import held_if_writable, storage_watched
from tunekit.driver.session import (
    callers_ray,
    check_cluster_fits,
    check_storage_shared,
    driver_env,
    joined_address,
    keep_workers_warm,
    kill_owned_local_ray,
    ray_session,
    wait_for_released_resources,
    wait_for_warm_workers,
)
from tunekit.driver.signals import StopSignals, quiet_trial_tracebacks
from tunekit.errors import NoResultError, SearchAborted, SearchInterrupted
from tunekit.layout import DRIVER_LOG_FILE
from tunekit.results.completion import no_result_reason, space_ran_out
from tunekit.storage.buckets import bucket_of, shown
from tunekit.storage.journal import JournalSealer
from tunekit.tracking.preflight import check_complete


def fit_saying_why(
    spec: ExperimentSpec, experiment_dir: Path, target: Target, stream: TextIO | None, *, restore: bool
) -> None:
    """``_fit``, with a full disk anywhere in the driver or a trial (``ENOSPC`` in a table, the
    journal, Ray's saved state, a checkpoint) or a bucket's outage past ``storage.outage_s``
    ended by one line (``storage_watched``). Its running trials are held for the resume, as
    after any crash (``_fit``)."""
    with storage_watched(spec, experiment_dir, stream):
        _fit(spec, experiment_dir, target, stream, restore=restore)


# What _fit imports once Ray is up: imported while Ray starts (session.ray_session), not before
# it, where Ray Tune's, Optuna's and pandas's imports (0.7 s of CPU, quiet) delayed Ray's start and
# so the first trials' workers.
AFTER_RAY_STARTS = ("ray.tune", "tunekit.driver.tune_run", "tunekit.driver.recorder", "tunekit.search.history")


def _fit(
    spec: ExperimentSpec,
    experiment_dir: Path,
    target: Target,
    stream: TextIO | None,
    *,
    restore: bool,
) -> None:
    from tunekit.driver.progress import ConsoleProgress

    session_began = time.time()  # the active clock's session starts here, with the console's
    console = ConsoleProgress(spec, stream) if stream else None
    if console:
        console.header(experiment_dir, _tracking_uri(spec))
        if target.note:
            console.phase(target.note)
    # A new search interrupted before fit has nothing to keep: the command removes it as it exits.
    discard = None if restore else experiment_dir
    with (
        StopSignals(experiment_dir, kill_owned_local_ray, discard=discard) as signals,
        ray_session(target.address, spec, console, signals, experiment_dir / DRIVER_LOG_FILE, AFTER_RAY_STARTS),
        # After Ray's start: it imports Ray Tune (in the background, with AFTER_RAY_STARTS).
        driver_env(),
    ):
        # A session that cannot place a trial ran nowhere: cluster.json keeps the last one's.
        check_cluster_fits(spec, experiment_dir)
        # Where this session ran, for the next resume (a local Ray records null).
        record_address(
            experiment_dir, joined_address() if target.address is not None else None, callers_ray=callers_ray()
        )
        if bucket_of(experiment_dir) is None:  # a bucket is every node's by its nature
            check_storage_shared(experiment_dir)
        if restore and not has_tune_state(experiment_dir):
            restore = False  # stopped during start-up, before Ray Tune saved anything: start afresh
        if console:
            console.phase("preparing the study and the Tuner")
        from tunekit.driver.guard import FailureRules
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
        if console and not restore and (history := HistorySummary.recorded(experiment_dir)):
            console.phase(history.describe())
        if console:
            console.phase("waiting for the first trial workers (each imports TensorFlow)")
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
        if signals.received is None:
            recorder.settle_study()
        else:  # a signal's stopped trials are the resume's to continue
            recorder.searcher.mark_held(True)
        JournalSealer(experiment_dir).seal()  # the study's last writes, after the tables' last seal
        wait_for_released_resources()
        if signals.received is None:
            keep_workers_warm(spec)  # for this process's next search
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
