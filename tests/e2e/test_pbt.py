"""Population-based training on a real Ray runtime, the default digits trainable, real SQLite.

One Ray session (2 CPUs): the population's 4 trials take turns on 2 slots, which is what
synchronous PBT is for. One search covers it all (3 epochs, ranked every epoch, a killed
worker, an interruption while half the population waits at a meeting, and a resume) so the
module stays within its share of CI's time.
"""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import threading
import time
from pathlib import Path

import mlflow
import numpy as np
import optuna
import pytest

import tunekit
from tunekit.layout import CHECKPOINT_STATE, CHECKPOINT_WEIGHTS, EXPLOITS_FILE, NEW_PREFIX, TRACKING_FILE
from tunekit.results import plots, summarize
from tunekit.results.mlflow import load_from_mlflow
from tunekit.search.attrs import PBT_STEPS_ATTR
from tunekit.search.plan import study_storage
from tunekit.storage.clock import SearchClock
from tunekit.tracking.client import ARTIFACTS_FOLDER
from tunekit.tracking.tags import TAG_PBT_EXPLOITS, TAG_PBT_STEP_PREFIX, TAG_TRIAL_ID

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("shared_ray")]

REPO = Path(__file__).resolve().parents[2]
PBT_SPEC = REPO / "search_spaces" / "digits_mlp_pbt.yaml"
KILL_ONCE = REPO / "tests" / "trainables" / "kill_once.py"
EVERY_EPOCH = ["scheduler.perturbation_interval=1"]
STOPPED_S = 3.0  # between the interruption and the resume
HOLD_S = 60.0  # the trials after the first two hold epoch 2 this long, until the interruption
# kill_once's marker files (its REACHED_PREFIX, RESUMED_FILE; importing it would import Keras here)
REACHED_PREFIX, RESUMED_FILE = "reached_", "resumed"


def _study(experiment_dir: Path) -> optuna.Study:
    return optuna.load_study(study_name="digits-mlp-pbt", storage=study_storage(experiment_dir))


def _final_checkpoint(experiment_dir: Path, trial_id: str) -> tuple[dict[str, float], list[float]]:
    """The configuration in a trial's newest checkpoint, and its optimizer's scalar variables."""
    newest = sorted((experiment_dir / trial_id).glob("checkpoint_*"))[-1]
    config = json.loads((newest / CHECKPOINT_STATE).read_text())["config"]
    with np.load(newest / CHECKPOINT_WEIGHTS) as arrays:
        scalars = [float(arrays[name]) for name in arrays.files if name.startswith("o") and arrays[name].ndim == 0]
    return config, scalars


def _interrupt_mid_meeting(experiment_dir: Path, markers: Path) -> threading.Thread:
    """SIGINT to this process (as Ctrl-C) once exploits.csv has a row (a resume has steps to
    keep) and two trials finished epoch 2, so they wait at the meeting there while the others
    hold that epoch (kill_once's ``hold_epoch``)."""

    def watch() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            table = experiment_dir / EXPLOITS_FILE
            stepped = table.is_file() and len(table.read_text().splitlines()) > 1
            if stepped and len(list(markers.glob(f"{REACHED_PREFIX}*"))) >= 2:
                time.sleep(2.5)  # their epoch-2 reports reach the driver (sent as the next step starts)
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    return watcher


def test_a_population_of_4_survives_a_killed_worker_and_a_resume_and_records_each_exploit(tmp_path: Path) -> None:
    # One population, as CI's time allows: the default digits trainable (through kill_once,
    # whose first trial's worker dies after epoch 1), ranked at every epoch but the last,
    # interrupted by Ctrl-C after its first exploit step while two trials wait at the
    # meeting at epoch 2 and two have not reached it, then resumed to the end.
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    overrides = [f"trainable={KILL_ONCE}", "budget.max_epochs=3", *EVERY_EPOCH, f"tracking.uri={uri}"]
    data = {"marker_dir": str(tmp_path), "kill_after_epoch": 1, "hold_epoch": 2, "hold_s": HOLD_S}
    experiment_dir = tmp_path / "population"
    watcher = _interrupt_mid_meeting(experiment_dir, tmp_path)
    with pytest.raises(tunekit.SearchInterrupted):
        tunekit.run(PBT_SPEC, overrides=overrides, data=data, storage=tmp_path, name="population", progress=False)
    watcher.join()
    with (experiment_dir / EXPLOITS_FILE).open() as handle:
        before = list(csv.DictReader(handle))
    assert before
    epochs_before = tunekit.load(experiment_dir).epochs.groupby("trial_id")["epoch"].max()
    assert sorted(epochs_before) == [1, 1, 2, 2], epochs_before  # mid-meeting
    (tmp_path / RESUMED_FILE).touch()
    time.sleep(STOPPED_S)  # the search stands still: no figure may count this

    console = io.StringIO()
    results = tunekit.resume(experiment_dir, progress=console)

    trials, steps = results.trials, results.exploits
    assert sorted(trials["number"]) == [0, 1, 2, 3]  # the same population, no trial added
    assert set(trials["status"]) == {"completed"} and set(trials["epochs"]) == {3}, trials[["status", "reason"]]
    assert (tmp_path / "claimed").is_file()
    # The killed trial came back from its checkpoint: more attempts than the resume alone gives.
    assert trials["attempts"].max() >= 2
    with (experiment_dir / EXPLOITS_FILE).open() as handle:
        after = list(csv.DictReader(handle))
    assert after[: len(before)] == before  # steps before the interruption kept as they were
    # The resume's console: the start-up milestones a run shows, and a line per new exploit step.
    shown = console.getvalue()
    assert "first trial started (trial" in shown and "first epoch reported (trial" in shown, shown
    exploit_lines = [line for line in shown.splitlines() if "] PBT: trial " in line]
    assert len(exploit_lines) == len(after) - len(before) >= 1, shown
    assert all("checkpoint; learning_rate " in line for line in exploit_lines), exploit_lines
    # Synchronous PBT ranks all 4 at epochs 1 and 2 (never at the last); the weakest quarter
    # (1 trial) copies a trial of the top quarter each time, and went on after the resume.
    assert list(steps["epoch"]) == [1, 2] and list(steps["source_epoch"]) == [1, 2]
    assert all(steps["trial_id"] != steps["source_trial_id"])
    # The resumed population met at epoch 2 where it had stopped: the two that waited there
    # waited again, so no trial trained on before the meeting ranked all four at epoch 2.
    for step in steps.itertuples():
        later = results.epochs[results.epochs["epoch"] > step.epoch]
        assert (later["time"] >= step.time).all(), (step, later)
    assert steps[NEW_PREFIX + "learning_rate"].between(1e-4, 1e-2).all()
    assert steps[NEW_PREFIX + "dropout"].between(0.0, 0.5).all()

    # The new configuration took effect: the trial's last checkpoint was trained under its
    # last exploit's configuration, with that learning rate on the optimizer's variable.
    for trial_id, rows in steps.groupby("trial_id"):
        last = rows.iloc[-1]
        config, scalars = _final_checkpoint(results.experiment_dir, str(trial_id))
        assert config["learning_rate"] == last[NEW_PREFIX + "learning_rate"]
        assert any(np.isclose(value, float(config["learning_rate"])) for value in scalars), scalars

    # Optuna: COMPLETE with its final value, params as it started, every step as a user attr.
    by_number = {t.number: t for t in _study(results.experiment_dir).trials}
    for row in trials.itertuples():
        study_trial = by_number[int(row.number)]
        assert study_trial.state == optuna.trial.TrialState.COMPLETE
        assert study_trial.value == pytest.approx(row.final_metric)
        started = trials.loc[trials["number"] == row.number, "params.learning_rate"].iloc[0]
        assert study_trial.params["learning_rate"] == pytest.approx(started)
        moved = steps[steps["trial_id"] == row.trial_id]
        recorded = study_trial.user_attrs.get(PBT_STEPS_ATTR, [])
        assert [step["epoch"] for step in recorded] == list(moved["epoch"])
        assert [step["source"] for step in recorded] == list(moved["source_number"])

    # MLflow: each moved trial's child run counts and describes its steps.
    client = mlflow.MlflowClient(uri)
    experiment = client.get_experiment_by_name("digits-mlp-pbt")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    tags = {run.data.tags.get(TAG_TRIAL_ID): run.data.tags for run in runs}
    for trial_id, rows in steps.groupby("trial_id"):
        assert tags[str(trial_id)][TAG_PBT_EXPLOITS] == str(len(rows))
        first = rows.iloc[0]
        assert tags[str(trial_id)][f"{TAG_PBT_STEP_PREFIX}1"].startswith(
            f"epoch {first['epoch']}: copied trial {first['source_number']} (epoch {first['source_epoch']}); "
        )

    # TensorBoard: each moved trial's run steps its mutated values at its exploits' epochs,
    # from its starting value at step 0, the resume adding its step and repeating none.
    from tunekit.testing.runs import read_events

    for trial_id, rows in steps.groupby("trial_id"):
        number = int(trials.loc[trials["trial_id"] == trial_id, "number"].iloc[0])
        events = read_events(experiment_dir / "tensorboard" / f"trial-{number}")
        rates = [(e.step, v.simple_value) for e in events for v in e.summary.value if v.tag == "pbt/learning_rate"]
        assert [step for step, _ in rates] == [0, *rows["epoch"]], rates
        assert [rate for _, rate in rates[1:]] == pytest.approx(list(rows[NEW_PREFIX + "learning_rate"]), rel=1e-6)

    figure = plots.lineage(results)
    assert figure.axes[0].get_title().startswith("PBT lineage: 2 exploit steps (dashed")

    # Times are active: the stop is downtime, in no trial's time and in no slot-hour.
    summary = summarize(results)
    assert summary.sessions == 2 and summary.downtime_seconds >= STOPPED_S
    clock = SearchClock.read(experiment_dir)
    assert clock is not None
    elapsed = clock.sessions[-1][1] - clock.started_at
    assert summary.active_seconds == pytest.approx(elapsed - summary.downtime_seconds)
    spans = results.spans.groupby("trial_id").apply(lambda rows: float((rows["end"] - rows["start"]).sum()))
    for row in trials.itertuples():
        assert row.wall_seconds == pytest.approx(spans[row.trial_id], abs=0.01)
        assert row.wall_seconds < summary.active_seconds
    # The best trial's configuration is the one its saved model was trained under.
    best = results.best
    assert best is not None
    config, _ = _final_checkpoint(results.experiment_dir, best.trial_id)
    assert {k: v for k, v in config.items() if not k.startswith("_")} == pytest.approx(best.config)
    # MLflow's copy of the search holds its steps, and names the same best configuration
    # (before, load_from_mlflow gave a moved trial's starting configuration).
    mirrored = load_from_mlflow("digits-mlp-pbt", uri, experiment_dir=experiment_dir)
    assert mirrored.best is not None and (mirrored.best.trial_id, mirrored.best.config) == (best.trial_id, best.config)
    parent = client.get_run(json.loads((experiment_dir / TRACKING_FILE).read_text())["parent_run_id"])
    sent = client.download_artifacts(parent.info.run_id, EXPLOITS_FILE, str(tmp_path))
    assert Path(sent).read_text() == (experiment_dir / EXPLOITS_FILE).read_text()
    # A SQLite store's artifacts lie beside its database, not in the working directory.
    assert parent.info.artifact_uri.startswith((tmp_path / ARTIFACTS_FOLDER).as_uri() + "/"), parent.info.artifact_uri
    if best.lineage:
        assert best.config == best.lineage[-1].config != best.initial_config
    # Resumed once more, the complete population has nothing to do, and no hint to grow it:
    # a PBT search cannot grow (tunekit.config.growth).
    again = io.StringIO()
    tunekit.resume(experiment_dir, progress=again)
    assert again.getvalue().splitlines()[0] == "the search is complete: nothing to resume", again.getvalue()
