"""search.tpe_history: TPE models only the most recent finished trials, so its cost stops growing."""

from __future__ import annotations

from typing import Any

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial

from tunekit.compat import recent_trials_study
from tunekit.config.spec import load_spec
from tunekit.errors import SpecError
from tunekit.search.searcher import build_sampler

SPEC: dict[str, Any] = {
    "name": "history",
    "trainable": "trainables.digits_mlp",
    "metric": {"name": "val_accuracy", "mode": "max"},
    "budget": {"num_samples": 50, "max_epochs": 2},
    "search": {"algorithm": "tpe", "seed": 3, "n_startup_trials": 10},
    "space": {"x": {"type": "uniform", "low": 0.0, "high": 1.0}},
}
X = FloatDistribution(0.0, 1.0)


def finished(xs: list[float]) -> list[optuna.trial.FrozenTrial]:
    return [create_trial(params={"x": x}, distributions={"x": X}, value=(x - 0.3) ** 2) for x in xs]


def study_of(trials: list[optuna.trial.FrozenTrial], sampler: optuna.samplers.BaseSampler) -> optuna.Study:
    study = optuna.create_study(direction="minimize", sampler=sampler)
    study.add_trials(trials)
    return study


def proposals(study: optuna.Study, count: int) -> list[float]:
    out = []
    for _ in range(count):
        trial = study.ask()
        out.append(trial.suggest_float("x", 0.0, 1.0))
        study.tell(trial, (out[-1] - 0.3) ** 2)
    return out


def test_tpe_with_a_history_of_15_proposes_what_it_would_on_a_study_of_only_the_last_15() -> None:
    xs = [((i * 37) % 100) / 100 for i in range(60)]
    windowed = load_spec(SPEC, ["search.tpe_history=15"])
    whole = study_of(finished(xs), build_sampler(windowed))
    recent_only = study_of(finished(xs[-15:]), build_sampler(load_spec(SPEC)))
    assert proposals(whole, 1) == proposals(recent_only, 1)  # the same fit to the same 15 trials
    unbounded = study_of(finished(xs), build_sampler(load_spec(SPEC)))
    assert proposals(unbounded, 1) != proposals(study_of(finished(xs), build_sampler(windowed)), 1)


def test_the_view_keeps_the_last_finished_trials_and_every_running_one_however_large_the_study() -> None:
    for size in (30, 300):
        study = study_of(finished([i / size for i in range(size)]), optuna.samplers.RandomSampler(seed=0))
        running = study.ask()
        view = recent_trials_study(study, 10)
        done = view._get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED), use_cache=True)
        assert [t.number for t in done] == list(range(size - 10, size))
        with_running = view._get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING))
        assert [t.number for t in with_running] == [*range(size - 10, size), running.number]
        assert view.directions == study.directions  # the rest is the study's


def test_the_spec_takes_a_history_for_tpe_of_at_least_its_start_up_trials() -> None:
    assert load_spec(SPEC).search.tpe_history is None
    assert load_spec(SPEC, ["search.tpe_history=1000"]).search.tpe_history == 1000
    with pytest.raises(SpecError, match=r"search\.tpe_history: must be an integer >= 10, got 5"):
        load_spec(SPEC, ["search.tpe_history=5"])
    with pytest.raises(SpecError, match=r"search\.tpe_history: applies to search\.algorithm tpe only, not random"):
        load_spec(SPEC, ["search.algorithm=random", "search.tpe_history=100"])


class CountedStorage:
    """Counts the calls a study makes to its storage, and the trials it asks to be deep-copied."""

    def __init__(self, storage: Any) -> None:
        self.calls: dict[str, int] = {}
        self.copied = 0
        for name in ("get_all_trials", "get_trial", "get_n_trials", "get_best_trial", "get_study_user_attrs"):
            setattr(storage, name, self._counted(name, getattr(storage, name)))

    def _counted(self, name: str, method: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] = self.calls.get(name, 0) + 1
            answer = method(*args, **kwargs)
            if name == "get_all_trials" and kwargs.get("deepcopy", args[1] if len(args) > 1 else True):
                self.copied += len(answer)
            return answer

        return call


def storage_reads_per_trial(tmp_path: Any, earlier_trials: int) -> tuple[dict[str, int], int]:
    """What one trial's ask, report and tell read from the journal after ``earlier_trials``."""
    from tunekit.search.searcher import OptunaStudySearcher

    tmp_path.mkdir()
    spec = load_spec(SPEC, ["search.tpe_history=20", f"budget.num_samples={earlier_trials + 20}"])
    searcher = OptunaStudySearcher(spec, tmp_path)
    searcher.study.add_trials(finished([((i * 37) % 100) / 100 for i in range(earlier_trials)]))
    counted = CountedStorage(searcher.study._storage)
    for number in range(3):
        trial_id = f"t{number}"
        config = searcher.suggest(trial_id)
        assert config is not None
        value = config["x"]
        searcher.on_trial_result(trial_id, {"epoch": 1, "val_accuracy": value})
        searcher.on_trial_complete(trial_id, {"epoch": 2, "val_accuracy": value})
    return counted.calls, counted.copied


def test_a_trial_reads_the_study_as_often_at_600_trials_as_at_60_and_copies_none(tmp_path: Any) -> None:
    # The scale benchmark's guard without a clock: the journal answers each read from its
    # replayed log, so the calls per trial are the access pattern; a deep copy of every
    # trial per ask (Optuna's default for get_all_trials) was what grew with the study.
    small = storage_reads_per_trial(tmp_path / "small", 60)
    large = storage_reads_per_trial(tmp_path / "large", 600)
    assert small == large
    # Per trial: the waiting queue, the search space and TPE; once: which configurations ran.
    assert small[1] == 0 and small[0]["get_all_trials"] == 3 * 3 + 1
