"""The same tables as tunekit.load, rebuilt from an MLflow tracking server (no experiment directory needed)."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from tunekit.config.objectives import MetricSpec, headline_metric
from tunekit.errors import TunekitError
from tunekit.layout import (
    EPOCH_COLUMNS,
    EXPLOITS_FILE,
    FEASIBLE_COLUMN,
    FINAL_PREFIX,
    INFO_PREFIX,
    PARAM_PREFIX,
    SPEC_FILE,
    TRIAL_COLUMNS,
)
from tunekit.results.load import ExperimentResults, best_trial, recorded_spec
from tunekit.storage.buckets import readable, shown
from tunekit.storage.clock import SearchClock

if TYPE_CHECKING:
    import pandas as pd

    from tunekit.config.spec import ExperimentSpec

logger = logging.getLogger(__name__)


def load_from_mlflow(
    experiment_name: str,
    tracking_uri: str | None = None,
    *,
    experiment_dir: str | Path | None = None,
    run_id: str | None = None,
    latest: bool = False,
) -> ExperimentResults:
    """Loads an experiment from the runs ``tunekit.tracking.tracker`` logged, without its directory.

    The trials and epochs tables have the columns ``load`` gives; what MLflow does not
    hold (an epoch's attempt and resume point) is left empty. Several searches that share
    a name share its MLflow experiment (one parent run each); which one to load is never
    guessed: an ambiguous name is an error that lists them.

    Args:
        experiment_name: the MLflow experiment (``tracking.experiment``, else the spec's name).
        tracking_uri: where to look (default: MLflow's own default, as the tracker used).
        experiment_dir: pick the parent run of this experiment directory (of the search its
            ``started.json`` names, when the directory is on this machine)...
        run_id: ...or this parent run (``parent_run_id`` in ``tracking.json``)...
        latest: ...or the most recently started one.

    Raises:
        TunekitError: no such MLflow experiment, no tunekit run in it, or several and
            neither ``experiment_dir``, ``run_id`` nor ``latest`` picks one.
    """
    import pandas as pd
    from mlflow import MlflowClient

    from tunekit.tracking.client import search_all_runs
    from tunekit.tracking.tags import PARENT_RUN_TAG, RETRAIN_ROLE, TAG_EXPERIMENT_DIR, TAG_ROLE

    client = MlflowClient(tracking_uri=tracking_uri)
    experiment = client.get_experiment_by_name(experiment_name)
    if experiment is None:
        raise TunekitError(f"no MLflow experiment {experiment_name!r} at {client.tracking_uri}")
    ids = [experiment.experiment_id]
    parents = list(search_all_runs(client, ids, f"tags.`{TAG_ROLE}` = 'experiment'"))
    if run_id is not None:
        parents = [run for run in parents if run.info.run_id == run_id]
        if not parents:
            raise TunekitError(f"run_id: no tunekit parent run {run_id!r} in MLflow experiment {experiment_name!r}")
    elif experiment_dir is not None:
        wanted = readable(experiment_dir)  # a bucket experiment's records, pulled
        parents = [run for run in parents if run.data.tags.get(TAG_EXPERIMENT_DIR) == shown(wanted)]
        # A directory whose earlier search was deleted and made again holds the newer one's
        # clock: its parent is the one that started when it did.
        here = SearchClock.read(wanted)
        if here is not None and len(parents) > 1:
            parents = [run for run in parents if abs(run.info.start_time - here.started_at * 1000) <= 1]
    if not parents:
        raise TunekitError(f"no tunekit experiment run in MLflow experiment {experiment_name!r}")
    parents.sort(key=lambda run: run.info.start_time, reverse=True)
    # A retrain's run is a child of the parent too, but no trial of the search: not counted, not read.
    children_of = {
        run.info.run_id: [
            child
            for child in search_all_runs(client, ids, f"tags.`{PARENT_RUN_TAG}` = '{run.info.run_id}'")
            if child.data.tags.get(TAG_ROLE) != RETRAIN_ROLE
        ]
        for run in (parents if len(parents) > 1 and not latest else parents[:1])
    }
    if len(children_of) > 1:
        candidates = [(run.info.run_id, run.info.start_time, len(children_of[run.info.run_id])) for run in parents]
        raise TunekitError(ambiguity_message(experiment_name, candidates))
    parent = parents[0]
    spec = _spec_from_mlflow(client, parent)
    children = children_of[parent.info.run_id]
    parsed = recorded_spec(spec)  # the trainable as recorded, never looked for
    trial_rows, epoch_rows = [], []
    clock = _recorded_clock(parent)
    for child in children:
        trial, epochs = _trial_from_run(client, child, headline_metric(parsed), clock)
        if parsed.multi_objective:
            _add_finals(trial, epochs, parsed)
        trial_rows.append(trial)
        epoch_rows.extend(epochs)
    trials = pd.DataFrame(trial_rows)
    if not trials.empty:
        params = sorted(c for c in trials.columns if c.startswith(PARAM_PREFIX))
        infos = sorted(c for c in trials.columns if c.startswith(INFO_PREFIX))
        finals = [c for c in trials.columns if c.startswith(FINAL_PREFIX)]
        feasible = [FEASIBLE_COLUMN] if finals else []
        trials = trials.sort_values(["number", "started_at"], na_position="last")
        trials = trials.reset_index(drop=True)
        trials = trials[[*TRIAL_COLUMNS, *finals, *feasible, *params, *infos]]
    epochs = pd.DataFrame(epoch_rows)
    if not epochs.empty:
        metrics = sorted(c for c in epochs.columns if c not in EPOCH_COLUMNS)
        epochs = epochs.sort_values(["time", "trial_id", "epoch"]).reset_index(drop=True)
        epochs = epochs[[*EPOCH_COLUMNS, *metrics]]
    directory = Path(parent.data.tags.get(TAG_EXPERIMENT_DIR, "."))
    exploits = _exploits_from_mlflow(client, parent) if parsed.scheduler.type == "pbt" else pd.DataFrame()
    return ExperimentResults(
        directory, parsed, trials, epochs, best_trial(trials, exploits, headline_metric(parsed).mode, parsed)
    )


def ambiguity_message(experiment_name: str, candidates: list[tuple[str, int, int]]) -> str:
    """One line naming every candidate parent run as (run id, start in ms, trial count), in the order given."""
    listed = "; ".join(
        f"{run_id} (started {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(start_ms / 1000))} UTC, "
        f"{trials} {'trial' if trials == 1 else 'trials'})"
        for run_id, start_ms, trials in candidates
    )
    return (
        f"MLflow experiment {experiment_name!r} holds {len(candidates)} tunekit searches; "
        f"pass experiment_dir= or run_id= for one of them, or latest=True for the newest: {listed}"
    )


def _wall_seconds(tagged: str | None, started: float, ended: float | None) -> float | None:
    """The seconds a trial ran, as its run's tag recorded them; runs older than the tag: start to end."""
    try:
        return float(tagged) if tagged is not None else (round(ended - started, 3) if ended else None)
    except ValueError:
        return None


def artifact_text(client: Any, run_id: str, name: str) -> str:
    """The text of one small artifact of the run (MLflow's progress bar off for it)."""
    import os
    import tempfile

    quiet = os.environ.get("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR")
    os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"
    try:
        with tempfile.TemporaryDirectory() as scratch:
            return Path(client.download_artifacts(run_id, name, scratch)).read_text()
    finally:
        if quiet is None:
            os.environ.pop("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", None)
        else:
            os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = quiet


def _exploits_from_mlflow(client: Any, parent: Any) -> pd.DataFrame:
    """PBT's exploits.csv as the parent run holds it (sent when the search ended), else empty."""
    import io

    import pandas as pd

    from tunekit.layout import ID_COLUMNS

    try:
        text = artifact_text(client, parent.info.run_id, EXPLOITS_FILE)
    except Exception as error:  # not sent (a search still running), or a store this machine cannot read
        logger.info("tunekit: no %s on MLflow run %s (%s)", EXPLOITS_FILE, parent.info.run_id, error)
        return pd.DataFrame()
    return pd.read_csv(io.StringIO(text), dtype={column: str for column in ID_COLUMNS})


def _spec_from_mlflow(client: Any, parent: Any) -> dict[str, Any]:
    """The spec.yaml the parent run holds; else what its params say.

    Raises:
        TunekitError: the run holds neither (its search's writer never sent them).
    """
    from tunekit.tracking.values import brief

    unreadable = "not found"
    try:
        spec = yaml.safe_load(artifact_text(client, parent.info.run_id, SPEC_FILE))
        if isinstance(spec, dict) and "metric" in spec:
            return spec
    except Exception as error:  # an artifact store this machine cannot read: fall back to params
        unreadable = brief(error)
        logger.info(
            "tunekit: cannot read %s of MLflow run %s (%s); rebuilding the spec from its params",
            SPEC_FILE,
            parent.info.run_id,
            unreadable,
        )
    params = parent.data.params
    if "metric" not in params and not any(key.startswith("metric.") for key in params):
        raise TunekitError(
            f"MLflow run {parent.info.run_id} holds neither {SPEC_FILE} ({unreadable}) nor the spec's params: "
            "its search's tracking is incomplete; `tunekit sync EXPERIMENT_DIR` sends the rest"
        )
    spec = {"name": params.get("name", parent.info.run_name)}
    for key, text in params.items():
        section, _, name = key.partition(".")
        if name and section != "space":
            spec.setdefault(section, {})[name] = yaml.safe_load(text)
    return spec


def _recorded_clock(parent: Any) -> SearchClock:
    """The search's clock as the parent run recorded its sessions (a run without them: its start)."""
    from tunekit.tracking.tags import TAG_SESSIONS

    start = parent.info.start_time / 1000
    try:
        sessions = [[float(a), float(b)] for a, b in json.loads(parent.data.tags.get(TAG_SESSIONS, "[]"))]
    except (TypeError, ValueError):
        sessions = []
    return SearchClock(sessions[0][0] if sessions else start, sessions)


def _add_finals(trial: dict[str, Any], epochs: list[dict[str, Any]], spec: ExperimentSpec) -> None:
    """Several objectives: each tracked metric's last value and feasibility, as trials.csv has them."""
    from tunekit.config.objectives import tracked_metrics
    from tunekit.search.pareto import is_feasible

    names = tracked_metrics(spec.objectives, spec.constraints, spec.select)
    finals: dict[str, float] = {}
    for name in names:
        values = [row[name] for row in epochs if row.get(name) is not None]
        if values:
            finals[name] = float(values[-1])
    trial.update({f"{FINAL_PREFIX}{name}": finals.get(name) for name in names})
    trial[FEASIBLE_COLUMN] = is_feasible(finals, spec.constraints) if epochs else None


def _trial_from_run(
    client: Any, run: Any, headline: MetricSpec, clock: SearchClock
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A trial's row and its epochs, from its run; its final and best metric are ``headline``'s
    (``config.objectives.headline_metric``), as trials.csv has them."""
    from tunekit.tracking import tags as t

    tags, metric = run.data.tags, headline.name
    trial_id = tags.get(t.TAG_TRIAL_ID, run.info.run_id)
    by_step: dict[int, dict[str, Any]] = {}
    for key in run.data.metrics:
        for point in client.get_metric_history(run.info.run_id, key):
            row = by_step.setdefault(
                point.step,
                {
                    "trial_id": trial_id,
                    "epoch": point.step,
                    "attempt": None,
                    "resumed_from_epoch": None,
                },
            )
            row[key] = point.value
            at = point.timestamp / 1000
            row["time"] = round(clock.active_at(at) if clock.sessions else at - clock.started_at, 3)
    epochs = [by_step[step] for step in sorted(by_step)]
    values = [row[metric] for row in epochs if metric in row]
    rates = [row["samples_per_second"] for row in epochs if "samples_per_second" in row]
    best = (max if headline.mode == "max" else min)(values) if values else None
    kept = int(tags[t.TAG_KEPT_EPOCH]) if t.TAG_KEPT_EPOCH in tags else None
    # The trial's figure: its metric at the kept epoch (training.keep), else at its last.
    at_kept = [row[metric] for row in epochs if row["epoch"] == kept and metric in row]
    ended = run.info.end_time / 1000 if run.info.end_time else None
    trial = {
        "trial_id": trial_id,
        "number": int(tags[t.TAG_TRIAL_NUMBER]) if t.TAG_TRIAL_NUMBER in tags else None,
        "status": tags.get(t.TAG_STATUS, "running"),
        "reason": tags.get(t.TAG_REASON),
        "epochs": int(tags.get(t.TAG_EPOCHS, len(epochs))),
        "final_metric": at_kept[0] if at_kept else values[-1] if values else None,
        "best_metric": best,
        "kept_epoch": kept,
        "rung": int(tags[t.TAG_RUNG]) if t.TAG_RUNG in tags else None,
        "wall_seconds": _wall_seconds(tags.get(t.TAG_WALL_SECONDS), run.info.start_time / 1000, ended),
        "samples_per_second": sum(rates) / len(rates) if rates else None,
        "node_id": tags.get("tunekit.node_id"),
        "attempts": int(tags.get(t.TAG_ATTEMPTS, 1)),
        "started_at": run.info.start_time / 1000,
        "ended_at": ended,
    }
    trial.update({f"{PARAM_PREFIX}{k}": yaml.safe_load(v) for k, v in run.data.params.items()})
    trial.update(
        {
            f"{INFO_PREFIX}{key}": yaml.safe_load(tags[tag]) if ";" not in tags[tag] else tags[tag]
            for key, tag in t.INFO_TAGS.items()
            if key != "node_id" and tag in tags
        }
    )
    return trial, epochs
