"""``tunekit sync``'s events rebuilt from an experiment's tables, without MLflow."""

from __future__ import annotations

from pathlib import Path

from tunekit.config.spec import load_spec
from tunekit.storage.clock import SearchClock
from tunekit.tracking.backfill import _progress_events

REPO = Path(__file__).resolve().parents[3]


def test_a_tie_for_best_goes_to_the_lower_trial_number_as_in_the_summary() -> None:
    spec = load_spec(REPO / "search_spaces" / "digits_mlp.yaml")
    # Trial 2 ended first with the value trial 0 reaches later (a user's resumed PBT search).
    rows = [
        {
            "trial_id": "b",
            "number": "2",
            "status": "completed",
            "final_metric": "0.9667",
            "epochs": "6",
            "ended_at": "10",
        },
        {
            "trial_id": "a",
            "number": "0",
            "status": "completed",
            "final_metric": "0.9667",
            "epochs": "6",
            "ended_at": "20",
        },
    ]
    events = list(_progress_events(spec, rows, rows, SearchClock(0.0, [[0.0, 30.0]])))
    assert [(event.best_trial, event.final) for event in events] == [("b", False), ("a", True)]
