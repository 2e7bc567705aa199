"""Retrain's checks, folders and lines, on a made-up experiment: no TensorFlow, no training.

The training itself (it reproduces the best trial, exports, logs a linked MLflow run) is
tested end to end in tests/e2e/test_tracking.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import tunekit
from tunekit.cli import main as cli_main
from tunekit.layout import RETRAIN_DIR, TRIALS_FILE, retrain_folder
from tunekit.results.retrain import Retrained, RetrainError, closing_line, epoch_line, next_folder, plan_retrain

from .made_up_experiments import asha_experiment


@pytest.fixture
def results(tmp_path: Path) -> tunekit.ExperimentResults:
    directory = asha_experiment(tmp_path / "exp")
    table = directory / TRIALS_FILE
    table.write_text(table.read_text().replace("t5,5,pruned,,", "t5,5,failed,loss is NaN at epoch 2,"))
    return tunekit.load(directory)


def test_the_default_is_the_best_trial_its_final_config_and_epochs_on_train_plus_validation(
    results: tunekit.ExperimentResults,
) -> None:
    plan = plan_retrain(results)
    assert results.best is not None
    assert (plan.trial_id, plan.number, plan.epochs) == (results.best.trial_id, results.best.number, 9)
    assert plan.config == results.best.config and plan.data == "train+validation"
    assert (plan.precision, plan.seed) == ("float32", 0)


def test_a_trial_by_number_or_id_with_its_own_epochs_or_the_given_ones(results: tunekit.ExperimentResults) -> None:
    assert (plan_retrain(results, 7).trial_id, plan_retrain(results, 7).epochs) == ("t7", 3)
    assert plan_retrain(results, "7").trial_id == "t7"
    assert plan_retrain(results, "t6", epochs=4, data="train").epochs == 4
    assert plan_retrain(results, "t6", data="train").data == "train"
    assert plan_retrain(results, data=(object(), None)).data == "given"


def test_errors_name_the_path_the_rule_and_the_value(results: tunekit.ExperimentResults) -> None:
    where = results.experiment_dir
    cases: list[tuple[dict[str, object], str]] = [
        ({"trial": 99}, f"{where}: no trial 99; trials: 0, 1, 2, 3, 4, 5, 6, 7, 8, 9"),
        (
            {"trial": 5},
            f"{where}: trial 5 failed (loss is NaN at epoch 2); retrain a trial that trained, e.g. the best (no --trial)",
        ),
        ({"data": "test"}, "data: must be one of train+validation, train or a (train, validation) pair, got 'test'"),
        (
            {"data": (None, None)},
            "data: must be one of train+validation, train or a (train, validation) pair of datasets "
            "(validation may be None), got tuple",
        ),
        ({"epochs": 0}, "epochs: must be a whole number of at least 1, got 0"),
        ({"epochs": 2.5}, "epochs: must be a whole number of at least 1, got 2.5"),
        ({"trial": True}, "trial: must be a trial number or a trial id, got True"),
    ]
    for arguments, message in cases:
        with pytest.raises(RetrainError) as raised:
            plan_retrain(results, **arguments)  # type: ignore[arg-type]
        assert str(raised.value) == message
        assert isinstance(raised.value, ValueError)


def test_folders_are_numbered_in_order_beside_the_experiment(tmp_path: Path) -> None:
    assert retrain_folder(3, 12) == "3-trial-12"
    assert next_folder(tmp_path, 4) == tmp_path / RETRAIN_DIR / "1-trial-4"
    assert next_folder(tmp_path, 4) == tmp_path / RETRAIN_DIR / "2-trial-4"
    (tmp_path / RETRAIN_DIR / "7-trial-1").mkdir()
    assert next_folder(tmp_path, "abc123") == tmp_path / RETRAIN_DIR / "8-trial-abc123"


def test_the_command_prints_each_epoch_and_where_the_model_went(tmp_path: Path) -> None:
    assert epoch_line(2, 5, {"loss": 0.25, "accuracy": 0.9, "epoch_seconds": 1.26}) == (
        "epoch 2/5  loss 0.2500  accuracy 0.9000  (1.3 s)"
    )
    done = Retrained(None, tmp_path / "1-trial-3", "t3", 3, {}, 5, "train", {}, seconds=4.04, model_file="model.keras")
    assert (
        closing_line(done)
        == f"retrained trial 3 for 5 epochs on train in 4.0 s: {tmp_path / '1-trial-3' / 'model.keras'}"
    )
    tracked = Retrained(None, tmp_path, "t3", None, {}, 1, "given", {}, model_file="model.keras", run_id="abc")
    assert closing_line(tracked).endswith("; MLflow run abc") and "retrained trial t3 " in closing_line(tracked)


def test_the_command_refuses_a_missing_trial_before_loading_tensorflow(
    results: tunekit.ExperimentResults, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["retrain", str(results.experiment_dir), "--trial", "5"]) == 1
    assert capsys.readouterr().err.startswith(f"tunekit: error: {results.experiment_dir}: trial 5 failed (")
    with pytest.raises(SystemExit):
        cli_main(["retrain", str(results.experiment_dir), "--data", "test"])
