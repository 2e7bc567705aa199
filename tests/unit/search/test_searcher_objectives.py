"""The searcher with several objectives, driven directly on an in-memory study (no Ray run):
directions, values in the spec's order, constraints Optuna reads, PRUNED before the end,
and study.best_trials as the feasible front."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from tunekit.config.spec import ExperimentSpec, load_spec
from tunekit.layout import EPOCH_KEY
from tunekit.search.searcher import OptunaStudySearcher
from tunekit.search.study import build_sampler


def make_spec(algorithm: str = "tpe", constraints: list[str] | None = None) -> ExperimentSpec:
    space = {"units": {"type": "choice", "values": [8, 16, 32]}} if algorithm == "grid" else None
    raw: dict[str, Any] = {
        "name": "objectives",
        "trainable": "trainables.digits_mlp",
        "metric": [{"name": "val_accuracy", "mode": "max"}, {"name": "model_params", "mode": "min"}],
        "budget": {"max_epochs": 2} if algorithm == "grid" else {"num_samples": 6, "max_epochs": 2},
        "search": {"algorithm": algorithm, "seed": 0, "n_startup_trials": 2},
        "scheduler": {"type": "fifo"},
        "space": space or {"units": {"type": "int", "low": 8, "high": 256}},
    }
    if constraints:
        raw["constraints"] = constraints
    return load_spec(raw)


def finish(searcher: OptunaStudySearcher, trial_id: str, accuracy: float, params: float, epochs: int = 2) -> None:
    result = {"val_accuracy": accuracy, "model_params": params, EPOCH_KEY: epochs}
    searcher.on_trial_result(trial_id, result)  # no intermediate value: Optuna's report raises here
    searcher.on_trial_complete(trial_id, result)


def test_values_constraints_and_the_front(tmp_path: Path) -> None:
    searcher = OptunaStudySearcher(
        make_spec(constraints=["model_params <= 1000"]), tmp_path, storage=optuna.storages.InMemoryStorage()
    )
    for trial_id in "abcde":
        searcher.suggest(trial_id)
    finish(searcher, "a", 0.90, 900)
    finish(searcher, "b", 0.80, 500)
    finish(searcher, "c", 0.95, 2000)  # the most accurate, but infeasible
    finish(searcher, "d", 0.70, 800)  # dominated by b
    finish(searcher, "e", 0.99, 100, epochs=1)  # stopped early: PRUNED, never on the front
    study = searcher.study
    assert [d.name for d in study.directions] == ["MAXIMIZE", "MINIMIZE"]
    trials = study.trials
    assert trials[0].values == [0.90, 900.0]
    assert trials[0].constraints == {"model_params <= 1000": -100.0}
    assert trials[2].constraints == {"model_params <= 1000": 1000.0}
    assert trials[4].state == TrialState.PRUNED
    assert sorted(t.number for t in study.best_trials) == [0, 1]


def test_a_missing_objective_fails_the_trial(tmp_path: Path) -> None:
    searcher = OptunaStudySearcher(make_spec(), tmp_path, storage=optuna.storages.InMemoryStorage())
    searcher.suggest("a")
    searcher.on_trial_complete("a", {"val_accuracy": 0.9, EPOCH_KEY: 2})
    assert searcher.study.trials[0].state == TrialState.FAIL


@pytest.mark.parametrize(
    ("algorithm", "sampler"),
    [("tpe", "TPESampler"), ("nsga2", "NSGAIISampler"), ("random", "RandomSampler")],
)
def test_samplers_on_request(algorithm: str, sampler: str) -> None:
    assert type(build_sampler(make_spec(algorithm)).base).__name__ == sampler


def test_nsga2_trials_carry_their_generation_and_numbers_skip_none(tmp_path: Path) -> None:
    """Proposals are sampled apart from the study: what NSGA-II writes on the trial it samples
    (its generation, which its later proposals count) reaches the study's trial all the same."""
    spec = make_spec("nsga2")
    searcher = OptunaStudySearcher(spec, tmp_path, storage=optuna.storages.InMemoryStorage())
    for number in range(6):
        config = searcher.suggest(f"t{number}")
        assert config is not None
        finish(searcher, f"t{number}", 0.5 + config["units"] / 1000, 10.0 * config["units"])
    trials = searcher.study.trials
    assert [t.number for t in trials] == list(range(6))
    assert [t.system_attrs.get("NSGAIISampler:generation") for t in trials] == [0] * 6


def test_grid_takes_several_objectives_as_it_is(tmp_path: Path) -> None:
    searcher = OptunaStudySearcher(make_spec("grid"), tmp_path, storage=optuna.storages.InMemoryStorage())
    configs = [searcher.suggest(trial_id) for trial_id in "abc"]
    assert sorted(c["units"] for c in configs if c) == [8, 16, 32]
    for trial_id, config in zip("abc", configs, strict=True):
        assert config is not None
        finish(searcher, trial_id, 0.5 + config["units"] / 100, 100.0 * config["units"])
    # Every point trades accuracy for size: the whole grid is the front.
    assert sorted(t.params["units"] for t in searcher.study.best_trials) == [8, 16, 32]
