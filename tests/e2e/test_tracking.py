"""MLflow tracking: parent and child runs, against a real ``mlflow server`` on 127.0.0.1.

The tracker is driven two ways: directly, with made-up trials and epochs (fast, and
the only way to pull the server away at a chosen moment), and by real searches on the
digits spec on a real Ray runtime (slow).
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ray.tune.schedulers import FIFOScheduler

import tunekit
from tunekit.cli import main as cli_main
from tunekit.compat.ray_saved_state import finished_trials, saved_trials
from tunekit.config.spec import ExperimentSpec, load_spec
from tunekit.driver.recorder import EpochRow, Recorder, TrialRecord
from tunekit.environment import redact_uri
from tunekit.errors import TunekitError
from tunekit.layout import FINAL_MODEL, FINAL_WEIGHTS, TRACKING_FILE, TrialStatus
from tunekit.results.check import check_experiment
from tunekit.results.closing import closing_text
from tunekit.results.mlflow import ambiguity_message, load_from_mlflow
from tunekit.storage.clock import SearchClock, ended_by_its_driver
from tunekit.testing.servers import MlflowServer, free_port
from tunekit.tracking import sync
from tunekit.tracking.preflight import TrackingIncomplete, check_complete
from tunekit.tracking.record import TrackingRecord
from tunekit.tracking.tags import (
    PARENT_RUN_TAG,
    RETRAIN_ROLE,
    TAG_EXPERIMENT_DIR,
    TAG_RETRAIN_TRIAL_ID,
    TAG_ROLE,
    TAG_RUNG,
    TAG_STATUS,
    TAG_TRIAL_ID,
    TAG_TRIAL_NUMBER,
)
from tunekit.tracking.tracker import MlflowTracker
from tunekit.tracking.values import run_status

REPO = Path(__file__).resolve().parents[2]
DIGITS_SPEC = REPO / "search_spaces" / "digits_mlp.yaml"
# 5 trials of up to 3 epochs; ASHA compares at epochs 1 and 2 and stops the weaker half.
SMALL_SEARCH = [
    "budget.num_samples=5",
    "budget.max_epochs=3",
    "budget.max_concurrent=2",
    "scheduler.grace_period=1",
    "scheduler.reduction_factor=2",
    "search.n_startup_trials=3",
]
EXPERIMENT = "tunekit-tracking-test"
REGISTERED_MODEL = "tunekit-digits-best"


# ------------------------------------------------------------------------ helpers


def recorder_for(spec: ExperimentSpec, experiment_dir: Path) -> Recorder:
    """A real recorder with no Ray behind it: tests fill its trials and epochs themselves."""
    return Recorder(spec, experiment_dir, searcher=None, scheduler=FIFOScheduler())


def drive(
    tracker: MlflowTracker, recorder: Recorder, trials: int, epochs: int, *, pause: float = 0.0, first: int = 0
) -> None:
    """Feeds tracker and recorder what a search of ``trials`` trials would: odd trials pruned after epoch 1."""
    for index in range(first, first + trials):
        record = TrialRecord(
            f"fake{index:03d}",
            index,
            {"learning_rate": 10.0 ** -(index % 4 + 1), "units": 32 * (index + 1), "dropout": 0.25},
        )
        recorder.trials[record.trial_id] = record
        tracker.trial_started(record)
        last = 1 if index % 2 else epochs
        for epoch in range(1, last + 1):
            if epoch == 1:
                record.info = {
                    "precision": "float32",
                    "replicas": 1,
                    "device_names": ["/CPU:0"],
                    "node_ip": "127.0.0.1",
                }
            value = 0.5 + 0.1 * epoch + 0.01 * index
            row = EpochRow(
                record.trial_id,
                epoch,
                {"val_accuracy": value, "loss": 1.0 / epoch, "epoch_seconds": 0.1},
                1,
                0 if epoch == 1 else None,
                recorder.clock.now(),
            )
            recorder.epochs.append(row)
            record.epochs, record.final_metric = epoch, value
            tracker.epoch_reported(record, row)
            time.sleep(pause)
        record.status = TrialStatus.PRUNED if index % 2 else TrialStatus.COMPLETED
        record.rung = 0
        record.ended_at = time.time()
        recorder._changed_record(record)  # as every callback of the recorder's does: its tally follows
        tracker.trial_ended(record)
        tracker.tick(recorder)


def small_spec(tmp_path: Path, uri: str, *extra: str, directory: str = "experiment") -> tuple[ExperimentSpec, Path]:
    spec = load_spec(DIGITS_SPEC, [f"tracking.uri={uri}", "budget.num_samples=4", "budget.max_epochs=3", *extra])
    experiment_dir = tmp_path / directory
    experiment_dir.mkdir()
    (experiment_dir / "spec.yaml").write_text(spec.to_yaml())
    return spec, experiment_dir


def client(uri: str) -> Any:
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=uri)


def runs_of(uri: str, experiment: str, experiment_dir: Path | None = None) -> tuple[Any, list[Any]]:
    """The parent run of ``experiment_dir`` (or the only parent) and its children."""
    mlflow_client = client(uri)
    found = mlflow_client.get_experiment_by_name(experiment)
    assert found is not None, f"no MLflow experiment {experiment!r}"
    runs = mlflow_client.search_runs([found.experiment_id], max_results=1000)
    parents = [
        r
        for r in runs
        if r.data.tags.get(TAG_ROLE) == "experiment"
        and (experiment_dir is None or r.data.tags[TAG_EXPERIMENT_DIR] == str(experiment_dir))
    ]
    assert len(parents) == 1, [r.data.tags for r in parents]
    children = [
        r
        for r in runs
        if r.data.tags.get(PARENT_RUN_TAG) == parents[0].info.run_id and r.data.tags.get(TAG_ROLE) != RETRAIN_ROLE
    ]
    return parents[0], children


def untracked_experiment(
    tmp_path: Path, uri: str, experiment: str, *, trials: int = 4, directory: str = "experiment"
) -> tuple[Recorder, Path]:
    """An experiment directory as a search leaves it, written by a real recorder, never sent to MLflow."""
    spec, experiment_dir = small_spec(tmp_path, uri, f"tracking.experiment={experiment}", directory=directory)
    recorder = recorder_for(spec, experiment_dir)
    drive(MlflowTracker(spec, experiment_dir), recorder, trials=trials, epochs=3)  # never started: sends nothing
    recorder.write_tables()
    return recorder, experiment_dir


def histories(uri: str, experiment: str, experiment_dir: Path) -> dict[str, dict[str, list[int]]]:
    """{run name: {metric: its steps}} for the parent and each child run."""
    mlflow_client = client(uri)
    parent, children = runs_of(uri, experiment, experiment_dir)
    return {
        run.info.run_name: {
            key: [p.step for p in mlflow_client.get_metric_history(run.info.run_id, key)] for key in run.data.metrics
        }
        for run in [parent, *children]
    }


def tracking_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == "tunekit.tracking.tracker" and r.levelno >= logging.WARNING
    ]


# --------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def sqlite_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One SQLite tracking store for the module's direct tests (creating one takes seconds)."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow-sqlite') / 'mlflow.db'}"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    running = MlflowServer(tmp_path_factory.mktemp("mlflow-server")).start()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def tracked(
    server: MlflowServer, shared_ray: None, tmp_path_factory: pytest.TempPathFactory
) -> tunekit.ExperimentResults:
    """A small real search logged to the server: 5 trials, 3 epochs, some pruned.

    One trial at a time: with two, which trial reaches a rung first depends on timing,
    and ASHA may then let all five through.
    """
    storage = tmp_path_factory.mktemp("tracked-results")
    return tunekit.run(
        DIGITS_SPEC,
        overrides=[*SMALL_SEARCH, "budget.max_concurrent=1", "search.n_startup_trials=5"],
        storage=storage,
        name="tracked",
        progress=False,
        tracking={"uri": server.uri, "experiment": EXPERIMENT, "registered_model": REGISTERED_MODEL},
    )


# ----------------------------------------------------- the tracker, driven directly


def test_callbacks_only_queue_and_the_tracker_pickles_without_its_thread(tmp_path: Path, sqlite_uri: str) -> None:
    spec, experiment_dir = small_spec(tmp_path, sqlite_uri, "tracking.experiment=pickled")
    tracker = MlflowTracker(spec, experiment_dir)
    recorder = recorder_for(spec, experiment_dir)
    tracker.experiment_started(recorder)
    started = time.perf_counter()
    drive(tracker, recorder, trials=4, epochs=3)
    assert time.perf_counter() - started < 0.5  # 8 epochs and 4 trials: no I/O on this thread
    copy = pickle.loads(pickle.dumps(tracker))
    assert copy.experiment_dir == experiment_dir and copy._thread is None
    tracker.experiment_ended(recorder)
    _, children = runs_of(sqlite_uri, "pickled")
    assert len(children) == 4


def test_tracker_records_runs_and_a_replay_adds_nothing(tmp_path: Path, sqlite_uri: str) -> None:
    uri = sqlite_uri
    spec, experiment_dir = small_spec(tmp_path, uri, "tracking.experiment=replay")
    recorder = recorder_for(spec, experiment_dir)
    tracker = MlflowTracker(spec, experiment_dir)
    tracker.experiment_started(recorder)
    drive(tracker, recorder, trials=3, epochs=3)
    tracker.experiment_ended(recorder)

    # A resumed session: same directory, the recorder restored with every trial and epoch.
    again = MlflowTracker(spec, experiment_dir)
    again.experiment_started(recorder)
    drive(again, recorder, trials=1, epochs=3, first=3)
    again.experiment_ended(recorder)

    mlflow_client = client(uri)
    parent, children = runs_of(uri, "replay")
    assert sorted(c.data.tags[TAG_TRIAL_ID] for c in children) == ["fake000", "fake001", "fake002", "fake003"]
    for child in children:
        record = recorder.trials[child.data.tags[TAG_TRIAL_ID]]
        history = mlflow_client.get_metric_history(child.info.run_id, "val_accuracy")
        assert [p.step for p in history] == list(range(1, record.epochs + 1))
        assert child.data.params == {k: str(v) for k, v in record.params.items()}
        assert child.data.tags[TAG_STATUS] == record.status
        assert child.data.tags["tunekit.precision"] == "float32"
        assert child.info.status == "FINISHED"
    assert parent.info.status == "FINISHED"
    assert parent.data.metrics["trials_completed"] == 2 and parent.data.metrics["trials_pruned"] == 2
    assert parent.data.metrics["epochs_full_budget"] == 4 * 3
    assert parent.data.params["budget.max_epochs"] == "3" and parent.data.params["scheduler.type"] == "asha"
    assert [a.path for a in mlflow_client.list_artifacts(parent.info.run_id)] == ["spec.yaml"]
    assert (experiment_dir / TRACKING_FILE).is_file()


def test_resume_retires_the_run_of_a_trial_ray_never_saved(tmp_path: Path, sqlite_uri: str) -> None:
    from mlflow.entities import ViewType

    spec, experiment_dir = small_spec(tmp_path, sqlite_uri, "tracking.experiment=lost")
    recorder = recorder_for(spec, experiment_dir)
    tracker = MlflowTracker(spec, experiment_dir)
    tracker.experiment_started(recorder)
    drive(tracker, recorder, trials=3, epochs=2)
    # Started and reporting when the driver died, but after Ray's last experiment
    # checkpoint: the restored recorder will not know it.
    lost = TrialRecord("fake003", 3, {"learning_rate": 0.01, "units": 64, "dropout": 0.25})
    tracker.trial_started(lost)
    tracker.epoch_reported(lost, EpochRow(lost.trial_id, 1, {"val_accuracy": 0.9}, 1, 0, 1.0))
    assert tracker.flush(30)
    tracker.experiment_ended(recorder)

    resumed = MlflowTracker(spec, experiment_dir)
    resumed.experiment_started(recorder)
    drive(resumed, recorder, trials=1, epochs=2, first=4)
    resumed.experiment_ended(recorder)

    _, children = runs_of(sqlite_uri, "lost")
    assert sorted(c.data.tags[TAG_TRIAL_ID] for c in children) == sorted(recorder.trials)
    mlflow_client = client(sqlite_uri)
    every = mlflow_client.search_runs(
        [children[0].info.experiment_id], f"tags.`{TAG_TRIAL_ID}` = 'fake003'", run_view_type=ViewType.ALL
    )
    assert len(every) == 1
    retired = every[0]
    assert retired.info.lifecycle_stage == "deleted"
    assert retired.info.status == "KILLED"
    assert retired.data.tags[TAG_STATUS] == "lost"
    assert "not resumed" in retired.data.tags["tunekit.reason"]


def test_experiments_are_marked_as_model_training_unless_someone_chose_a_kind(tmp_path: Path, sqlite_uri: str) -> None:
    mlflow_client = client(sqlite_uri)
    mlflow_client.create_experiment("made-elsewhere")
    mlflow_client.create_experiment("kind-chosen", tags={"mlflow.experimentKind": "genai_development"})
    for name in ("made-elsewhere", "kind-chosen", "made-by-tunekit"):
        spec, experiment_dir = small_spec(tmp_path, sqlite_uri, f"tracking.experiment={name}", directory=name)
        recorder = recorder_for(spec, experiment_dir)
        tracker = MlflowTracker(spec, experiment_dir)
        tracker.experiment_started(recorder)
        drive(tracker, recorder, trials=1, epochs=1)
        tracker.experiment_ended(recorder)
        parent, _ = runs_of(sqlite_uri, name)
        assert parent.info.run_name == name  # the parent run is named after the experiment directory
        assert "ui_url" not in json.loads((experiment_dir / TRACKING_FILE).read_text())  # no server, no UI link
    kinds = {
        name: mlflow_client.get_experiment_by_name(name).tags["mlflow.experimentKind"]
        for name in ("made-elsewhere", "kind-chosen", "made-by-tunekit")
    }
    assert kinds == {
        "made-elsewhere": "custom_model_development",
        "kind-chosen": "genai_development",
        "made-by-tunekit": "custom_model_development",
    }


@pytest.mark.slow
def test_best_trial_with_weights_only_gets_them_attached_and_is_not_registered(
    tmp_path: Path, sqlite_uri: str, caplog: pytest.LogCaptureFixture
) -> None:
    import keras
    import numpy as np

    spec, experiment_dir = small_spec(
        tmp_path, sqlite_uri, "tracking.experiment=weights-only", "tracking.registered_model=weights-only-best"
    )
    recorder = recorder_for(spec, experiment_dir)
    tracker = MlflowTracker(spec, experiment_dir)
    tracker.experiment_started(recorder)
    drive(tracker, recorder, trials=3, epochs=3)
    best = recorder.best()
    assert best is not None
    # What the worker leaves when Keras cannot serialise the model: weights, in the last checkpoint.
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    stale = experiment_dir / best.trial_id / "checkpoint_000001" / FINAL_MODEL
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"an older checkpoint's model: not the one to attach")
    final = experiment_dir / best.trial_id / "checkpoint_000002" / FINAL_WEIGHTS
    final.parent.mkdir(parents=True)
    model.save_weights(final)
    with caplog.at_level(logging.WARNING, logger="tunekit.tracking.tracker"):
        tracker.experiment_ended(recorder)

    mlflow_client = client(sqlite_uri)
    _, children = runs_of(sqlite_uri, "weights-only")
    run = next(c for c in children if c.data.tags[TAG_TRIAL_ID] == best.trial_id)
    assert [a.path for a in mlflow_client.list_artifacts(run.info.run_id, "model")] == [f"model/{FINAL_WEIGHTS}"]
    copy = mlflow_client.download_artifacts(run.info.run_id, f"model/{FINAL_WEIGHTS}", str(tmp_path))
    rebuilt = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    rebuilt.load_weights(copy)
    for mine, theirs in zip(model.get_weights(), rebuilt.get_weights(), strict=True):
        np.testing.assert_array_equal(mine, theirs)
    assert mlflow_client.search_model_versions("name = 'weights-only-best'") == []
    assert tracking_warnings(caplog) == [
        f"tunekit: not registering 'weights-only-best': the best trial {best.trial_id} saved weights only "
        f"({FINAL_WEIGHTS}, Keras could not save the model whole); they are attached to its run"
    ]


def test_run_status_and_outcome_follow_the_trial_status_and_reason(tmp_path: Path, sqlite_uri: str) -> None:
    spec, experiment_dir = small_spec(tmp_path, sqlite_uri, "tracking.experiment=outcomes")
    recorder = recorder_for(spec, experiment_dir)
    tracker = MlflowTracker(spec, experiment_dir)
    tracker.experiment_started(recorder)
    endings = {  # trial id: (status, reason, epochs, rung) as the recorder ends trials (max_epochs=3)
        "full": ("completed", "trained all 3 epochs", 3, None),
        "early": ("completed", "stopped by the model at epoch 2", 2, None),
        "weak": ("pruned", "pruned by ASHA at rung 0 (epoch 1)", 1, 0),
        "late": ("stopped", "the search's time budget of 60 s ran out after 1 epochs", 1, None),
        "broken": (
            "failed",
            "TrialFailure: non-finite loss at epoch 2\nTraceback (most recent call last): ...",
            1,
            None,
        ),
    }
    for number, (trial_id, (status, reason, epochs, rung)) in enumerate(endings.items()):
        record = TrialRecord(trial_id, number, {"units": 32})
        recorder.trials[trial_id] = record
        tracker.trial_started(record)
        for epoch in range(1, epochs + 1):
            row = EpochRow(trial_id, epoch, {"val_accuracy": 0.5 + 0.1 * epoch}, 1, None, 0.1 * epoch)
            recorder.epochs.append(row)
            record.epochs, record.final_metric = epoch, row.metrics["val_accuracy"]
            tracker.epoch_reported(record, row)
        record.status, record.reason, record.rung, record.ended_at = TrialStatus(status), reason, rung, time.time()
        recorder._changed_record(record)  # as every callback of the recorder's does: its tally follows
        tracker.trial_ended(record)
    tracker.experiment_ended(recorder)

    _, children = runs_of(sqlite_uri, "outcomes")
    seen = {
        c.data.tags[TAG_TRIAL_ID]: (c.info.status, c.data.tags["tunekit.outcome"], c.data.tags["tunekit.reason"])
        for c in children
    }
    assert seen == {
        "full": ("FINISHED", "completed: trained all 3 epochs", endings["full"][1]),
        "early": ("FINISHED", "completed: stopped by the model at epoch 2", endings["early"][1]),
        "weak": ("FINISHED", "pruned at rung 0 (epoch 1)", endings["weak"][1]),
        "late": ("KILLED", "stopped: the search's time budget of 60 s ran out after 1 epochs", endings["late"][1]),
        "broken": ("FAILED", "failed after 1 epochs: TrialFailure: non-finite loss at epoch 2", endings["broken"][1]),
    }
    # The runs table's one always-shown column tells the outcome: a pruned run is "Finished" too.
    assert {c.data.tags[TAG_TRIAL_ID]: c.info.run_name for c in children} == {
        "full": "trial-0 · completed",
        "early": "trial-1 · completed",
        "weak": "trial-2 · pruned@1",
        "late": "trial-3 · stopped@1",
        "broken": "trial-4 · failed@1",
    }


def test_credentials_never_reach_runs(tmp_path: Path, sqlite_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    secrets = {
        "MLFLOW_TRACKING_USERNAME": "user-4f1c",
        "MLFLOW_TRACKING_PASSWORD": "pw-9a7e",
        "MLFLOW_TRACKING_TOKEN": "token-c0ffee",
    }
    for key, value in secrets.items():
        monkeypatch.setenv(key, value)
    uri = sqlite_uri
    spec, experiment_dir = small_spec(tmp_path, uri, "tracking.experiment=secrets")
    recorder = recorder_for(spec, experiment_dir)
    tracker = MlflowTracker(spec, experiment_dir)
    tracker.experiment_started(recorder)
    drive(tracker, recorder, trials=2, epochs=2)
    tracker.experiment_ended(recorder)
    parent, children = runs_of(uri, "secrets")
    stored = repr([(r.data.params, r.data.tags) for r in [parent, *children]])
    spec_copy = client(uri).download_artifacts(parent.info.run_id, "spec.yaml", str(tmp_path))
    stored += Path(spec_copy).read_text()
    for value in secrets.values():
        assert value not in stored
    assert redact_uri("https://alice:s3cret@mlflow.example.com:5000/x") == "https://mlflow.example.com:5000/x"
    assert redact_uri("sqlite:////tmp/mlflow.db") == "sqlite:////tmp/mlflow.db"


def test_unreachable_server_warns_once_and_returns_promptly(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    spec, experiment_dir = small_spec(tmp_path, f"http://127.0.0.1:{free_port()}")
    recorder = recorder_for(spec, experiment_dir)
    tracker = MlflowTracker(spec, experiment_dir)
    with caplog.at_level(logging.WARNING, logger="tunekit.tracking.tracker"):
        tracker.experiment_started(recorder)
        drive(tracker, recorder, trials=3, epochs=2)
        started = time.monotonic()
        tracker.experiment_ended(recorder)
    assert time.monotonic() - started < 20
    warnings = tracking_warnings(caplog)
    assert len(warnings) == 1, warnings
    assert "cannot use MLflow at http://127.0.0.1:" in warnings[0]
    assert "the search goes on without tracking" in warnings[0]


@pytest.mark.slow
def test_server_that_goes_away_mid_search_warns_once_and_blocks_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    own = MlflowServer(tmp_path / "server").start()
    try:
        spec, experiment_dir = small_spec(tmp_path, own.uri, "tracking.experiment=vanishing")
        recorder = recorder_for(spec, experiment_dir)
        tracker = MlflowTracker(spec, experiment_dir, flush_timeout=5)
        with caplog.at_level(logging.WARNING, logger="tunekit.tracking.tracker"):
            tracker.experiment_started(recorder)
            drive(tracker, recorder, trials=2, epochs=2)
            assert tracker.flush(timeout=60)
            _, children = runs_of(own.uri, "vanishing")
            assert len(children) == 2
            own.stop()
            started = time.perf_counter()
            drive(tracker, recorder, trials=3, epochs=3, first=2, pause=0.05)
            driver_seconds = time.perf_counter() - started - 0.05 * 5  # less the made-up training
            tracker.experiment_ended(recorder)
        assert driver_seconds < 0.5
        warnings = tracking_warnings(caplog)
        assert len(warnings) == 1, warnings
        assert "training goes on" in warnings[0]
    finally:
        own.stop()


# ------------------------------------------------------- a real search, tracked


@pytest.mark.slow
def test_one_parent_run_and_one_child_run_per_trial(tracked: tunekit.ExperimentResults, server: MlflowServer) -> None:
    parent, children = runs_of(server.uri, EXPERIMENT, tracked.experiment_dir)
    assert len(children) == len(tracked.trials) == 5
    assert sorted(c.data.tags[TAG_TRIAL_ID] for c in children) == sorted(tracked.trials["trial_id"])
    numbers = {c.data.tags[TAG_TRIAL_ID]: int(c.data.tags[TAG_TRIAL_NUMBER]) for c in children}
    assert numbers == dict(zip(tracked.trials["trial_id"], tracked.trials["number"], strict=True))
    assert parent.data.tags[TAG_EXPERIMENT_DIR] == str(tracked.experiment_dir)


@pytest.mark.slow
def test_child_params_are_the_trial_config(tracked: tunekit.ExperimentResults, server: MlflowServer) -> None:
    _, children = runs_of(server.uri, EXPERIMENT, tracked.experiment_dir)
    by_id = {c.data.tags[TAG_TRIAL_ID]: c for c in children}
    param_columns = [c for c in tracked.trials.columns if c.startswith("params.")]
    for row in tracked.trials.to_dict("records"):
        params = by_id[row["trial_id"]].data.params
        assert sorted(params) == sorted(c[len("params.") :] for c in param_columns)
        for column in param_columns:
            logged, expected = params[column[len("params.") :]], row[column]
            if isinstance(expected, float):
                assert float(logged) == pytest.approx(expected, rel=1e-12)
            else:
                assert logged == str(expected)


@pytest.mark.slow
def test_one_metric_point_per_epoch_reached(tracked: tunekit.ExperimentResults, server: MlflowServer) -> None:
    mlflow_client = client(server.uri)
    _, children = runs_of(server.uri, EXPERIMENT, tracked.experiment_dir)
    by_id = {c.data.tags[TAG_TRIAL_ID]: c for c in children}
    for row in tracked.trials.itertuples():
        history = mlflow_client.get_metric_history(by_id[row.trial_id].info.run_id, tracked.metric)
        assert [p.step for p in history] == list(range(1, row.epochs + 1))
        epochs = tracked.epochs[tracked.epochs["trial_id"] == row.trial_id].sort_values("epoch")
        assert [p.value for p in history] == pytest.approx(list(epochs[tracked.metric]))


@pytest.mark.slow
def test_status_tags_match_the_trial_table(tracked: tunekit.ExperimentResults, server: MlflowServer) -> None:
    _, children = runs_of(server.uri, EXPERIMENT, tracked.experiment_dir)
    by_id = {c.data.tags[TAG_TRIAL_ID]: c for c in children}
    assert set(tracked.trials["status"]) == {"completed", "pruned"}
    for row in tracked.trials.itertuples():
        child = by_id[row.trial_id]
        assert child.data.tags[TAG_STATUS] == row.status
        assert child.info.status == "FINISHED"
        if row.status == "pruned":
            assert child.data.tags[TAG_RUNG] == str(int(row.rung))
            assert child.data.tags["tunekit.outcome"] == f"pruned at rung {int(row.rung)} (epoch {row.epochs})"
        assert child.data.tags["tunekit.env.tensorflow"] and child.data.tags["tunekit.env.ray"]
        assert child.data.tags["tunekit.precision"] == "float32"
        assert child.data.tags["tunekit.replicas"] == "1"


@pytest.mark.slow
def test_nothing_but_reported_metrics_become_metrics(tracked: tunekit.ExperimentResults, server: MlflowServer) -> None:
    _, children = runs_of(server.uri, EXPERIMENT, tracked.experiment_dir)
    reported = set(tracked.epochs.columns) - {"trial_id", "epoch", "attempt", "resumed_from_epoch", "time"}
    config_keys = {c[len("params.") :] for c in tracked.trials.columns if c.startswith("params.")}
    for child in children:
        assert set(child.data.metrics) <= reported
        assert not set(child.data.metrics) & config_keys
        assert not {k for k in child.data.metrics if "pid" in k or "time" in k or k.startswith("tunekit")}


@pytest.mark.slow
def test_parent_run_holds_settings_summary_spec_and_best_model(
    tracked: tunekit.ExperimentResults, server: MlflowServer
) -> None:
    mlflow_client = client(server.uri)
    parent, children = runs_of(server.uri, EXPERIMENT, tracked.experiment_dir)
    params = parent.data.params
    assert params["search.algorithm"] == "tpe" and params["scheduler.grace_period"] == "1"
    assert params["budget.num_samples"] == "5" and params["metric.name"] == "val_accuracy"
    metrics = parent.data.metrics
    counts = tracked.trials["status"].value_counts()
    assert metrics["trials_completed"] == counts.get("completed", 0)
    assert metrics["trials_pruned"] == counts.get("pruned", 0)
    assert metrics["trials_failed"] == 0
    assert metrics["epochs_spent"] == tracked.trials["epochs"].sum()
    assert metrics["epochs_full_budget"] == 5 * 3
    assert metrics["wall_seconds"] > 0
    assert metrics["best_val_accuracy"] == pytest.approx(tracked.best_metric)
    assert parent.info.status == "FINISHED"
    assert "spec.yaml" in [a.path for a in mlflow_client.list_artifacts(parent.info.run_id)]

    assert tracked.best is not None
    best = next(c for c in children if c.data.tags[TAG_TRIAL_ID] == tracked.best.trial_id)
    assert [a.path for a in mlflow_client.list_artifacts(best.info.run_id, "model")] == ["model/model.keras"]
    versions = mlflow_client.search_model_versions(f"name = '{REGISTERED_MODEL}'")
    assert [v.run_id for v in versions] == [best.info.run_id]


@pytest.mark.slow
def test_resume_adds_no_duplicate_runs_or_points(tracked: tunekit.ExperimentResults, server: MlflowServer) -> None:
    mlflow_client = client(server.uri)
    before_parent, before = runs_of(server.uri, EXPERIMENT, tracked.experiment_dir)
    points = {c.info.run_id: len(mlflow_client.get_metric_history(c.info.run_id, "val_accuracy")) for c in before}

    sessions = SearchClock.read(tracked.experiment_dir).sessions  # type: ignore[union-attr]
    shown = io.StringIO()
    tunekit.resume(tracked.experiment_dir, progress=shown)
    # A complete search has nothing to resume: no Ray, no session, no time added.
    assert shown.getvalue().startswith("the search is complete: nothing to resume"), shown.getvalue()
    assert SearchClock.read(tracked.experiment_dir).sessions == sessions  # type: ignore[union-attr]

    parent, after = runs_of(server.uri, EXPERIMENT, tracked.experiment_dir)
    assert parent.info.run_id == before_parent.info.run_id
    assert sorted(c.info.run_id for c in after) == sorted(points)
    for child in after:
        assert len(mlflow_client.get_metric_history(child.info.run_id, "val_accuracy")) == points[child.info.run_id]
        assert child.info.status == "FINISHED"
    assert parent.info.status == "FINISHED"
    assert len(mlflow_client.search_model_versions(f"name = '{REGISTERED_MODEL}'")) == 1


@pytest.mark.slow
def test_unreachable_tracking_uri_warns_once_and_the_search_completes_naming_sync(
    shared_ray: None, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    with caplog.at_level(logging.WARNING, logger="tunekit.tracking.tracker"):
        results = tunekit.run(
            DIGITS_SPEC,
            storage=tmp_path,
            name="untracked",
            progress=False,
            overrides=["budget.num_samples=2", "budget.max_epochs=2", "scheduler.type=fifo", f"tracking.uri={closed}"],
        )
    assert list(results.trials["status"]) == ["completed", "completed"]
    # One warning while it searches; the search's last word says what MLflow lacks, and the fix.
    warnings = tracking_warnings(caplog)
    assert len(warnings) == 2, warnings
    assert closed in warnings[0] and "the search goes on without tracking" in warnings[0]
    assert warnings[1].startswith("tunekit: MLflow lacks some of this search's records: cannot use MLflow at")
    assert warnings[1].endswith(f"`tunekit sync {results.experiment_dir}` sends the rest")


def _ray_saved_an_ended_trial(experiment_dir: Path) -> bool:
    try:
        return bool(finished_trials(saved_trials(experiment_dir)))
    except (OSError, ValueError):  # not written yet, or read while Ray writes it
        return False


@pytest.mark.slow
def test_killed_driver_then_resume_leaves_one_run_per_trial_and_one_point_per_epoch(
    server: MlflowServer, shared_ray: None, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    storage, name, experiment = tmp_path / "results", "killed", "tunekit-killed"
    overrides = [
        *SMALL_SEARCH,
        "budget.num_samples=6",
        "budget.max_epochs=4",
        f"tracking.uri={server.uri}",
        f"tracking.experiment={experiment}",
    ]
    command = [
        sys.executable,
        "-m",
        "tunekit.cli",
        "run",
        str(DIGITS_SPEC),
        "--storage",
        str(storage),
        "--name",
        name,
        *[part for o in overrides for part in ("--set", o)],
    ]
    # Its own session and its own local Ray: the driver and its Ray die together, as on a lost machine.
    driver = subprocess.Popen(
        command,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, "RAY_ADDRESS": "local"},
    )
    directory = storage / name
    deadline = time.monotonic() + 300
    try:
        # Killed as soon as Ray's saved state knows an ended trial, so most of the search is
        # left: a fixed wait after two endings let CI's machine finish the search first.
        while not _ray_saved_an_ended_trial(directory):
            assert driver.poll() is None, "the search ended before it could be interrupted"
            assert time.monotonic() < deadline, "Ray saved no ended trial in time"
            time.sleep(0.1)
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
    assert not ended_by_its_driver(directory), "the search ended before the kill: this test would test nothing"
    # What the dead driver left, MLflow included, is its lag (notes), not disagreements.
    killed = check_experiment(directory)
    assert killed.ok and "mlflow" in killed.checked, killed.describe()

    with caplog.at_level(logging.INFO, logger="tunekit.tracking.tracker"):
        results = tunekit.resume(directory, progress=False)
    said = tracking_warnings(caplog)

    mlflow_client = client(server.uri)
    parent, children = runs_of(server.uri, experiment, directory)
    assert len(children) == len(results.trials) == 6
    by_id = {c.data.tags[TAG_TRIAL_ID]: c for c in children}
    assert set(by_id) == set(results.trials["trial_id"])
    for row in results.trials.itertuples():
        child = by_id[row.trial_id]
        history = mlflow_client.get_metric_history(child.info.run_id, "val_accuracy")
        steps = [p.step for p in history]
        # One point per epoch. MLflow lists them as they arrived: a resumed trial's new epoch
        # can arrive before the epochs the dead driver's writer never sent ([4, 1, 2, 3] in CI).
        # An epoch a restarted trial trained again to another value has that value after the
        # first: MLflow's latest is the last attempt's, as epochs.csv's.
        assert sorted(set(steps)) == list(range(1, row.epochs + 1)), (row.trial_id, steps, said)
        assert len(steps) == len(set(steps)) or row.attempts > 1, (row.trial_id, steps, said)
        latest = max(history, key=lambda p: (p.step, p.timestamp))
        assert latest.value == pytest.approx(row.final_metric), (row.trial_id, history)
        assert child.data.tags[TAG_STATUS] == row.status
        # MLflow agrees with the table. (A trial running at the kill can end "stopped" when Ray's
        # last saved state does not let it continue: a known race of the kill, seen once in five runs.)
        assert child.info.status == run_status(TrialStatus(row.status))
    assert parent.info.status == "FINISHED"
    assert parent.data.metrics["trials_completed"] == (results.trials["status"] == "completed").sum()


# ---------------------------------------------------- tunekit sync, tracking.required

# Made up by a recorder without Ray: no study or checkpoints behind the tables.
MADE_UP = pytest.mark.inconsistent_on_purpose("made-up records: no study or checkpoints behind trials.csv")


@MADE_UP
def test_sync_sends_an_untracked_experiment_once(tmp_path: Path, server: MlflowServer) -> None:
    recorder, experiment_dir = untracked_experiment(tmp_path, f"http://127.0.0.1:{free_port()}", "synced")

    for _ in range(2):
        assert cli_main(["sync", str(experiment_dir), "--tracking-uri", server.uri]) == 0

    mlflow_client = client(server.uri)
    parent, children = runs_of(server.uri, "synced", experiment_dir)
    assert len(children) == 4
    for child in children:
        record = recorder.trials[child.data.tags[TAG_TRIAL_ID]]
        steps = [p.step for p in mlflow_client.get_metric_history(child.info.run_id, "val_accuracy")]
        assert steps == list(range(1, record.epochs + 1))
        assert len(mlflow_client.get_metric_history(child.info.run_id, "loss")) == record.epochs
        assert child.data.params == {k: str(v) for k, v in record.params.items()}
        assert child.data.tags[TAG_STATUS] == record.status and child.data.tags["tunekit.precision"] == "float32"
        assert child.data.tags[TAG_TRIAL_NUMBER] == str(record.number)
        assert child.info.status == "FINISHED"
    assert parent.info.status == "FINISHED"
    summary = {key: len(mlflow_client.get_metric_history(parent.info.run_id, key)) for key in parent.data.metrics}
    assert summary["trials_completed"] == summary["wall_seconds"] == 1
    assert summary["best_val_accuracy"] == 4  # one point per ended trial, in the order they ended
    assert parent.data.metrics["trials_completed"] == 2 and parent.data.metrics["trials_pruned"] == 2
    # sync writes ledger.json from the records first (the summary, as a search's end does): the
    # parent's figures are its metrics, and it is attached beside the spec.
    assert [a.path for a in mlflow_client.list_artifacts(parent.info.run_id)] == ["ledger.json", "spec.yaml"]
    ledger = json.loads((experiment_dir / "ledger.json").read_text())
    assert parent.data.metrics["wall_seconds"] == ledger["metrics"]["wall_seconds"]
    recorded = json.loads((experiment_dir / TRACKING_FILE).read_text())
    assert recorded["parent_run_id"] == parent.info.run_id and recorded["tracking_uri"] == server.uri


@pytest.mark.slow
@MADE_UP
def test_sync_completes_a_search_whose_server_went_away_halfway(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    own = MlflowServer(tmp_path / "server").start()
    try:
        spec, experiment_dir = small_spec(tmp_path, own.uri, "tracking.experiment=half")
        recorder = recorder_for(spec, experiment_dir)
        tracker = MlflowTracker(spec, experiment_dir, flush_timeout=2)
        tracker.experiment_started(recorder)
        drive(tracker, recorder, trials=2, epochs=3)
        assert tracker.flush(timeout=60)
        own.stop()
        drive(tracker, recorder, trials=3, epochs=3, first=2)
        tracker.experiment_ended(recorder)
        recorder.write_tables()
        assert tracker.shortfall() is not None
        with pytest.raises(TrackingIncomplete) as incomplete:
            check_complete(
                load_spec(experiment_dir / "spec.yaml", ["tracking.required=true"]), experiment_dir, [tracker]
            )
        assert str(incomplete.value) == (
            f"tracking.required: {tracker.shortfall()}; the experiment is complete on disk: "
            f"`tunekit sync {experiment_dir}` sends the rest"
        )
        # Not required: the search ends as it would, and its last word says what MLflow lacks
        # (the writer's mid-search warning had only said it would retry).
        with caplog.at_level(logging.WARNING, logger="tunekit.tracking"):
            check_complete(load_spec(experiment_dir / "spec.yaml"), experiment_dir, [tracker])
        assert caplog.messages[-1] == (
            f"tunekit: MLflow lacks some of this search's records: {tracker.shortfall()}; the experiment is "
            f"complete on disk: `tunekit sync {experiment_dir}` sends the rest"
        )

        # The same server back at its address (MLflow stores artifact locations with it).
        back = MlflowServer(tmp_path / "server")
        back.port, back.uri = own.port, own.uri
        back.start()
        try:
            # As if an earlier session had ended (stopped, then resumed): MLflow holds its summary
            # at the same step with another value, older; sync sends the search's own, later.
            parent_id = TrackingRecord.read(experiment_dir).parent_run_id  # type: ignore[union-attr]
            older_ms = int((time.time() - 3600) * 1000)
            client(back.uri).log_metric(parent_id, "trials_completed", 0.0, timestamp=older_ms, step=0)
            first = sync(experiment_dir, tracking_uri=back.uri)
            after_one = histories(back.uri, "half", experiment_dir)
            second = sync(experiment_dir, tracking_uri=back.uri)
            assert histories(back.uri, "half", experiment_dir) == after_one
            assert first.parent_run_id == second.parent_run_id and first.trials == 5
            parent, children = runs_of(back.uri, "half", experiment_dir)
            assert len(children) == 5 and parent.info.status == "FINISHED"
            for child in children:
                record = recorder.trials[child.data.tags[TAG_TRIAL_ID]]
                assert after_one[child.info.run_name]["val_accuracy"] == list(range(1, record.epochs + 1))
                assert child.data.tags[TAG_STATUS] == record.status and child.info.status == "FINISHED"
            assert parent.data.metrics["trials_completed"] == 3 and parent.data.metrics["trials_pruned"] == 2
        finally:
            back.stop()
    finally:
        own.stop()


@MADE_UP
def test_runs_held_twice_are_found_by_check_and_retired_by_sync(tmp_path: Path, sqlite_uri: str) -> None:
    """What a resume that did not find its parent run left (another machine's cache of a bucket
    experiment, before the parent was found by the experiment's URI and tracking.json): a second
    parent run of the same search with its own trial runs, a trial logged twice, and a trial run
    left RUNNING. `tunekit check` names each and `tunekit sync`; the sync keeps one of each."""
    recorder, experiment_dir = untracked_experiment(tmp_path, sqlite_uri, "twice", trials=3)
    synced = sync(experiment_dir)
    mlflow_client = client(sqlite_uri)
    parent = mlflow_client.get_run(synced.parent_run_id)
    experiment_id = parent.info.experiment_id
    children = {r.data.tags[TAG_TRIAL_ID]: r.info.run_id for r in runs_of(sqlite_uri, "twice", experiment_dir)[1]}
    first, second = sorted(recorder.trials, key=lambda t: recorder.trials[t].number or 0)[:2]
    # The other machine's parent: the same search (its start, its folder's name), from another cache.
    twin = mlflow_client.create_run(
        experiment_id,
        start_time=parent.info.start_time,
        run_name=parent.info.run_name,
        tags={TAG_ROLE: "experiment", TAG_EXPERIMENT_DIR: f"/elsewhere/cache/{experiment_dir.name}"},
    ).info.run_id
    mlflow_client.create_run(experiment_id, tags={PARENT_RUN_TAG: twin, TAG_TRIAL_ID: first})
    again = mlflow_client.create_run(experiment_id, tags={PARENT_RUN_TAG: synced.parent_run_id, TAG_TRIAL_ID: first})
    mlflow_client.update_run(again.info.run_id, status="FINISHED")
    mlflow_client.update_run(children[second], status="RUNNING")  # left RUNNING by a dead driver

    def mlflow_findings() -> list[str]:
        report = check_experiment(experiment_dir, tracking_uri=sqlite_uri)
        found = [str(f) for f in report.findings if f.where in ("files vs mlflow", "mlflow runs")]
        return found + [note for note in report.notes if "tunekit sync" in note]

    label = {t: f"trial {recorder.trials[t].number} ({t})" for t in (first, second)}
    assert sorted(mlflow_findings()) == sorted(
        [
            f"mlflow runs: parent run {twin} of this search: 'none' vs '1 child runs, 1 RUNNING'",
            f"files vs mlflow: {label[first]} child runs: 1 vs 2",
            f"files vs mlflow: {label[second]} run: 'ended' vs 'RUNNING'",
            f"MLflow holds runs of this search twice: `tunekit sync {experiment_dir}` keeps the parent "
            "tracking.json names and one run per trial, and moves the others to MLflow's trash",
            f"MLflow disagrees with the files: `tunekit sync {experiment_dir}` sends it what they hold "
            "(runs, epochs, the parent's figures)",
        ]
    )
    assert sync(experiment_dir).parent_run_id == synced.parent_run_id
    assert mlflow_findings() == []
    assert mlflow_client.get_run(twin).info.lifecycle_stage == "deleted"  # in MLflow's trash, restorable
    _, kept = runs_of(sqlite_uri, "twice", experiment_dir)
    assert sorted(r.data.tags[TAG_TRIAL_ID] for r in kept) == sorted(recorder.trials)
    assert all(r.info.status == "FINISHED" for r in kept)


@MADE_UP
def test_load_from_mlflow_refuses_an_ambiguous_name_unless_told_which(tmp_path: Path, sqlite_uri: str) -> None:
    older_recorder, older = untracked_experiment(tmp_path, sqlite_uri, "shared", trials=2, directory="a")
    newer_recorder, newer = untracked_experiment(tmp_path, sqlite_uri, "shared", trials=3, directory="b")
    older_run, newer_run = sync(older).parent_run_id, sync(newer).parent_run_id
    mlflow_client = client(sqlite_uri)
    starts = {run_id: mlflow_client.get_run(run_id).info.start_time for run_id in (older_run, newer_run)}
    # A retrain of the older search: a child of its parent run, but no trial, so not counted.
    shared_id = mlflow_client.get_experiment_by_name("shared").experiment_id
    mlflow_client.create_run(shared_id, tags={PARENT_RUN_TAG: older_run, TAG_ROLE: RETRAIN_ROLE})

    with pytest.raises(TunekitError) as ambiguous:
        load_from_mlflow("shared", sqlite_uri)
    assert str(ambiguous.value) == ambiguity_message(
        "shared", [(newer_run, starts[newer_run], 3), (older_run, starts[older_run], 2)]
    )
    assert sorted(load_from_mlflow("shared", sqlite_uri, latest=True).trials["trial_id"]) == sorted(
        newer_recorder.trials
    )
    assert sorted(load_from_mlflow("shared", sqlite_uri, run_id=older_run).trials["trial_id"]) == sorted(
        older_recorder.trials
    )
    alone_recorder, alone = untracked_experiment(tmp_path, sqlite_uri, "alone", trials=1, directory="c")
    sync(alone)
    assert list(load_from_mlflow("alone", sqlite_uri).trials["trial_id"]) == list(alone_recorder.trials)
    # A parent run whose writer was cut off after opening it: no spec.yaml, no params.
    bare = mlflow_client.create_run(
        mlflow_client.get_experiment_by_name("alone").experiment_id, tags={TAG_ROLE: "experiment"}
    ).info.run_id
    with pytest.raises(TunekitError) as incomplete:
        load_from_mlflow("alone", sqlite_uri, run_id=bare)
    assert str(incomplete.value).startswith(f"MLflow run {bare} holds neither spec.yaml (")
    assert str(incomplete.value).endswith(
        "its search's tracking is incomplete; `tunekit sync EXPERIMENT_DIR` sends the rest"
    )


@MADE_UP
def test_a_search_made_again_in_a_deleted_search_s_directory_gets_a_parent_run_of_its_own(
    tmp_path: Path, sqlite_uri: str
) -> None:
    # A user removes an experiment and runs the search again under the same name: the new
    # search was reattached to the old parent run (found by its directory), mixing the two.
    _, first = untracked_experiment(tmp_path, sqlite_uri, "again", trials=2, directory="same")
    first_parent = sync(first).parent_run_id
    shutil.rmtree(first)
    recorder, again = untracked_experiment(tmp_path, sqlite_uri, "again", trials=3, directory="same")
    assert again == first
    second_parent = sync(again).parent_run_id
    assert second_parent != first_parent
    mirrored = load_from_mlflow("again", sqlite_uri, experiment_dir=again)
    assert sorted(mirrored.trials["trial_id"]) == sorted(recorder.trials)
    # MLflow agrees with the records (made up: no study or checkpoints behind them).
    assert [str(f) for f in check_experiment(again).findings if "mlflow" in f.where] == []


@pytest.mark.slow
def test_sync_of_a_tracked_search_adds_nothing(tracked: tunekit.ExperimentResults, server: MlflowServer) -> None:
    before = histories(server.uri, EXPERIMENT, tracked.experiment_dir)
    synced = sync(tracked.experiment_dir)  # the spec's tracking.uri, as the search used
    assert histories(server.uri, EXPERIMENT, tracked.experiment_dir) == before
    parent, children = runs_of(server.uri, EXPERIMENT, tracked.experiment_dir)
    assert synced.parent_run_id == parent.info.run_id and len(children) == 5
    assert len(client(server.uri).search_model_versions(f"name = '{REGISTERED_MODEL}'")) == 1


def test_a_parent_summary_a_clock_running_ahead_left_latest_is_found_by_check_and_repaired_by_sync(
    tracked: tunekit.ExperimentResults, server: MlflowServer
) -> None:
    # A session on a host whose clock ran 5 minutes ahead logged its count at the same step:
    # MLflow shows its point as the latest, whatever a later session with a right clock logs.
    mlflow_client = client(server.uri)
    parent, _ = runs_of(server.uri, EXPERIMENT, tracked.experiment_dir)
    truth = parent.data.metrics["trials_completed"]
    step = max(point.step for point in mlflow_client.get_metric_history(parent.info.run_id, "trials_completed"))
    ahead_ms = int((time.time() + 300) * 1000)
    mlflow_client.log_metric(parent.info.run_id, "trials_completed", truth + 2, timestamp=ahead_ms, step=step)
    found = check_experiment(tracked.experiment_dir)
    assert not found.ok and "trials_completed" in found.describe(), found.describe()
    sync(tracked.experiment_dir)
    parent, _ = runs_of(server.uri, EXPERIMENT, tracked.experiment_dir)
    assert parent.data.metrics["trials_completed"] == truth
    assert check_experiment(tracked.experiment_dir).ok


@pytest.mark.slow
def test_resume_of_a_finished_search_sends_what_its_killed_driver_had_not(
    tracked: tunekit.ExperimentResults, server: MlflowServer
) -> None:
    # What a driver killed during the search's final flush leaves: every file written, the last
    # trial's run and the parent still running in MLflow, and tracking.json saying MLflow lacks some.
    directory = tracked.experiment_dir
    assert TrackingRecord.read(directory).holds_everything  # type: ignore[union-attr]  # the search's own end
    mlflow_client = client(server.uri)
    parent, children = runs_of(server.uri, EXPERIMENT, directory)
    before = histories(server.uri, EXPERIMENT, directory)
    last = max(children, key=lambda run: int(run.data.tags[TAG_TRIAL_NUMBER]))
    for run in (last, parent):
        mlflow_client.update_run(run.info.run_id, status="RUNNING")
    mlflow_client.set_tag(last.info.run_id, TAG_STATUS, "running")
    record = TrackingRecord.read(directory)
    assert record is not None
    dataclasses.replace(record, holds_everything=False).write(directory)

    shown = io.StringIO()
    tunekit.resume(directory, progress=shown)
    closing = closing_text(tunekit.load(directory)).splitlines()  # the search's end, as at its first end
    assert shown.getvalue().splitlines()[1:] == [
        f"MLflow lacked some of this search's records: sent them to {server.uri}",
        *closing,
    ]
    assert TrackingRecord.read(directory).holds_everything  # type: ignore[union-attr]
    parent, children = runs_of(server.uri, EXPERIMENT, directory)
    assert parent.info.status == "FINISHED" and len(children) == 5
    for run in children:
        assert run.info.status == "FINISHED" and run.data.tags[TAG_STATUS] != "running"
    assert histories(server.uri, EXPERIMENT, directory) == before  # no point sent twice
    assert check_experiment(directory).ok

    # Once MLflow holds it all, a resume sends nothing at all.
    shown = io.StringIO()
    tunekit.resume(directory, progress=shown)
    assert shown.getvalue().splitlines()[1:] == closing
    assert histories(server.uri, EXPERIMENT, directory) == before


# ------------------------------------------- the same search in a real TensorBoard


@pytest.mark.slow
def test_tensorboard_lists_every_trial_with_its_params_final_metric_and_status(
    tracked: tunekit.ExperimentResults, tmp_path: Path
) -> None:
    """tunekit's TensorBoard logs of the tracked search, read by a real ``tensorboard`` on
    127.0.0.1 through its HParams plugin's HTTP API, and rendered by headless chromium."""
    from tunekit.testing.browser import CHROMIUM, chromium, page_text
    from tunekit.testing.servers import TensorBoardServer

    logdir = tracked.experiment_dir / "tensorboard"
    server = TensorBoardServer(logdir, tmp_path / "tensorboard.log").start()
    try:
        experiment = server.post("experiment", {"experimentName": ""})
        statuses = ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE", "STATUS_RUNNING"]
        body = {"experimentName": "", "allowedStatuses": statuses, "colParams": [], "startIndex": 0, "sliceSize": 100}
        groups = server.post("session_groups", body)
        text = ""
        if CHROMIUM is not None:
            text = page_text(f"{server.uri}/#timeseries", tmp_path, r"trial-\d.*val_accuracy")
            chromium(f"{server.uri}/#hparams", tmp_path, f"--screenshot={tmp_path / 'hparams.png'}")
    finally:
        server.stop()

    assert isinstance(experiment, dict) and isinstance(groups, dict)
    domains = {info["name"]: info for info in experiment["hparamInfos"]}
    assert domains["learning_rate"]["domainInterval"] == {"minValue": 1e-4, "maxValue": 1e-2}
    assert domains["units"]["domainDiscrete"] == [32.0, 64.0, 128.0, 256.0]
    assert [m["name"]["tag"] for m in experiment["metricInfos"]] == [tracked.metric]
    by_name = {group["name"]: group for group in groups["sessionGroups"]}
    assert sorted(by_name) == sorted(f"trial-{n}" for n in tracked.trials["number"]), sorted(by_name)
    expected_status = {"completed": "STATUS_SUCCESS", "failed": "STATUS_FAILURE", "pruned": "STATUS_UNKNOWN"}
    for row in tracked.trials.to_dict("records"):
        group = by_name[f"trial-{row['number']}"]
        for column in (c for c in row if c.startswith("params.")):
            assert group["hparams"][column[len("params.") :]] == pytest.approx(row[column]), column
        (final,) = group["metricValues"]
        assert final["value"] == pytest.approx(row["final_metric"], rel=1e-6)  # TensorBoard keeps float32
        assert final["trainingStep"] == row["epochs"]
        assert group["sessions"][0]["status"] == expected_status[row["status"]], row
    assert "pruned" in set(tracked.trials["status"])  # ASHA stopped some: their status is tested
    if CHROMIUM is not None:
        for number in tracked.trials["number"]:
            assert f"trial-{number}" in text, text[:2000]
        assert (tmp_path / "hparams.png").stat().st_size > 10_000


@pytest.mark.slow
def test_best_models_load_and_score_what_their_trials_reported(tracked: tunekit.ExperimentResults) -> None:
    """The top models, the pruned trial's rebuilt from its last checkpoint, each scoring on the
    validation data what its trial reported last."""
    from tunekit.results.models import config_of, runnable_spec, trial_data

    models = tracked.best_models(5)
    assert [m.trial_id for m in models] == list(tracked.ranked()["trial_id"])
    spec = runnable_spec(tracked.experiment_dir)
    rows = {row["trial_id"]: row for row in tracked.trials.to_dict("records")}
    for found in models:
        row = rows[found.trial_id]
        if row["status"] == "pruned":
            assert found.source == f"rebuilt from the checkpoint of epoch {row['epochs']} (no exported model)"
        else:
            assert found.source == "exported model.keras", found
        _, val_ds = trial_data(spec, config_of(row), tracked.experiment_dir / found.trial_id)
        score = found.model.evaluate(val_ds, verbose=0, return_dict=True)["accuracy"]
        assert score == pytest.approx(row["final_metric"], abs=1e-6), (found.number, found.source)
    assert {m.status for m in models} == {"completed", "pruned"}


@pytest.mark.slow
def test_retrain_reproduces_the_best_trial_and_logs_a_linked_run(
    tracked: tunekit.ExperimentResults, server: MlflowServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """On train only, a retrain is the best trial again (same seed, epochs, compile): it scores
    what the trial reported. On train plus validation (the default) it exports its model and
    logs an MLflow run under the search's parent, and the experiment still agrees with itself.
    Last in the module: it adds a folder and a run to the shared search."""
    best = tracked.best
    assert best is not None
    again = tracked.retrain(data="train", track=False)
    assert again.epochs == best.epochs and again.run_id is None
    assert again.metrics[tracked.metric] == pytest.approx(best.metric, abs=0.02)

    assert cli_main(["retrain", str(tracked.experiment_dir)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split("  ")[0] for line in out[:-1]] == [f"epoch {e}/{best.epochs}" for e in range(1, best.epochs + 1)]
    folder = tracked.experiment_dir / "retrain" / f"2-trial-{best.number}"
    assert out[-1].startswith(f"retrained trial {best.number} for {best.epochs} epochs on train+validation in ")
    assert f": {folder / FINAL_MODEL}; MLflow run " in out[-1]
    record = json.loads((folder / "retrain.json").read_text())
    assert record["trial_id"] == best.trial_id and record["data"] == "train+validation"
    assert record["epochs"] == best.epochs and record["model"] == FINAL_MODEL
    assert "val_accuracy" not in record["metrics"] and record["metrics"]["accuracy"] > 0.5

    parent_id = TrackingRecord.read(tracked.experiment_dir).parent_run_id  # type: ignore[union-attr]
    run = client(server.uri).get_run(record["mlflow_run_id"])
    assert run.data.tags[PARENT_RUN_TAG] == parent_id and run.data.tags[TAG_ROLE] == RETRAIN_ROLE
    assert run.data.tags[TAG_RETRAIN_TRIAL_ID] == best.trial_id and run.info.status == "FINISHED"
    steps = [p.step for p in client(server.uri).get_metric_history(run.info.run_id, "accuracy")]
    assert steps == list(range(1, best.epochs + 1))
    assert client(server.uri).list_artifacts(run.info.run_id, "model")[0].path == f"model/{FINAL_MODEL}"
    # The retrain is no trial: the files, the checker and MLflow's copy of the search say so.
    assert len(load_from_mlflow(EXPERIMENT, server.uri, run_id=parent_id).trials) == len(tracked.trials)
    report = check_experiment(tracked.experiment_dir)
    assert report.ok, report.describe()
