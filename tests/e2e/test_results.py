"""Figures, the HTML report, ``tunekit report`` and ``load_from_mlflow`` on a real small experiment.

Made-up tables: tests/unit/results/test_results.py.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

import tunekit
from tunekit import plots
from tunekit.cli import main as cli_main
from tunekit.results.importance import MIN_TRIALS_FOR_IMPORTANCE
from tunekit.results.load import ExperimentResults
from tunekit.results.mlflow import load_from_mlflow
from tunekit.results.report import write_html

REPO = Path(__file__).resolve().parents[2]
DIGITS_SPEC = REPO / "search_spaces" / "digits_mlp.yaml"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def experiment(tmp_path_factory: pytest.TempPathFactory, shared_ray: None) -> Iterator[tuple[ExperimentResults, str]]:
    """6 trials of up to 3 epochs, ASHA at epochs 1 and 2, tracked to SQLite, keeping each trial's
    best epoch (``training.keep: best``): (results, tracking URI)."""
    root = tmp_path_factory.mktemp("results-experiment")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    results = tunekit.run(
        DIGITS_SPEC,
        storage=root,
        name="small",
        progress=False,
        overrides=[
            "budget.num_samples=6",
            "budget.max_epochs=3",
            "scheduler.grace_period=1",
            "scheduler.reduction_factor=2",
            "search.n_startup_trials=3",
            "training.keep=best",
            f"tracking.uri={uri}",
            # A writer that did not send everything fails here with its reason, not in a reader below.
            "tracking.required=true",
        ],
    )
    yield results, uri


# ------------------------------------------------------- a real small experiment


@pytest.mark.slow
def test_plots_of_a_real_experiment(experiment: tuple[ExperimentResults, str], tmp_path: Path) -> None:
    results, _ = experiment
    stopped = (results.trials["status"] != "completed").sum()
    assert stopped >= 1, "the experiment should have early-stopped trials"
    for name, fig in plots.all_figures(results).items():
        fig.savefig(tmp_path / f"{name}.png")
        assert (tmp_path / f"{name}.png").read_bytes().startswith(PNG_MAGIC)
    curves = plots.learning_curves(results).axes[0].get_lines()
    assert len([line for line in curves if line.get_marker() == "x"]) == stopped
    # Importance counts the pruned trials too: all 6 reached rung 0 (epoch 1), however few completed.
    completed = (results.trials["status"] == "completed").sum()
    found = results.importance()
    assert found.trials >= MIN_TRIALS_FOR_IMPORTANCE and set(found) == {
        c[len("params.") :] for c in results.trials if c.startswith("params.")
    }
    deeper = results.epochs.groupby("epoch")["trial_id"].nunique()
    assert found.epoch is not None and (completed >= MIN_TRIALS_FOR_IMPORTANCE) == (found.epoch == 3), found.note
    assert deeper[found.epoch] >= MIN_TRIALS_FOR_IMPORTANCE, found.note
    importance = plots.param_importance(results).axes[0]
    assert len(importance.patches) == len(found)


@pytest.mark.slow
def test_model_path_of_a_real_experiment_is_the_best_trials_saved_model(
    experiment: tuple[ExperimentResults, str],
) -> None:
    results, _ = experiment
    assert results.best is not None and results.best.status == "completed"
    path = results.model_path()
    assert path is not None and path.is_file(), path
    assert path.name == "model.keras" and path.parent.parent == results.experiment_dir / results.best.trial_id


@pytest.mark.slow
def test_keep_best_ranks_exports_and_tells_the_study_each_completed_trials_best_epoch(
    experiment: tuple[ExperimentResults, str],
) -> None:
    """Each completed trial's figure is its best epoch's value, in trials.csv and the study, and
    its exported model is that epoch's: it scores the figure on the validation data."""
    import optuna

    from tunekit.results.models import config_of, runnable_spec, trial_data
    from tunekit.search.plan import study_storage

    results, _ = experiment
    study = optuna.load_study(study_name="digits-mlp", storage=study_storage(results.experiment_dir))
    values = {t.user_attrs["ray_trial_id"]: t.value for t in study.trials}
    spec = runnable_spec(results.experiment_dir)
    completed = results.trials[results.trials["status"] == "completed"].to_dict("records")
    models = {m.trial_id: m for m in results.best_models(len(results.trials))}
    assert completed
    for row in completed:
        epochs = results.epochs[results.epochs["trial_id"] == row["trial_id"]].sort_values("epoch")
        scores = list(epochs[results.metric])
        assert row["kept_epoch"] == scores.index(max(scores)) + 1, scores
        assert row["final_metric"] == pytest.approx(max(scores)) == pytest.approx(values[row["trial_id"]])
        _, val_ds = trial_data(spec, config_of(row), results.experiment_dir / row["trial_id"])
        score = models[row["trial_id"]].model.evaluate(val_ds, verbose=0, return_dict=True)["accuracy"]
        assert score == pytest.approx(row["final_metric"], abs=1e-6)
    assert results.trials.loc[results.trials["status"] != "completed", "kept_epoch"].isna().all()


@pytest.mark.slow
def test_html_report_is_self_contained(experiment: tuple[ExperimentResults, str], tmp_path: Path) -> None:
    results, _ = experiment
    page = write_html(results, tmp_path / "report.html").read_text()
    images = re.findall(r'<img alt="[^"]*" src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) == 4
    assert all(base64.b64decode(image).startswith(PNG_MAGIC) for image in images)
    assert page.count("<table") >= 2  # best trial's config and the ranked trials
    for trial_id in results.trials["trial_id"]:
        assert f">{trial_id}<" in page
    assert 'class="best"' in page and results.best is not None and results.best.trial_id in page
    assert not re.search(r'(src|href)="(https?:)?//', page), "the page must not load anything"


@pytest.mark.slow
def test_report_command_writes_the_page(
    experiment: tuple[ExperimentResults, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    results, _ = experiment
    target = tmp_path / "out" / "report.html"
    assert cli_main(["report", str(results.experiment_dir), "--html", str(target)]) == 0
    assert target.read_text().count("data:image/png;base64,") == 4
    shown = capsys.readouterr().out
    assert "val_accuracy" in shown and shown.endswith(f"html report: {target.resolve()}\n")


@pytest.mark.slow
def test_load_from_mlflow_gives_the_same_tables(
    experiment: tuple[ExperimentResults, str],
) -> None:
    results, uri = experiment
    mirrored = load_from_mlflow("digits-mlp", uri, experiment_dir=results.experiment_dir)
    assert list(mirrored.trials.columns) == list(results.trials.columns)
    assert list(mirrored.epochs.columns) == list(results.epochs.columns)
    assert mirrored.trials.shape == results.trials.shape and mirrored.epochs.shape == results.epochs.shape
    assert mirrored.experiment_dir == results.experiment_dir
    assert mirrored.best is not None and results.best is not None
    assert (mirrored.best.trial_id, mirrored.best.config) == (
        results.best.trial_id,
        results.best.config,
    )
    same = [
        "trial_id",
        "number",
        "status",
        "epochs",
        "rung",
        "kept_epoch",
        *[c for c in results.trials if c.startswith("params.")],
    ]
    pd.testing.assert_frame_equal(mirrored.trials[same], results.trials[same], check_dtype=False)
    for column in ("final_metric", "best_metric"):
        assert list(mirrored.trials[column]) == pytest.approx(list(results.trials[column]))
    key = ["trial_id", "epoch"]
    left = mirrored.epochs.sort_values(key).reset_index(drop=True)
    right = results.epochs.sort_values(key).reset_index(drop=True)
    assert left[key].equals(right[key])
    assert list(left[results.metric]) == pytest.approx(list(right[results.metric]))
    assert list(left["time"]) == pytest.approx(list(right["time"]), abs=0.01)


@pytest.mark.slow
def test_the_html_report_and_the_notebook_view_render_in_chromium(
    experiment: tuple[ExperimentResults, str], tmp_path: Path
) -> None:
    """The page a browser shows: the report's headline, parameters and every trial; the
    notebook's HTML view (``_repr_html_``, as Jupyter shows ``results``) with the best trial."""
    from tunekit.testing.browser import CHROMIUM, chromium, page_text

    if CHROMIUM is None:
        pytest.skip("needs Debian's chromium: apt-get install -y chromium")
    results, _ = experiment
    best = results.best
    assert best is not None
    page = write_html(results, tmp_path / "report.html")
    shown = page_text(page.as_uri(), tmp_path, r"val_accuracy")
    for trial_id in results.trials["trial_id"]:
        assert trial_id in shown, shown[:2000]
    assert f"{best.metric:.4f}"[:5] in shown and "learning_rate" in shown
    chromium(page.as_uri(), tmp_path, f"--screenshot={tmp_path / 'report.png'}")
    assert (tmp_path / "report.png").read_bytes().startswith(PNG_MAGIC)

    view = tmp_path / "notebook.html"
    view.write_text(f"<html><body>{results._repr_html_()}</body></html>")
    seen = page_text(view.as_uri(), tmp_path, r"completed")
    assert results.spec.name in seen and f"trial {best.number}" in seen, seen[:2000]
    assert len(repr(results).splitlines()) <= 6  # its plain repr stays a few lines
