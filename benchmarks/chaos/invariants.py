"""The invariants after a history, checked from the files themselves, independently of ``tunekit check``.

Read with the standard library, Optuna (on a copy of the journal, so nothing is written into
the experiment) and SQLite (MLflow's store): trials.csv, epochs.csv, spans.csv, spec.yaml, the study,
MLflow's child runs of the experiment's parent, and every driver's console output.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import sqlite3
import tempfile
from collections import Counter
from pathlib import Path

import yaml

ENDED = {"completed": "COMPLETE", "pruned": "PRUNED"}  # trials.csv's status, the study's state
RUN_STATUS = {"failed": "FAILED", "stopped": "KILLED"}  # an MLflow run's end for a trial's status; else FINISHED
RAY_TRIAL_ATTR = "ray_trial_id"  # the study trial's attribute naming its Ray trial
LOST_ATTR = "tunekit_lost"  # a study trial asked for just before a driver died and never run
# "[01:15] trial 1 completed after 3 epochs ...": a trial's ending (a stop's "stopped" is a hold, not one).
ENDING_LINE = re.compile(r"^\[[\d:]+\] trial (\d+) (completed|pruned) ", re.MULTILINE)


def violations(experiment: Path, mlflow_db: Path, logs: list[Path]) -> tuple[list[str], list[str]]:
    """What breaks the invariants, one line each: the records' disagreements (which ``tunekit
    check`` could know too), then the search's outcome (its count, endings, consoles)."""
    try:
        spec = yaml.safe_load((experiment / "spec.yaml").read_text())
        samples, metric = int(spec["budget"]["num_samples"]), str(spec["metric"]["name"])
        trials = _rows(experiment / "trials.csv")
        epochs = _rows(experiment / "epochs.csv")
        spans = _rows(experiment / "spans.csv")
        study = _study_trials(experiment / "study.journal")
        runs = _mlflow_children(experiment, mlflow_db)
        finals = _mlflow_finals(experiment, mlflow_db, metric)
    except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError, sqlite3.Error, yaml.YAMLError) as error:
        return [f"a record does not read whole: {type(error).__name__}: {error}"], []
    problems = _disagreements(trials, epochs, study, runs) + _values(trials, epochs, study, finals) + _spans(spans)
    return problems, _outcome(experiment, samples, trials, logs)


def _disagreements(
    trials: list[dict[str, str]],
    epochs: list[dict[str, str]],
    study: list[tuple[int, str, dict[str, object], dict[int, float]]],
    runs: dict[int, str] | None,
) -> list[str]:
    """Every trial exactly once in trials.csv, the study and MLflow, ending the same in each; its epochs whole."""
    problems = []
    numbers = [int(row["number"]) for row in trials]
    if len(set(numbers)) != len(numbers) or len({row["trial_id"] for row in trials}) != len(trials):
        problems.append(f"trials.csv names a trial twice: numbers {sorted(numbers)}")
    ran = {number: state for number, state, attrs, _ in study if LOST_ATTR not in attrs}
    if sorted(ran) != sorted(numbers):
        problems.append(f"the study's trials {sorted(ran)} are not trials.csv's {sorted(numbers)}")
    named = {attrs.get(RAY_TRIAL_ATTR) for _, _, attrs, _ in study}
    unnamed = [row["number"] for row in trials if row["trial_id"] not in named]
    if unnamed:  # seed 826701: a journal cut lost the line naming a trial's Ray id
        problems.append(f"trials.csv's trials {unnamed} are named by no study trial ({RAY_TRIAL_ATTR})")
    for row in trials:
        state = ran.get(int(row["number"]))
        if row["status"] in ENDED and state is not None and state != ENDED[row["status"]]:
            problems.append(f"trial {row['number']}: {row['status']} in trials.csv, {state} in the study")
    if runs is not None:
        if sorted(runs) != sorted(numbers):
            problems.append(f"MLflow's child runs {sorted(runs)} are not trials.csv's {sorted(numbers)}")
        ends = {int(row["number"]): RUN_STATUS.get(row["status"], "FINISHED") for row in trials}
        differ = {n: status for n, status in runs.items() if n in ends and status != ends[n]}
        if differ:
            problems.append(f"MLflow's child runs end otherwise than trials.csv says: {differ}")
    twice = [key for key, count in Counter((row["trial_id"], row["epoch"]) for row in epochs).items() if count > 1]
    if twice:
        problems.append(f"epochs.csv holds (trial, epoch) twice: {sorted(twice)[:5]}")
    for row in trials:
        recorded = sorted(int(e["epoch"]) for e in epochs if e["trial_id"] == row["trial_id"])
        if recorded != list(range(1, int(row["epochs"]) + 1)):
            problems.append(f"trial {row['number']}: epochs.csv holds epochs {recorded} for {row['epochs']} epochs")
    return problems


def _values(
    trials: list[dict[str, str]],
    epochs: list[dict[str, str]],
    study: list[tuple[int, str, dict[str, object], dict[int, float]]],
    finals: dict[int, float] | None,
) -> list[str]:
    """The study holds every epoch epochs.csv does (it may hold more: a restarted trial ASHA
    pruned before where its first attempt reached), and MLflow's final value of each trial is
    trials.csv's: an epoch trained twice ends with the last attempt's values everywhere."""
    problems = []
    steps = {number: set(values) for number, _, _, values in study}
    for row in trials:
        recorded = {int(e["epoch"]) for e in epochs if e["trial_id"] == row["trial_id"]}
        if missing := sorted(recorded - steps.get(int(row["number"]), set())):
            problems.append(f"trial {row['number']}: the study lacks epochs {missing} that epochs.csv holds")
        final = float(row["final_metric"]) if row["final_metric"] else None
        logged = None if finals is None else finals.get(int(row["number"]))
        if finals is not None and final is not None and (logged is None or abs(logged - final) > 1e-9):
            problems.append(f"trial {row['number']}: MLflow's final value {logged}, trials.csv's {final}")
    return problems


def _spans(spans: list[dict[str, str]]) -> list[str]:
    """Each trial's stretches follow one another on the search's clock: each ends after it starts,
    the next starts after it ends (seed 694332: a resume whose clock ran behind began spans at 0 s)."""
    problems = []
    by_trial: dict[str, list[tuple[float, float | None]]] = {}
    for row in sorted(spans, key=lambda row: (row["trial_id"], int(row["span"]))):
        by_trial.setdefault(row["trial_id"], []).append(
            (float(row["start"] or 0.0), float(row["end"]) if row["end"] else None)
        )
    for trial_id, stretches in by_trial.items():
        for (start, end), (later, _) in zip(stretches, [*stretches[1:], (None, None)], strict=True):
            if end is not None and end < start:
                problems.append(f"spans.csv: trial {trial_id}'s span ends at {end} before its start {start}")
            if later is not None and (end is None or later < end):
                problems.append(
                    f"spans.csv: trial {trial_id}'s span starting at {later} overlaps the one before (end {end})"
                )
    return problems


def _outcome(experiment: Path, samples: int, trials: list[dict[str, str]], logs: list[Path]) -> list[str]:
    """num_samples trials, each ended by ASHA or its budget, none trained after it ended, no lease left."""
    problems = []
    if len(trials) != samples:
        problems.append(f"trials.csv holds {len(trials)} trials for num_samples {samples}")
    bad = {row["number"]: f"{row['status']} ({row['reason']})" for row in trials if row["status"] not in ENDED}
    if bad:
        problems.append(f"trials not completed or pruned by ASHA or the budget: {bad}")
    endings = Counter(int(m.group(1)) for log in logs for m in ENDING_LINE.finditer(log.read_text(errors="replace")))
    again = sorted(number for number, count in endings.items() if count > 1)
    if again:
        problems.append(f"the consoles said trials {again} ended more than once (trained again)")
    if (experiment / "driver.lease").exists():
        problems.append("driver.lease is left behind though no driver runs")
    return problems


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as file:
        reader = csv.DictReader(file, strict=True)
        rows = list(reader)
    width = len(reader.fieldnames or [])
    for number, row in enumerate(rows, start=2):
        if None in row or len(row) != width or None in row.values():
            raise ValueError(f"{path.name} line {number}: {width} columns expected")
    return rows


def _study_trials(journal: Path) -> list[tuple[int, str, dict[str, object], dict[int, float]]]:
    """Each study trial's number, state, user attributes and values by epoch, read from a copy of the journal."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "study.journal"
        shutil.copyfile(journal, copy)
        storage = JournalStorage(JournalFileBackend(str(copy)))
        names = optuna.get_all_study_names(storage)
        if len(names) != 1:
            raise ValueError(f"study.journal holds studies {names}, not one")
        study = optuna.load_study(study_name=names[0], storage=storage)
        return [(t.number, t.state.name, dict(t.user_attrs), dict(t.intermediate_values)) for t in study.trials]


def _mlflow_finals(experiment: Path, mlflow_db: Path, metric: str) -> dict[int, float] | None:
    """Each active child run's latest value of ``metric`` (the greatest step, then the latest
    point there), by trial number; None untracked. The metric's name is MLflow's key as it is
    for the explorer's search (no characters MLflow replaces)."""
    tracking = experiment / "tracking.json"
    if not tracking.is_file():
        return None
    parent = json.loads(tracking.read_text())["parent_run_id"]
    with sqlite3.connect(f"file:{mlflow_db}?mode=ro", uri=True) as db:
        points = db.execute(
            "SELECT r.name, m.value FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid "
            "JOIN metrics m ON m.run_uuid = r.run_uuid "
            "WHERE t.key = 'mlflow.parentRunId' AND t.value = ? AND r.lifecycle_stage = 'active' AND m.key = ? "
            "ORDER BY m.step, m.timestamp",
            (parent, metric),
        ).fetchall()
    finals: dict[int, float] = {}
    for name, value in points:  # the last point of a run wins
        if match := re.match(r"trial-(\d+)", name or ""):
            finals[int(match.group(1))] = float(value)
    return finals


def _mlflow_children(experiment: Path, mlflow_db: Path) -> dict[int, str] | None:
    """The status of the parent run's active child runs by trial number (``trial-<n> · ...``),
    a number twice raising; None untracked."""
    tracking = experiment / "tracking.json"
    if not tracking.is_file():
        return None
    parent = json.loads(tracking.read_text())["parent_run_id"]
    with sqlite3.connect(f"file:{mlflow_db}?mode=ro", uri=True) as db:
        names = db.execute(
            "SELECT r.name, r.status FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid "
            "WHERE t.key = 'mlflow.parentRunId' AND t.value = ? AND r.lifecycle_stage = 'active'",
            (parent,),
        ).fetchall()
    runs: dict[int, str] = {}
    for name, status in names:
        match = re.match(r"trial-(\d+)", name or "")
        if match is None or int(match.group(1)) in runs:
            raise ValueError(f"MLflow child run {name!r}: not named trial-<n>, or its number twice")
        runs[int(match.group(1))] = status
    return runs
