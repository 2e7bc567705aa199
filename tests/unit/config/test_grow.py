"""Growing a search on resume: what may change (the budget) and what is refused, in one line.

No Ray: an experiment directory is its spec.yaml and trials.csv. The grown search itself:
tests/e2e/test_grow.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tunekit.config.growth import resumed_spec
from tunekit.config.spec import load_spec
from tunekit.errors import SpecError
from tunekit.layout import SPEC_FILE, TRIAL_COLUMNS, TRIALS_FILE

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def experiment(tmp_path: Path) -> Path:
    """A 6-trial search that ran 6 trials."""
    spec = load_spec(REPO / "search_spaces" / "digits_mlp.yaml", ["budget.num_samples=6"])
    (tmp_path / SPEC_FILE).write_text(spec.to_yaml())
    rows = [",".join(TRIAL_COLUMNS)] + [f"t{i},{i},completed" + "," * (len(TRIAL_COLUMNS) - 3) for i in range(6)]
    (tmp_path / TRIALS_FILE).write_text("\n".join(rows) + "\n")
    return tmp_path


def test_without_overrides_the_recorded_spec_resumes_unchanged(experiment: Path) -> None:
    spec, grown = resumed_spec(experiment)
    assert (grown, spec.budget.num_samples) == (False, 6)
    assert spec.to_yaml() == (experiment / SPEC_FILE).read_text()


def test_the_budget_may_grow_and_change_its_pace(experiment: Path) -> None:
    overrides = ["budget.num_samples=10", "budget.max_concurrent=1", "budget.time_budget_s=120"]
    spec, grown = resumed_spec(experiment, overrides)
    assert grown
    assert (spec.budget.num_samples, spec.budget.max_concurrent, spec.budget.time_budget_s) == (10, 1, 120.0)
    recorded = yaml.safe_load((experiment / SPEC_FILE).read_text())
    assert yaml.safe_load(spec.to_yaml()) == {
        **recorded,
        "budget": {**recorded["budget"], "num_samples": 10, "max_concurrent": 1, "time_budget_s": 120.0},
    }


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "budget.max_epochs=30",
            "--set budget.max_epochs: cannot change when resuming; only budget.num_samples, "
            "budget.max_concurrent, budget.time_budget_s can, got 30",
        ),
        (
            "metric.name=val_loss",
            "--set metric.name: cannot change when resuming; only budget.num_samples, "
            "budget.max_concurrent, budget.time_budget_s can, got 'val_loss'",
        ),
        (
            "space.units.values=[8, 16]",
            "--set space.units.values: cannot change when resuming; only budget.num_samples, "
            "budget.max_concurrent, budget.time_budget_s can, got a list of 2",
        ),
        (
            "trainable=trainables.image_cnn",
            "--set trainable.module: cannot change when resuming; only budget.num_samples, "
            "budget.max_concurrent, budget.time_budget_s can, got 'trainables.image_cnn'",
        ),
        (
            "budget.num_samples=5",
            "--set budget.num_samples: must be at least the 6 trials this search already ran, got 5",
        ),
        ("budget.num_samples=0", "budget.num_samples: must be an integer >= 1, got 0"),
    ],
)
def test_anything_else_is_refused_naming_the_key_the_rule_and_the_value(
    experiment: Path, override: str, message: str
) -> None:
    before = (experiment / SPEC_FILE).read_text()
    with pytest.raises(SpecError) as error:
        resumed_spec(experiment, [override])
    assert str(error.value) == message
    assert (experiment / SPEC_FILE).read_text() == before


def test_a_pbt_population_is_not_grown(tmp_path: Path) -> None:
    # A new user grew a 4-trial PBT search to 6: the two new trials started at epoch 0,
    # ranked only against each other, never stepped, and one ended at 0.24.
    spec = load_spec(REPO / "search_spaces" / "digits_mlp_pbt.yaml")
    (tmp_path / SPEC_FILE).write_text(spec.to_yaml())
    refusal = (
        "--set budget.num_samples: cannot grow a PBT search: its population trains together from the first "
        "epoch; start a new search instead (search.warm_start_from takes this one's trials that never stepped), "
        "got 6"
    )
    # With num_samples alone, PBT's rule that max_concurrent equal it answered first, as if
    # setting both would grow the search.
    for overrides in (["budget.num_samples=6"], ["budget.num_samples=6", "budget.max_concurrent=6"]):
        with pytest.raises(SpecError) as refused:
            resumed_spec(tmp_path, overrides)
        assert str(refused.value) == refusal, overrides
    (tmp_path / TRIALS_FILE).write_text("trial_id,number\n" + "".join(f"t{n},{n}\n" for n in range(4)))
    with pytest.raises(SpecError) as fewer:  # fewer than ran: that rule, not PBT's
        resumed_spec(tmp_path, ["budget.num_samples=2"])
    assert str(fewer.value) == "--set budget.num_samples: must be at least the 4 trials this search already ran, got 2"
