"""The experiment's on-disk format and the keys of a trial's reports: one owner, stdlib only.

The driver, the workers, the results loader, the tracker and the benchmarks all import
these names from here, so a file name or a column is spelled in exactly one place and
the driver never imports the worker (TensorFlow) for a constant.

An experiment directory holds::

    spec.yaml  study.journal  trials.csv  epochs.csv  spans.csv  started.json  tracking.json  cluster.json
    driver.log  driver.lease (while a driver writes it)  Ray's state files
    <trial id>/checkpoint_<n>/{weights.npz, state.json, model.keras | model.weights.h5}
    <trial id>/output.log     the trainable's stdout and stderr, every attempt
    <trial id>/error.txt      the full traceback of a failed trial
    retrain/<n>-trial-<number>/{retrain.json, model.keras | model.weights.h5}   retrains (tunekit retrain)
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any

# ------------------------------------------------------------------ experiment files

SPEC_FILE = "spec.yaml"
# The Optuna study, as Optuna's journal file: an append-only log of the study's operations.
# SQLite through SQLAlchemy cost the driver about 100 ms per trial, the journal a tenth of
# that (benchmarks/scale.py). Experiments made before the journal keep ``study.db``.
STUDY_FILE = "study.journal"
SQLITE_STUDY_FILE = "study.db"
# The journal's length and a CRC-32 per block of its lines, as its driver last wrote them
# (tunekit.storage.journal): a cut or a changed byte anywhere in what it covers is found.
JOURNAL_SEAL_FILE = "study.seal.json"
TRIALS_FILE = "trials.csv"
EPOCHS_FILE = "epochs.csv"
TRACKING_FILE = "tracking.json"  # where in MLflow the experiment's runs are (tunekit.tracking.tracker)
# {"started_at": wall-clock seconds, "sessions": [[start, end], ...]}: the search's clock
# (tunekit.storage.clock). Every time column counts active seconds on it: the time between a stop
# and a resume is left out. Written by tunekit.driver.recorder.
STARTED_FILE = "started.json"
SPANS_FILE = "spans.csv"  # one row per stretch a trial ran (start and end on the active clock)
# {"address": "host:port" | null}: the Ray cluster the search last ran on (null: a local Ray);
# ``tunekit resume`` joins it again. Never the token. Written by tunekit.driver.connect.
CLUSTER_FILE = "cluster.json"
# TensorBoard's log directory of the experiment: one run per trial (``trial-<number>``), the
# HParams plugin's experiment in the directory itself (tunekit.tracking.tensorboard).
TENSORBOARD_DIR = "tensorboard"
# A trial's name, ``trial-<number>`` (its Optuna trial number, as in trials.csv): its
# TensorBoard run's folder, its MLflow run's name, and Ray's trial name, from which the
# worker reads its number back (``TrialContext.trial_number``).
TRIAL_NAME_PREFIX = "trial-"
# The user attribute that names a study trial's Ray trial id, which is its folder's name in the
# experiment: every record of a trial is found by it (tunekit.search.attrs has the others).
RAY_TRIAL_ATTR = "ray_trial_id"
# Retrains of a trial's configuration (tunekit.results.retrain): one folder each,
# ``retrain/<n>-trial-<number>/``, holding its model (``model.keras`` or ``model.weights.h5``)
# and ``retrain.json`` (trial, config, epochs, data, metrics, seconds, MLflow run).
RETRAIN_DIR = "retrain"
RETRAIN_FILE = "retrain.json"
DRIVER_LOG_FILE = "driver.log"  # Ray's own lines from joining and starting (never the console)
MLFLOW_LOG_FILE = "mlflow.log"  # MLflow's own lines while tunekit sent to it: its store's errors (never the console)
# {"host", "pid", "process_started", "command", "since", "beat", "token"}: the driver that
# writes the experiment now, with its heartbeat; absent when none does (tunekit.storage.lease).
LEASE_FILE = "driver.lease"
STARTED_KEY = "started_at"


def trial_name(number: int | None, trial_id: str) -> str:
    """``trial-<number>``, or the Ray trial id of a trial that has no number (yet)."""
    return f"{TRIAL_NAME_PREFIX}{number if number is not None else trial_id}"


def number_in_trial_name(name: str) -> int | None:
    """The number in ``trial-<number>``; None for any other name."""
    digits = name.removeprefix(TRIAL_NAME_PREFIX)
    return int(digits) if name.startswith(TRIAL_NAME_PREFIX) and digits.isdigit() else None


# ----------------------------------------------------------------------- trial files

OUTPUT_FILE = "output.log"
ERROR_FILE = "error.txt"
# {"epoch", "phase": "train" | "validate", "step", "steps", "at"}: where a running trial is
# inside its epoch, rewritten at most every few seconds by the worker (tunekit.worker.heartbeat)
# and shown on the console's status line during long epochs.
HEARTBEAT_FILE = "heartbeat.json"
CHECKPOINT_WEIGHTS = "weights.npz"
CHECKPOINT_STATE = "state.json"
# training.keep: best: the best epoch so far, its weights (w0, w1, ...) with its epoch and value.
KEPT_WEIGHTS = "kept.npz"
FINAL_MODEL = "model.keras"  # the whole model, when Keras can serialise it
FINAL_WEIGHTS = "model.weights.h5"  # the fallback: weights only, rebuilt with build_model
# Beside a checkpoint's payloads: {file name: SHA-256} of each as its worker wrote it
# (tunekit.storage.checksums), since a changed byte inside an array or a weight reads as a number.
CHECKSUMS_FILE = "checksums.json"
CHECKSUMMED = (CHECKPOINT_STATE, CHECKPOINT_WEIGHTS, KEPT_WEIGHTS, FINAL_MODEL, FINAL_WEIGHTS)

# ------------------------------------------------------------------------- tables

PARAM_PREFIX = "params."
# With several objectives (tunekit.config.objectives), trials.csv has one column per
# objective and constrained metric holding the trial's last value, and ``feasible``: every
# constraint holds (a metric never measured breaks its constraint).
FINAL_PREFIX = "final."
FEASIBLE_COLUMN = "feasible"
# The Pareto front as a table (trial id, number, each objective's final value), written
# with ledger.json from the summary and logged to the MLflow parent run.
PARETO_FILE = "pareto_front.csv"
INFO_PREFIX = "info."  # what the trial ran on: precision, replicas, devices (lists joined by ";")
# The columns of trials.csv and the fixed columns of epochs.csv (tunekit.driver.recorder writes them).
# trials.csv: wall_seconds is the seconds the trial ran, summed over its spans (active time);
# started_at and ended_at are wall-clock timestamps. epochs.csv: time is active seconds.
TRIAL_COLUMNS = (
    "trial_id",
    "number",
    "status",
    "reason",
    "epochs",
    "final_metric",
    "best_metric",
    "kept_epoch",
    "rung",
    "wall_seconds",
    "samples_per_second",
    "node_id",
    "attempts",
    "started_at",
    "ended_at",
)
EPOCH_COLUMNS = ("trial_id", "epoch", "attempt", "resumed_from_epoch", "time")
# spans.csv: attempt is the trial's attempt the span belongs to; node_id and pid name the
# node and worker process that ran it (empty until the span's first report).
SPAN_COLUMNS = ("trial_id", "span", "start", "end", "attempt", "node_id", "pid")
# Columns that name things and are text even when every value looks like a number: Ray's
# trial ids are 8 hex digits, so "42395413" or "375e9202" (3.75e9204, read as inf) happen.
ID_COLUMNS = ("trial_id", "source_trial_id", "node_id")

# ------------------------------------------------------------- a trial's report keys

EPOCH_KEY = "epoch"  # the time attribute ASHA counts in: epochs completed, from 1
FAILURE_KEY = "tunekit_failure"  # set in a trial's last result when it failed on its own
FAILURE_KIND_KEY = "tunekit_failure_kind"  # "fatal" stops the search, "trial" does not
# The kind of a trial whose storage filled up: no failure of the trial's, the search ends
# with the storage's error and a resume continues the trial (tunekit.driver.guard).
NO_SPACE_FAILURE = "no_space"
# The kind of a trial whose own records' storage refused a write for good (read-only, no
# permission): no failure of the trial's either, the search ends with the storage's line.
STORAGE_FAILURE = "storage"
INFO_KEY = "tunekit"  # bookkeeping, never a metric: metric names, devices, resume point
# In INFO_KEY: set on the last epoch's report when the model's own callbacks ended
# training (EarlyStopping, anything setting ``model.stop_training``).
STOPPED_BY_MODEL = "stopped_by_model"


def kept_value(result: Mapping[str, Any], metric: str) -> Any:
    """A trial's figure in its result: the kept epoch's value where the worker named one (its
    last report, ``training.keep``), else the result's own ``metric``. Nested or flattened."""
    info = result.get(INFO_KEY)
    if isinstance(info, Mapping) and KEPT_VALUE in info:
        return info[KEPT_VALUE]
    return result.get(f"{INFO_KEY}/{KEPT_VALUE}", result.get(metric))


def stopped_by_model(result: Mapping[str, Any]) -> bool:
    """Whether a trial's result is its last because its model stopped training. Schedulers and
    searchers get Ray's flattened results (``tunekit/stopped_by_model``); callbacks nested ones."""
    info = result.get(INFO_KEY)
    nested = isinstance(info, Mapping) and bool(info.get(STOPPED_BY_MODEL))
    return nested or bool(result.get(f"{INFO_KEY}/{STOPPED_BY_MODEL}"))


# In INFO_KEY: the model's callbacks restored earlier weights at the end (EarlyStopping's
# restore_best_weights); the last report's validation metrics were measured on them.
RESTORED_WEIGHTS = "restored_weights"
# In INFO_KEY of a trial's last report (it trained to its end): the epoch whose weights its
# exported model holds and that epoch's value of the metric (training.keep; tunekit.worker.keep).
KEPT_EPOCH = "kept_epoch"
KEPT_VALUE = "kept_value"
CHECKPOINTED = "checkpointed"  # in INFO_KEY: the report carried a checkpoint (CheckpointPolicy)
# In INFO_KEY of the first report after a restore that passed over a damaged checkpoint: which,
# and the one restored instead (the console says it; the trial's output.log has it too).
CHECKPOINT_NOTE = "checkpoint_note"
EXPORT_NOTE = "export_note"  # in INFO_KEY: why the final export is weights only


# ------------------------------------------------------------------- trial statuses


class TrialStatus(StrEnum):
    """Where a trial stands, as written in trials.csv, the MLflow status tag and reports.

    A ``StrEnum``: each member is its plain string (``TrialStatus.COMPLETED == "completed"``),
    so CSV cells, JSON and tags keep the same spelling and older experiments still compare.
    """

    RUNNING = "running"
    COMPLETED = "completed"  # trained all epochs, or the model's own callbacks ended it
    PRUNED = "pruned"  # stopped early by the scheduler (ASHA)
    STOPPED = "stopped"  # the search stopped around it (time budget, Ctrl-C)
    FAILED = "failed"  # failed for its own reasons; the reason says why
    LOST = "lost"  # its driver went away before it ended (found later in MLflow)

    def is_finished(self) -> bool:
        """Whether the trial has ended, one way or another (everything but running)."""
        return self is not TrialStatus.RUNNING


# How a trial the search's time budget stopped begins its reason (tunekit.driver.records.settle_ended).
TIME_BUDGET_REASON = "the search's time budget of "


# How a trial in flight when the failure guard stopped the search begins its reason.
ABORTED_REASON = "the failure guard stopped the search"


def stopped_by_time_budget(status: str | None, reason: str | None) -> bool:
    """Whether a trial's status and reason (a record's, or trials.csv's cells) say the search's
    time budget stopped it: it stays stopped on resume, and its search counts as complete."""
    return status == TrialStatus.STOPPED and (reason or "").startswith(TIME_BUDGET_REASON)


def stopped_for_good(status: str | None, reason: str | None) -> bool:
    """Whether a stopper of the whole search (its time budget, the failure guard) stopped the
    trial: Ray ends such trials for good, and no resume runs them again, unlike a signal's."""
    return stopped_by_time_budget(status, reason) or (
        status == TrialStatus.STOPPED and (reason or "").startswith(ABORTED_REASON)
    )


def unstarted_by_time_budget(planned: int, endings: list[tuple[str | None, str | None]]) -> int:
    """How many of ``planned`` trials the search's time budget left unstarted, from each
    recorded trial's (status, reason): none unless the budget stopped a trial, since a search
    a signal stopped still has its trials to start."""
    if len(endings) >= planned or not any(stopped_by_time_budget(status, reason) for status, reason in endings):
        return 0
    return planned - len(endings)


# The statuses a search ends trials with, in the order reports list them.
ENDED_STATUSES = (TrialStatus.COMPLETED, TrialStatus.PRUNED, TrialStatus.STOPPED, TrialStatus.FAILED)
# The statuses the driver counts while a search runs.
SEARCH_STATUSES = (TrialStatus.RUNNING, *ENDED_STATUSES)


# -------------------------------------------------------------------------- numbers


def number_or_none(text: str | None) -> float | None:
    """A number written as text (a table's cell, a tag), or None when it is missing or not a number."""
    try:
        return float(text) if text else None
    except ValueError:
        return None


def first_best_epoch(values: Mapping[int, float], mode: str) -> int | None:
    """The first epoch with the best value (``mode`` max or min): the one ``training.keep: best``
    keeps (tunekit.worker.keep decides it so as the trial trains; a trial's record and
    ``tunekit check`` find it again from its epochs)."""
    if not values:
        return None
    best = (max if mode == "max" else min)(values.values())
    return min(epoch for epoch, value in values.items() if value == best)


def finite(value: Any) -> float | None:
    """``value`` as a float when it is a finite real number, else None.

    None, NaN, infinities, text and bools are not metrics; numpy scalars are. The one
    check the recorder, searcher, results and tracker use before they trust a value.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


# ----------------------------------------------------------- predictions and ledger

# The prediction of a probe of this spec (``tunekit plan --probe``), filed by ``tunekit run``
# with the experiment (tunekit.search.forecast), and its compute ledger (tunekit.results.ledger).
PREDICTION_FILE = "prediction.json"
LEDGER_FILE = "ledger.json"
# Under the storage root: one measurement per spec fingerprint and target, <fingerprint>.json.
PROBES_DIR = ".probes"

# ------------------------------------------------------------------------ warm start

# {"sources": [...], "used": n, "skipped": {reason: n}}: what search.warm_start_from added
# to the study as history (tunekit.search.history); the MLflow parent run records it.
WARM_START_FILE = "warm_start.json"


# ----------------------------------------------------------- population-based training

# One row per PBT exploit step: a trial copied another trial's checkpoint and went on
# under a perturbed configuration (tunekit.search.pbt records them, the recorder writes
# them). ``old.<param>``/``new.<param>``: the trial's whole configuration before and after
# (it takes the source's, with the mutated parameters perturbed).
EXPLOITS_FILE = "exploits.csv"
EXPLOIT_COLUMNS = ("trial_id", "number", "epoch", "source_trial_id", "source_number", "source_epoch", "time")
# Columns whose every cell is a number or empty (tunekit.storage.store refuses a table where one is
# not: a changed byte must not read as a metric); in epochs.csv every column but the ids.
NUMBER_COLUMNS = {
    TRIALS_FILE: (
        *("number", "epochs", "final_metric", "best_metric", "kept_epoch", "rung", "wall_seconds"),
        *("samples_per_second", "attempts", "started_at", "ended_at"),
    ),
    SPANS_FILE: ("span", "start", "end", "attempt", "pid"),
    EXPLOITS_FILE: ("number", "epoch", "source_number", "source_epoch", "time"),
}


# Columns that name a row of a table: a second row naming the same is a row copied in, and the
# table is refused (a duplicated trials.csv row read as a fifth trial of four).
KEY_COLUMNS = {TRIALS_FILE: ("trial_id",), EPOCHS_FILE: ("trial_id", "epoch"), SPANS_FILE: ("trial_id", "span")}
# Columns that hold one of a few words: trials.csv's status (`check` ended in a traceback on "complet3d").
WORD_COLUMNS: dict[str, dict[str, frozenset[str]]] = {TRIALS_FILE: {"status": frozenset(TrialStatus)}}


def key_columns(table: str, header: Sequence[str]) -> list[int]:
    """Where in ``header`` the table named ``table`` names its rows (``KEY_COLUMNS``); none when
    the header lacks one of them."""
    keys = KEY_COLUMNS.get(table, ())
    return [header.index(c) for c in keys] if all(c in header for c in keys) else []


def word_columns(table: str, header: Sequence[str]) -> dict[int, frozenset[str]]:
    """Where in ``header`` the table named ``table`` keeps one of a few words, and which (``WORD_COLUMNS``)."""
    return {header.index(c): words for c, words in WORD_COLUMNS.get(table, {}).items() if c in header}


def number_columns(table: str, header: Sequence[str]) -> list[int]:
    """Where in ``header`` the table named ``table`` keeps numbers (``NUMBER_COLUMNS``)."""
    if table == EPOCHS_FILE:
        return [i for i, column in enumerate(header) if column not in ID_COLUMNS]
    fixed = NUMBER_COLUMNS.get(table, ())
    finals = table == TRIALS_FILE
    return [i for i, c in enumerate(header) if c in fixed or (finals and c.startswith(FINAL_PREFIX))]


OLD_PREFIX = "old."
NEW_PREFIX = "new."
# In a trial's folder: the source checkpoint an exploit copied, restarted from.
EXPLOITED_CHECKPOINT_PREFIX = "exploited_checkpoint_"


def retrain_folder(index: int, trial: int | str) -> str:
    """The name of a retrain's folder under ``RETRAIN_DIR``: its order, then the trial it retrains."""
    return f"{index}-trial-{trial}"


def study_file(experiment_dir: str | Path) -> Path:
    """The file that holds the experiment's study: ``study.journal``, or ``study.db`` (SQLite)
    in an experiment made before tunekit kept studies in a journal."""
    sqlite = Path(experiment_dir) / SQLITE_STUDY_FILE
    journal = Path(experiment_dir) / STUDY_FILE
    return sqlite if sqlite.is_file() and not journal.is_file() else journal


def unnamed_trial_folders(directory: Path, trial_ids: set[str]) -> list[Path]:
    """Folders holding a trial's checkpoint or output.log whose names are not in ``trial_ids``;
    a probe's (``.probes/``), one set aside (``.orphans/``) and Ray's own are not trials'."""
    others = {TENSORBOARD_DIR, RETRAIN_DIR, *trial_ids}
    return [
        folder
        for folder in sorted(p for p in directory.iterdir() if p.is_dir() and p.name not in others)
        if not folder.name.startswith(".") and (any(folder.glob("checkpoint_*")) or (folder / OUTPUT_FILE).is_file())
    ]
