"""search.warm_start_from: which earlier trials fit the new space, and what the spec refuses.

No Ray and no training: earlier experiments are a spec.yaml and a study made by hand.
The warm start in a real search: tests/e2e/test_grow.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from optuna.distributions import CategoricalDistribution
from optuna.trial import FrozenTrial, TrialState

from tunekit.config.objectives import Constraint, MetricSpec
from tunekit.config.space import SearchSpace, parse_space
from tunekit.config.spec import ExperimentSpec, load_spec
from tunekit.errors import SpecError
from tunekit.layout import EPOCH_KEY, SPEC_FILE, STUDY_FILE
from tunekit.search.attrs import DUPLICATE_ATTR, HISTORY_ATTR, PBT_STEPS_ATTR
from tunekit.search.history import (
    HistorySummary,
    ObjectiveMap,
    history_trial,
    misfit,
    optuna_distribution,
    ran_configuration,
)
from tunekit.search.searcher import OptunaStudySearcher

SPACE: dict[str, Any] = {
    "optimizer": {"type": "choice", "values": ["adam", "sgd"]},
    "momentum": {"type": "uniform", "low": 0.5, "high": 0.9, "when": {"optimizer": "sgd"}},
    "units": {"type": "int", "low": 16, "high": 64, "step": 16},
    "dropout": {"type": "uniform", "low": 0.0, "high": 0.5, "step": 0.1},
    "loss": {"type": "fixed", "value": "sparse_categorical_crossentropy"},
}


def space(**changes: Any) -> SearchSpace:
    return parse_space({**SPACE, **changes})


def finished(params: dict[str, Any], value: float = 0.9, state: TrialState = TrialState.COMPLETE) -> FrozenTrial:
    """A finished trial as an earlier study holds it: searched params only, two epochs reported."""
    by_name = {p.name: p.distribution for p in space().params}
    distributions = {
        name: optuna_distribution(by_name[name]) if name in by_name else CategoricalDistribution([params[name]])
        for name in params
    }
    return optuna.trial.create_trial(
        state=state,
        value=None if state == TrialState.FAIL else value,
        params=params,
        distributions=distributions,
        intermediate_values={1: value - 0.1, 2: value},
    )


@pytest.mark.parametrize(
    ("params", "reason"),
    [
        ({"optimizer": "sgd", "momentum": 0.7, "units": 32, "dropout": 0.2}, ""),
        ({"optimizer": "adam", "units": 64, "dropout": 0.0}, ""),
        ({"optimizer": "adam", "units": 128, "dropout": 0.0}, "with units outside this space"),
        ({"optimizer": "adam", "units": 24, "dropout": 0.0}, "with units outside this space"),  # off its step
        ({"optimizer": "adam", "units": 32, "dropout": 0.25}, "with dropout outside this space"),  # off its step
        ({"optimizer": "sgd", "units": 32, "dropout": 0.2}, "without momentum"),
        ({"optimizer": "adam", "momentum": 0.7, "units": 32, "dropout": 0.2}, "with momentum, inactive here"),
        ({"optimizer": "adam", "units": 32}, "without dropout"),
        ({"optimizer": "adam", "units": 32, "dropout": 0.2, "layers": 2}, "with layers, not in this space"),
        ({"optimizer": "rmsprop", "units": 32, "dropout": 0.2}, "with optimizer outside this space"),
    ],
)
def test_a_configuration_fits_only_where_the_space_could_have_produced_it(params: dict[str, Any], reason: str) -> None:
    config = {**params, "loss": "sparse_categorical_crossentropy"}
    assert misfit(config, space()) == reason


def test_an_earlier_fixed_value_counts_as_the_trial_s_own() -> None:
    earlier = space(units={"type": "fixed", "value": 32})
    config = ran_configuration({"optimizer": "adam", "dropout": 0.1}, earlier)
    assert config == {"optimizer": "adam", "units": 32, "dropout": 0.1, "loss": "sparse_categorical_crossentropy"}
    assert misfit(config, space()) == ""
    assert misfit(config, space(loss={"type": "fixed", "value": "hinge"})) == "with loss outside this space"


def test_complete_and_pruned_trials_become_history_with_their_values_and_steps() -> None:
    for state in (TrialState.COMPLETE, TrialState.PRUNED):
        frozen = finished({"optimizer": "sgd", "momentum": 0.7, "units": 32, "dropout": 0.2}, 0.9, state)
        history, reason = history_trial(frozen, space(), space(), "/earlier#0")
        assert reason == "" and history is not None
        assert (history.state, history.value) == (state, 0.9)
        assert history.intermediate_values == {1: pytest.approx(0.8), 2: 0.9}
        assert history.params == {"optimizer": "sgd", "momentum": 0.7, "units": 32, "dropout": 0.2}
        assert history.user_attrs == {HISTORY_ATTR: "/earlier#0"}
        # The distributions are the new space's, as SearchSpace.sample asks with them.
        assert history.distributions["units"] == optuna.distributions.IntDistribution(16, 64, step=16)


def test_failed_repeated_and_borrowed_trials_are_skipped() -> None:
    params = {"optimizer": "adam", "units": 32, "dropout": 0.2}
    failed = finished(params, state=TrialState.FAIL)
    assert history_trial(failed, space(), space(), "x") == (None, "fail (only complete and pruned trials are used)")
    for attr in (DUPLICATE_ATTR, HISTORY_ATTR):
        repeat = finished(params)
        repeat.set_user_attr(attr, 3)
        assert (
            history_trial(repeat, space(), space(), "x")[1]
            == "not trained by that search (a repeat or its own history)"
        )
    # A PBT trial that took a step earned its value on other trials' weights and values.
    stepped = finished(params)
    stepped.set_user_attr(PBT_STEPS_ATTR, [{"epoch": 2, "source": 1, "new": {"dropout": 0.3}}])
    assert history_trial(stepped, space(), space(), "x") == (None, "changed by PBT while it trained")
    never_stepped = finished(params)
    never_stepped.set_user_attr(PBT_STEPS_ATTR, [])
    assert history_trial(never_stepped, space(), space(), "x")[1] == ""


def test_the_summary_line_counts_used_and_skipped_by_reason() -> None:
    summary = HistorySummary(("/a",), 10)
    summary.skipped.update({"with units outside this space": 2, "fail (only complete and pruned trials are used)": 1})
    assert summary.describe() == (
        "warm start: 10 trials of 1 earlier experiment used as history, 3 skipped "
        "(2 with units outside this space, 1 fail (only complete and pruned trials are used))"
    )
    assert HistorySummary(("/a", "/b"), 4).describe() == "warm start: 4 trials of 2 earlier experiments used as history"
    assert HistorySummary(("/a",), 1).describe() == "warm start: 1 trial of 1 earlier experiment used as history"


# --------------------------------------------------------------------------- refusals


def earlier_experiment(directory: Path, metric: Any) -> Path:
    directory.mkdir(parents=True)
    (directory / SPEC_FILE).write_text(
        yaml.safe_dump({"name": "earlier", "metric": metric, "space": SPACE}, sort_keys=False)
    )
    (directory / STUDY_FILE).touch()
    return directory


def spec_with(tmp_path: Path, warm_start_from: Any, **search: Any) -> ExperimentSpec:
    spec_file = tmp_path / "specs" / "spec.yaml"
    spec_file.parent.mkdir(exist_ok=True)
    spec_file.write_text(
        yaml.safe_dump(
            {
                "name": "later",
                "trainable": "trainables.digits_mlp",
                "metric": {"name": "val_accuracy", "mode": "max"},
                "budget": {"num_samples": 4, "max_epochs": 2},
                "search": {**({"warm_start_from": warm_start_from} if warm_start_from else {}), **search},
                "space": {**SPACE, "dropout": {"type": "uniform", "low": 0.0, "high": 0.5}},
            },
            sort_keys=False,
        )
    )
    return load_spec(spec_file)


def test_relative_sources_start_from_the_spec_file_s_folder(tmp_path: Path) -> None:
    earlier = earlier_experiment(tmp_path / "runs" / "a", {"name": "val_accuracy", "mode": "max"})
    spec = spec_with(tmp_path, "../runs/a")
    assert spec.search.warm_start_from == (str(earlier),)
    assert spec.raw["search"]["warm_start_from"] == [str(earlier)]
    assert spec_with(tmp_path, [str(earlier)]).search.warm_start_from == (str(earlier),)


def test_a_source_that_is_no_experiment_is_refused_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(SpecError) as error:
        spec_with(tmp_path, [str(missing)])
    assert str(error.value) == f"search.warm_start_from[0]: no such experiment directory, got '{missing}'"
    (tmp_path / "plain").mkdir()
    with pytest.raises(SpecError) as error:
        spec_with(tmp_path, [str(tmp_path / "plain")])
    assert str(error.value) == (
        f"search.warm_start_from[0]: is not a tunekit experiment (no spec.yaml), got '{tmp_path / 'plain'}'"
    )


def test_another_metric_or_mode_is_refused(tmp_path: Path) -> None:
    good = earlier_experiment(tmp_path / "a", {"name": "val_accuracy", "mode": "max"})
    other = earlier_experiment(tmp_path / "b", {"name": "val_loss", "mode": "min"})
    with pytest.raises(SpecError) as error:
        spec_with(tmp_path, [str(good), str(other)])
    assert str(error.value) == (
        "search.warm_start_from[1]: metric must match: the earlier experiment minimises val_loss, "
        f"this one maximises val_accuracy, got '{other}'"
    )


def test_grid_search_refuses_a_warm_start_from_history(tmp_path: Path) -> None:
    earlier = earlier_experiment(tmp_path / "a", {"name": "val_accuracy", "mode": "max"})
    with pytest.raises(SpecError, match=r"^search.warm_start_from: is not used by grid search \(it ignores history\)"):
        spec_with(tmp_path, [str(earlier)], algorithm="grid")


# ------------------------------------------------------------------ several objectives

TWO = (MetricSpec("val_accuracy", "max"), MetricSpec("model_params", "min"))


def _mo_finished(
    values: list[float], state: TrialState = TrialState.COMPLETE, constraints: dict[str, float] | None = None
) -> FrozenTrial:
    params = {"optimizer": "adam", "units": 32, "dropout": 0.2}
    by_name = {p.name: p.distribution for p in space().params}
    return optuna.trial.create_trial(
        state=state,
        values=values if state == TrialState.COMPLETE else None,
        params=params,
        distributions={name: optuna_distribution(by_name[name]) for name in params},
        constraints=constraints,
    )


def test_several_objectives_take_the_earlier_values_by_name_and_its_constraints() -> None:
    # The earlier study listed model_params first; this one val_accuracy first.
    limit = Constraint("model_params", "<=", 20000.0, "model_params <= 20000")
    latency = Constraint("latency_ms", "<=", 5.0, "latency_ms <= 5")
    mapping = ObjectiveMap(("model_params", "val_accuracy"), TWO, (limit,))
    history, reason = history_trial(_mo_finished([30000.0, 0.95]), space(), space(), "a#0", mapping)
    assert reason == "" and history is not None
    assert history.values == [0.95, 30000.0]
    assert history.constraints == {"model_params <= 20000": 10000.0}  # computed from the value: broken
    # A constraint on a metric the study never kept: the earlier trial's own, or the trial is skipped.
    mapping = ObjectiveMap(("model_params", "val_accuracy"), TWO, (limit, latency))
    kept = _mo_finished([10000.0, 0.9], constraints={"latency_ms <= 5": -1.5})
    history, _ = history_trial(kept, space(), space(), "a#1", mapping)
    assert history is not None and history.constraints == {"model_params <= 20000": -10000.0, "latency_ms <= 5": -1.5}
    assert history_trial(_mo_finished([10000.0, 0.9]), space(), space(), "a#2", mapping) == (
        None,
        "without latency_ms, which the constraint 'latency_ms <= 5' needs",
    )
    pruned = _mo_finished([0.0, 0.0], state=TrialState.PRUNED)
    assert history_trial(pruned, space(), space(), "a#3", mapping)[1] == (
        "pruned (with several objectives only complete trials carry values)"
    )


def test_a_multi_objective_warm_start_needs_the_same_objectives_in_any_order(tmp_path: Path) -> None:
    earlier = earlier_experiment(
        tmp_path / "a", [{"name": "model_params", "mode": "min"}, {"name": "val_accuracy", "mode": "max"}]
    )
    single = earlier_experiment(tmp_path / "b", {"name": "val_accuracy", "mode": "max"})
    spec_file = tmp_path / "mo.yaml"
    raw: dict[str, Any] = {
        "name": "later",
        "trainable": "trainables.digits_mlp",
        "metric": [{"name": "val_accuracy", "mode": "max"}, {"name": "model_params", "mode": "min"}],
        "budget": {"num_samples": 4, "max_epochs": 2},
        "search": {"warm_start_from": [str(earlier)]},
        "space": SPACE,
    }
    spec_file.write_text(yaml.safe_dump(raw, sort_keys=False))
    assert load_spec(spec_file).search.warm_start_from == (str(earlier),)
    raw["search"] = {"warm_start_from": [str(single)]}
    spec_file.write_text(yaml.safe_dump(raw, sort_keys=False))
    with pytest.raises(SpecError) as error:
        load_spec(spec_file)
    assert str(error.value) == (
        "search.warm_start_from[0]: metric must match: the earlier experiment maximises val_accuracy, "
        f"this one maximises val_accuracy and minimises model_params, got '{single}'"
    )


# --------------------------------------------------------------------------- proposals


def test_a_warm_started_search_with_the_earlier_seed_does_not_propose_the_earlier_first_points(
    tmp_path: Path,
) -> None:
    # With fewer earlier trials than search.n_startup_trials, TPE still samples at random,
    # from the seed: the earlier search's seed gave its first points, and would give them again.
    earlier = tmp_path / "runs" / "earlier"
    earlier_spec = spec_with(tmp_path, None)
    earlier.mkdir(parents=True)
    (earlier / SPEC_FILE).write_text(yaml.safe_dump({**earlier_spec.raw, "name": "earlier"}, sort_keys=False))
    earlier_points = ask_and_finish(load_spec(earlier / SPEC_FILE), earlier, 3)

    later = tmp_path / "runs" / "later"
    later.mkdir()
    later_points = ask_and_finish(spec_with(tmp_path, [str(earlier)]), later, 3)
    assert not [point for point in later_points if point in earlier_points], (earlier_points, later_points)
    # Asked again from the same files, the warm-started search proposes the same points: still seeded.
    again = tmp_path / "runs" / "again"
    again.mkdir()
    assert ask_and_finish(spec_with(tmp_path, [str(earlier)]), again, 3) == later_points


def ask_and_finish(spec: ExperimentSpec, experiment_dir: Path, trials: int) -> list[dict[str, Any]]:
    """The configurations the searcher proposes for ``trials`` trials, each told complete."""
    searcher = OptunaStudySearcher(spec, experiment_dir)
    points = []
    for index in range(trials):
        config = searcher.suggest(f"t{index}")
        assert config is not None
        points.append({name: config[name] for name in SPACE if name in config})
        searcher.on_trial_complete(f"t{index}", {"val_accuracy": 0.5 + index / 100, EPOCH_KEY: spec.budget.max_epochs})
    return points
