"""The parent run's best with several objectives: the ``select`` pick, as MLflow reads it back.

A second user's multi-objective searches all failed ``tunekit check``: the parent's
``best_val_accuracy`` was the most accurate trial's (the recorder's running best, first
objective alone), not the pick, because both points went in at one step and one
millisecond and MLflow keeps the larger value then. No MLflow here: the RunBook's points.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from tunekit.config.spec import load_spec
from tunekit.layout import LEDGER_FILE, TrialStatus
from tunekit.tracking.events import ProgressEvent, TrialEndEvent, TrialEvent
from tunekit.tracking.runs import RunBook

REPO = Path(__file__).resolve().parents[3]


def progress(best: float, *, final: bool) -> ProgressEvent:
    counts = {"completed": 3}
    return ProgressEvent(3, best, "t-acc", counts, 9, 30.0, final=final, interrupted=False, at=1000.0)


def test_the_pick_is_the_parent_s_last_best_point_at_a_later_time(tmp_path: Path) -> None:
    spec = load_spec(REPO / "search_spaces" / "digits_mlp_pareto.yaml")
    pick = {"trial_id": "t-pick", "metric": 0.93, "values": {"val_accuracy": 0.93, "model_params": 800.0}}
    pick["rule"] = "select: maximize val_accuracy among the Pareto front"
    summary = {"best": pick, "pareto": {"ranks": {"t-pick": 1}, "unranked": {}}}
    (tmp_path / LEDGER_FILE).write_text(json.dumps({"summary": summary, "metrics": {}}))
    book = RunBook(spec, tmp_path, started=990.0)
    book._apply_progress(progress(0.96, final=False))  # the running best, first objective alone
    book._apply_progress(progress(0.96, final=True))  # the same millisecond
    points = [(m.value, m.timestamp_ms, m.step) for m in book._parent.metrics if m.key.startswith("best_")]
    assert points == [(0.96, 1_000_000, 3), (0.93, 1_000_001, 3)]
    latest = max(points, key=lambda p: (p[2], p[1], p[0]))  # MLflow's latest value
    assert latest[0] == 0.93
    assert book._parent.tags["tunekit.best_trial_id"] == "t-pick"
    # t-pick's run is unknown to this book: the description names it by id, with the pick's values.
    assert book._parent.tags["mlflow.note.content"] == (
        "Best trial: trial t-pick, val_accuracy 0.93, model_params 800 (select: maximize val_accuracy among the "
        "Pareto front)."
    )


def test_the_parent_names_its_best_trial_by_number_and_in_its_description(tmp_path: Path) -> None:
    spec = load_spec(REPO / "search_spaces" / "digits_mlp.yaml")
    book = RunBook(spec, tmp_path, started=990.0)
    book.apply(TrialEvent("t-9", 9, {"units": 64}, 995.0, 1, True))
    book.apply(TrialEndEvent("t-9", TrialStatus.COMPLETED, "", None, 20, 1, 999.0, 4.0))
    event = ProgressEvent(1, 0.975, "t-9", {"completed": 1}, 20, 9.0, final=False, interrupted=False, at=1000.0)
    book._apply_progress(event)
    assert book._parent.tags["tunekit.best_trial_number"] == "9"
    assert "mlflow.note.content" not in book._parent.tags  # the description is written once, at the end
    book._apply_progress(replace(event, final=True))
    assert book._parent.tags["mlflow.note.content"] == "Best trial: trial-9 · completed, val_accuracy 0.975."


def test_a_select_rule_that_chose_no_trial_leaves_the_parent_without_a_best(tmp_path: Path) -> None:
    """A user pass: MLflow named the running best (and got its model) while the console said none."""
    spec = load_spec(REPO / "search_spaces" / "digits_mlp_pareto.yaml")
    summary = {"best": None, "pareto": {"ranks": {"t-acc": 1}, "unranked": {}}}
    (tmp_path / LEDGER_FILE).write_text(json.dumps({"summary": summary, "metrics": {}}))
    book = RunBook(spec, tmp_path, started=990.0)
    book.apply(TrialEvent("t-acc", 0, {"units": 64}, 995.0, 1, True))
    book._apply_progress(progress(0.96, final=False))  # the first objective's running best, named mid-search
    assert book._parent.tags["tunekit.best_trial_id"] == "t-acc"

    book._apply_progress(progress(0.96, final=True))

    assert book._parent.tags["tunekit.best_trial_id"] == book._parent.tags["tunekit.best_trial_number"] == "none"
    assert book._parent.tags["mlflow.note.content"] == (
        "No best trial: no trial on the Pareto front meets the select rule."
    )
    assert [m.value for m in book._parent.metrics if m.key.startswith("best_")] == [0.96]  # no pick point
    assert book._parent.status is not None and book._parent.status[0] == "FINISHED"
    assert book._model_trial is None  # no model goes to the running best's run
