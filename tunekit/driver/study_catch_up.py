"""A study that is behind the tables: caught up from ``trials.csv`` and ``epochs.csv`` before a resume.

In a local experiment the study hears of each epoch and each ending first, the tables up to
two seconds later, and ``tunekit.driver.late_endings`` makes the study's decisions stand. A
bucket experiment's driver uploads its records every ``storage.mirror.PUSH_EVERY_S`` seconds, one
file after another; a SIGKILL between two uploads (or a journal that changed after the last
one) leaves the bucket with tables newer than the journal. Resumed from there, a trial that
``trials.csv`` holds as completed was RUNNING in the study and Ray's state: it was trained
again from its last checkpoint and ended a second time with another value; a running trial's
study lacked the epochs ``epochs.csv`` had (``[1..17, 20]`` against ``[1..20]``).

So before a resume reads the study (before Ray starts, and before it decides whether the
search is complete), every study trial still RUNNING takes what
the tables know of it: the epochs the study lacks (the metric's intermediate values; with
several objectives each epoch's tracked metrics, as the searcher keeps them) and, when
``trials.csv`` says it ended, that ending (COMPLETE with its kept epoch's values, PRUNED or
FAIL). ``late_endings`` then ends it in Ray's state, so it is never trained again.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import yaml

from tunekit.compat.optuna_study import reopen_trial
from tunekit.compat.ray_saved_state import saved_callback_states
from tunekit.config.spec import ExperimentSpec
from tunekit.driver.records import EpochRow, TrialRecord
from tunekit.layout import (
    EPOCH_COLUMNS,
    EPOCH_KEY,
    EPOCHS_FILE,
    RAY_TRIAL_ATTR,
    STUDY_FILE,
    TRIALS_FILE,
    TrialStatus,
    finite,
    study_file,
)
from tunekit.search.attrs import (
    DUPLICATE_ATTR,
    EPOCH_RESULT_ATTR_PREFIX,
    FINAL_RESULT_ATTR,
    HISTORY_ATTR,
    LOST_ATTR,
    epoch_results,
)
from tunekit.search.plan import study_storage
from tunekit.search.searcher import final_result, objective_values, set_constraints
from tunekit.storage.buckets import bucket_of
from tunekit.storage.store import table_rows

if TYPE_CHECKING:
    import optuna

# trials.csv's endings as the searcher tells the study them (``tunekit.search.searcher``).
_STUDY_STATES: dict[str, str] = {
    TrialStatus.COMPLETED: "COMPLETE",
    TrialStatus.PRUNED: "PRUNED",
    TrialStatus.FAILED: "FAIL",
}


def caught_up(experiment_dir: Path, spec: ExperimentSpec, stream: TextIO | None) -> None:
    """Catches the experiment's study up with its tables (``catch_up_study``), and says so on
    ``stream`` when it lacked anything. Call it with the experiment's lease held."""
    import optuna

    path = study_file(experiment_dir)
    if path.name != STUDY_FILE or not _whole_tail(path):
        # An older experiment's SQLite study is written before its tables, never after; a torn
        # tail is the resume's to cut back (``resumable.check_resumable``), and the restore
        # catches the study up after that (``tunekit.driver.restore``).
        return
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.load_study(study_name=spec.name, storage=study_storage(experiment_dir))
    except (ValueError, KeyError):  # a damaged journal: the resume refuses it in one line, later
        return
    ended, added = catch_up_study(study, spec, experiment_dir)
    if (ended or added) and stream is not None:
        stream.write(
            f"tunekit: {STUDY_FILE} was behind {TRIALS_FILE} and {EPOCHS_FILE} (its last upload came before "
            f"theirs): it took {ended} trial endings and {added} epochs from them, so no ended trial trains again\n"
        )


def _whole_tail(path: Path) -> bool:
    """The journal exists and ends with a whole line (an append after a torn one would damage it)."""
    try:
        with path.open("rb") as journal:
            journal.seek(-1, 2)
            return journal.read(1) == b"\n"
    except OSError:  # missing, or empty
        return False


def catch_up_study(study: optuna.Study, spec: ExperimentSpec, experiment_dir: Path) -> tuple[int, int]:
    """Gives the study's RUNNING trials the epochs and endings the tables hold and it lacks.

    Returns:
        (trials it ended, epochs it added).
    """
    from optuna.trial import TrialState

    tables = {cells["trial_id"]: cells for cells in table_rows(experiment_dir / TRIALS_FILE) if cells.get("trial_id")}
    epochs: dict[str, dict[int, dict[str, float]]] = {}
    for cells in table_rows(experiment_dir / EPOCHS_FILE):
        if cells.get("trial_id") in tables:
            metrics = {name: float(text) for name, text in cells.items() if name not in EPOCH_COLUMNS and text}
            epochs.setdefault(cells["trial_id"], {})[int(cells["epoch"])] = metrics
    # A bucket's Ray state, uploaded apart from the driver's mirror, may be ahead of its tables:
    # the trials it names count as known to them (seed 724138 again: trial 2 ran an epoch that
    # only Ray's save held, the resume's recorder took it from there, and the study never did).
    saved, saved_rows = _saved_records(experiment_dir) if bucket_of(experiment_dir) is not None else ({}, [])
    named = set(tables) | set(saved)
    _add_saved_rows(epochs, named, saved_rows)
    ended = _add_unknown(study, spec, tables, epochs, saved)
    added = 0
    for frozen in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        trial_id = str(frozen.user_attrs.get(RAY_TRIAL_ATTR))
        if trial_id not in named or {HISTORY_ATTR, DUPLICATE_ATTR, LOST_ATTR} & set(frozen.user_attrs):
            continue
        trial = reopen_trial(study, frozen)
        rows = epochs.get(trial_id, {})
        added += _add_epochs(trial, frozen, spec, rows)
        ended += _end(study, trial, spec, tables.get(trial_id, {}), rows)
    return ended, added


def _saved_records(experiment_dir: Path) -> tuple[dict[str, TrialRecord], list[EpochRow]]:
    """The recorder's records and epoch rows in Ray's newest save, each state unpickled and read once."""
    from tunekit.driver.saved_records import records_of

    records: dict[str, TrialRecord] = {}
    rows: list[EpochRow] = []
    for state in saved_callback_states(experiment_dir):
        if isinstance(state, Mapping) and "records" in state:
            state_records, state_rows = records_of(state["records"])
            records.update(state_records)
            rows += state_rows
    return records, rows


def _add_saved_rows(epochs: dict[str, dict[int, dict[str, float]]], named: set[str], saved: list[EpochRow]) -> None:
    """Adds the epoch rows of Ray's newest save that ``epochs.csv`` lacks (a bucket's).

    Ray uploads its state, the recorder's rows among it, to the bucket itself, apart from the
    driver's mirror: a save that came after the mirror's last upload holds epochs neither the
    bucket's journal nor its tables have, and the resume's recorder takes them from it. Chaos
    seed 254402: an outage past the bound, then the resume; the study lacked epochs 1 and 2 of
    a trial that resumed from its epoch-2 checkpoint, which ``epochs.csv`` then held.
    """
    for row in saved:
        if row.trial_id in named:
            epochs.setdefault(row.trial_id, {}).setdefault(row.epoch, dict(row.metrics))


def _add_unknown(
    study: optuna.Study,
    spec: ExperimentSpec,
    tables: Mapping[str, Mapping[str, str]],
    epochs: Mapping[str, Any],
    saved: Mapping[str, TrialRecord],
) -> int:
    """Adds the trials the study lacks altogether that follow its last, in number order: an ended
    one as the searcher told it (from the tables), one not ended asked again as RUNNING with its
    parameters and Ray id. Returns how many it added as ended.

    The study misses them when they were asked after the journal's last upload: a bucket
    experiment's mirror uploads its files one after another, and Ray uploads its state apart from
    it. ``trials.csv`` or Ray's newest save may then name trials the bucket's study never asked (an
    outage past ``storage.outage_s`` that began just after trials were asked; a kill between two
    uploads), and the resume's searcher met their numbers with an ``IndexError`` traceback: chaos
    seed 724138, trial 2 stopped after 0 epochs, held by trials.csv alone. A trial's study number
    is its number everywhere, so a gap, or an ended trial only Ray's save holds (its ending's
    figures are in no table), ends the run of them: the resume's check says what is wrong.
    """
    known = {str(t.user_attrs.get(RAY_TRIAL_ATTR)) for t in study.get_trials(deepcopy=False)}
    unknown: dict[int, tuple[str, str, dict[str, Any], Mapping[str, str] | None]] = {}
    for record in saved.values():
        if record.number is not None and record.trial_id not in known:
            unknown[record.number] = (record.trial_id, str(record.status), dict(record.params), None)
    for trial_id, cells in tables.items():  # the tables' word on a trial wins: they hold its ending's figures
        if trial_id not in known and cells.get("number"):
            params = {
                n.removeprefix("params."): yaml.safe_load(v) for n, v in cells.items() if n.startswith("params.") and v
            }
            unknown[int(float(cells["number"]))] = (trial_id, str(cells.get("status")), params, cells)
    ended = 0
    while (found := unknown.get(len(study.trials))) is not None:
        trial_id, status, params, row = found
        if status not in _STUDY_STATES:
            _ask_again(study, spec, trial_id, params)
        elif row is not None:
            _add_ended(study, spec, trial_id, _STUDY_STATES[status], params, row, epochs.get(trial_id, {}))
            ended += 1
        else:
            break
    return ended


def _ask_again(study: optuna.Study, spec: ExperimentSpec, trial_id: str, params: Mapping[str, Any]) -> None:
    names = set(spec.space.names)
    study.enqueue_trial({k: v for k, v in params.items() if k in names}, skip_if_exists=False)
    trial = study.ask()
    spec.space.sample(trial)
    trial.set_user_attr(RAY_TRIAL_ATTR, trial_id)


def _add_ended(
    study: optuna.Study,
    spec: ExperimentSpec,
    trial_id: str,
    state: str,
    params: Mapping[str, Any],
    cells: Mapping[str, str],
    rows: Mapping[int, dict[str, float]],
) -> None:
    import optuna
    from optuna.trial import TrialState

    fixed = optuna.trial.FixedTrial(dict(params))
    spec.space.sample(fixed)  # type: ignore[arg-type]  # FixedTrial keeps each distribution asked for
    values, attrs = _told(spec, state, cells, rows)
    steps = {e: v for e, metrics in rows.items() if (v := finite(metrics.get(spec.metric.name))) is not None}
    study.add_trial(
        optuna.trial.create_trial(
            state=TrialState.FAIL if state == "COMPLETE" and values is None else TrialState[state],
            values=values,
            params=fixed.params,
            distributions=fixed.distributions,
            intermediate_values={} if spec.multi_objective else steps,
            user_attrs={RAY_TRIAL_ATTR: trial_id, **attrs},
        )
    )


def _told(
    spec: ExperimentSpec, state: str, cells: Mapping[str, str], rows: Mapping[int, dict[str, float]]
) -> tuple[list[float] | None, dict[str, Any]]:
    """The values and user attrs the searcher gives a trial that ended in ``state``: a completed
    trial's kept epoch's objectives, a pruned one's last value of the metric (as Optuna's tell)."""
    attrs: dict[str, Any] = {}
    if spec.multi_objective:  # each epoch's tracked metrics, as the searcher keeps them
        attrs = {
            f"{EPOCH_RESULT_ATTR_PREFIX}{e}": final_result(spec, {**m, EPOCH_KEY: e})["metrics"]
            for e, m in rows.items()
        }
    if state == "COMPLETE":
        kept = int(float(cells.get("kept_epoch") or cells.get("epochs") or 0))
        result = {**rows.get(kept, {}), EPOCH_KEY: kept}
        if spec.multi_objective:
            attrs[FINAL_RESULT_ATTR] = final_result(spec, result)
        return objective_values(spec, result), attrs
    pruned = rows and state == "PRUNED" and not spec.multi_objective
    last = finite(rows[max(rows)].get(spec.metric.name)) if pruned else None
    return ([last] if last is not None else None), attrs


def _add_epochs(trial: optuna.Trial, frozen: Any, spec: ExperimentSpec, rows: Mapping[int, dict[str, float]]) -> int:
    held = set(epoch_results(frozen.user_attrs) if spec.multi_objective else frozen.intermediate_values)
    added = 0
    for epoch in sorted(set(rows) - held):
        result = {**rows[epoch], EPOCH_KEY: epoch}
        value = finite(result.get(spec.metric.name))
        if value is None:
            continue
        if spec.multi_objective:  # as the searcher keeps them: Optuna has no intermediate values for these
            trial.set_user_attr(f"{EPOCH_RESULT_ATTR_PREFIX}{epoch}", final_result(spec, result)["metrics"])
        else:
            trial.report(value, step=epoch)
        added += 1
    return added


def _end(
    study: optuna.Study, trial: optuna.Trial, spec: ExperimentSpec, cells: Mapping[str, str], rows: Mapping[int, Any]
) -> int:
    """Tells the study the ending ``trials.csv`` gives the trial, as the searcher told it; 0 when it has none."""
    from optuna.trial import TrialState

    status = cells.get("status")
    if status == TrialStatus.PRUNED:
        study.tell(trial, state=TrialState.PRUNED, skip_if_finished=True)
    elif status == TrialStatus.FAILED:
        study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
    elif status == TrialStatus.COMPLETED:
        kept = int(float(cells.get("kept_epoch") or cells.get("epochs") or 0))
        result = {**rows.get(kept, {}), EPOCH_KEY: kept}
        values = objective_values(spec, result)
        if values is None:
            study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
            return 1
        set_constraints(trial, spec, result)
        if spec.multi_objective:
            trial.set_user_attr(FINAL_RESULT_ATTR, final_result(spec, result))
        study.tell(trial, values if spec.multi_objective else values[0], skip_if_finished=True)
    else:
        return 0
    return 1
