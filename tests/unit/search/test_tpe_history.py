"""search.tpe_history: TPE models only the most recent finished trials, so its cost stops growing."""

from __future__ import annotations

import random
from typing import Any

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial

from tunekit.compat.optuna_study import recent_trials_study
from tunekit.config.spec import load_spec
from tunekit.errors import SpecError
from tunekit.search.study import build_sampler

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


def window_by_definition(trials: list[Any], window: int, states: Any) -> list[int]:
    """The view's answer as the docs put it: the listed trials from the window-th most recent
    finished one on, and every older unfinished one."""
    listed = [t for t in trials if states is None or t.state in states]
    finished = [t.number for t in listed if t.state.is_finished()]
    oldest = finished[-window] if len(finished) >= window else -1
    return [t.number for t in listed if t.number >= oldest or not t.state.is_finished()]


def test_the_experiment_journal_answers_the_view_from_the_window_as_any_storage_would(tmp_path: Any) -> None:
    from tunekit.search.plan import study_storage

    rng = random.Random(0)
    study = optuna.create_study(study_name="s", storage=study_storage(tmp_path), direction="minimize")
    other = optuna.load_study(study_name="s", storage=study_storage(tmp_path))  # another process
    running: list[optuna.Trial] = []
    queries = [None, (TrialState.COMPLETE,), (TrialState.COMPLETE, TrialState.PRUNED), (TrialState.RUNNING,)]
    queries += [(TrialState.COMPLETE, TrialState.RUNNING), (TrialState.WAITING,), (TrialState.FAIL, TrialState.WAITING)]
    for round_ in range(6):
        for _ in range(40):  # a mix of every state, some left running across rounds
            kind = rng.random()
            if kind < 0.1:
                (other if round_ % 2 else study).enqueue_trial({"x": rng.random()})
            elif kind < 0.3:
                running.append(study.ask({"x": X}))
            else:
                trial = study.ask({"x": X})
                state = rng.choice([TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL])
                study.tell(trial, rng.random() if state == TrialState.COMPLETE else None, state=state)
        for trial in rng.sample(running, len(running) // 2):
            study.tell(trial, rng.random())
            running.remove(trial)
        trials = other.get_trials(deepcopy=False)  # read from the file by the other storage
        for window in (1, 7, 50, 1000):
            view = recent_trials_study(study, window)
            for states in queries:
                got = [t.number for t in view._get_trials(deepcopy=False, states=states)]
                assert got == window_by_definition(trials, window, states), (round_, window, states)


def test_the_spec_takes_a_history_for_tpe_of_at_least_its_start_up_trials() -> None:
    assert load_spec(SPEC).search.tpe_history is None
    assert load_spec(SPEC, ["search.tpe_history=1000"]).search.tpe_history == 1000
    with pytest.raises(SpecError, match=r"search\.tpe_history: must be an integer >= 10, got 5"):
        load_spec(SPEC, ["search.tpe_history=5"])
    with pytest.raises(SpecError, match=r"search\.tpe_history: applies to search\.algorithm tpe only, not random"):
        load_spec(SPEC, ["search.algorithm=random", "search.tpe_history=100"])


class CountedStorage:
    """Counts the calls a study makes to its journal, the trials those calls read from its
    replayed log, and the trials it asks to be deep-copied."""

    def __init__(self, storage: Any) -> None:
        self.calls: dict[str, int] = {}
        self.copied = 0
        self.trials_read = 0
        for name in ("get_all_trials", "get_trial", "get_n_trials", "get_best_trial", "get_study_user_attrs"):
            setattr(storage, name, self._counted(name, getattr(storage, name)))
        replay = storage._replay_result
        replay._trials = _CountedReads(replay._trials, self)

    def _counted(self, name: str, method: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] = self.calls.get(name, 0) + 1
            answer = method(*args, **kwargs)
            if name == "get_all_trials" and kwargs.get("deepcopy", args[1] if len(args) > 1 else True):
                self.copied += len(answer)
            return answer

        return call


class _CountedReads(dict[int, Any]):
    def __init__(self, trials: dict[int, Any], counter: CountedStorage) -> None:
        super().__init__(trials)
        self._counter = counter

    def __getitem__(self, trial_id: int) -> Any:
        self._counter.trials_read += 1
        return super().__getitem__(trial_id)

    def values(self) -> Any:  # a walk over every trial counts each
        self._counter.trials_read += len(self)
        return super().values()


def storage_reads_per_trial(tmp_path: Any, earlier_trials: int) -> CountedStorage:
    """What three trials' asks, reports and tells read from the journal after ``earlier_trials``
    (and a first trial, which builds the searcher's once-only caches)."""
    from tunekit.search.searcher import OptunaStudySearcher

    tmp_path.mkdir()
    spec = load_spec(SPEC, ["search.tpe_history=20", f"budget.num_samples={earlier_trials + 20}"])
    searcher = OptunaStudySearcher(spec, tmp_path)
    searcher.study.add_trials(finished([((i * 37) % 100) / 100 for i in range(earlier_trials)]))
    counted: CountedStorage | None = None
    for number in range(4):
        if number == 1:
            counted = CountedStorage(searcher.study._storage)
        trial_id = f"t{number}"
        config = searcher.suggest(trial_id)
        assert config is not None
        value = config["x"]
        searcher.on_trial_result(trial_id, {"epoch": 1, "val_accuracy": value})
        searcher.on_trial_complete(trial_id, {"epoch": 2, "val_accuracy": value})
    assert counted is not None
    return counted


def test_a_trial_reads_as_much_of_the_study_at_600_trials_as_at_60_and_copies_none(tmp_path: Any) -> None:
    # The scale benchmark's guard without a clock. Optuna's journal walks every trial for
    # each listing (the waiting queue, TPE's search space and trials: 3 a trial, 5.6 ms each
    # at 10,000 trials) and Optuna's default deep-copies them; tunekit's journal and TPE view
    # read the window and the trials added or unfinished since the last look.
    small = storage_reads_per_trial(tmp_path / "small", 60)
    large = storage_reads_per_trial(tmp_path / "large", 600)
    assert (small.calls, small.trials_read, small.copied) == (large.calls, large.trials_read, large.copied)
    assert small.copied == 0
    # Per trial, the waiting queue twice (the searcher's look for a warm-start point, Optuna's
    # ask); TPE's space and trials come from the view's window.
    assert small.calls["get_all_trials"] == 2 * 3
    assert small.trials_read < 3 * 3 * 20 * 2  # three reads of the window a trial, at most twice over
