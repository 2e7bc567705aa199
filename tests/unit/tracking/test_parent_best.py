"""The parent run's best with several objectives: the ``select`` pick, as MLflow reads it back.

A second user's multi-objective searches all failed ``tunekit check``: the parent's
``best_val_accuracy`` was the most accurate trial's (the recorder's running best, first
objective alone), not the pick, because both points went in at one step and one
millisecond and MLflow keeps the larger value then. No MLflow here: the RunBook's points.
"""

from __future__ import annotations

import json
from pathlib import Path

from tunekit.config.spec import load_spec
from tunekit.layout import LEDGER_FILE
from tunekit.tracking.events import ProgressEvent
from tunekit.tracking.runs import RunBook

REPO = Path(__file__).resolve().parents[3]


def progress(best: float, *, final: bool) -> ProgressEvent:
    counts = {"completed": 3}
    return ProgressEvent(3, best, "t-acc", counts, 9, 30.0, final=final, interrupted=False, at=1000.0)


def test_the_pick_is_the_parent_s_last_best_point_at_a_later_time(tmp_path: Path) -> None:
    spec = load_spec(REPO / "search_spaces" / "digits_mlp_pareto.yaml")
    summary = {"best": {"trial_id": "t-pick", "metric": 0.93}, "pareto": {"ranks": {"t-pick": 1}, "unranked": {}}}
    (tmp_path / LEDGER_FILE).write_text(json.dumps({"summary": summary, "metrics": {}}))
    book = RunBook(spec, tmp_path, started=990.0)
    book._apply_progress(progress(0.96, final=False))  # the running best, first objective alone
    book._apply_progress(progress(0.96, final=True))  # the same millisecond
    points = [(m.value, m.timestamp_ms, m.step) for m in book._parent.metrics if m.key.startswith("best_")]
    assert points == [(0.96, 1_000_000, 3), (0.93, 1_000_001, 3)]
    latest = max(points, key=lambda p: (p[2], p[1], p[0]))  # MLflow's latest value
    assert latest[0] == 0.93
    assert book._parent.tags["tunekit.best_trial_id"] == "t-pick"
