"""``tunekit check``'s MLflow part: the runs MLflow holds against the experiment's files and summary."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from typing import Any

from tunekit.layout import EXPLOITS_FILE, TrialStatus, finite, number_or_none
from tunekit.results.best import NO_BEST, BestTrial
from tunekit.results.check_pareto import mlflow_findings
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
from tunekit.results.load import ExperimentResults
from tunekit.results.summary import Summary
from tunekit.storage.buckets import shown
from tunekit.storage.clock import died_mid_session
from tunekit.tracking.duplicates import same_search
from tunekit.tracking.record import TrackingRecord
from tunekit.tracking.tags import (
    PARENT_RUN_TAG,
    RETRAIN_ROLE,
    TAG_BEST_TRIAL,
    TAG_BEST_TRIAL_NUMBER,
    TAG_ROLE,
    TAG_STATUS,
    TAG_TRIAL_ID,
    TAG_WALL_SECONDS,
)
from tunekit.tracking.values import metric_key

WHERE = "files vs mlflow"  # how each finding of the per-trial comparison is headed
# How a finding about MLflow's own records is headed (a metric's step logged twice): no
# dead driver's lag explains it, and `tunekit sync` does not mend it.
ITSELF = "mlflow"
# How a finding about runs MLflow holds twice for the search is headed: no lag explains them,
# and `tunekit sync` retires them (tunekit.tracking.duplicates).
TWICE = "mlflow runs"


def check_mlflow(
    report: CheckReport, results: ExperimentResults, summary: Summary, record: TrackingRecord, uri: str | None
) -> None:
    """MLflow's runs against the files, when its store answers; a server that does not is a
    note (nothing could be compared), known in seconds: MLflow's own retries take minutes."""
    from tunekit.tracking.client import absent_platforms_skipped
    from tunekit.tracking.writer import answers, quick_http_retries

    uri = uri or record.tracking_uri
    silent = answers(uri)
    if silent is not None:
        report.notes.append(
            f"MLflow was not compared: {silent}; run the check again once it answers, or with "
            "`--tracking-uri` where its runs are now (`--no-mlflow` leaves it out)"
        )
        return
    report.checked.append("mlflow")
    # A check reads every trial's metric history: the writer's settings spare each request
    # MLflow's retries and its searches for Databricks and Spark.
    with quick_http_retries(), absent_platforms_skipped():
        found = list(_mlflow(results, summary, record, uri))
    report.findings.extend(finding for finding in found if finding.where in (ITSELF, TWICE))
    if any(finding.where == TWICE for finding in found):
        report.notes.append(
            f"MLflow holds runs of this search twice: `tunekit sync {shown(results.experiment_dir)}` keeps the "
            "parent tracking.json names and one run per trial, and moves the others to MLflow's trash"
        )
    found = [finding for finding in found if finding.where not in (ITSELF, TWICE)]
    if found and died_mid_session(results.experiment_dir):
        # Its writer sent up to a second behind the search, its tables up to 2 s behind: MLflow
        # can be behind or ahead of the files, and `tunekit sync` cannot fix what is ahead.
        ran_ahead = "MLflow and the tables stopped at different points of the search"
        report.notes.append(dead_driver_lag(WHERE, ran_ahead, found))
        return
    report.findings.extend(found)
    if found:
        report.notes.append(
            f"MLflow disagrees with the files: `tunekit sync {shown(results.experiment_dir)}` sends it what they hold "
            "(runs, epochs, the parent's figures)"
        )


def _mlflow(results: ExperimentResults, summary: Summary, record: TrackingRecord, uri: str) -> Iterator[Finding]:
    from mlflow.tracking import MlflowClient

    from tunekit.tracking.client import search_all_runs

    where = WHERE
    parent_id = record.parent_run_id
    client = MlflowClient(tracking_uri=uri)
    try:
        parent = client.get_run(parent_id)
    except Exception as error:  # MLflow raises its own and HTTP errors alike
        yield Finding(where, f"parent run {parent_id} at {uri}", "reachable", f"{type(error).__name__}: {error}")
        return
    yield from _other_parents(client, parent)
    children = list(search_all_runs(client, [parent.info.experiment_id], f"tags.`{PARENT_RUN_TAG}` = '{parent_id}'"))
    runs: dict[str, list[Any]] = {}
    for run in children:
        if run.data.tags.get(TAG_ROLE) == RETRAIN_ROLE:  # a retrain of a trial, no trial of the search
            continue
        runs.setdefault(str(run.data.tags.get(TAG_TRIAL_ID)), []).append(run)
    rows = {str(r["trial_id"]): r for r in table_rows_of(results.trials)}
    for trial_id in sorted(set(runs) - set(rows)):
        yield Finding(where, f"child run of trial {trial_id}", "no row", "a child run")
    metric = metric_key(results.metric)
    epochs: dict[str, set[int]] = {}
    for row in table_rows_of(results.epochs):
        if finite(row.get(results.metric)) is not None:
            epochs.setdefault(str(row["trial_id"]), set()).add(int(row["epoch"]))
    for trial_id, row in rows.items():
        label, found = trial_label(row), runs.get(trial_id, [])
        if len(found) != 1:
            yield Finding(where, f"{label} child runs", 1, len(found))
            continue
        run = found[0]
        if TrialStatus(str(row["status"])).is_finished() and run.info.status == "RUNNING":
            yield Finding(where, f"{label} run", "ended", "RUNNING")
        if run.data.tags.get(TAG_STATUS) != str(row["status"]):
            yield Finding(where, f"{label} status", str(row["status"]), run.data.tags.get(TAG_STATUS))
        tagged, wall = finite(number_or_none(run.data.tags.get(TAG_WALL_SECONDS))), finite(row.get("wall_seconds"))
        if TrialStatus(str(row["status"])).is_finished() and not same(wall, tagged, absolute=TIME_SLACK_S):
            yield Finding(where, f"{label} {TAG_WALL_SECONDS}", wall, tagged)
        # Each key's history once: the headline metric's against the files, and every key's
        # steps against themselves (a trial run's step is logged once; the parent's repeat).
        histories = {key: client.get_metric_history(run.info.run_id, key) for key in {metric, *run.data.metrics}}
        restarted = int(finite(row.get("attempts")) or 1) > 1
        for key in sorted(histories):
            yield from steps_logged_twice(label, key, histories[key], trained_again=restarted)
        history = histories[metric]
        steps = {int(point.step) for point in history}
        if steps != epochs.get(trial_id, set()):
            yield Finding(where, f"{label} {metric} steps", sorted(epochs.get(trial_id, set())), sorted(steps))
        # The trial's figure is its metric at the epoch it kept (training.keep), else its last.
        kept = finite(row.get("kept_epoch"))
        shown = [p for p in history if kept is None or int(p.step) == int(kept)]
        last = max(shown, key=lambda p: (p.step, p.timestamp), default=None)
        final = finite(row.get("final_metric"))
        if last is not None and not same(final, last.value):
            yield Finding(where, f"{label} final {metric}", final, last.value)
    if any(str(r["status"]) == TrialStatus.RUNNING for r in rows.values()):
        return  # an interrupted search: the parent's final figures come when it ends
    yield from map(finding_of, mlflow_findings(summary, runs))
    if results.spec.scheduler.type == "pbt":  # load_from_mlflow's final configurations come from it
        yield from _sent_exploits(results, client, parent_id)
    parent_metrics = parent.data.metrics
    for key, value in summary.flat_metrics().items():
        if key.startswith(("ledger_", "predicted_", "actual_")) or key == "downtime_seconds":
            continue  # the ledger's figures travel as ledger.json, compared above
        if not same(finite(parent_metrics.get(key)), value, absolute=TIME_SLACK_S):
            yield Finding("summary vs mlflow parent", key, value, parent_metrics.get(key))
    yield from _parent_best(summary.best, results.metric, parent.data.tags, parent_metrics)


def _other_parents(client: Any, parent: Any) -> Iterator[Finding]:
    """Other parent runs of this search, each with its child runs (one a driver made that did not
    find the recorded parent: its trials logged again, the old parent's left RUNNING)."""
    from tunekit.tracking.client import search_all_runs

    experiments = [parent.info.experiment_id]
    for run in search_all_runs(client, experiments, f"tags.`{TAG_ROLE}` = 'experiment'"):
        tags, start = run.data.tags, int(run.info.start_time or 0)
        if run.info.run_id == parent.info.run_id or not same_search(
            tags, start, parent.data.tags, int(parent.info.start_time or 0)
        ):
            continue
        children = list(search_all_runs(client, experiments, f"tags.`{PARENT_RUN_TAG}` = '{run.info.run_id}'"))
        running = sum(child.info.status == "RUNNING" for child in children)
        yield Finding(
            TWICE,
            f"parent run {run.info.run_id} of this search",
            "none",
            f"{len(children)} child runs, {running} RUNNING",
        )


def steps_logged_twice(label: str, key: str, history: list[Any], *, trained_again: bool = False) -> Iterator[Finding]:
    """A trial run's metric ``key`` at steps MLflow holds more than one point for, each step
    with its values: one finding for the steps whose values conflict (which one is the
    epoch's?), one for those logged again with the same value.

    The writer sends each epoch once (it leaves out the steps MLflow holds, on a resume
    too), so a second point at a step is a bug or a second writer; MLflow's charts and
    ``load_from_mlflow`` then pick one of the values by timestamp. The one exception: a trial
    that ran more than once (``trained_again``) trained epochs again after a restart from an
    older checkpoint, and the writer sends such an epoch's new values after the first
    attempt's, so that the latest is the last attempt's (its final value is compared apart).
    """
    by_step: dict[int, list[float]] = {}
    for point in sorted(history, key=lambda p: (p.step, p.timestamp)):
        by_step.setdefault(int(point.step), []).append(point.value)
    twice = {step: values for step, values in by_step.items() if len(values) > 1}
    conflicting = {step: values for step, values in twice.items() if len(set(map(repr, values))) > 1}  # NaN too
    repeated = {step: values for step, values in twice.items() if step not in conflicting}
    if conflicting and not trained_again:
        yield Finding(ITSELF, f"{label} {key} values at a step", 1, conflicting)
    if repeated:
        yield Finding(ITSELF, f"{label} {key} points at a step", 1, repeated)


def _parent_best(
    best: BestTrial | None, metric: str, tags: Mapping[str, str], metrics: Mapping[str, float]
) -> Iterator[Finding]:
    """The parent run's best (tags and metric) against the summary's: none when it has none."""
    where = "summary vs mlflow parent"
    if best is None:  # the running best the parent named mid-search must not stand
        for tag in (TAG_BEST_TRIAL, TAG_BEST_TRIAL_NUMBER):
            if tags.get(tag, NO_BEST) != NO_BEST:
                yield Finding(where, tag, NO_BEST, tags.get(tag))
        return
    best_key = metric_key(f"best_{metric}")
    if not same(finite(metrics.get(best_key)), best.metric):
        yield Finding(where, best_key, best.metric, metrics.get(best_key))
    if tags.get(TAG_BEST_TRIAL) != best.trial_id:
        yield Finding(where, TAG_BEST_TRIAL, best.trial_id, tags.get(TAG_BEST_TRIAL))
    # Only a best trial of this experiment has a number here (an inherited one has its own run).
    number = tags.get(TAG_BEST_TRIAL_NUMBER)
    if number is not None and number != str(best.number):
        yield Finding(where, TAG_BEST_TRIAL_NUMBER, best.number, number)


def _sent_exploits(results: ExperimentResults, client: Any, parent_id: str) -> Iterator[Finding]:
    """The parent run's copy of exploits.csv is the file (sent when the search ended)."""
    from tunekit.results.mlflow import artifact_text

    written = results.experiment_dir / EXPLOITS_FILE
    if not written.is_file():
        return
    try:
        sent = artifact_text(client, parent_id, EXPLOITS_FILE)
    except Exception as error:  # MLflow raises its own and OS errors alike
        yield Finding("files vs mlflow parent", EXPLOITS_FILE, "attached", f"{type(error).__name__}")
        return
    rows, sent_rows = written.read_text().splitlines(), sent.splitlines()
    for line, (row, sent_row) in enumerate(itertools.zip_longest(rows, sent_rows), start=1):
        if row != sent_row:  # the first line that differs, both sides
            yield Finding("files vs mlflow parent", f"{EXPLOITS_FILE} line {line}", row, sent_row)
            return
