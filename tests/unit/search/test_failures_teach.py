"""Failed trials teach TPE: the searcher driven directly on in-memory studies (no Ray run).

The trainable here fails (a "trial" failure, as tunekit.worker.trial reports a non-finite
loss) for learning rates in the top third of the space's log range, and its accuracy grows
with the learning rate up to there: the region TPE is drawn to borders the one that fails.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from tunekit.compat.optuna_failures import FAILED_CONSTRAINT, failures_as_infeasible
from tunekit.config.spec import ExperimentSpec, load_spec
from tunekit.layout import EPOCH_KEY, FAILURE_KEY, FAILURE_KIND_KEY
from tunekit.search.attrs import LOST_ATTR
from tunekit.search.searcher import OptunaStudySearcher
from tunekit.search.study import TRIAL_FAILURE_ATTR, build_sampler, teaches

SPACE = {
    "learning_rate": {"type": "loguniform", "low": 1.0e-4, "high": 1.0e-2},
    "units": {"type": "choice", "values": [32, 64, 128, 256]},
    "dropout": {"type": "uniform", "low": 0.0, "high": 0.5},
}
DIVERGES_ABOVE = 10 ** (-4 + 2 * 2 / 3)  # the top third of log10(learning_rate) in [-4, -2]
NON_FINITE = "non-finite loss at epoch 1"


def make_spec(seed: int = 0, algorithm: str = "tpe", num_samples: int = 24, **extra: Any) -> ExperimentSpec:
    raw: dict[str, Any] = {
        "name": "failures",
        "trainable": "trainables.digits_mlp",
        "metric": {"name": "val_accuracy", "mode": "max"},
        "budget": {"num_samples": num_samples, "max_epochs": 1},
        "search": {"algorithm": algorithm, "seed": seed, "n_startup_trials": 8},
        "scheduler": {"type": "fifo"},
        "space": SPACE,
        **extra,
    }
    return load_spec(raw)


def searcher_for(spec: ExperimentSpec, tmp_path: Path, teach: bool = True) -> OptunaStudySearcher:
    searcher = OptunaStudySearcher(spec, tmp_path, storage=optuna.storages.InMemoryStorage())
    if not teach:  # Optuna's plain behaviour: the sampler ignores FAIL trials
        searcher.study.sampler = build_sampler(spec, teach_failures=False)
    return searcher


def fail(searcher: OptunaStudySearcher, trial_id: str, kind: str = "trial") -> None:
    searcher.on_trial_complete(trial_id, {EPOCH_KEY: 1, FAILURE_KEY: NON_FINITE, FAILURE_KIND_KEY: kind})


def run(searcher: OptunaStudySearcher, trials: int, **results: float) -> int:
    """Asks and tells ``trials`` trials one at a time; returns how many failed."""
    failed = 0
    for number in range(trials):
        trial_id = f"t{number}"
        config = searcher.suggest(trial_id)
        assert config is not None
        if config["learning_rate"] > DIVERGES_ABOVE:
            failed += 1
            fail(searcher, trial_id)
            continue
        dropout = config.get("dropout", 0.2)
        accuracy = 0.85 + 0.05 * (math.log10(config["learning_rate"]) + 4) - 0.05 * abs(dropout - 0.2)
        searcher.on_trial_complete(trial_id, {EPOCH_KEY: 1, "val_accuracy": accuracy, **results})
    return failed


def test_tpe_proposes_fewer_failing_configurations_when_failures_teach_it(tmp_path: Path) -> None:
    plain = [run(searcher_for(make_spec(seed), tmp_path, teach=False), 24) for seed in (0, 1, 2)]
    taught = [run(searcher_for(make_spec(seed), tmp_path), 24) for seed in (0, 1, 2)]
    # Measured: 16, 15, 16 failed of 24 without, 9, 8, 6 with (benchmarks/failures.py: the same on the shipped space).
    assert sum(taught) <= 0.7 * sum(plain), (plain, taught)
    assert all(t < p for t, p in zip(taught, plain, strict=True)), (plain, taught)


def test_the_study_still_records_the_failures_as_fail(tmp_path: Path) -> None:
    searcher = searcher_for(make_spec(), tmp_path)
    failed = run(searcher, 24)
    study = searcher.study
    fails = [t for t in study.trials if t.state == TrialState.FAIL]
    assert len(fails) == failed > 0
    assert all(t.user_attrs[TRIAL_FAILURE_ATTR] == NON_FINITE for t in fails)
    assert all(FAILED_CONSTRAINT not in t.constraints for t in study.trials)  # nothing written for the sampler
    # The sampler's view: the same trials, PRUNED and infeasible.
    view = failures_as_infeasible(study, teaches, {})
    shown = {t.number: t for t in view._get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))}
    assert sorted(shown) == list(range(24))
    for trial in fails:
        assert shown[trial.number].state == TrialState.PRUNED
        assert shown[trial.number].constraints == {FAILED_CONSTRAINT: math.inf}
        assert shown[trial.number].params == trial.params
    assert study.trials[fails[0].number].state == TrialState.FAIL  # the view copied, never changed, them


def test_only_failures_of_the_trials_own_teach(tmp_path: Path) -> None:
    searcher = searcher_for(make_spec(num_samples=4), tmp_path)
    for trial_id in "abc":
        searcher.suggest(trial_id)
    fail(searcher, "a", kind="fatal")  # every trial would hit it: says nothing of the configuration
    searcher.on_trial_complete("b", error=True)  # the worker died (a node lost): neither
    fail(searcher, "c")
    trials = searcher.study.trials
    assert [t.state for t in trials] == [TrialState.FAIL] * 3
    assert [teaches(t) for t in trials] == [False, False, True]


def test_a_repeat_of_a_failed_configuration_is_shown_its_failure(tmp_path: Path) -> None:
    spec = load_spec(
        {
            "name": "repeats",
            "trainable": "trainables.digits_mlp",
            "metric": {"name": "val_accuracy", "mode": "max"},
            "budget": {"num_samples": 3, "max_epochs": 1},
            "search": {"algorithm": "tpe", "seed": 0, "n_startup_trials": 1},
            "scheduler": {"type": "fifo"},
            "space": {"units": {"type": "choice", "values": [8, 16]}},
        }
    )
    searcher = searcher_for(spec, tmp_path)
    first = searcher.suggest("a")
    assert first is not None
    fail(searcher, "a")
    searcher.suggest("b")
    assert searcher.repeated, "the sampler never proposed the failed configuration again"
    assert set(searcher.repeated) == {0}
    # The sampler sees the failure once per proposal of it: infeasible (PRUNED, the failure's
    # constraint violated), as the failed trial itself.
    sampler: Any = searcher.study.sampler
    shown = sampler._modelled(searcher.study)._get_trials(deepcopy=False, states=(TrialState.PRUNED,))
    assert len(shown) == 1 + len(searcher.repeated)
    assert all(t.number == 0 and t.constraints[FAILED_CONSTRAINT] == math.inf for t in shown)


def test_a_trial_lost_with_the_driver_does_not_teach(tmp_path: Path) -> None:
    storage = optuna.storages.InMemoryStorage()
    searcher = OptunaStudySearcher(make_spec(num_samples=4), tmp_path, storage=storage)
    searcher.suggest("a")
    searcher.study.ask()  # asked just before the driver died, never saved by Ray
    saved = tmp_path / "searcher.json"
    searcher.save(str(saved))
    resumed = OptunaStudySearcher(make_spec(num_samples=4), tmp_path, storage=storage)
    resumed.restore(str(saved))
    lost = resumed.study.trials[1]
    assert (lost.state, lost.user_attrs.get(LOST_ATTR), teaches(lost)) == (TrialState.FAIL, True, False)


def test_a_search_started_over_closes_the_trials_its_dead_driver_asked_for(tmp_path: Path) -> None:
    # Its driver died in start-up (a lost lease, a kill) after asking the study, before Ray saved.
    storage = optuna.storages.InMemoryStorage()
    searcher = OptunaStudySearcher(make_spec(num_samples=4), tmp_path, storage=storage)
    searcher.suggest("a")
    searcher.suggest("b")
    again = OptunaStudySearcher(make_spec(num_samples=4), tmp_path, storage=storage)
    again.close_orphans()
    assert [(t.state, t.user_attrs.get(LOST_ATTR)) for t in again.study.trials] == [(TrialState.FAIL, True)] * 2
    assert again.lost_numbers == (0, 1)
    assert again.suggest("c") is not None  # the search goes on with new trials


def test_a_tpe_history_window_and_failures_compose(tmp_path: Path) -> None:
    spec = make_spec(num_samples=30, search={"algorithm": "tpe", "seed": 0, "n_startup_trials": 10, "tpe_history": 10})
    failed = run(searcher_for(spec, tmp_path), 30)
    assert 0 < failed < 30


def multi_objective_spec(algorithm: str) -> ExperimentSpec:
    return make_spec(
        algorithm=algorithm, metric=[{"name": "val_accuracy", "mode": "max"}, {"name": "model_params", "mode": "min"}]
    )


@pytest.mark.parametrize("algorithm", ["tpe", "nsga2", "random"])
def test_several_objectives_and_other_samplers_run_with_failures(algorithm: str, tmp_path: Path) -> None:
    searcher = searcher_for(multi_objective_spec(algorithm), tmp_path)
    failed = run(searcher, 24, model_params=1000.0)
    states = [t.state for t in searcher.study.trials]
    assert states.count(TrialState.FAIL) == failed > 0
    assert states.count(TrialState.COMPLETE) == 24 - failed


def test_motpe_proposes_fewer_failing_configurations_when_failures_teach_it(tmp_path: Path) -> None:
    spec = multi_objective_spec("tpe")
    plain = run(searcher_for(spec, tmp_path, teach=False), 24, model_params=1000.0)
    taught = run(searcher_for(spec, tmp_path), 24, model_params=1000.0)
    assert taught < plain, (plain, taught)


def test_grid_search_runs_with_failures(tmp_path: Path) -> None:
    spec = make_spec(
        algorithm="grid",
        num_samples=12,
        space={"learning_rate": {"type": "choice", "values": [1.0e-4, 1.0e-3, 5.0e-3]}, "units": SPACE["units"]},
    )
    failed = run(searcher_for(spec, tmp_path), 12)
    assert failed == 4  # every point is run once, 5e-3 diverges with each of the 4 units
