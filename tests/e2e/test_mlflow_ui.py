"""What a person sees in the MLflow UI: the search's runs, rendered by headless Chromium.

Needs Debian's ``chromium`` (``apt-get install -y chromium``; ``.ci/bootstrap`` installs it).
Chromium renders the UI's JavaScript against a real ``mlflow server`` on 127.0.0.1 and
the test reads the resulting DOM; screenshots land in the test's temporary directory.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest

from tunekit.layout import TRACKING_FILE
from tunekit.testing.browser import CHROMIUM, chromium, page_text
from tunekit.testing.servers import MlflowServer
from tunekit.tracking.tracker import MlflowTracker

from .test_tracking import client, drive, recorder_for, runs_of, small_spec

pytestmark = pytest.mark.slow

EXPERIMENT = "tunekit-ui"
TRIALS = 4


@pytest.fixture(scope="module")
def ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    if CHROMIUM is None:
        pytest.skip("needs Debian's chromium: apt-get install -y chromium")
    root = tmp_path_factory.mktemp("mlflow-ui")
    server = MlflowServer(root / "server").start()
    try:
        spec, experiment_dir = small_spec(
            root, server.uri, f"tracking.experiment={EXPERIMENT}", directory="digits-ui-20261123-020000"
        )
        recorder = recorder_for(spec, experiment_dir)
        tracker = MlflowTracker(spec, experiment_dir)
        tracker.experiment_started(recorder)
        drive(tracker, recorder, trials=TRIALS, epochs=3)
        tracker.experiment_ended(recorder)
        parent, children = runs_of(server.uri, EXPERIMENT)
        experiment = client(server.uri).get_experiment_by_name(EXPERIMENT)
        record = json.loads((experiment_dir / TRACKING_FILE).read_text())
        yield {
            "uri": server.uri,
            "experiment": experiment,
            "experiment_id": experiment.experiment_id,
            "experiment_dir": experiment_dir,
            "record": record,
            "parent": parent,
            "children": children,
            "root": root,
        }
    finally:
        server.stop()


def test_the_link_tunekit_records_opens_the_experiment_on_its_training_runs(ui: dict[str, Any]) -> None:
    # MLflow 3.17's UI opens an experiment on the GenAI overview ("Traces 0", "No data
    # available") unless told it is model training; the kind tag says so for the UIs that
    # read it, the link's workflowType for 3.17, whose browser-wide switch starts on GenAI.
    assert ui["experiment"].tags["mlflow.experimentKind"] == "custom_model_development"
    url = ui["record"]["ui_url"]
    assert url == f"{ui['uri']}/#/experiments/{ui['experiment_id']}/runs?workflowType=machine_learning"
    text = page_text(url, ui["root"], r"\d+ matching runs")
    shot = ui["root"] / "runs.png"
    chromium(url, ui["root"], f"--screenshot={shot}")
    assert f"{TRIALS + 1} matching runs" in text, text[:2000]  # the parent and one child per trial
    assert ui["parent"].info.run_name == ui["experiment_dir"].name  # the parent is named after the experiment
    assert ui["experiment_dir"].name in text, text[:2000]
    assert "Run Name" in text and "Model training" in text, text[:2000]
    for genai in ("Overview", "No data available", "Evaluation runs", "Training runs"):
        assert genai not in text, (genai, text[:2000])
    assert shot.stat().st_size > 10_000


def test_the_compare_view_plots_the_trials_val_curves_under_names_that_say_their_outcome(ui: dict[str, Any]) -> None:
    # MLflow calls a pruned run "Finished" like a completed one; the run name, the column every
    # view shows, says which it was (the runs table nests the trials under the parent run).
    ids = json.dumps([child.info.run_id for child in ui["children"]])
    url = (
        f"{ui['uri']}/#/metric/val_accuracy?runs={quote(ids)}&metric=%22val_accuracy%22"
        f"&experiments={quote(json.dumps([ui['experiment_id']]))}&plot_metric_keys={quote(json.dumps(['val_accuracy']))}"
    )
    text = page_text(url, ui["root"], r"trial-0 · completed")
    shot = ui["root"] / "val_curves.png"
    chromium(url, ui["root"], f"--screenshot={shot}")
    assert f"Comparing {TRIALS} Runs" in text, text[:3000]
    for name in ("trial-0 · completed", "trial-1 · pruned@1", "trial-2 · completed", "trial-3 · pruned@1"):
        assert f"{name} (val_accuracy)" in text, (name, text[:3000])  # each curve's legend
    assert shot.stat().st_size > 10_000


def test_parent_run_page_lists_every_trial_as_a_child_run(ui: dict[str, Any]) -> None:
    parent = ui["parent"]
    url = f"{ui['uri']}/#/experiments/{ui['experiment_id']}/runs/{parent.info.run_id}"
    text = page_text(url, ui["root"], r"Child runs")
    chromium(url, ui["root"], f"--screenshot={ui['root'] / 'parent.png'}")
    listed = re.search(r"Child runs (.*?) Source", text)
    assert listed, text[:3000]
    names = {name.strip() for name in listed.group(1).split(",")}
    assert names == {child.info.run_name for child in ui["children"]}
    assert names == {"trial-0 · completed", "trial-1 · pruned@1", "trial-2 · completed", "trial-3 · pruned@1"}
    assert "best_val_accuracy" in text and "trials_pruned" in text
