"""One metric behind every "final" and "best" figure: with several objectives, the metric the
``select`` rule picks the best trial by, not the first objective (a search of
``model_params, val_accuracy`` selecting by val_accuracy showed 'best model_params' in the
console, status, the report's table, MLflow's parent and ``tunekit.load(...).best_metric``)."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tunekit.config.objectives import headline_metric
from tunekit.config.spec import ExperimentSpec, parse_spec
from tunekit.driver.progress import ConsoleProgress
from tunekit.driver.records import EpochRow, TrialRecord, apply_epoch
from tunekit.layout import STARTED_FILE, TrialStatus
from tunekit.results.best import best_trial
from tunekit.results.load import ExperimentResults, recorded_spec
from tunekit.results.status import read_status

SIZE_FIRST: dict[str, Any] = {
    "name": "headline",
    "trainable": "trainables.digits_mlp",
    "metric": [{"name": "model_params", "mode": "min"}, {"name": "val_accuracy", "mode": "max"}],
    "select": {"maximize": "val_accuracy"},
    "budget": {"num_samples": 4, "max_epochs": 3},
    "space": {"units": {"type": "choice", "values": [8, 16]}},
}


def spec(**changes: Any) -> ExperimentSpec:
    return parse_spec({**SIZE_FIRST, **changes}, None, locate_trainable=False)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({}, ("val_accuracy", "max")),  # select's metric, not the first objective
        ({"select": None}, ("model_params", "min")),  # no select: the first objective picks
        ({"metric": {"name": "val_loss", "mode": "min"}, "select": None}, ("val_loss", "min")),
    ],
)
def test_the_headline_is_the_metric_the_best_trial_is_picked_by(
    changes: dict[str, Any], expected: tuple[str, str]
) -> None:
    the_spec = spec(**changes)
    headline = headline_metric(the_spec)
    assert (headline.name, headline.mode) == expected
    # status reads spec.yaml as a recorded spec: the same answer from the recorded mapping.
    assert headline_metric(recorded_spec(dict(the_spec.raw))).name == expected[0]


def test_a_trial_s_final_and_best_metric_and_its_console_line_follow_the_select_rule() -> None:
    the_spec = spec()
    record = TrialRecord("t1", 1, {})
    for epoch, accuracy in ((1, 0.80), (2, 0.90), (3, 0.85)):
        apply_epoch(
            record, EpochRow("t1", epoch, {"val_accuracy": accuracy, "model_params": 9610.0}, 1, None, 1.0), the_spec
        )
    assert (record.final_metric, record.best_metric) == (0.85, 0.90)
    # The trial's line names every objective's last value (a size whole, as the front's text).
    assert ConsoleProgress(the_spec, io.StringIO(), live=False)._finals_text(record) == (
        " model_params=9610 val_accuracy=0.85"
    )


def test_results_status_and_plots_name_select_s_metric(tmp_path: Path) -> None:
    from tunekit.results import plots

    the_spec = spec()
    trials = pd.DataFrame(
        [
            {"trial_id": "a", "number": 0, "status": "completed", "epochs": 3, "final_metric": 0.95,
             "best_metric": 0.96, "final.model_params": 20000.0, "final.val_accuracy": 0.95},
            {"trial_id": "b", "number": 1, "status": "completed", "epochs": 3, "final_metric": 0.80,
             "best_metric": 0.80, "final.model_params": 1000.0, "final.val_accuracy": 0.80},
        ]
    )  # fmt: skip
    epochs = pd.DataFrame(
        [{"trial_id": t, "epoch": 3, "time": 1.0, "val_accuracy": v} for t, v in (("a", 0.95), ("b", 0.80))]
    )
    results = ExperimentResults(tmp_path, the_spec, trials, epochs, best_trial(trials, pd.DataFrame(), "max", the_spec))
    assert (results.metric, results.mode, results.best_metric) == ("val_accuracy", "max", 0.95)
    assert plots.best_so_far(results).axes[0].get_title() == "best val_accuracy so far (max)"
    # A table written before final_metric followed select (it held the first objective):
    # the best's metric comes from its own final column all the same.
    older = trials.assign(final_metric=trials["final.model_params"])
    assert best_trial(older, pd.DataFrame(), "max", the_spec).metric == 0.95  # type: ignore[union-attr]

    (tmp_path / "spec.yaml").write_text(the_spec.to_yaml())
    (tmp_path / "trials.csv").write_text(
        "trial_id,number,status,reason,epochs,final_metric,ended_at,attempts\nb,1,completed,done,3,0.8,1.0,1\n"
    )
    (tmp_path / "epochs.csv").write_text(  # written with trials.csv, always: one without the other is damage
        "trial_id,epoch,attempt,resumed_from_epoch,time,val_accuracy\n"
        + "".join(f"b,{e},1,,{e}.0,0.8\n" for e in (1, 2, 3))
    )
    now = time.time()
    (tmp_path / STARTED_FILE).write_text(json.dumps({"started_at": now - 10, "sessions": [[now - 10, now - 5]]}))
    status = read_status(tmp_path)
    assert status.metric == "val_accuracy"
    assert [line.split() for line in status.describe().splitlines() if line.lstrip().startswith(("trial", "1"))][
        -2:
    ] == [
        ["trial", "status", "epochs", "val_accuracy", "node", "attempts", "reason"],
        ["1", str(TrialStatus.COMPLETED), "3", "0.8", "-", "1", "done"],
    ]


def test_the_best_so_far_line_follows_the_trials_the_select_rule_could_pick(tmp_path: Path) -> None:
    # c is the most accurate but breaks subject_to: the line stopped at its 0.99 while every
    # other figure said a's 0.95.
    from tunekit.results import plots
    from tunekit.results.ledger import _time_to_best

    the_spec = spec(select={"maximize": "val_accuracy", "subject_to": ["model_params <= 30000"]})
    finals = {"a": (0.95, 20000.0), "b": (0.80, 1000.0), "c": (0.99, 50000.0)}
    trials = pd.DataFrame(
        [
            {"trial_id": t, "number": n, "status": "completed", "epochs": 1, "final_metric": acc, "best_metric": acc,
             "final.model_params": params, "final.val_accuracy": acc}
            for n, (t, (acc, params)) in enumerate(finals.items())
        ]
    )  # fmt: skip
    epochs = pd.DataFrame(
        [
            {"trial_id": t, "epoch": 1, "time": float(n), "val_accuracy": acc}
            for n, (t, (acc, _)) in enumerate(finals.items())
        ]
    )
    results = ExperimentResults(tmp_path, the_spec, trials, epochs, best_trial(trials, pd.DataFrame(), "max", the_spec))
    assert results.best is not None and (results.best.trial_id, results.best_metric) == ("a", 0.95)
    line = plots.best_so_far(results).axes[0].lines[0]
    ys, xs = np.asarray(line.get_ydata()), np.asarray(line.get_xdata())
    assert ys[-1] == 0.95 and 2.0 not in xs
    assert _time_to_best(results, 0.0) == (0.95, 0.0)
