"""Figures, the HTML report and model paths from made-up tables: no Ray, no search.

A real small experiment (figures, report, ``load_from_mlflow``): tests/e2e/test_results.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from tunekit import plots
from tunekit.config.spec import METRIC_MODES, MetricMode, parse_spec
from tunekit.errors import TunekitError
from tunekit.results.load import ExperimentResults, load
from tunekit.results.report import render_html

REPO = Path(__file__).resolve().parents[3]
DIGITS_SPEC = REPO / "search_spaces" / "digits_mlp.yaml"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def made_up(tmp_path: Path, *, mode: MetricMode = "max") -> ExperimentResults:
    """Three trials: one completed, one pruned after epoch 1, one failed before any epoch."""
    raw = {
        "name": "made-up",
        "trainable": "trainables.digits_mlp",
        "metric": {"name": "score", "mode": mode},
        "budget": {"num_samples": 3, "max_epochs": 3, "max_concurrent": 1},
        "scheduler": {"type": "asha", "grace_period": 1, "reduction_factor": 2},
        "search": {"algorithm": "random", "seed": 0},
        "space": {
            "lr": {"type": "loguniform", "low": 1e-4, "high": 1e-1},
            "optimizer": {"type": "choice", "values": ["adam", "sgd"]},
        },
    }
    trials = pd.DataFrame(
        [
            {
                "trial_id": "a",
                "number": 0,
                "status": "completed",
                "reason": None,
                "epochs": 3,
                "final_metric": 0.9,
                "best_metric": 0.9,
                "rung": 1,
                "wall_seconds": 3.0,
                "started_at": 100.0,
                "ended_at": 103.0,
                "params.lr": 0.01,
                "params.optimizer": "adam",
            },
            {
                "trial_id": "b",
                "number": 1,
                "status": "pruned",
                "reason": None,
                "epochs": 1,
                "final_metric": 0.4,
                "best_metric": 0.4,
                "rung": 0,
                "wall_seconds": 1.0,
                "started_at": 100.5,
                "ended_at": 101.5,
                "params.lr": 0.0005,
                "params.optimizer": "sgd",
            },
            {
                "trial_id": "c",
                "number": 2,
                "status": "failed",
                "reason": "TrialFailure: non-finite loss",
                "epochs": 0,
                "final_metric": None,
                "best_metric": None,
                "rung": None,
                "wall_seconds": 0.5,
                "started_at": 102.0,
                "ended_at": 102.5,
                "params.lr": 0.09,
                "params.optimizer": "sgd",
            },
        ]
    )
    epochs = pd.DataFrame(
        [
            {
                "trial_id": "a",
                "epoch": e,
                "attempt": 1,
                "resumed_from_epoch": None,
                "time": float(e),
                "score": s,
            }
            for e, s in ((1, 0.5), (2, 0.8), (3, 0.9))
        ]
        + [
            {
                "trial_id": "b",
                "epoch": 1,
                "attempt": 1,
                "resumed_from_epoch": 0,
                "time": 1.5,
                "score": 0.4,
            }
        ]
    )
    from tunekit.results.best import best_trial

    spec = parse_spec(raw, None, locate_trainable=False)  # as results.load reads a recorded spec.yaml
    return ExperimentResults(tmp_path, spec, trials, epochs, best_trial(trials, pd.DataFrame(), mode))


# -------------------------------------------------------------- made-up tables (fast)


def test_learning_curves_draw_each_trial_and_cross_out_early_stops(
    tmp_path: Path,
) -> None:
    results = made_up(tmp_path)
    fig = plots.learning_curves(results, path=tmp_path / "curves.png")
    lines = fig.axes[0].get_lines()
    crosses = [line for line in lines if line.get_marker() == "x"]
    assert len(crosses) == 1 and list(np.asarray(crosses[0].get_xdata())) == [1]  # trial b, stopped at epoch 1
    assert any(list(np.asarray(line.get_xdata())) == [1, 2, 3] for line in lines)  # trial a's curve
    assert (tmp_path / "curves.png").read_bytes().startswith(PNG_MAGIC)


def test_best_so_far_never_gets_worse(tmp_path: Path) -> None:
    for mode in METRIC_MODES:
        results = made_up(tmp_path, mode=mode)
        step = max(
            plots.best_so_far(results).axes[0].get_lines(),
            key=lambda line: len(np.asarray(line.get_ydata())),
        )
        values = [float(v) for v in np.asarray(step.get_ydata())]
        assert values == sorted(values, reverse=mode == "min")


def test_a_figure_returned_in_jupyter_shows_as_a_png_without_matplotlib_inline(tmp_path: Path) -> None:
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()  # what get_ipython() returns in a kernel
    try:
        display = shell.display_formatter
        assert display is not None
        shown, _ = display.format(plots.learning_curves(made_up(tmp_path)))
        assert shown["image/png"][:4] == b"\x89PNG"
        # A display the user registered (or %matplotlib inline did) is theirs: left as it is.
        display.formatters["image/png"].for_type(Figure, lambda fig: b"theirs")
        assert display.format(plots.best_so_far(made_up(tmp_path)))[0]["image/png"] == b"theirs"
    finally:
        InteractiveShell.clear_instance()


def test_parallel_coordinates_one_line_per_trial_with_log_and_categorical_axes(
    tmp_path: Path,
) -> None:
    fig = plots.parallel_coordinates(made_up(tmp_path))
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == [
        "lr (log)",
        "optimizer",
        "score",
    ]
    trial_lines = [line for line in ax.get_lines() if len(np.asarray(line.get_xdata())) == 3]
    assert len(trial_lines) == 3
    labels = {t.get_text() for t in ax.texts}
    assert {"adam", "sgd", "0.0001", "0.1"} <= labels


def test_importance_from_too_few_trials_at_any_epoch_is_one_line_saying_why_and_warns(tmp_path: Path) -> None:
    results = made_up(tmp_path)  # 3 trials: 1 trained to the end, 2 reached rung 0
    expected = "needs at least 5 trials at one epoch: 1 trained to the end, at most 2 reached an ASHA rung"
    with pytest.warns(plots.FewTrialsWarning) as caught:
        fig = plots.param_importance(results)
    assert [str(w.message) for w in caught] == [f"parameter importance {expected}"]
    assert caught[0].filename == __file__  # points at the caller's line
    assert not fig.axes[0].patches
    assert [t.get_text() for t in fig.axes[0].texts] == [f"parameter importance: none; {expected}"]
    assert fig.get_size_inches()[1] <= 0.5  # a line, not a large empty box
    with pytest.warns(plots.FewTrialsWarning) as caught:
        found = results.importance()
    assert caught[0].filename == __file__
    assert (dict(found), found.note, found.few_trials) == ({}, expected, True)


def test_importance_counts_pruned_trials_at_the_deepest_rung_enough_reached(tmp_path: Path) -> None:
    import warnings

    from .made_up_experiments import asha_experiment

    # 10 trials, 4 trained to the end (too few); 7 reached rung 1 (epoch 3), 3 of them pruned there.
    results = load(asha_experiment(tmp_path, completed=4))
    with warnings.catch_warnings():
        warnings.simplefilter("error", plots.FewTrialsWarning)
        found = results.importance()
        fig = plots.param_importance(results)
    assert (found.epoch, found.rung, found.trials, found.pruned) == (3, 1, 7, 3)
    assert found.note == "fANOVA over 7 trials' values at epoch 3, ASHA rung 1 (3 of them pruned)"
    assert set(found) == {"learning_rate", "units", "dropout"} and next(iter(found)) == "units"
    assert abs(sum(found.values()) - 1.0) < 1e-6
    assert found.to_series().index[0] == "units"
    assert len(fig.axes[0].patches) == 3
    assert fig.axes[0].get_title() == f"parameter importance: {found.note}"


def test_importance_uses_the_last_epoch_once_enough_trials_trained_to_the_end(tmp_path: Path) -> None:
    from .made_up_experiments import asha_experiment

    found = load(asha_experiment(tmp_path, completed=5)).importance()
    assert (found.epoch, found.rung, found.trials, found.pruned) == (9, None, 5, 0)
    assert found.note.startswith("fANOVA over 5 trials' values at epoch 9, the last")


def test_importance_takes_other_optuna_evaluators(tmp_path: Path) -> None:
    import optuna

    from .made_up_experiments import asha_experiment

    results = load(asha_experiment(tmp_path, completed=4))
    found = results.importance(evaluator=optuna.importance.MeanDecreaseImpurityImportanceEvaluator(seed=0))
    assert found.evaluator == "mean decrease in impurity" and len(found) == 3


def test_report_page_says_why_there_is_no_importance_instead_of_an_empty_box(tmp_path: Path) -> None:
    import warnings

    results = made_up(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", plots.FewTrialsWarning)  # the page itself says so
        figures = plots.all_figures(results)
    assert "param_importance" not in figures
    page = render_html(results, {})
    assert "Parameter importance: none; needs at least 5 trials at one epoch" in page


def test_figures_of_an_experiment_without_epochs_say_so(tmp_path: Path) -> None:
    results = made_up(tmp_path)
    empty = ExperimentResults(tmp_path, results.spec, results.trials.iloc[0:0], pd.DataFrame(), None)
    for fig in plots.all_figures(empty).values():
        assert isinstance(fig, Figure)
    assert "no epoch reported score" in plots.learning_curves(empty).axes[0].texts[0].get_text()


def test_model_path_finds_the_final_model_or_weights_in_the_newest_checkpoint(
    tmp_path: Path,
) -> None:
    results = made_up(tmp_path)
    a = tmp_path / "a"
    for checkpoint, name in (
        ("checkpoint_9", "model.keras"),
        ("checkpoint_10", "model.weights.h5"),
    ):
        (a / checkpoint).mkdir(parents=True)
        (a / checkpoint / name).write_bytes(b"x")
    (a / "checkpoint_11").mkdir()  # a checkpoint without a final model (written mid-training)
    (tmp_path / "b" / "checkpoint_000000").mkdir(parents=True)
    (tmp_path / "b" / "checkpoint_000000" / "weights.npz").write_bytes(b"x")
    assert results.model_path() == a / "checkpoint_10" / "model.weights.h5"  # the best trial is a
    assert results.model_path("a") == results.model_path(0) == results.model_path()
    assert results.model_path("b") is None and results.model_path(2) is None  # pruned, failed: no final model
    (a / "checkpoint_10" / "model.weights.h5").unlink()
    assert results.model_path() == a / "checkpoint_9" / "model.keras"
    with pytest.raises(TunekitError, match=re.escape(f"no trial 'zz' in {tmp_path}; trials: a, b, c")):
        results.model_path("zz")
    with pytest.raises(TunekitError, match=re.escape(f"no trial number 7 in {tmp_path}")):
        results.model_path(7)


def test_model_path_imports_no_tensorflow(tmp_path: Path) -> None:
    import subprocess
    import sys

    (tmp_path / "spec.yaml").write_text("name: x\nmetric: {name: score, mode: max}\n")
    (tmp_path / "trials.csv").write_text("trial_id,number,status,final_metric,epochs\nt1,0,completed,0.5,2\n")
    (tmp_path / "epochs.csv").write_text("trial_id,epoch,score\nt1,1,0.4\nt1,2,0.5\n")
    (tmp_path / "t1" / "checkpoint_000001").mkdir(parents=True)
    (tmp_path / "t1" / "checkpoint_000001" / "model.keras").write_bytes(b"x")
    code = (
        "import sys, tunekit; r = tunekit.load(sys.argv[1]); print(r.model_path()); "
        "print(sorted(m for m in ('tensorflow', 'keras', 'ray', 'mlflow') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.splitlines() == [
        str(tmp_path / "t1" / "checkpoint_000001" / "model.keras"),
        "[]",
    ]


def test_report_table_says_why_each_trial_ended(tmp_path: Path) -> None:
    results = made_up(tmp_path)
    trials = results.trials.copy()
    trials["reason"] = [
        "stopped by the model at epoch 3",
        "pruned by ASHA at rung 0 (epoch 1)",
        "TrialFailure: non-finite loss\n" + "Traceback (most recent call last):\n" * 40,
    ]
    page = render_html(
        ExperimentResults(tmp_path, results.spec, trials, results.epochs, results.best),
        {},
    )
    table = page[page.index('<table class="trials">') :]
    head = re.findall(r"<th[^>]*>([^<]*)</th>", table[: table.index("</table>")])
    assert head[3] == "status" and head[-1] == "reason", head  # its long text last, after the parameters
    cells = re.findall(r'<td class="text reason"( title="[^"]*")?>([^<]*)</td>', table)
    assert [shown for _, shown in cells] == [
        "stopped by the model at epoch 3",
        "pruned by ASHA at rung 0 (epoch 1)",
        "TrialFailure: non-finite loss",
    ]
    assert cells[0][0] == "" and "Traceback (most recent call last):" in cells[2][0]  # all of it on hover


def test_report_links_the_mlflow_runs_when_a_server_holds_them(tmp_path: Path) -> None:
    import json

    from tunekit.layout import TRACKING_FILE

    record = {
        "tracking_uri": "sqlite:///m.db",
        "experiment_name": "made-up",
        "experiment_id": "3",
        "parent_run_id": "p1",
    }
    (tmp_path / TRACKING_FILE).write_text(json.dumps(record))
    page = render_html(made_up(tmp_path), {})
    assert "experiment <code>made-up</code> at <code>sqlite:///m.db</code>, parent run <code>p1</code></p>" in page
    assert "<a href" not in page
    link = "http://127.0.0.1:5000/#/experiments/3/runs?workflowType=machine_learning"
    (tmp_path / TRACKING_FILE).write_text(
        json.dumps({**record, "tracking_uri": "http://127.0.0.1:5000", "ui_url": link})
    )
    page = render_html(made_up(tmp_path), {})
    assert f'(<a href="{link}">open its runs in the MLflow UI</a>)' in page


def test_learning_curves_name_the_best_and_the_top_trials_in_the_legend_and_at_their_ends(tmp_path: Path) -> None:
    from .made_up_experiments import asha_experiment

    results = load(asha_experiment(tmp_path))
    legend = plots.learning_curves(results, top=3).axes[0].get_legend()
    assert legend is not None
    assert [t.get_text() for t in legend.get_texts()] == [
        "completed (4)",
        "pruned (6)",
        "best: trial 1 (0.7732)",
        "trial 2 (0.6565, completed)",
        "trial 3 (0.5064, completed)",
    ]
    ends = [
        t.get_text()
        for t in plots.learning_curves(results, top=3).axes[0].texts
        if t.get_text().startswith(" ") and "rung" not in t.get_text()
    ]
    assert ends == [" 1", " 2", " 3"]
    legend = plots.learning_curves(results, top=1).axes[0].get_legend()
    assert legend is not None and len(legend.get_texts()) == 3


def test_report_table_shows_the_parameters_right_after_the_metric(tmp_path: Path) -> None:
    page = render_html(made_up(tmp_path), {})
    table = page[page.index('<table class="trials">') :]
    head = re.findall(r"<th[^>]*>([^<]*)</th>", table[: table.index("</table>")])
    at = head.index("best score")
    assert head[at + 1 : at + 3] == ["lr", "optimizer"] and head[-3:] == ["wall s", "samples/s", "reason"], head
