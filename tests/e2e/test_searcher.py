"""The Optuna searcher in real Ray searches: a repeated conditional grid, an exhausted space
whose repeated proposals take no trial number.

The searcher driven directly, without Ray: tests/unit/search/test_searcher.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pandas as pd
import pytest
from optuna.trial import TrialState

import tunekit
from tunekit.search.plan import study_storage

REPO = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------ with real Ray

QUIET = {
    "tracking": {"enabled": False},
    "training": {"precision": "float32", "seed": 0},
}


def digits_spec(space: dict[str, Any], algorithm: str, **budget: Any) -> dict[str, Any]:
    return {
        "name": "searcher-e2e",
        "trainable": "trainables.digits_mlp",
        "metric": {"name": "val_accuracy", "mode": "max"},
        "budget": {"max_epochs": 1, "max_concurrent": 2, **budget},
        "search": {"algorithm": algorithm, "seed": 0, "n_startup_trials": 1},
        "scheduler": {"type": "fifo"},
        "resources": {"cpu": 1},
        "space": space,
        **QUIET,
    }


@pytest.mark.slow
def test_a_repeated_conditional_grid_runs_each_configuration_twice(
    shared_ray: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    space = {
        "optimizer": {"type": "choice", "values": ["adam", "sgd"]},
        "momentum": {
            "type": "uniform",
            "low": 0.0,
            "high": 0.9,
            "step": 0.9,
            "when": {"optimizer": "sgd"},
        },
        "units": {"type": "fixed", "value": 16},
    }
    results = tunekit.run(
        digits_spec(space, "grid", num_samples=6),
        storage=tmp_path,
        name="grid",
        progress=False,
    )
    trials = results.trials
    assert len(trials) == 6 and set(trials["status"]) == {"completed"}
    ran = sorted(
        (
            row["params.optimizer"],
            None if pd.isna(row["params.momentum"]) else row["params.momentum"],
            row["params.seed"],
        )
        for _, row in trials.iterrows()
    )
    assert ran == sorted(
        (optimizer, momentum, seed)
        for optimizer, momentum in [("adam", None), ("sgd", 0.0), ("sgd", 0.9)]
        for seed in (0, 1)
    )
    study = optuna.load_study(
        study_name="searcher-e2e",
        storage=study_storage(results.experiment_dir),
    )
    assert len(study.trials) == 6
    for trial in study.trials:
        assert trial.state == TrialState.COMPLETE
        assert ("momentum" in trial.params) == (trial.params["optimizer"] == "sgd")


@pytest.mark.slow
def test_an_exhausted_space_ends_a_real_search_early(
    shared_ray: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    space = {"units": {"type": "choice", "values": [16, 32]}}
    results = tunekit.run(
        digits_spec(space, "tpe", num_samples=4),
        storage=tmp_path,
        name="tpe",
        progress=False,
    )
    assert sorted(results.trials["params.units"]) == [16, 32]
    assert set(results.trials["status"]) == {"completed"}
    # TPE proposed the two configurations over and over before the space ran out: those repeats
    # took no trial number, in the study or in trials.csv.
    study = optuna.load_study(study_name="searcher-e2e", storage=study_storage(results.experiment_dir))
    assert [t.number for t in study.trials] == [0, 1]
    assert sorted(results.trials["number"]) == [0, 1]
