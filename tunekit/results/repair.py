"""``tunekit check --repair DIR``: a study journal damaged before its tail, rebuilt.

A journal cut in the middle, with a line inserted or a byte changed (``tunekit.storage.journal`` finds
each), cannot be read past its first damaged line, and a resume refuses it. The study is
rebuilt from what is known whole:

* the journal's **valid prefix**: every line before the first damaged one, replayed by Optuna
  (so each trial keeps what it held there: parameters, sampler attributes, first values);
* ``trials.csv`` and ``epochs.csv`` for what the prefix lacks: a trial's state and value from
  its row, its parameters from ``params.*`` (with the spec's distributions), its epochs'
  values from ``epochs.csv``, the Ray trial it was.

Trials are written again in their numbers' order (a trial's id in the journal is its order of
creation), each as one whole operation, into a new journal renamed over the old one; the
damaged file is kept beside it (``study.journal.damaged``) and the new one sealed. A number
that neither the prefix nor the tables know (a trial asked for just before the damage, never
recorded) is kept as a failed trial marked lost, as a resume closes such a trial.
A lost trial's Ray id, when only the lost lines held it, is its folder's whose newest checkpoint
holds its parameters; a trial folder no record names after the rebuild (its trial's creation
was in the lost lines, or it has no checkpoint) is moved to ``.orphans/``, kept and read by nothing.

What cannot be rebuilt: what only the lost lines held (a trial's PBT steps, several objectives'
per-epoch attributes); ``tunekit check`` after the repair says where these differ.
"""

from __future__ import annotations

import os
import warnings
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunekit.errors import DamagedRecordWarning
from tunekit.layout import (
    EPOCHS_FILE,
    JOURNAL_SEAL_FILE,
    PARAM_PREFIX,
    RAY_TRIAL_ATTR,
    STUDY_FILE,
    TRIALS_FILE,
    TrialStatus,
    finite,
    number_or_none,
)
from tunekit.results.findings import table_rows_of
from tunekit.search.attrs import HELD_ATTR, LOST_ATTR
from tunekit.storage.clock import died_mid_session
from tunekit.storage.journal import JournalSealer, verify_journal
from tunekit.storage.store import repair_torn_tail

if TYPE_CHECKING:
    import optuna

    from tunekit.config.spec import ExperimentSpec
    from tunekit.results.load import ExperimentResults

DAMAGED_SUFFIX = ".damaged"
ORPHANS_DIR = ".orphans"  # a dot folder: no reader takes it for a trial's


def repair_experiment(experiment_dir: str | Path) -> list[str]:
    """Repairs what ``tunekit check`` finds damaged and can rebuild; returns what it did, one line each.

    A bucket's experiment is pulled afresh into this machine's cache under the bucket's lease,
    repaired there, and the files the repair wrote are uploaded back (the study's journal, the
    damaged one kept beside it, the seal).

    Raises:
        LeaseHeldError: a driver is writing the experiment.
        StorageError: the bucket cannot be reached or written.
    """
    from tunekit.storage.buckets import Bucket, check_bucket, is_uri, local_path, mirror_cache
    from tunekit.storage.lease import DriverLease

    if not is_uri(experiment_dir):
        directory = local_path(experiment_dir)
        with DriverLease(directory, "check --repair"):
            return _repair_journal(directory)
    location = str(experiment_dir)
    check_bucket(location)
    bucket = Bucket(location)
    with DriverLease(location, "check --repair"):
        directory = bucket.pull(mirror_cache(bucket, "driver", fresh=True))
        repaired = _repair_journal(directory)
        if repaired:
            bucket.push(directory, [STUDY_FILE, f"{STUDY_FILE}{DAMAGED_SUFFIX}", JOURNAL_SEAL_FILE])
        return repaired


def _repair_journal(directory: Path) -> list[str]:
    path = directory / STUDY_FILE
    if not path.is_file():
        if not (directory / TRIALS_FILE).is_file():
            return []
        return [_rebuild(directory, b"", "it was missing")]
    report = verify_journal(path)
    if report.damage is None:
        repaired = []
        if cut := repair_torn_tail(path):
            JournalSealer(directory).seal()
            repaired.append(f"{STUDY_FILE}: cut back a torn last line ({cut} bytes)")
        if (count := _states_not_the_tables(directory, report.trials)) and not died_mid_session(directory):
            # A driver that died leaves the study ahead of the tables: the resume settles that.
            repaired.append(_rebuild(directory, path.read_bytes(), f"{count} trials' states were not {TRIALS_FILE}'s"))
        return repaired
    line = report.damage[0]
    with path.open("rb") as handle:
        prefix = b"".join(handle.readline() for _ in range(line - 1))
    return [_rebuild(directory, prefix, report.damage[1], _ray_ids_after(path.read_bytes()[len(prefix) :]))]


def _ray_ids_after(damaged: bytes) -> dict[int, str]:
    """Ray's trial ids that lines after the damage still name (their trial ids are creation
    numbers, which a line lost before them does not change): a trial only they knew keeps its
    id, so ``tunekit check`` tells its folder from an orphan's."""
    import json

    ids: dict[int, str] = {}
    for line in damaged.splitlines():
        try:
            log = json.loads(line)
            ids[int(log["trial_id"])] = str(log["user_attr"][RAY_TRIAL_ATTR])
        except (ValueError, TypeError, KeyError):
            continue
    return ids


def _rebuild(directory: Path, prefix: bytes, damage: str, ray_ids: dict[int, str] | None = None) -> str:
    import optuna

    from tunekit.compat.optuna_study import journal_storage
    from tunekit.results.load import load

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with warnings.catch_warnings():  # a missing study is what this rebuilds
        warnings.simplefilter("ignore", DamagedRecordWarning)
        results = load(directory)
    spec = results.spec
    kept = directory / f"{STUDY_FILE}.prefix"
    kept.write_bytes(prefix)
    try:
        old = journal_storage(kept)
        study = next((s for s in old.get_all_studies() if s.study_name == spec.name), None)
        trials = old.get_all_trials(study._study_id, deepcopy=False) if study is not None else []
        partial = directory / f"{STUDY_FILE}.partial"
        partial.unlink(missing_ok=True)
        new = journal_storage(partial)
        direction = optuna.study.StudyDirection
        directions = [direction.MAXIMIZE if o.mode == "max" else direction.MINIMIZE for o in spec.objectives]
        study_id = new.create_new_study(directions, spec.name)
        held = False
        if study is not None:
            for key, value in study.user_attrs.items():
                new.set_study_user_attr(study_id, key, value)
            for key, value in study.system_attrs.items():
                new.set_study_system_attr(study_id, key, value)
            held = bool(study.user_attrs.get(HELD_ATTR))
        rows = {int(n): row for row in table_rows_of(results.trials) if (n := finite(row.get("number"))) is not None}
        epochs = _metric_by_epoch(results)
        count = max(len(trials), max(rows, default=-1) + 1)
        templates = [
            _template(spec, trials[number] if number < len(trials) else None, rows.get(number), epochs, held)
            for number in range(count)
        ]
        for number, template in enumerate(templates):
            if number not in rows and number in (ray_ids or {}):  # its Ray id named only after the damage
                template.user_attrs.setdefault(RAY_TRIAL_ATTR, (ray_ids or {})[number])
        orphans = _name_orphan_folders(directory, templates, {str(row["trial_id"]) for row in rows.values()})
        for template in templates:
            new.create_new_trial(study_id, template_trial=template)
        del new
        path = directory / STUDY_FILE
        if path.is_file():
            os.replace(path, directory / f"{STUDY_FILE}{DAMAGED_SUFFIX}")
        os.replace(partial, path)
    finally:
        kept.unlink(missing_ok=True)
    JournalSealer(directory).seal()
    whole_lines, from_tables = prefix.count(b"\n"), count - len(trials)
    set_aside = _set_aside(directory, orphans)
    return (
        f"{STUDY_FILE}: rebuilt ({damage}): {len(trials)} trials from its first {whole_lines} whole lines, "
        f"{from_tables} from {TRIALS_FILE} and {EPOCHS_FILE}, every trial's state and epochs held to "
        f"them; the damaged file is kept as {STUDY_FILE}{DAMAGED_SUFFIX}{set_aside}"
    )


def _name_orphan_folders(directory: Path, templates: list[Any], recorded: set[str]) -> list[Path]:
    """Gives a lost trial whose Ray id only the damaged lines held the folder whose checkpoint
    holds its parameters; returns the trial folders still named by no record (a lost trial
    without a checkpoint, or one whose creation the damage took)."""
    from tunekit.layout import unnamed_trial_folders

    named = recorded | {str(t.user_attrs[RAY_TRIAL_ATTR]) for t in templates if RAY_TRIAL_ATTR in t.user_attrs}
    orphans = unnamed_trial_folders(directory, named)
    for template in templates:
        if template.user_attrs.get(LOST_ATTR) and RAY_TRIAL_ATTR not in template.user_attrs and template.params:
            match = next((f for f in orphans if _checkpointed_config(f).items() >= template.params.items()), None)
            if match is not None:
                template.user_attrs[RAY_TRIAL_ATTR] = match.name
                orphans.remove(match)
    return orphans


def _checkpointed_config(folder: Path) -> dict[str, Any]:
    """The configuration a trial folder's newest checkpoint was trained with ({} without one)."""
    import json

    from tunekit.layout import CHECKPOINT_STATE

    for checkpoint in sorted(folder.glob("checkpoint_*"), reverse=True):
        try:
            return dict(json.loads((checkpoint / CHECKPOINT_STATE).read_text())["config"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return {}


def _set_aside(directory: Path, orphans: list[Path]) -> str:
    """Moves trial folders no record names into ``.orphans/`` (kept, and read by nothing); says so."""
    if not orphans:
        return ""
    aside = directory / ORPHANS_DIR
    aside.mkdir(exist_ok=True)
    for folder in orphans:
        os.replace(folder, aside / folder.name)
    names = ", ".join(folder.name for folder in orphans)
    return f"; trial folders no record names now ({names}) are moved to {ORPHANS_DIR}/"


# The Optuna states (their journal codes) a trial of each status may have; see check._study_states.
_STATES_OF = {
    TrialStatus.COMPLETED: {1},
    TrialStatus.PRUNED: {2},
    TrialStatus.FAILED: {3},
}


def _states_not_the_tables(directory: Path, states: list[int]) -> int:
    """How many trials of trials.csv the study holds in a state their status rules out."""
    from tunekit.storage.store import table_rows

    count = 0
    for row in table_rows(directory / TRIALS_FILE):
        number, status = number_or_none(row.get("number")), row.get("status", "")
        allowed = _STATES_OF.get(TrialStatus(status)) if status in set(TrialStatus) else None
        if number is not None and allowed is not None and int(number) < len(states):
            count += states[int(number)] not in allowed
    return count


def _metric_by_epoch(results: ExperimentResults) -> dict[str, dict[int, float]]:
    by_trial: dict[str, dict[int, float]] = {}
    for row in table_rows_of(results.epochs):
        if (value := finite(row.get(results.metric))) is not None:
            by_trial.setdefault(str(row["trial_id"]), {})[int(row["epoch"])] = value
    return by_trial


def _template(
    spec: ExperimentSpec,
    trial: optuna.trial.FrozenTrial | None,
    row: dict[str, Any] | None,
    epochs: dict[str, dict[int, float]],
    held: bool,
) -> optuna.trial.FrozenTrial:
    """The trial as it is written again: the prefix's, its state and values held to its row."""
    from optuna.trial import TrialState, create_trial

    if row is None:
        if trial is not None and trial.state.is_finished():
            return trial  # a trial the tables do not hold: a warm start's history, a duplicate, a lost ask
        if trial is not None:  # asked, never run (its closing as lost was in the lines the damage took)
            return create_trial(
                state=TrialState.FAIL,
                params=dict(trial.params),
                distributions=dict(trial.distributions),
                user_attrs={**trial.user_attrs, LOST_ATTR: True},
                system_attrs=dict(trial.system_attrs),
                intermediate_values=dict(trial.intermediate_values),
            )
        return create_trial(state=TrialState.FAIL, user_attrs={LOST_ATTR: "rebuilt: lost with the journal's damage"})
    state = _state(str(row["status"]), finite(row.get("final_metric")), held, trial)
    params = dict(trial.params) if trial is not None else {}
    distributions = dict(trial.distributions) if trial is not None else {}
    _add_params(spec, row, params, distributions)
    user_attrs = dict(trial.user_attrs) if trial is not None else {}
    user_attrs.setdefault(RAY_TRIAL_ATTR, str(row["trial_id"]))
    intermediate = dict(trial.intermediate_values) if trial is not None else {}
    if not spec.multi_objective:
        for epoch, value in epochs.get(str(row["trial_id"]), {}).items():
            intermediate.setdefault(epoch, value)  # the study keeps an epoch's first value
    values = None
    if state == TrialState.COMPLETE:
        names = [f"final.{o.name}" for o in spec.objectives] if spec.multi_objective else ["final_metric"]
        values = [float(finite(row.get(name)) or 0.0) for name in names]
    elif state == TrialState.PRUNED and intermediate:
        values = [intermediate[max(intermediate)]]  # as Optuna's tell keeps a pruned trial's last report
    frozen = create_trial(
        state=state,
        values=values,
        params=params,
        distributions=distributions,
        user_attrs=user_attrs,
        system_attrs=dict(trial.system_attrs) if trial is not None else {},
        intermediate_values=intermediate,
    )
    frozen.datetime_start = trial.datetime_start if trial is not None else _when(row.get("started_at"))
    if state.is_finished():
        done = trial.datetime_complete if trial is not None and trial.state.is_finished() else None
        frozen.datetime_complete = done or _when(row.get("ended_at"))
    return frozen


def _state(status: str, final: float | None, held: bool, trial: optuna.trial.FrozenTrial | None) -> Any:
    from optuna.trial import TrialState

    match TrialStatus(status):
        case TrialStatus.COMPLETED:
            return TrialState.COMPLETE
        case TrialStatus.PRUNED:
            return TrialState.PRUNED
        case TrialStatus.FAILED:
            return TrialState.FAIL
        case TrialStatus.STOPPED if not (held and (trial is None or trial.state == TrialState.RUNNING)):
            return TrialState.PRUNED if final is not None else TrialState.FAIL
        case _:  # running, lost, or stopped by a signal and held for the resume
            return trial.state if trial is not None and trial.state.is_finished() else TrialState.RUNNING


def _add_params(
    spec: ExperimentSpec, row: dict[str, Any], params: dict[str, Any], distributions: dict[str, Any]
) -> None:
    """The row's ``params.*`` the prefix lacks, with the space's distributions."""
    from tunekit.config.space import Fixed
    from tunekit.search.history import optuna_distribution

    for param in spec.space.params:
        value = row.get(PARAM_PREFIX + param.name)
        if param.name in params or isinstance(param.distribution, Fixed) or value is None or value != value:
            continue
        distribution = optuna_distribution(param.distribution)
        params[param.name] = _as_in(distribution, value)
        distributions[param.name] = distribution


def _as_in(distribution: Any, value: Any) -> Any:
    """A cell of trials.csv as the value the distribution holds (pandas reads 64 as 64.0 beside blanks)."""
    from optuna.distributions import CategoricalDistribution, IntDistribution

    if isinstance(distribution, CategoricalDistribution):
        for choice in distribution.choices:
            if str(choice) == str(value) or (finite(choice) is not None and finite(choice) == finite(value)):
                return choice
        return value
    return int(value) if isinstance(distribution, IntDistribution) else float(value)


def _when(stamp: Any) -> datetime | None:
    seconds = finite(stamp)
    return None if seconds is None else datetime.fromtimestamp(seconds, tz=UTC).replace(tzinfo=None)
