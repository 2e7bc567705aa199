"""A real two-objective search on the default digits trainable (accuracy against parameters,
with a constraint), tracked to SQLite, then grown, then a second search warm-started from
it: the issue's "done when" agreement, and resume, grow and warm start with two objectives.

Small on purpose (6 trials of up to 4 epochs, then 2 more, then 2 warm-started trials of 2
epochs): CI's whole suite runs on 2 cores.
The front is checked against dominance computed here from trials.csv alone, and the front
of the JSON report, ``pareto_front()``, the study's ``best_trials`` and MLflow's ranks must
be the same trials. The conftest's ``tunekit check`` then holds everything else together.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest

import tunekit
from tunekit import plots
from tunekit.results.report import write_html
from tunekit.results.summary import summarize
from tunekit.search.plan import study_storage
from tunekit.tracking.tags import PARENT_RUN_TAG, TAG_BEST_TRIAL, TAG_PARETO_RANK, TAG_TRIAL_ID

REPO = Path(__file__).resolve().parents[2]
PARETO_SPEC = REPO / "search_spaces" / "digits_mlp_pareto.yaml"
WARM_POINT = {"learning_rate": 0.005, "units": 64, "dropout": 0.1, "batch_size": 32}
SMALL = [
    "budget.num_samples=6",
    "budget.max_epochs=4",
    "scheduler.grace_period=1",
    "search.n_startup_trials=3",
    "constraints=['model_params <= 20000', 'latency_ms <= 50']",
    f"search.warm_start=[{json.dumps(WARM_POINT)}]",
]


WARMED: dict[str, tunekit.ExperimentResults] = {}  # the warm-started search, run by the fixture


@pytest.fixture(scope="module")
def searched(
    tmp_path_factory: pytest.TempPathFactory, shared_ray: None
) -> Iterator[tuple[tunekit.ExperimentResults, str]]:
    """The search, then the same search grown to 8 trials: (grown results, tracking URI).
    A second search warm-started from the grown one goes to ``WARMED``."""
    root = tmp_path_factory.mktemp("pareto")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    first = tunekit.run(
        PARETO_SPEC, storage=root, name="pareto", progress=False, overrides=[*SMALL, f"tracking.uri={uri}"]
    )
    grown = tunekit.resume(first.experiment_dir, overrides=["budget.num_samples=8"], progress=False)
    WARMED["results"] = tunekit.run(
        PARETO_SPEC,
        storage=root,
        name="warmed",
        progress=False,
        overrides=[
            *SMALL[:-1],
            "budget.num_samples=2",
            "budget.max_epochs=2",
            f"search.warm_start_from={grown.experiment_dir}",
            f"tracking.uri={uri}",
        ],
    )
    yield grown, uri


def dominates(a: dict[str, float], b: dict[str, float]) -> bool:
    """Accuracy up, parameters down: written out here, apart from tunekit's own sorting."""
    no_worse = a["val_accuracy"] >= b["val_accuracy"] and a["model_params"] <= b["model_params"]
    return no_worse and (a["val_accuracy"] > b["val_accuracy"] or a["model_params"] < b["model_params"])


def test_the_front_is_the_non_dominated_feasible_completed_trials(
    searched: tuple[tunekit.ExperimentResults, str],
) -> None:
    results, _ = searched
    trials = results.trials
    assert len(trials) == 8
    assert trials.loc[trials["number"] == 0, "params.units"].item() == WARM_POINT["units"]  # the warm start ran first
    feasible = trials[(trials["status"] == "completed") & (trials["feasible"])]
    infeasible = trials[trials["final.model_params"] > 20000]
    assert not infeasible["feasible"].any()
    values = {
        str(row["trial_id"]): {"val_accuracy": row["final.val_accuracy"], "model_params": row["final.model_params"]}
        for _, row in feasible.iterrows()
    }
    front = set(results.pareto_front()["trial_id"])
    assert front, "a search of 8 trials with ASHA lets at least one train to the end"
    for trial_id in front:
        assert not any(dominates(other, values[trial_id]) for other in values.values())
    for trial_id in set(values) - front:
        assert any(dominates(values[f], values[trial_id]) for f in front)
    assert front <= set(values)


def test_report_json_study_and_mlflow_name_the_same_front(searched: tuple[tunekit.ExperimentResults, str]) -> None:
    from mlflow.tracking import MlflowClient

    results, uri = searched
    front = set(results.pareto_front()["trial_id"])
    report = subprocess.run(
        [sys.executable, "-m", "tunekit.cli", "report", str(results.experiment_dir), "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    record = json.loads(report.stdout)
    assert {t["trial_id"] for t in record["pareto"]["front"]} == front
    assert {t["trial_id"] for t in record["trials"] if t["pareto_rank"] == "1"} == front
    study = optuna.load_study(study_name=results.spec.name, storage=study_storage(results.experiment_dir))
    assert {t.user_attrs["ray_trial_id"] for t in study.best_trials} == front
    tracking = json.loads((results.experiment_dir / "tracking.json").read_text())
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs(
        [tracking["experiment_id"]], f"tags.`{PARENT_RUN_TAG}` = '{tracking['parent_run_id']}'", max_results=100
    )
    ranked = {run.data.tags[TAG_TRIAL_ID]: run.data.tags.get(TAG_PARETO_RANK) for run in runs}
    assert {trial_id for trial_id, rank in ranked.items() if rank == "1"} == front
    summary = summarize(results)
    assert summary.pareto is not None
    assert all(ranked[t] == summary.pareto.rank_text(t) for t in ranked)
    # The one exported model is the select rule's: front trial, model_params <= 20000, most accurate.
    best = results.best
    assert best is not None and best.trial_id in front
    assert best.rule == ("select: maximize val_accuracy among the Pareto front subject to model_params <= 20000")
    parent = client.get_run(tracking["parent_run_id"])
    assert parent.data.tags[TAG_BEST_TRIAL] == best.trial_id
    assert "pareto_front.csv" in {a.path for a in client.list_artifacts(parent.info.run_id)}
    chosen = next(run for run in runs if run.data.tags[TAG_TRIAL_ID] == best.trial_id)
    assert [a.path for a in client.list_artifacts(chosen.info.run_id, "model")] == ["model/model.keras"]


def test_figure_and_pages_show_the_front(searched: tuple[tunekit.ExperimentResults, str], tmp_path: Path) -> None:
    results, _ = searched
    figure = plots.pareto(results, path=tmp_path / "pareto.png")
    assert figure.axes[0].get_xlabel() == "val_accuracy (max)"
    assert (tmp_path / "pareto.png").read_bytes().startswith(b"\x89PNG")
    page = write_html(results, tmp_path / "report.html").read_text()
    assert "<h2>Pareto front</h2>" in page and 'alt="Pareto front over all trials"' in page


def test_a_warm_start_takes_the_complete_trials_by_objective_and_the_select_rule_s_best(
    searched: tuple[tunekit.ExperimentResults, str],
) -> None:
    grown, _ = searched
    warmed = WARMED["results"]
    earlier = optuna.load_study(study_name=grown.spec.name, storage=study_storage(grown.experiment_dir))
    complete = {t.number: t.values for t in earlier.trials if t.state == optuna.trial.TrialState.COMPLETE}
    record = json.loads((warmed.experiment_dir / "warm_start.json").read_text())
    assert record["used"] == len(complete) and sum(record["skipped"].values()) == len(earlier.trials) - len(complete)
    study = optuna.load_study(study_name=warmed.spec.name, storage=study_storage(warmed.experiment_dir))
    history = {
        int(t.user_attrs["tunekit_history_from"].rpartition("#")[2]): t.values
        for t in study.trials
        if "tunekit_history_from" in t.user_attrs
    }
    assert history == complete  # both objectives, in the spec's order, trial by trial
    # The inherited best is the earlier search's own choice by the select rule.
    assert grown.best is not None
    assert (record["best"]["number"], record["best"]["config"]) == (grown.best.number, grown.best.initial_config)
    assert len(warmed.trials) == 2


def test_results_from_mlflow_carry_every_objective_and_the_same_front(
    searched: tuple[tunekit.ExperimentResults, str],
) -> None:
    from tunekit.results.mlflow import load_from_mlflow

    grown, uri = searched
    mirrored = load_from_mlflow(grown.spec.name, uri, experiment_dir=grown.experiment_dir)
    columns = ["trial_id", "final.val_accuracy", "final.model_params", "feasible", "final_metric", "best_metric"]
    local = grown.trials[columns].sort_values("trial_id").reset_index(drop=True)
    remote = mirrored.trials[columns].sort_values("trial_id").reset_index(drop=True)
    assert local.to_dict("records") == remote.to_dict("records")
    assert set(mirrored.pareto_front()["trial_id"]) == set(grown.pareto_front()["trial_id"])
