"""What the parent run records of the spec: its budget as tags."""

from __future__ import annotations

from pathlib import Path

from tunekit.config.spec import load_spec
from tunekit.tracking.values import budget_tags

REPO = Path(__file__).resolve().parents[3]


def test_the_parent_run_s_budget_tags_say_none_for_an_unset_time_budget() -> None:
    unset = budget_tags(load_spec(REPO / "search_spaces" / "digits_mlp.yaml"))
    assert unset["tunekit.budget.time_budget_s"] == "none"  # overwrites a resume's earlier budget; not "None"
    assert unset["tunekit.budget.num_samples"] == "24"
    grown = budget_tags(load_spec(REPO / "search_spaces" / "digits_mlp.yaml", ["budget.time_budget_s=600"]))
    assert grown["tunekit.budget.time_budget_s"] == "600.0"
