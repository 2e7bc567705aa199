"""``tunekit check DIR``: does an experiment agree with itself?

A search writes the same facts into several places: ``trials.csv``, ``epochs.csv`` and
``spans.csv``, the Optuna study, the trials' checkpoints, ``ledger.json``, and MLflow
when tracked. Each feature (ASHA, PBT, grid, resume, grow, warm start, retries) has its own
path into them, so a disagreement between two is a bug somewhere. ``check_experiment``
holds every place against the others and against ``tunekit.results.summary`` (the one
computation every report renders), and names each disagreement with both values.

Run by users after a crash or before trusting a result, and by the end-to-end suite after
every search it makes.
"""

from __future__ import annotations

import itertools
import json
import math
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunekit.errors import DamagedFileError, DamagedRecordWarning
from tunekit.layout import (
    CHECKPOINT_STATE,
    EPOCHS_FILE,
    EXPLOITS_FILE,
    LEDGER_FILE,
    RAY_TRIAL_ATTR,
    SPANS_FILE,
    STARTED_FILE,
    STUDY_FILE,
    TRACKING_FILE,
    TRIALS_FILE,
    TrialStatus,
    finite,
    first_best_epoch,
)
from tunekit.results.check_files import (
    SAVED_STATE,
    checkpoint_file_findings,
    damage,
    kept_checkpoint_findings,
    last_checkpoints,
    orphan_folder_findings,
    saved_state_findings,
)
from tunekit.results.check_journal import journal_findings
from tunekit.results.check_mlflow import check_mlflow
from tunekit.results.check_pareto import FRONT_VS_STUDY, front_findings, ledger_front_findings, study_findings
from tunekit.results.findings import (
    TIME_SLACK_S,
    CheckReport,
    Finding,
    dead_driver_lag,
    finding_of,
    same,
    table_rows_of,
    trial_label,
)
from tunekit.results.load import ExperimentResults, load
from tunekit.results.summary import Summary, summarize
from tunekit.search.attrs import (
    DUPLICATE_ATTR,
    FINAL_RESULT_ATTR,
    HELD_ATTR,
    HISTORY_ATTR,
    LOST_ATTR,
    PBT_STEPS_ATTR,
    epoch_results,
)
from tunekit.search.forecast import slot_units
from tunekit.storage.buckets import readable, shown
from tunekit.storage.clock import SearchClock, died_mid_session
from tunekit.tracking.record import TrackingRecord

if TYPE_CHECKING:
    pass


TABLES_VS_STUDY = f"{TRIALS_FILE} vs study"
BEST_VS_CHECKPOINTS = "best vs checkpoints"
# Where a driver that died mid-session leaves one record ahead of another, and how that reads.
# Several objectives: the study's front then holds trials the tables have not ended yet.
STUDY_LAG = ((TABLES_VS_STUDY, FRONT_VS_STUDY), "the study ran up to a table write ahead of the tables")
CHECKPOINTS_LAG = ((BEST_VS_CHECKPOINTS,), "the trials' checkpoints ran up to a table write ahead of the tables")


def check_experiment(
    experiment_dir: str | Path, *, mlflow: bool = True, tracking_uri: str | None = None
) -> CheckReport:
    """Compares every record of an experiment with the others; see ``CheckReport.findings``.

    Args:
        experiment_dir: the experiment's directory.
        mlflow: compare MLflow's runs too, when the experiment was tracked (``tracking.json``).
        tracking_uri: where its runs are, when not the URI ``tracking.json`` recorded.
    """
    directory = readable(experiment_dir, payloads=True)  # a bucket's: its checkpoints' files too
    with warnings.catch_warnings():  # a missing study is a finding here (journal_findings)
        warnings.simplefilter("ignore", DamagedRecordWarning)
        try:
            results = load(directory)
            clock = SearchClock.read(directory)  # read once: the spans and the ledger's age
        except DamagedFileError as error:
            return _unreadable(directory, error)
    report = CheckReport(results.experiment_dir)
    summary = summarize(results)
    directory = results.experiment_dir
    journal_whole = journal_findings(directory)
    sections: list[tuple[str, Callable[[], Iterator[Finding | str]]]] = [
        (STUDY_FILE, lambda: iter(journal_whole)),
        (TRIALS_FILE, lambda: _trials_table(results)),
        (EPOCHS_FILE, lambda: _epochs_against_trials(results)),
        (SPANS_FILE, lambda: _spans(results, clock)),
        ("study", lambda: _as_a_dead_driver_s_lag(directory, _study(results, summary, journal_whole), *STUDY_LAG)),
        ("checkpoints", lambda: _as_a_dead_driver_s_lag(directory, _checkpoints(results), *CHECKPOINTS_LAG)),
        ("trial folders", lambda: orphan_folder_findings(directory, set(map(str, results.trials.get("trial_id", []))))),
        (SAVED_STATE, lambda: saved_state_findings(directory)),
        ("summary", lambda: _figures(results, summary)),
    ]
    if summary.pareto is not None:
        sections.append(("pareto front", lambda: map(finding_of, front_findings(results, summary))))
    for name, section in sections:
        report.checked.append(name)
        for item in section():  # a string is a note: agreement explained, not a disagreement
            if isinstance(item, str):
                report.notes.append(item)
            else:
                report.findings.append(item)
    if any(finding.where == TABLES_VS_STUDY for finding in report.findings):
        report.notes.append(
            f"`tunekit check --repair {shown(directory)}` holds the study's trials to {TRIALS_FILE} and {EPOCHS_FILE}"
        )
    ledger = results.experiment_dir / LEDGER_FILE
    if not ledger.is_file():
        report.notes.append(f"no {LEDGER_FILE}: the search did not end (or ended before this file existed)")
    elif clock is not None and clock.sessions and ledger.stat().st_mtime < clock.sessions[-1][0]:
        # Written when an earlier session ended; the last one ended without it (a killed driver).
        report.notes.append(
            f"{LEDGER_FILE} is from an earlier session: the last one ended without writing it "
            "(its driver was killed); `tunekit resume` writes it again"
        )
    else:
        report.checked.append(LEDGER_FILE)
        report.findings.extend(_ledger_file(results, summary))
    running = int(summary.counts.get(TrialStatus.RUNNING, 0))
    if running:
        report.notes.append(f"{running} trials were running when the search stopped; `tunekit resume` finishes them")
    tracked = TrackingRecord.read(results.experiment_dir)
    if mlflow and tracked is not None:
        check_mlflow(report, results, summary, tracked, tracking_uri)
    elif mlflow and (damage := _damaged_json(results.experiment_dir / TRACKING_FILE)) is not None:
        # Not "never tracked": resume refuses it, so check names it (fault explorer seed 219569).
        report.findings.append(Finding(TRACKING_FILE, "the record reads whole", "yes", damage))
    elif mlflow:
        report.notes.append(f"not tracked in MLflow (no {TRACKING_FILE})")
    return report


def _damaged_json(path: Path) -> str | None:
    """What is wrong with the JSON record at ``path`` (empty, not JSON), or None when it reads or is missing."""
    from tunekit.storage.store import read_json

    try:
        read_json(path)
    except DamagedFileError as error:
        return str(error)
    return None


def _as_a_dead_driver_s_lag(
    experiment_dir: Path, items: Iterator[Finding | str], wheres: tuple[str, ...], ran_ahead: str
) -> Iterator[Finding | str]:
    """A section's findings at each of ``wheres``, as one note each when the last session's driver died
    without ending it (SIGKILL, or a second Ctrl-C's forced exit).

    Such a driver wrote its records at different paces: the study and the checkpoints as
    things happened, the tables every 2 s, MLflow up to a second late. So the study and a
    trial's checkpoints can be ahead of ``trials.csv`` and ``epochs.csv``. That is the state
    ``tunekit resume`` starts from and reconciles, not a disagreement; a check after the
    resume holds them to the letter again. A driver on another host, or a tunekit that did
    not record its session's end, is held to the letter now."""
    if not died_mid_session(experiment_dir):
        yield from items
        return
    lagging: dict[str, list[Finding]] = {}
    for item in items:
        if isinstance(item, Finding) and item.where in wheres:
            lagging.setdefault(item.where, []).append(item)
        else:
            yield item
    for where, findings in lagging.items():
        yield dead_driver_lag(where, ran_ahead, findings)


# ---------------------------------------------------------------- the tables


def _trials_table(results: ExperimentResults) -> Iterator[Finding]:
    rows = table_rows_of(results.trials)
    ids = [str(r["trial_id"]) for r in rows]
    for trial_id in sorted({i for i in ids if ids.count(i) > 1}):
        yield Finding(TRIALS_FILE, f"trial {trial_id} rows", 1, ids.count(trial_id))
    numbers = [int(n) for r in rows if (n := finite(r.get("number"))) is not None]
    for number in sorted({n for n in numbers if numbers.count(n) > 1}):
        yield Finding(TRIALS_FILE, f"rows of trial number {number}", 1, numbers.count(number))
    valid = {str(s) for s in TrialStatus}
    for row in rows:
        status = str(row["status"])
        if status not in valid:
            yield Finding(TRIALS_FILE, f"{trial_label(row)} status", sorted(valid), status)
        elif TrialStatus(status).is_finished() and not isinstance(row.get("reason"), str):
            yield Finding(TRIALS_FILE, f"{trial_label(row)} reason of a {status} trial", "a reason", row.get("reason"))
    if len(rows) > results.spec.budget.num_samples:
        yield Finding(TRIALS_FILE, "trials against the budget", results.spec.budget.num_samples, len(rows))


def _epochs_against_trials(results: ExperimentResults) -> Iterator[Finding]:
    where = f"{TRIALS_FILE} vs {EPOCHS_FILE}"
    epochs, metric, mode = results.epochs, results.metric, results.mode
    by_trial: dict[str, list[dict[str, Any]]] = {}
    for row in table_rows_of(epochs):
        by_trial.setdefault(str(row["trial_id"]), []).append(row)
    known = {str(r["trial_id"]) for r in table_rows_of(results.trials)}
    for trial_id in sorted(set(by_trial) - known):
        yield Finding(where, f"epochs of trial {trial_id}", f"a trial in {TRIALS_FILE}", "none")
    kept_in_table = "kept_epoch" in results.trials.columns  # experiments before training.keep lack it
    for row in table_rows_of(results.trials):
        reported = sorted(by_trial.get(str(row["trial_id"]), []), key=lambda r: int(r["epoch"]))
        numbers = [int(r["epoch"]) for r in reported]
        epochs_count = int(finite(row.get("epochs")) or 0)
        if numbers != list(range(1, epochs_count + 1)):
            yield Finding(where, f"{trial_label(row)} epochs", list(range(1, epochs_count + 1)), numbers)
        values = [v for r in reported if (v := finite(r.get(metric))) is not None]
        final, best = finite(row.get("final_metric")), finite(row.get("best_metric"))
        kept = finite(row.get("kept_epoch"))
        yield from _kept_epoch(results, row, reported, kept_in_table)
        at_kept = [v for r in reported if int(r["epoch"]) == kept and (v := finite(r.get(metric))) is not None]
        expected = at_kept[0] if kept is not None and at_kept else values[-1] if values else None
        if expected is not None and not same(final, expected):
            yield Finding(where, f"{trial_label(row)} final {metric}", final, expected)
        if values and not same(best, max(values) if mode == "max" else min(values)):
            yield Finding(
                where, f"{trial_label(row)} best {metric}", best, max(values) if mode == "max" else min(values)
            )


def _kept_epoch(
    results: ExperimentResults, row: dict[str, Any], reported: list[dict[str, Any]], kept_in_table: bool
) -> Iterator[Finding]:
    """A completed trial names the epoch it kept (``training.keep``): its last, or its best
    (the first epoch with the best value); and with ``best``, its final checkpoint holds that
    epoch's weights (``kept.npz``), the ones its exported model was saved from."""
    where, label = f"{TRIALS_FILE} vs {EPOCHS_FILE}", trial_label(row)
    kept = finite(row.get("kept_epoch"))
    if str(row["status"]) != TrialStatus.COMPLETED:
        if kept is not None:
            yield Finding(TRIALS_FILE, f"{label} kept_epoch of a {row['status']} trial", "none", int(kept))
        return
    if kept is None:
        if kept_in_table:
            yield Finding(TRIALS_FILE, f"{label} kept_epoch", "the epoch its model keeps", "none")
        return
    keep = results.spec.training.keep
    if keep == "last":
        expected = int(finite(row.get("epochs")) or 0)
    else:
        values = {int(r["epoch"]): v for r in reported if (v := finite(r.get(results.metric))) is not None}
        expected = first_best_epoch(values, results.mode) or 0
    if int(kept) != expected:
        yield Finding(where, f"{label} kept_epoch (training.keep: {keep})", expected, int(kept))
    if keep == "best":
        yield from kept_checkpoint_findings(results.experiment_dir / str(row["trial_id"]), label, int(kept))


def _unreadable(directory: Path, error: DamagedFileError) -> CheckReport:
    """A record every comparison reads (a table, the spec) is damaged: the report names it and
    its damage as a disagreement, where ``check`` raised the reader's error, whose hint was to run
    ``check`` (and a status no table holds ended in a traceback)."""
    name = Path(str(error.path)).name
    report = CheckReport(directory, [Finding(name, "read whole", "yes", f"{error.problem}; restore it from a copy")])
    report.checked.append(name)
    report.notes.append(f"nothing else was compared: every comparison reads {name}")
    return report


def _spans(results: ExperimentResults, clock: SearchClock | None) -> Iterator[Finding]:
    where = f"{TRIALS_FILE} vs {SPANS_FILE}"
    if clock is None:
        yield Finding("experiment", STARTED_FILE, "present", "missing")
        return
    spans = results.spans
    by_trial: dict[str, list[tuple[float, float | None]]] = {}
    attempts_of: dict[str, int] = {}  # the last attempt a span of the trial belongs to
    for row in table_rows_of(spans):
        by_trial.setdefault(str(row["trial_id"]), []).append((float(row["start"]), finite(row["end"])))
        if (attempt := finite(row.get("attempt"))) is not None:
            attempts_of[str(row["trial_id"])] = max(attempts_of.get(str(row["trial_id"]), 0), int(attempt))
    reports: dict[str, list[float]] = {}
    for row in table_rows_of(results.epochs):
        reports.setdefault(str(row["trial_id"]), []).append(float(row["time"]))
    limit = clock.active_seconds + TIME_SLACK_S
    for row in table_rows_of(results.trials):
        trial_id, label = str(row["trial_id"]), trial_label(row)
        pairs = sorted(by_trial.get(trial_id, []))
        if not pairs:
            yield Finding(where, f"{label} spans", "at least one", 0)
            continue
        closed = [(start, end) for start, end in pairs if end is not None]
        if TrialStatus(str(row["status"])).is_finished() and len(closed) != len(pairs):
            yield Finding(where, f"{label} open spans of a {row['status']} trial", 0, len(pairs) - len(closed))
        for (_, end), (start, _) in itertools.pairwise(closed):
            if start < end - TIME_SLACK_S:
                yield Finding(where, f"{label} spans overlap", f"start >= {end}", start)
        if closed and closed[-1][1] is not None and closed[-1][1] > limit:
            yield Finding(where, f"{label} span ends after the search's active time", f"<= {limit:.3f}", closed[-1][1])
        yield from _attempts(label, row, attempts_of.get(trial_id))
        total = sum(end - start for start, end in closed)
        wall = finite(row.get("wall_seconds"))
        if len(closed) == len(pairs) and (wall is None or abs(total - wall) > TIME_SLACK_S):
            yield Finding(where, f"{label} wall_seconds against its spans", round(total, 3), wall)
        for at in reports.get(trial_id, []):
            if not any(_within(at, start, end) for start, end in pairs):
                yield Finding(f"{EPOCHS_FILE} vs {SPANS_FILE}", f"{label} report at {at} s", "inside a span", pairs)


# ----------------------------------------------------------------- the study


def _study(results: ExperimentResults, summary: Summary, journal: list[Finding | str]) -> Iterator[Finding | str]:
    import optuna

    from tunekit.search.plan import study_storage

    where = TABLES_VS_STUDY
    if any(isinstance(item, Finding) for item in journal):
        return  # a damaged journal replays as another study: its finding says what to do
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.load_study(study_name=results.spec.name, storage=study_storage(results.experiment_dir))
    except (KeyError, ValueError) as error:
        yield Finding(where, "the study", "present", str(error))
        return
    ours = {
        str(t.user_attrs[RAY_TRIAL_ATTR]): t
        for t in study.get_trials(deepcopy=False)
        if RAY_TRIAL_ATTR in t.user_attrs and not {HISTORY_ATTR, DUPLICATE_ATTR, LOST_ATTR} & set(t.user_attrs)
    }
    rows = {str(r["trial_id"]): r for r in table_rows_of(results.trials)}
    for trial_id in sorted(set(ours) - set(rows)):
        yield Finding(where, f"study trial {ours[trial_id].number} ({trial_id})", "no row", "a trial")
    yield from _number_gaps(study.get_trials(deepcopy=False), sorted(t.number for t in ours.values()))
    held = bool(study.user_attrs.get(HELD_ATTR))
    waiting = sum(
        t.state.name == "RUNNING" and str(rows[i]["status"]) == TrialStatus.STOPPED
        for i, t in ours.items()
        if i in rows
    )
    if held and waiting:
        trials = "1 stopped trial waits" if waiting == 1 else f"{waiting} stopped trials wait"
        yield f"a signal stopped the search: {trials} for `tunekit resume` to finish {'it' if waiting == 1 else 'them'}"
    exploited: dict[str, list[int]] = {}
    for step in table_rows_of(results.exploits):
        exploited.setdefault(str(step["trial_id"]), []).append(int(step["epoch"]))
    epochs: dict[str, dict[int, float]] = {}  # trial id -> {epoch: the metric in epochs.csv}
    for row in table_rows_of(results.epochs):
        if (value := finite(row.get(results.metric))) is not None:
            epochs.setdefault(str(row["trial_id"]), {})[int(row["epoch"])] = value
    for trial_id, row in rows.items():
        trial, label = ours.get(trial_id), trial_label(row)
        if trial is None:
            yield Finding(where, f"{label} in the study", "a study trial", "none")
            continue
        if finite(row.get("number")) != trial.number:
            yield Finding(where, f"{label} number", row.get("number"), trial.number)
        expected = _study_states(str(row["status"]), finite(row.get("final_metric")), held)
        if trial.state.name not in expected:
            yield Finding(where, f"{label} state", " or ".join(expected), trial.state.name)
        multi = results.spec.multi_objective  # its values: check_pareto.study_findings
        if trial.state.name == "COMPLETE" and not multi and not same(finite(row.get("final_metric")), trial.value):
            yield Finding(where, f"{label} value", finite(row.get("final_metric")), trial.value)
        kept_steps: dict[int, float] = dict(trial.intermediate_values)
        if multi:  # Optuna keeps no intermediate values for them: each epoch's metrics are user attributes
            by_epoch = epoch_results(trial.user_attrs)
            kept_steps = {epoch: m[results.metric] for epoch, m in by_epoch.items() if results.metric in m}
        # A study kept by a tunekit before the epochs' attributes has none: nothing to compare.
        values = {} if multi and not kept_steps else epochs.get(trial_id, {})
        if set(kept_steps) != set(values):
            yield _epochs_reported(where, label, row, sorted(values), sorted(kept_steps))
        yield from _epochs_trained_twice(label, row, values, kept_steps, results.metric)
        final = trial.user_attrs.get(FINAL_RESULT_ATTR)  # several objectives (none before it was kept)
        trained = finite(row.get("epochs"))
        if isinstance(final, dict) and trained is not None and int(trained) != final.get("epoch"):
            yield Finding(where, f"{label} last epoch", int(trained), final.get("epoch"))
        kept = [int(step["epoch"]) for step in trial.user_attrs.get(PBT_STEPS_ATTR, [])]
        if kept != exploited.get(trial_id, []):
            yield Finding(f"{EXPLOITS_FILE} vs study", f"{label} exploit epochs", exploited.get(trial_id, []), kept)
    yield from map(finding_of, study_findings(results, summary, study, ours))


def _epochs_reported(where: str, label: str, row: dict[str, Any], tables: list[int], study: list[int]) -> Finding | str:
    """The epochs ``epochs.csv`` and the study hold for a trial differ: a finding, or a note
    for a trial restarted from an older checkpoint whose last attempt ended earlier than the
    first reached (ASHA pruned it at a rung the first had passed, before the driver could
    record that pass: a crash or a kill).

    The study keeps what the first attempt reported, as it keeps an epoch's first value.
    """
    restarted = int(finite(row.get("attempts")) or 1) > 1
    if restarted and tables and study[: len(tables)] == tables and str(row.get("status")) != TrialStatus.COMPLETED:
        later = study[len(tables) :]
        return (
            f"{label} reported epochs {later[0]}-{later[-1]} in an earlier attempt, before a restart from an older "
            f"checkpoint; its last attempt ended at epoch {tables[-1]} ({row.get('status')}), and the study keeps "
            "the earlier attempt's epochs"
        )
    return Finding(where, f"{label} epochs reported", tables, study)


def _epochs_trained_twice(
    label: str, row: dict[str, Any], tables: dict[int, float], study: dict[int, float], metric: str
) -> Iterator[Finding | str]:
    """Epochs whose metric differs between ``epochs.csv`` and the study: a note for a trial that
    ran more than once, a finding otherwise.

    A trial that a resume or a lost worker restarted from a checkpoint older than its last
    reported epoch trains those epochs again: the tables, the saved model, MLflow's latest
    points and (one objective) the study take the new values; a study of several objectives,
    whose epochs are attributes, keeps the first.
    """
    differ = [epoch for epoch in sorted(tables.keys() & study.keys()) if not same(tables[epoch], study[epoch])]
    if not differ:
        return
    if int(finite(row.get("attempts")) or 1) > 1:
        pairs = "; ".join(f"epoch {e}: {tables[e]:.4g} in {EPOCHS_FILE}, {study[e]:.4g} in the study" for e in differ)
        yield (
            f"{label} trained epochs again after a restart, so its {metric} has two values ({pairs}); "
            f"{EPOCHS_FILE} and the saved model hold the last attempt's, the study the first's"
        )
        return
    for epoch in differ:
        yield Finding(f"{EPOCHS_FILE} vs study", f"{label} {metric} at epoch {epoch}", tables[epoch], study[epoch])


def _number_gaps(trials: list[Any], ran: list[int]) -> Iterator[Finding]:
    """Study trials numbered between the search's first and last trial that no trial ran, but
    for the ones a resume closed as lost (which it names) and the repeats studies told before
    repeated proposals took no number: the numbers trials.csv, MLflow and TensorBoard show are
    0..N-1 without gaps (``OptunaStudySearcher.suggest``)."""
    explained = {RAY_TRIAL_ATTR, HISTORY_ATTR, DUPLICATE_ATTR, LOST_ATTR}
    for frozen in trials[ran[0] : ran[-1]] if ran else ():
        if not explained & set(frozen.user_attrs):
            yield Finding(
                TABLES_VS_STUDY, f"study trial {frozen.number}", "the number of a trial, or of a lost one", "unused"
            )


def _study_states(status: str, final: float | None, held: bool) -> tuple[str, ...]:
    """The Optuna states a trial of this status may have (tunekit.search.searcher tells them);
    ``held``: a signal stopped the search, and its stopped trials wait RUNNING for a resume."""
    match TrialStatus(status):
        case TrialStatus.COMPLETED:
            return ("COMPLETE",)
        case TrialStatus.PRUNED:
            return ("PRUNED",)
        case TrialStatus.FAILED:
            return ("FAIL",)
        case TrialStatus.STOPPED:
            told = ("PRUNED",) if final is not None else ("FAIL",)
            return ("RUNNING", *told) if held else told
        case _:  # running, or lost: the search ended around it
            return ("RUNNING", "PRUNED", "FAIL")


# ----------------------------------------------------------- the checkpoints


def _checkpoints(results: ExperimentResults) -> Iterator[Finding | str]:
    """Completed trials left a model; the best trial's last checkpoint holds the best config;
    the files these name, and those a resume would restore, open whole (``check_files``)."""
    yield from _checkpoint_records(results)
    yield from checkpoint_file_findings(results)


def _checkpoint_records(results: ExperimentResults) -> Iterator[Finding]:
    from tunekit.tracking.artifacts import final_model_path

    where = f"{TRIALS_FILE} vs checkpoints"
    directory = results.experiment_dir
    for row in table_rows_of(results.trials):
        if str(row["status"]) == TrialStatus.COMPLETED and final_model_path(directory, str(row["trial_id"])) is None:
            yield Finding(where, f"{trial_label(row)} final model", "model.keras or model.weights.h5", "none")
    best = results.best
    if best is None:
        return
    where, label = BEST_VS_CHECKPOINTS, f"trial {best.number} ({best.trial_id})"
    newest = last_checkpoints(directory / best.trial_id)
    if not newest:
        yield Finding(where, f"{label} last checkpoint", "present", "none")
        return
    last = newest[0]
    if damage(last / CHECKPOINT_STATE) is not None:
        return  # nothing to compare: checkpoint_file_findings names the damaged file
    state = json.loads((last / CHECKPOINT_STATE).read_text())
    saved = {key: value for key, value in (state.get("config") or {}).items() if not str(key).startswith("_")}
    if not _same_config(best.config, saved):
        yield Finding(where, f"{label} config its model was trained under", best.config, saved)
    # A completed trial checkpoints its last epoch; one the search stopped around keeps its
    # last due checkpoint (training.checkpoint_every_s), which a resume continues from, or
    # one epoch more: the worker stores an epoch's checkpoint before the driver hears its
    # report, which a stop can cut off (a resume trains that epoch again, over it).
    epoch = int(state.get("epoch", -1))
    if epoch != best.epochs and (best.status == TrialStatus.COMPLETED or not 0 < epoch <= best.epochs + 1):
        yield Finding(where, f"{label} last checkpoint's epoch", best.epochs, state.get("epoch"))


# ------------------------------------------------------------- the figures


def _figures(results: ExperimentResults, summary: Summary) -> Iterator[Finding]:
    """The summary against the tables it was computed from, added up another way."""
    where = f"summary vs {TRIALS_FILE}"
    trials = results.trials
    statuses = [str(s) for s in trials["status"]] if not trials.empty else []
    for status in TrialStatus:
        if summary.counts.get(status, 0) != statuses.count(status):
            yield Finding(where, f"{status} trials", summary.counts.get(status, 0), statuses.count(status))
    spent = int(trials["epochs"].sum()) if not trials.empty else 0
    if summary.epochs_spent != spent:
        yield Finding(where, "epochs spent", summary.epochs_spent, spent)
    wall = sum(finite(w) or 0.0 for w in trials["wall_seconds"]) if not trials.empty else 0.0
    per_slot = slot_units(results.spec)[0] / 3600
    # A trial running when the driver died has its wall_seconds as of the last table write,
    # and its open span counts to the clock's end: the two need not agree (see _spans).
    settled = TrialStatus.RUNNING not in statuses
    if settled and not same(summary.ledger.slot_hours, wall * per_slot, absolute=TIME_SLACK_S * len(trials) * per_slot):
        yield Finding(
            f"ledger vs {TRIALS_FILE}", "slot-hours against wall_seconds", summary.ledger.slot_hours, wall * per_slot
        )
    if summary.active_seconds is not None and not trials.empty:
        longest = max(finite(w) or 0.0 for w in trials["wall_seconds"])
        if longest > summary.active_seconds + TIME_SLACK_S:
            yield Finding(
                where, "a trial's wall_seconds within the search's active time", summary.active_seconds, longest
            )
    best = summary.best
    if best is not None and not same(summary.ledger.final_best, best.metric):
        yield Finding("summary vs ledger", "final best", best.metric, summary.ledger.final_best)


def _ledger_file(results: ExperimentResults, summary: Summary) -> Iterator[Finding]:
    """``ledger.json`` (written at the search's end; the MLflow parent logs it) against the summary now."""
    record = json.loads((results.experiment_dir / LEDGER_FILE).read_text())
    written = record.get("metrics") or {}
    for key, value in summary.flat_metrics().items():
        if key in ("downtime_seconds",) or key.startswith("actual_") or key.startswith("predicted_"):
            continue
        if not same(finite(written.get(key)), value, absolute=TIME_SLACK_S):
            yield Finding(f"{LEDGER_FILE} vs summary", key, written.get(key), value)
    best = (record.get("summary") or {}).get("best") or {}
    if summary.best is not None and best.get("trial_id") != summary.best.trial_id:
        yield Finding(f"{LEDGER_FILE} vs summary", "best trial", best.get("trial_id"), summary.best.trial_id)
    if summary.pareto is not None:
        yield from map(finding_of, ledger_front_findings(record, summary.pareto))


# ------------------------------------------------------------------ helpers


def _attempts(label: str, row: dict[str, Any], spanned: int | None) -> Iterator[Finding]:
    """A trial's ``attempts`` (trials.csv) against the attempts its spans were run in (each attempt opens a
    span); None: spans from before they named their attempt."""
    attempts = finite(row.get("attempts"))
    if spanned is not None and attempts is not None and int(attempts) != spanned:
        yield Finding(f"{TRIALS_FILE} vs {SPANS_FILE}", f"{label} attempts", spanned, int(attempts))


def _within(at: float, start: float, end: float | None) -> bool:
    return start - TIME_SLACK_S <= at <= (math.inf if end is None else end + TIME_SLACK_S)


def _same_config(a: dict[str, Any], b: dict[str, Any]) -> bool:
    if set(a) != set(b):
        return False
    for key, value in a.items():
        other = b[key]
        if isinstance(value, float) or isinstance(other, float):
            if not same(finite(value), finite(other)):
                return False
        elif str(value) != str(other):
            return False
    return True
