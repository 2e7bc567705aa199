"""The default spec end to end in smoke mode, on a real Ray runtime with real worker processes."""

from __future__ import annotations

import io
import json
from pathlib import Path

import optuna
import pytest

import tunekit
from tunekit.cli import main as cli_main
from tunekit.layout import OUTPUT_FILE
from tunekit.search.plan import study_storage
from tunekit.worker.autocompile import AUTO_STEPS_PER_EXECUTION

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("shared_ray")]

REPO = Path(__file__).resolve().parents[2]
DEFAULT_SPEC = REPO / "search_spaces" / "digits_mlp.yaml"
SMOKE = [
    "budget.num_samples=6",
    "budget.max_epochs=6",
    "scheduler.grace_period=1",
    "scheduler.reduction_factor=2",
    "search.n_startup_trials=3",
    "tracking.enabled=false",
]


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory: pytest.TempPathFactory) -> tunekit.ExperimentResults:
    storage = tmp_path_factory.mktemp("results")
    return tunekit.run(DEFAULT_SPEC, overrides=SMOKE, storage=storage, name="smoke", progress=False)


def test_runs_exactly_num_samples_trials(smoke_run: tunekit.ExperimentResults) -> None:
    assert len(smoke_run.trials) == 6
    assert set(smoke_run.trials["status"]) <= {"completed", "pruned"}
    assert smoke_run.trials["trial_id"].is_unique


def test_two_trials_overlapped_in_time(smoke_run: tunekit.ExperimentResults) -> None:
    spans = list(zip(smoke_run.trials["started_at"], smoke_run.trials["ended_at"], strict=True))
    overlapping = [(a, b) for i, a in enumerate(spans) for b in spans[i + 1 :] if a[0] < b[1] and b[0] < a[1]]
    assert overlapping, f"no two trials ran at the same time: {spans}"


def test_study_marks_early_stopped_trials_pruned_with_intermediate_values(
    smoke_run: tunekit.ExperimentResults,
) -> None:
    study = optuna.load_study(study_name="digits-mlp", storage=study_storage(smoke_run.experiment_dir))
    by_ray_id = {t.user_attrs["ray_trial_id"]: t for t in study.trials}
    assert len(by_ray_id) == 6
    statuses: dict[str, int] = {}
    for row in smoke_run.trials.itertuples():
        trial = by_ray_id[row.trial_id]
        statuses[row.status] = statuses.get(row.status, 0) + 1
        # every reported epoch is an intermediate value, the last one included
        assert sorted(trial.intermediate_values) == list(range(1, row.epochs + 1))
        if row.epochs == 6:
            assert row.status == "completed"
            assert trial.state == optuna.trial.TrialState.COMPLETE
            assert trial.value == pytest.approx(row.final_metric)
        else:
            assert row.status == "pruned"
            assert trial.state == optuna.trial.TrialState.PRUNED
    assert statuses.get("completed", 0) >= 1 and statuses.get("pruned", 0) >= 1, statuses


def test_epochs_table_has_one_row_per_trial_epoch_with_measurements(smoke_run: tunekit.ExperimentResults) -> None:
    epochs = smoke_run.epochs
    assert len(epochs) == smoke_run.trials["epochs"].sum()
    for column in ("val_accuracy", "loss", "epoch_seconds", "samples_per_second", "memory_mb"):
        assert epochs[column].notna().all(), column
    assert (epochs["samples_per_second"] > 0).all()
    for trial_id in smoke_run.trials["trial_id"]:
        log = (smoke_run.experiment_dir / trial_id / OUTPUT_FILE).read_text()
        assert f"tunekit: steps_per_execution {AUTO_STEPS_PER_EXECUTION} (auto: tunekit compiled the model" in log


def test_best_trial_and_report(smoke_run: tunekit.ExperimentResults, capsys: pytest.CaptureFixture[str]) -> None:
    best = smoke_run.best
    assert best is not None and best.status == "completed"
    completed = smoke_run.trials[smoke_run.trials["status"] == "completed"]
    assert best.metric == pytest.approx(completed["final_metric"].max())
    assert set(best.config) == {"learning_rate", "units", "dropout", "batch_size"}

    assert cli_main(["report", str(smoke_run.experiment_dir), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["best"]["trial_id"] == best.trial_id
    assert len(report["trials"]) == 6 and {t["status"] for t in report["trials"]} <= {"completed", "pruned"}


def test_warm_start_points_run_first(tmp_path: Path) -> None:
    points = [
        {"learning_rate": 0.005, "units": 128, "dropout": 0.1, "batch_size": 32},
        {"learning_rate": 0.001, "units": 32},
    ]
    shown = io.StringIO()
    results = tunekit.run(
        DEFAULT_SPEC,
        overrides=[
            "budget.num_samples=3",
            "budget.max_epochs=1",
            "scheduler.type=fifo",
            "tracking.enabled=false",
            "space.momentum={type: uniform, low: 0.0, high: 0.9}",  # which digits_mlp never reads
            "training.executions=2",  # each trial fits 2 models in lockstep: their mean is reported
        ],
        search={"warm_start": points},
        storage=tmp_path,
        name="warm",
        progress=shown,
    )
    first_two = results.trials.sort_values("number").head(2)
    assert first_two.iloc[0]["params.learning_rate"] == 0.005 and first_two.iloc[0]["params.units"] == 128
    assert first_two.iloc[1]["params.learning_rate"] == 0.001 and first_two.iloc[1]["params.units"] == 32
    # Each trial recorded the names read for it (its builders', and tunekit's compile and batch size).
    assert set(results.trials["info.space_read"]) == {"batch_size;dropout;learning_rate;units"}
    assert (
        "warning: space.momentum: no completed trial's builders read it, so the search varied it for nothing"
        in shown.getvalue()
    )
    # The mean of 2 executions (seeds 0 and 1), and its spread, which is never 0 for every trial.
    assert (results.epochs["val_accuracy_std"] >= 0).all() and (results.epochs["val_accuracy_std"] > 0).any()


@pytest.mark.parametrize(("checkpoint_every_s", "resumed_from"), [(0, 3), (30, 0)])
def test_killed_worker_resumes_from_its_last_checkpoint(
    tmp_path: Path, checkpoint_every_s: int, resumed_from: int
) -> None:
    # 0: a checkpoint every epoch, so the retry goes on from epoch 3; 30 (the default): FIFO
    # has no rungs and the trial is younger than 30 s, so it has none and trains again.
    results = tunekit.run(
        DEFAULT_SPEC,
        overrides=[
            f"trainable={REPO / 'tests' / 'trainables' / 'kill_once.py'}",
            "budget.num_samples=2",
            "budget.max_epochs=5",
            "scheduler.type=fifo",
            "training.max_failures=2",
            f"training.checkpoint_every_s={checkpoint_every_s}",
            "tracking.enabled=false",
        ],
        data={"marker_dir": str(tmp_path), "kill_after_epoch": 3},
        storage=tmp_path / "results",
        name="killed",
        progress=False,
    )
    assert (tmp_path / "claimed").exists()
    victim = results.trials[results.trials["attempts"] == 2]
    assert len(victim) == 1, results.trials[["trial_id", "attempts", "status"]]
    assert victim.iloc[0]["status"] == "completed" and victim.iloc[0]["epochs"] == 5
    rows = results.epochs[results.epochs["trial_id"] == victim.iloc[0]["trial_id"]]
    # epochs trained again replace their rows: one row per epoch, the retry's from resumed_from on
    assert rows["epoch"].tolist() == [1, 2, 3, 4, 5]
    assert rows["attempt"].tolist() == [1] * resumed_from + [2] * (5 - resumed_from)
    second_attempt = rows[rows["attempt"] == 2]
    assert second_attempt.iloc[0]["resumed_from_epoch"] == resumed_from
    assert victim.iloc[0]["best_metric"] == rows["val_accuracy"].max()
    assert (results.trials["status"] == "completed").all()


def test_hyperband_judges_each_trial_only_at_its_own_brackets_rungs(tmp_path: Path) -> None:
    # 6 trials, 4 epochs, grace 1, rf 2: ASHA's rungs at epochs 1 and 2; 3 brackets, trial n in
    # bracket n mod 3: bracket 0 is compared at epochs 1 and 2, bracket 1 at 2, bracket 2 never.
    results = tunekit.run(
        DEFAULT_SPEC,
        overrides=[
            "budget.num_samples=6",
            "budget.max_epochs=4",
            "scheduler.type=hyperband",
            "scheduler.grace_period=1",
            "scheduler.reduction_factor=2",
            "search.n_startup_trials=3",
            "tracking.enabled=false",
        ],
        storage=tmp_path,
        name="hyperband",
        progress=False,
    )
    assert results.spec.scheduler.brackets == 3
    # Grown by 3: the restored scheduler (Ray's pickle, its rungs refilled per bracket) takes trials 6-8.
    results = tunekit.resume(results.experiment_dir, overrides=["budget.num_samples=9"], progress=False)
    trials = results.trials
    assert len(trials) == 9 and set(trials["status"]) <= {"completed", "pruned"}
    rungs_of_bracket = {0: {1, 2}, 1: {2}, 2: set()}
    for row in trials.itertuples():
        if row.status == "pruned":
            assert row.epochs in rungs_of_bracket[int(row.number) % 3], (row.number, row.epochs)
            assert row.reason == f"pruned by Hyperband at rung {row.epochs - 1} (epoch {row.epochs})"
        else:
            assert row.epochs == 4
    assert (trials[trials["number"] % 3 == 2]["status"] == "completed").all()  # the bracket that stops nothing
