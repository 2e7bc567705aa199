"""The Ray searcher driven directly with made-up results on a real SQLite study: no Ray run.

The searcher in real searches: tests/e2e/test_searcher.py.
"""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState
from ray.tune.search import Searcher

from tunekit.config.space import REPEAT_SEED_KEY
from tunekit.config.spec import ExperimentSpec, load_spec
from tunekit.layout import EPOCH_KEY, FAILURE_KEY, INFO_KEY, RAY_TRIAL_ATTR, STOPPED_BY_MODEL, study_file
from tunekit.search.attrs import GRID_POINT_ATTR, UNSEEN_PICK_ATTR
from tunekit.search.searcher import OptunaStudySearcher
from tunekit.search.study import PinnableSampler

METRIC = "val_accuracy"
CONDITIONAL = {
    "optimizer": {"type": "choice", "values": ["adam", "sgd"]},
    "momentum": {
        "type": "uniform",
        "low": 0.5,
        "high": 0.9,
        "step": 0.2,
        "when": {"optimizer": "sgd"},
    },
    "layers": {"type": "int", "low": 1, "high": 2},
    "loss": {"type": "fixed", "value": "sparse_categorical_crossentropy"},
}
SMALL = {
    "a": {"type": "choice", "values": [1, 2]},
    "b": {"type": "choice", "values": ["x", "y", "z"]},
}


def make_spec(
    space: dict[str, Any],
    algorithm: str = "tpe",
    *,
    max_epochs: int = 2,
    seed: int = 0,
    **budget: Any,
) -> ExperimentSpec:
    if algorithm != "grid":
        budget.setdefault("num_samples", 6)
    return load_spec(
        {
            "name": "searcher",
            "trainable": "trainables.digits_mlp",
            "metric": {"name": METRIC, "mode": "max"},
            "budget": {"max_epochs": max_epochs, **budget},
            "search": {"algorithm": algorithm, "seed": 0, "n_startup_trials": 2},
            "scheduler": {"type": "fifo"},
            "training": {"seed": seed},
            "space": space,
        }
    )


def in_memory(spec: ExperimentSpec, tmp_path: Path) -> OptunaStudySearcher:
    """A searcher on an in-memory study: a fresh SQLite schema costs half a second."""
    return OptunaStudySearcher(spec, tmp_path, storage=optuna.storages.InMemoryStorage())


def result(value: float, epoch: int, **extra: Any) -> dict[str, Any]:
    return {METRIC: value, EPOCH_KEY: epoch, **extra}


def train(searcher: OptunaStudySearcher, trial_id: str, values: list[float], **last: Any) -> None:
    """Reports one value per epoch, then completes the trial with the last result, as Ray does."""
    for epoch, value in enumerate(values, start=1):
        searcher.on_trial_result(trial_id, result(value, epoch))
    searcher.on_trial_complete(trial_id, result(values[-1], len(values), **last))


def frozen(searcher: OptunaStudySearcher, trial_id: str) -> optuna.trial.FrozenTrial:
    number = searcher.trial_number(trial_id)
    assert number is not None
    return searcher.study.trials[number]


def searched(config: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k not in ("loss", REPEAT_SEED_KEY)}


# ------------------------------------------------------------------------------ grid


def test_grid_hands_out_every_configuration_once_then_finishes(tmp_path: Path) -> None:
    spec = make_spec(CONDITIONAL, "grid")
    searcher = in_memory(spec, tmp_path)
    configs = [searcher.suggest(f"t{i}") for i in range(spec.budget.num_samples)]
    assert searcher.suggest("extra") == Searcher.FINISHED
    assert len(configs) == 2 + 3 * 2
    assert sorted(map(repr, configs)) == sorted(map(repr, spec.space.grid_points()))
    assert all(REPEAT_SEED_KEY not in c for c in configs if c)  # one pass: no seed key
    for i, config in enumerate(configs):
        assert config is not None
        trial = frozen(searcher, f"t{i}")
        # the study holds exactly what the trial runs: no inactive momentum for adam
        assert trial.params == searched(config)
        assert spec.space.grid_points()[trial.user_attrs[GRID_POINT_ATTR]] == config


def test_grid_repeats_each_point_with_its_own_seed(tmp_path: Path) -> None:
    spec = make_spec(
        {"units": {"type": "int", "low": 8, "high": 24, "step": 8}},
        "grid",
        seed=5,
        num_samples=9,
    )
    searcher = in_memory(spec, tmp_path)
    configs = [searcher.suggest(f"t{i}") for i in range(9)]
    assert searcher.suggest("extra") == Searcher.FINISHED
    passes = [configs[0:3], configs[3:6], configs[6:9]]
    for repeat, configs_of_pass in enumerate(passes):
        assert sorted(c["units"] for c in configs_of_pass) == [8, 16, 24]  # type: ignore[index]
        assert {c[REPEAT_SEED_KEY] for c in configs_of_pass} == {5 + repeat}  # type: ignore[index]
    assert frozen(searcher, "t4").user_attrs["tunekit_repeat"] == 1
    assert "seed" not in frozen(searcher, "t4").params


def test_resumed_grid_neither_reruns_nor_skips_a_point(tmp_path: Path) -> None:
    spec = make_spec(CONDITIONAL, "grid")
    searcher = OptunaStudySearcher(spec, tmp_path)
    first = {f"t{i}": searcher.suggest(f"t{i}") for i in range(3)}
    train(searcher, "t0", [0.5, 0.6])
    # Ray's last experiment checkpoint: the pickled searcher plus its save()
    pickled = pickle.dumps(searcher)
    searcher.save(str(tmp_path / "searcher-state.json"))
    orphan = searcher.suggest("lost")  # asked after that checkpoint; then the driver died
    assert orphan is not None
    lost_number = searcher.trial_number("lost")

    resumed: OptunaStudySearcher = pickle.loads(pickled)
    resumed.restore(str(tmp_path / "searcher-state.json"))
    assert resumed.study.trials[lost_number].state == TrialState.FAIL  # type: ignore[index]
    assert resumed.lost_note() == (
        f"study trial {lost_number}: asked for just before the last driver died and never run; closed as "
        f"failed (user attr tunekit_lost), so trial numbers skip {lost_number}"
    )  # the console shows it as the resumed search starts
    train(resumed, "t1", [0.4, 0.45])  # trials Ray restores report as before
    rest: list[dict[str, Any] | None] = []
    while (config := resumed.suggest(f"r{len(rest)}")) != Searcher.FINISHED:
        rest.append(config)
    ran = list(first.values()) + rest
    assert sorted(map(repr, ran)) == sorted(map(repr, spec.space.grid_points()))
    assert orphan in rest  # the lost trial's point was not skipped


# ------------------------------------------------------------------- no repeated work


def search_small(searcher: OptunaStudySearcher, count: int, first: int = 0) -> list[tuple[Any, Any]]:
    """Trials ``first`` to ``count - 1`` of a search over ``SMALL``, each trained as it is asked;
    their configurations."""
    configs = []
    for i in range(first, count):
        config = searcher.suggest(f"t{i}")
        assert isinstance(config, dict)
        configs.append((config["a"], config["b"]))
        value = 0.1 * config["a"] + {"x": 0.0, "y": 0.3, "z": 0.1}[config["b"]]
        if i % 2:
            train(searcher, f"t{i}", [value])  # pruned after 1 of 2 epochs
        else:
            train(searcher, f"t{i}", [value - 0.05, value])
    return configs


def test_tpe_never_trains_a_configuration_twice_and_its_numbers_skip_none(tmp_path: Path) -> None:
    """On the experiment's journal: a repeated proposal takes no study number, so the numbers
    trials.csv, MLflow and TensorBoard show are 0..N-1; the same seed proposes the same."""
    spec = make_spec(SMALL, num_samples=6)
    (tmp_path / "first").mkdir()
    (tmp_path / "again").mkdir()
    searcher = OptunaStudySearcher(spec, tmp_path / "first")
    configs = search_small(searcher, 6)
    assert searcher.suggest("t6") == Searcher.FINISHED
    assert len(set(configs)) == 6
    study = searcher.study
    assert [searcher.trial_number(f"t{i}") for i in range(6)] == list(range(6))
    assert [t.number for t in study.trials] == list(range(6))
    assert all(t.user_attrs[RAY_TRIAL_ATTR] == f"t{t.number}" for t in study.trials)
    # TPE on six points proposed repeats: the numbering had something to skip
    assert len(searcher.repeated) > 0 and set(searcher.repeated) <= set(range(6))
    # The study holds exactly the configurations trained, as trained.
    assert [(t.params["a"], t.params["b"]) for t in study.trials] == configs
    again = OptunaStudySearcher(spec, tmp_path / "again")
    assert search_small(again, 6) == configs
    assert again.repeated == searcher.repeated


def test_tpe_numbers_skip_none_across_a_resume(tmp_path: Path) -> None:
    spec = make_spec(SMALL, num_samples=6)
    searcher = OptunaStudySearcher(spec, tmp_path)
    search_small(searcher, 4)
    pickled = pickle.dumps(searcher)  # Ray's last experiment checkpoint
    searcher.save(str(tmp_path / "searcher-state.json"))
    resumed: OptunaStudySearcher = pickle.loads(pickled)
    resumed.restore(str(tmp_path / "searcher-state.json"))
    assert resumed.repeated == searcher.repeated
    search_small(resumed, 6, first=4)
    assert resumed.suggest("t6") == Searcher.FINISHED
    assert [t.number for t in resumed.study.trials] == list(range(6))
    assert [resumed.trial_number(f"t{i}") for i in range(6)] == list(range(6))
    assert len({(t.params["a"], t.params["b"]) for t in resumed.study.trials}) == 6
    assert len(resumed.repeated) > len(searcher.repeated), "the resumed search proposed no repeat"


@pytest.mark.parametrize(
    ("ending", "shown"),
    [("running", 1), ("completed", 21), ("pruned", 21), ("failed", 0)],
)
def test_repeats_are_shown_as_the_earlier_outcome_and_an_exhausted_space_ends_the_search(
    tmp_path: Path, ending: str, shown: int
) -> None:
    spec = make_spec(
        {
            "units": {"type": "choice", "values": [32]},
            "rate": {"type": "fixed", "value": 0.1},
        }
    )
    searcher = in_memory(spec, tmp_path)
    assert searcher.suggest("t0") == {"units": 32, "rate": 0.1}
    if ending == "completed":
        train(searcher, "t0", [0.6, 0.7])
    elif ending == "pruned":
        train(searcher, "t0", [0.6])
    elif ending == "failed":
        train(searcher, "t0", [0.6], **{FAILURE_KEY: "non-finite loss at epoch 1"})

    assert searcher.suggest("t1") == Searcher.FINISHED
    assert searcher.exhausted_reason == (
        "every configuration of the space has run (1 distinct); 1 of budget.num_samples=6 trials"
    )
    assert searcher.suggest("t2") == Searcher.FINISHED
    assert searcher.repeated == (0,) * 20
    assert len(searcher.study.trials) == 1  # the repeats took no trial number
    assert searcher.trial_number("t1") is None
    # The sampler sees a finished trial once more per repeat (a running one once, as constant
    # liar's guess; a failed one not at all: Optuna's samplers skip FAIL trials).
    sampler = searcher.study.sampler
    assert isinstance(sampler, PinnableSampler)
    modelled: Any = sampler._modelled(searcher.study)
    states = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)
    assert len(modelled._get_trials(deepcopy=False, states=states)) == shown


def test_when_the_sampler_only_repeats_an_unseen_configuration_is_picked(
    tmp_path: Path,
) -> None:
    spec = make_spec({"units": {"type": "choice", "values": [32, 64]}}, num_samples=3)
    searcher = in_memory(spec, tmp_path)
    # a sampler stuck on one point, as TPE gets on a small space it has modelled
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        stuck = optuna.samplers.PartialFixedSampler({"units": 32}, optuna.samplers.RandomSampler(seed=0))
    searcher.study.sampler.base = stuck  # type: ignore[union-attr]
    assert searcher.suggest("t0") == {"units": 32}
    assert searcher.suggest("t1") == {"units": 64}  # after 20 proposals of t0's 32
    assert frozen(searcher, "t1").params == {"units": 64}
    assert frozen(searcher, "t1").user_attrs[UNSEEN_PICK_ATTR] is True
    assert UNSEEN_PICK_ATTR not in frozen(searcher, "t0").user_attrs
    assert searcher.repeated == (0,) * 20
    assert [t.number for t in searcher.study.trials] == [0, 1]
    assert searcher.exhausted_reason is None
    assert searcher.suggest("t2") == Searcher.FINISHED
    assert searcher.exhausted_reason == (
        "every configuration of the space has run (2 distinct); 2 of budget.num_samples=3 trials"
    )


def test_a_random_search_draws_unseen_configurations_and_its_numbers_skip_none(tmp_path: Path) -> None:
    """As KerasTuner's RandomSearch: a repeat is drawn again, not told to the study, so the
    study's numbers (trials.csv's, MLflow's, a KerasTuner script's trial ids) are 0..N-1."""
    spec = make_spec(SMALL, algorithm="random", num_samples=6)
    searcher = in_memory(spec, tmp_path)
    configs = []
    for i in range(6):
        config = searcher.suggest(f"t{i}")
        assert isinstance(config, dict)
        configs.append((config["a"], config["b"]))
        train(searcher, f"t{i}", [0.1 * i, 0.1 * i])
    assert len(set(configs)) == 6  # the whole space, once each
    assert [searcher.trial_number(f"t{i}") for i in range(6)] == list(range(6))
    assert len(searcher.study.trials) == 6 and searcher.repeated == ()
    assert not any(UNSEEN_PICK_ATTR in t.user_attrs for t in searcher.study.trials)
    assert searcher.suggest("t6") == Searcher.FINISHED
    again = in_memory(spec, tmp_path / "again")  # the same seed draws the same configurations
    assert [tuple(again.suggest(f"t{i}").values()) for i in range(6)] == configs  # type: ignore[union-attr]


def test_continuous_spaces_are_not_held_back(tmp_path: Path) -> None:
    spec = make_spec(
        {"rate": {"type": "uniform", "low": 0.0, "high": 1.0}},
        algorithm="random",
        num_samples=5,
    )
    searcher = in_memory(spec, tmp_path)
    for i in range(5):
        assert isinstance(searcher.suggest(f"t{i}"), dict)
    assert searcher.repeated == () and len(searcher.study.trials) == 5


def test_repeat_count_and_exhaustion_survive_a_resume(tmp_path: Path) -> None:
    spec = make_spec({"units": {"type": "choice", "values": [32]}})
    searcher = OptunaStudySearcher(spec, tmp_path)
    searcher.suggest("t0")
    train(searcher, "t0", [0.5, 0.6])
    assert searcher.suggest("t1") == Searcher.FINISHED
    searcher.save(str(tmp_path / "state.json"))
    resumed = OptunaStudySearcher(spec, tmp_path)
    resumed.restore(str(tmp_path / "state.json"))
    assert (resumed.repeated, resumed.exhausted_reason) == ((0,) * 20, searcher.exhausted_reason)
    assert resumed.suggest("t2") == Searcher.FINISHED


# ----------------------------------------------------------------- reports and ends


def test_resume_reports_an_epoch_once_and_one_trained_again_takes_its_last_value(tmp_path: Path) -> None:
    spec = make_spec(SMALL, max_epochs=5)
    searcher = OptunaStudySearcher(spec, tmp_path)
    searcher.suggest("t0")
    searcher.on_trial_result("t0", result(0.1, 1))
    pickled = pickle.dumps(searcher)  # Ray's last saved state: one epoch reported
    searcher.save(str(tmp_path / "state.json"))
    searcher.on_trial_result("t0", result(0.2, 2))
    searcher.on_trial_result("t0", result(0.3, 3))  # then the driver died

    resumed: OptunaStudySearcher = pickle.loads(pickled)
    resumed.restore(str(tmp_path / "state.json"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Optuna's "The reported value is ignored ..." would raise
        # the trial resumes from its epoch-2 checkpoint: epoch 3 is trained and reported again
        resumed.on_trial_result("t0", result(0.35, 3))
        resumed.on_trial_result("t0", result(0.4, 4))
        resumed.on_trial_complete("t0", result(0.5, 5))
    trial = frozen(resumed, "t0")
    # Epoch 3's last value, as epochs.csv and MLflow's latest point hold it (chaos seed 689409).
    assert trial.intermediate_values == {1: 0.1, 2: 0.2, 3: 0.35, 4: 0.4, 5: 0.5}
    assert (trial.state, trial.value) == (TrialState.COMPLETE, 0.5)


def test_a_resumed_trial_whose_ray_id_line_the_journal_lost_gets_it_again(tmp_path: Path) -> None:
    """Chaos seed 826701: the journal cut during start-up after the line asking trial 0 and
    before the one naming its Ray trial; the resume cut it back as a torn tail, trained the trial
    on, and `tunekit check` found trials.csv's trial in no study trial."""
    spec = make_spec(SMALL, max_epochs=3)
    searcher = OptunaStudySearcher(spec, tmp_path)
    searcher.suggest("t0")
    pickled = pickle.dumps(searcher)  # Ray's saved state: t0 is study trial 0
    journal = study_file(tmp_path)
    lines = journal.read_bytes().splitlines(keepends=True)
    named = next(i for i, line in enumerate(lines) if b'"ray_trial_id"' in line)
    journal.write_bytes(b"".join(lines[:named]))  # the cut: every line from the naming one on

    resumed: OptunaStudySearcher = pickle.loads(pickled)
    resumed.on_trial_result("t0", result(0.3, 1))
    resumed.on_trial_complete("t0", result(0.3, 1))

    assert frozen(resumed, "t0").user_attrs[RAY_TRIAL_ATTR] == "t0"


@pytest.mark.parametrize(
    ("info", "state", "value"),
    [
        ({STOPPED_BY_MODEL: True}, TrialState.COMPLETE, 0.8),
        ({STOPPED_BY_MODEL: False}, TrialState.PRUNED, 0.8),
        ({}, TrialState.PRUNED, 0.8),
        (None, TrialState.PRUNED, 0.8),
    ],
)
def test_a_trial_its_model_stopped_is_complete(
    tmp_path: Path, info: dict[str, Any] | None, state: TrialState, value: float
) -> None:
    spec = make_spec(SMALL, max_epochs=10)
    searcher = in_memory(spec, tmp_path)
    searcher.suggest("t0")
    extra = {} if info is None else {INFO_KEY: info}
    train(searcher, "t0", [0.6, 0.7, 0.8], **extra)  # 3 of 10 epochs
    trial = frozen(searcher, "t0")
    assert (trial.state, trial.value) == (state, value)
    assert trial.intermediate_values == {1: 0.6, 2: 0.7, 3: 0.8}


def test_a_failed_self_stopped_trial_is_still_failed(tmp_path: Path) -> None:
    searcher = in_memory(make_spec(SMALL, max_epochs=10), tmp_path)
    searcher.suggest("t0")
    train(
        searcher,
        "t0",
        [0.6],
        **{
            INFO_KEY: {STOPPED_BY_MODEL: True},
            FAILURE_KEY: "non-finite loss at epoch 1",
        },
    )
    assert frozen(searcher, "t0").state == TrialState.FAIL
