"""``search.reproducible``: the same seed and the same results give the same configurations,
whatever the order trials end in and however many run at once. The searcher is driven directly
with made-up results; no Ray run."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import optuna
import pytest

from tunekit.config.spec import ExperimentSpec, load_spec
from tunekit.errors import SpecError
from tunekit.layout import EPOCH_KEY
from tunekit.search.searcher import OptunaStudySearcher

SPACE = {
    "learning_rate": {"type": "loguniform", "low": 1e-4, "high": 1e-1},
    "dropout": {"type": "uniform", "low": 0.0, "high": 0.5},
    "layers": {"type": "int", "low": 1, "high": 3},
}
TRIALS = 10


def make_spec(reproducible: int | None, max_concurrent: int) -> ExperimentSpec:
    search: dict[str, Any] = {"seed": 3, "n_startup_trials": 3}
    if reproducible is not None:
        search["reproducible"] = reproducible
    return load_spec(
        {
            "name": "reproducible",
            "trainable": "trainables.digits_mlp",
            "metric": {"name": "val_accuracy", "mode": "max"},
            "budget": {"num_samples": TRIALS, "max_epochs": 1, "max_concurrent": max_concurrent},
            "search": search,
            "scheduler": {"type": "fifo"},
            "space": SPACE,
        }
    )


def score(config: dict[str, Any]) -> float:
    """The same configuration always scores the same: the results are a function of the proposals."""
    return 1.0 - abs(math.log10(config["learning_rate"]) + 2.5) / 3 - config["dropout"] / 4 + config["layers"] / 30


def proposals(spec: ExperimentSpec, tmp_path: Path, *, concurrent: int, newest_first: bool) -> list[dict[str, Any]]:
    """Runs the whole search, ``concurrent`` trials at a time, ending the newest (or oldest) first."""
    searcher = OptunaStudySearcher(spec, tmp_path, storage=optuna.storages.InMemoryStorage())
    configs: list[dict[str, Any]] = []
    running: list[tuple[str, dict[str, Any]]] = []
    asked = 0
    while len(configs) < TRIALS or running:
        while len(running) < concurrent and len(configs) < TRIALS:
            asked += 1
            config = searcher.suggest(f"t{asked}")
            if config is None:  # Ray asks again later
                break
            configs.append(config)
            running.append((f"t{asked}", config))
        trial_id, config = running.pop(-1 if newest_first else 0)
        searcher.on_trial_complete(trial_id, {"val_accuracy": score(config), EPOCH_KEY: 1})
    return configs


def test_the_same_seed_gives_the_same_configurations_in_any_order_at_any_concurrency(tmp_path: Path) -> None:
    one_at_a_time = proposals(make_spec(2, 1), tmp_path / "a", concurrent=1, newest_first=False)
    for concurrent, newest_first in ((2, False), (2, True), (3, True), (3, False)):
        spec = make_spec(2, concurrent)
        assert proposals(
            spec, tmp_path / f"b{concurrent}{newest_first}", concurrent=concurrent, newest_first=newest_first
        ) == (one_at_a_time), (concurrent, newest_first)


def test_without_it_the_order_trials_end_in_changes_the_proposals(tmp_path: Path) -> None:
    oldest = proposals(make_spec(None, 2), tmp_path / "a", concurrent=2, newest_first=False)
    newest = proposals(make_spec(None, 2), tmp_path / "b", concurrent=2, newest_first=True)
    assert oldest[:4] == newest[:4]  # random start-up trials and the first TPE one see the same
    assert oldest != newest


def test_more_trials_at_once_than_it_lets_run_is_a_spec_error() -> None:
    with pytest.raises(SpecError) as caught:
        make_spec(1, 3)
    assert str(caught.value) == (
        "budget.max_concurrent: must be at most 2: search.reproducible 1 runs no more at once, got 3"
    )
