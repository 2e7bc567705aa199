"""A finished search grown on resume, and a new search warm-started from it, on a real Ray.

One Ray for the module; short searches of the digits MLP (2 epochs): 6 trials, the same
grown to 10 (one at a time, with a time budget), 2 trials warm-started from those 10, and
one its time budget ends, copied and resumed with a new one. MLflow on SQLite.
The rules without Ray: tests/unit/config/test_grow.py, tests/unit/search/test_warm_start.py.
"""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path
from typing import Any

import optuna
import pandas as pd
import pytest
import yaml
from mlflow.tracking import MlflowClient
from ray.tune.stopper import TimeoutStopper
from ray.tune.utils.serialization import TuneFunctionDecoder

import tunekit
from tunekit.layout import RAY_TRIAL_ATTR, SPEC_FILE
from tunekit.results import summarize
from tunekit.results.closing import closing_text
from tunekit.results.status import read_status
from tunekit.search.attrs import HISTORY_ATTR, WARM_START_ATTR
from tunekit.search.plan import study_storage
from tunekit.search.study import open_study
from tunekit.tracking.tags import PARENT_RUN_TAG, TAG_BUDGET_PREFIX, TAG_ROLE

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("shared_ray")]

REPO = Path(__file__).resolve().parents[2]
FIRST_SIX = [
    "trial_id",
    "number",
    "status",
    "epochs",
    "final_metric",
    "best_metric",
    "params.learning_rate",
    "params.units",
]


@pytest.fixture(scope="module")
def tracking_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


def spec(name: str, tracking_uri: str, num_samples: int, **search: Any) -> dict[str, Any]:
    return {
        "name": name,
        "trainable": "trainables.digits_mlp",
        "metric": {"name": "val_accuracy", "mode": "max"},
        "budget": {"num_samples": num_samples, "max_epochs": 2, "max_concurrent": 2},
        "search": {"algorithm": "tpe", "seed": 0, "n_startup_trials": 3, **search},
        "scheduler": {"type": "asha", "grace_period": 1, "reduction_factor": 2},
        "resources": {"cpu": 1},
        "training": {"precision": "float32", "seed": 0},
        "space": {
            "learning_rate": {"type": "loguniform", "low": 1.0e-3, "high": 1.0e-1},
            "units": {"type": "choice", "values": [16, 32]},
        },
        "tracking": {"uri": tracking_uri},
    }


def study_of(experiment_dir: Path, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=study_storage(experiment_dir))


def own_trials(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """The study trials Ray ran (not repeated proposals told without training, not history)."""
    return [t for t in study.trials if RAY_TRIAL_ATTR in t.user_attrs]


def mlflow_runs(tracking_uri: str, experiment: str) -> tuple[list[Any], list[Any]]:
    client = MlflowClient(tracking_uri)
    found = client.get_experiment_by_name(experiment)
    assert found is not None
    runs = client.search_runs([found.experiment_id], max_results=1000)
    parents = [r for r in runs if r.data.tags.get(TAG_ROLE) == "experiment"]
    children = [r for r in runs if PARENT_RUN_TAG in r.data.tags]
    return parents, children


@pytest.fixture(scope="module")
def grown(tmp_path_factory: pytest.TempPathFactory, tracking_uri: str) -> dict[str, Any]:
    """A 6-trial search, then the same directory resumed with budget.num_samples=10."""
    storage = tmp_path_factory.mktemp("grow")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(REPO)
        first = tunekit.run(spec("grow", tracking_uri, 6), storage=storage, name="grow", progress=False)
        study = study_of(first.experiment_dir, "grow")
        before = {
            "trials": first.trials[FIRST_SIX].copy(),
            "study": [(t.number, t.params, t.value, t.state, t.intermediate_values) for t in own_trials(study)],
        }
        grow = ["budget.num_samples=10", "budget.max_concurrent=1", "budget.time_budget_s=600"]
        console = io.StringIO()
        after = tunekit.resume(first.experiment_dir, overrides=grow, progress=console)
    return {"before": before, "after": after, "console": console.getvalue()}


def test_a_grown_search_has_ten_trials_and_its_first_six_unchanged(grown: dict[str, Any]) -> None:
    after: tunekit.ExperimentResults = grown["after"]
    assert len(grown["before"]["trials"]) == 6
    assert len(after.trials) == 10 and after.trials["trial_id"].is_unique
    assert set(after.trials["status"]) <= {"completed", "pruned"}, after.trials[["status", "reason"]]
    first_six = after.trials[after.trials["trial_id"].isin(grown["before"]["trials"]["trial_id"])][FIRST_SIX]
    pd.testing.assert_frame_equal(first_six.reset_index(drop=True), grown["before"]["trials"].reset_index(drop=True))
    study = own_trials(study_of(after.experiment_dir, "grow"))
    assert len(study) == 10
    assert [(t.number, t.params, t.value, t.state, t.intermediate_values) for t in study[:6]] == grown["before"][
        "study"
    ]
    assert all(t.state.is_finished() for t in study)
    budget = yaml.safe_load((after.experiment_dir / SPEC_FILE).read_text())["budget"]
    assert (budget["num_samples"], budget["max_concurrent"], budget["time_budget_s"]) == (10, 1, 600.0)


def test_a_grown_search_s_time_budget_is_its_own_from_the_resume(grown: dict[str, Any]) -> None:
    assert "time budget: 600 s left of 600 s\n" in grown["console"]
    # Ray saves its stopper with the experiment state and puts it back on resume; the grown
    # search's must be the new time budget, whole (the first run had none).
    newest = max(grown["after"].experiment_dir.glob("experiment_state-*.json"))
    state = json.loads(newest.read_text(), cls=TuneFunctionDecoder, allow_cloudpickle=True)  # our own file
    stopper = state["runner_data"]["_stopper"]
    timeouts = [s for s in stopper._stoppers if isinstance(s, TimeoutStopper)]
    assert [t._timeout_seconds for t in timeouts] == [600.0]


def test_a_grown_search_runs_at_its_new_concurrency(grown: dict[str, Any]) -> None:
    first_six = set(grown["before"]["trials"]["trial_id"])
    added = grown["after"].trials[lambda t: ~t["trial_id"].isin(first_six)].sort_values("started_at")
    assert len(added) == 4
    # max_concurrent went from 2 to 1: each added trial started after the one before ended.
    assert all(later >= earlier for earlier, later in zip(added["ended_at"], added["started_at"][1:], strict=False))


def test_a_grown_search_stays_one_parent_run_with_a_child_per_trial(grown: dict[str, Any], tracking_uri: str) -> None:
    after: tunekit.ExperimentResults = grown["after"]
    parents, children = mlflow_runs(tracking_uri, "grow")
    assert len(parents) == 1
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    assert parent.data.tags[f"{TAG_BUDGET_PREFIX}num_samples"] == "10"
    assert parent.data.tags[f"{TAG_BUDGET_PREFIX}max_concurrent"] == "1"
    assert parent.data.params["budget.num_samples"] == "6"  # MLflow params never change: the first run's
    assert sorted(r.data.tags["tunekit.ray_trial_id"] for r in children) == sorted(after.trials["trial_id"])
    assert {r.data.tags[PARENT_RUN_TAG] for r in children} == {parent.info.run_id}


def test_a_warm_started_study_holds_the_history_before_its_own_trials(
    grown: dict[str, Any], tracking_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source: Path = grown["after"].experiment_dir
    history = [t for t in own_trials(study_of(source, "grow")) if t.state.name in ("COMPLETE", "PRUNED")]
    monkeypatch.chdir(REPO)
    later = spec("later", tracking_uri, 2, n_startup_trials=2, warm_start_from=str(source))
    results = tunekit.run(later, storage=tmp_path, name="later", progress=False)

    study = study_of(results.experiment_dir, "later")
    k = len(history)
    assert [t.user_attrs.get(HISTORY_ATTR) for t in study.trials[:k]] == [f"{source}#{t.number}" for t in history]
    assert [(t.params, t.value, t.state) for t in study.trials[:k]] == [(t.params, t.value, t.state) for t in history]
    recorded = study.user_attrs[WARM_START_ATTR]
    assert {key: recorded[key] for key in ("sources", "used", "skipped")} == {
        "sources": [str(source)],
        "used": k,
        "skipped": {},
    }
    # Only its own trials count toward num_samples and reach the tables and MLflow; "best" has
    # two scopes: this experiment's, and including the inherited history (named by its source).
    own = own_trials(study)
    assert len(own) == 2 and min(t.number for t in own) >= k
    assert sorted(results.trials["number"]) == sorted(t.number for t in own)
    assert results.best is not None and results.best.trial_id in set(results.trials["trial_id"])
    inherited = max((t for t in history if t.state.name == "COMPLETE"), key=lambda t: float(t.value or 0.0))
    assert (recorded["best"]["source"], recorded["best"]["number"]) == (str(source), inherited.number)
    assert recorded["best"]["metric"] == inherited.value is not None
    overall = summarize(results).best_including_history
    assert overall is not None
    if float(recorded["best"]["metric"]) > results.best.metric:
        assert (overall.scope, overall.source, overall.number) == ("inherited history", str(source), inherited.number)
    else:
        assert overall == results.best
    parents, children = mlflow_runs(tracking_uri, "later")
    assert len(parents) == 1 and len(children) == 2
    assert (parents[0].data.params["warm_start.used"], parents[0].data.params["warm_start.skipped"]) == (str(k), "0")

    # TPE's first proposal came from the history: k >= n_startup_trials, so it modelled the
    # space at once; without history the same seed proposes a random configuration.
    assert k >= 2
    unseeded = open_study(
        tunekit.load_spec({**later, "search": {**later["search"], "warm_start_from": None}}),
        tmp_path,
        optuna.storages.InMemoryStorage(),
    )
    first_guess = unseeded.ask()
    results.spec.space.sample(first_guess)
    assert own[0].params != first_guess.params


def test_a_search_its_time_budget_ended_is_complete_and_a_copy_resumed_with_a_new_budget_runs_the_rest(
    tmp_path: Path,
) -> None:
    # 12 trials of two 1-s epochs on 2 slots, and 14 s from the search's start: the budget runs
    # out with trials running and others never started. The experiment is then copied (as from
    # a cluster's storage) and the copy resumed in its new place.
    search = {**spec("budget", "", 12), "tracking": {"enabled": False}, "data": {"epoch_seconds": 1}}
    search["trainable"] = str(REPO / "tests" / "trainables" / "slow_digits.py")
    search["budget"]["time_budget_s"] = 14
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(REPO)
        first = tunekit.run(search, storage=tmp_path / "ran", name="budget", progress=False)
    rows = first.trials
    by_budget = rows[rows["reason"].str.startswith("the search's time budget of 14 s ran out")]
    assert 0 < len(rows) < 12 and len(by_budget) >= 1, rows[["status", "reason"]]
    assert set(by_budget["status"]) == {"stopped"}
    # One count of the trials it never started, wherever the search is described.
    unstarted = 12 - len(rows)
    summary = summarize(first)
    assert summary.not_started == unstarted and summary.flat_metrics()["trials_not_started"] == unstarted
    assert json.loads(summary.to_json(first))["not_started"] == unstarted
    assert f"{unstarted} not started (the time budget ran out)" in closing_text(first)
    assert (
        f"search: finished: the time budget ran out, {unstarted} not started"
        in read_status(first.experiment_dir).describe()
    )

    console = io.StringIO()
    tunekit.resume(first.experiment_dir, progress=console)  # the budget is spent: nothing runs
    assert console.getvalue().startswith(
        f"the search is complete: its time budget of 14 s ran out (`tunekit resume {first.experiment_dir} "
        "--set budget.time_budget_s=N` runs the rest for up to N seconds)"
    ), console.getvalue()

    original = {name: (first.experiment_dir / name).read_bytes() for name in ("trials.csv", "study.journal")}
    copy = tmp_path / "copied" / "budget"
    shutil.copytree(first.experiment_dir, copy, symlinks=True)
    console = io.StringIO()
    resumed = tunekit.resume(copy, overrides=["budget.time_budget_s=600"], progress=console)
    assert {name: (first.experiment_dir / name).read_bytes() for name in original} == original  # left alone

    after = resumed.trials.set_index("trial_id")
    assert resumed.experiment_dir == copy and len(after) == 12
    # The trials the first budget stopped stay stopped, in its words; the rest ran.
    assert list(after.loc[by_budget["trial_id"], "reason"]) == list(by_budget["reason"])
    assert set(after.drop(index=by_budget["trial_id"])["status"]) <= {"completed", "pruned"}
    running = [int(n) for n in re.findall(r"running (\d+)", console.getvalue())]
    assert running and max(running) <= 2, console.getvalue()
    assert len(own_trials(study_of(copy, "budget"))) == 12
    assert summarize(resumed).not_started == 0
