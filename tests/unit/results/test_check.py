"""tunekit check over a hand-made experiment with a real SQLite study (no Ray, no TensorFlow).

The experiment is test_summary's (trial a completed in two sessions, trial b pruned); the
study holds what the searcher would have told it, and trial a's last checkpoint its config.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import optuna
import pytest

from tunekit.layout import (
    CHECKPOINT_STATE,
    EPOCHS_FILE,
    FINAL_MODEL,
    LEDGER_FILE,
    SPANS_FILE,
    STARTED_FILE,
    TRIALS_FILE,
)
from tunekit.results.check import check_experiment
from tunekit.results.load import load
from tunekit.search.attrs import FINAL_RESULT_ATTR, HELD_ATTR, PBT_STEPS_ATTR, RAY_TRIAL_ATTR
from tunekit.search.plan import study_storage

from .test_summary import experiment

PARAMS = {"a": {"learning_rate": 0.001, "units": 64}, "b": {"learning_rate": 0.01, "units": 128}}
DISTRIBUTIONS = {
    "learning_rate": optuna.distributions.FloatDistribution(0.0001, 0.1, log=True),
    "units": optuna.distributions.CategoricalDistribution([64, 128]),
}


def consistent(
    root: Path,
    ids: dict[str, str] | None = None,
    attrs: dict[str, dict[str, Any]] | None = None,
    *,
    b_untold: bool = False,
) -> Path:
    """The experiment and its study; ``ids`` renames trials a and b everywhere; ``attrs``
    adds user attrs to their study trials; ``b_untold`` leaves b's study trial RUNNING."""
    experiment(root)
    ids = ids or {}
    for table in (TRIALS_FILE, EPOCHS_FILE, SPANS_FILE):
        lines = (root / table).read_text().splitlines(keepends=True)
        renamed = [
            ids.get(line.split(",", 1)[0], line.split(",", 1)[0]) + "," + line.split(",", 1)[1] for line in lines
        ]
        (root / table).write_text("".join(renamed))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # A str, as the experiment-files page calls it (a Path elsewhere).
    study = optuna.create_study(study_name="summary", storage=study_storage(str(root)), direction="maximize")
    for trial_id, values, state in (
        ("a", [0.5, 0.7, 0.8, 0.9], optuna.trial.TrialState.COMPLETE),
        ("b", [0.6], optuna.trial.TrialState.PRUNED),
    ):
        trial = study.ask(DISTRIBUTIONS)
        trial.set_user_attr(RAY_TRIAL_ATTR, ids.get(trial_id, trial_id))
        for key, value in (attrs or {}).get(trial_id, {}).items():
            trial.set_user_attr(key, value)
        for epoch, value in enumerate(values, start=1):
            trial.report(value, epoch)
        if b_untold and trial_id == "b":
            continue
        study.tell(trial, values[-1] if state == optuna.trial.TrialState.COMPLETE else None, state=state)
    checkpoint = root / ids.get("a", "a") / "checkpoint_000003"
    checkpoint.mkdir(parents=True)
    (checkpoint / CHECKPOINT_STATE).write_text(json.dumps({"epoch": 4, "config": {**PARAMS["a"], "_seed": 1}}))
    (checkpoint / FINAL_MODEL).write_text("a model")
    return root


def test_an_experiment_that_agrees_with_itself_is_ok(tmp_path: Path) -> None:
    report = check_experiment(consistent(tmp_path))
    assert report.ok, report.describe()
    assert report.checked == ["trials.csv", "epochs.csv", "spans.csv", "study", "checkpoints", "summary"]
    assert report.describe().splitlines()[0] == f"{tmp_path}: ok"


def test_trial_ids_that_look_like_numbers_stay_the_trials_names(tmp_path: Path) -> None:
    # Ray's ids are 8 hex digits: a CI run drew 42395413 and 375e9202, which pandas read
    # as 42395413.0 and inf, so no trial of the study had a row in trials.csv.
    report = check_experiment(consistent(tmp_path, {"a": "42395413", "b": "375e9202"}))
    assert report.ok, report.describe()
    assert list(load(tmp_path).trials["trial_id"]) == ["42395413", "375e9202"]


def test_each_disagreement_names_both_values(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tunekit.cli import main

    root = consistent(tmp_path)
    table = (root / TRIALS_FILE).read_text()
    # trial a's final value says 0.95 where its epochs end at 0.9 and the study holds 0.9;
    # trial b's time says 9 s where its one span ran 7.
    table = table.replace("a,0,completed,trained all 4 epochs,4,0.9,", "a,0,completed,trained all 4 epochs,4,0.95,")
    table = table.replace(",0,7.0,", ",0,9.0,")
    (root / TRIALS_FILE).write_text(table)
    (root / "a" / "checkpoint_000003" / CHECKPOINT_STATE).write_text(
        json.dumps({"epoch": 4, "config": {"learning_rate": 0.002, "units": 64}})
    )
    findings = [str(f) for f in check_experiment(root).findings]
    assert "trials.csv vs epochs.csv: trial 0 (a) final val_accuracy: 0.95 vs 0.9" in findings
    assert "trials.csv vs study: trial 0 (a) value: 0.95 vs 0.9" in findings
    assert "trials.csv vs spans.csv: trial 1 (b) wall_seconds against its spans: 7.0 vs 9.0" in findings
    assert (
        "best vs checkpoints: trial 0 (a) config its model was trained under: "
        "{'learning_rate': 0.001, 'units': 64} vs {'learning_rate': 0.002, 'units': 64}" in findings
    )
    assert main(["check", str(root)]) == 1
    assert f"{root}: {len(findings)} disagreements" in capsys.readouterr().out


def test_a_study_trial_left_running_by_a_stopped_search_is_a_disagreement(tmp_path: Path) -> None:
    root = consistent(tmp_path)
    study = optuna.load_study(study_name="summary", storage=study_storage(root))
    trial = study.ask(DISTRIBUTIONS)  # a third trial Ray ran and trials.csv never heard of
    trial.set_user_attr(RAY_TRIAL_ATTR, "c")
    findings = [str(f) for f in check_experiment(root).findings]
    assert findings == ["trials.csv vs study: study trial 2 (c): 'no row' vs 'a trial'"]


def test_exploit_steps_and_last_epochs_the_study_kept_are_held_against_the_tables(tmp_path: Path) -> None:
    # PBT's steps the study lists that exploits.csv lacks (a resume that restored the
    # recorder's older list), and a last epoch the study kept that trials.csv disagrees with.
    step = {"epoch": 2, "source": 1, "new": {"learning_rate": 0.01}}
    root = consistent(tmp_path, attrs={"a": {PBT_STEPS_ATTR: [step]}, "b": {FINAL_RESULT_ATTR: {"epoch": 3}}})
    findings = [str(f) for f in check_experiment(root).findings]
    assert findings == [
        "exploits.csv vs study: trial 0 (a) exploit epochs: [] vs [2]",
        "trials.csv vs study: trial 1 (b) last epoch: 1 vs 3",
    ]


def test_trials_a_signal_stopped_wait_running_in_the_study_for_a_resume(tmp_path: Path) -> None:
    # Ctrl-C: Ray stops b, trials.csv says stopped, and the searcher holds b's study trial
    # RUNNING so the resume trains it on. The study says so; check notes it, finds nothing.
    root = consistent(tmp_path, b_untold=True)
    (root / TRIALS_FILE).write_text(
        (root / TRIALS_FILE)
        .read_text()
        .replace(
            "b,1,pruned,pruned by ASHA at rung 0 (epoch 1),1,0.6,0.6,0,",
            "b,1,stopped,the search was stopped after 1 epoch,1,0.6,0.6,,",
        )
    )
    findings = [str(f) for f in check_experiment(root).findings]
    assert findings == ["trials.csv vs study: trial 1 (b) state: 'PRUNED' vs 'RUNNING'"]  # not held: a bug
    study = optuna.load_study(study_name="summary", storage=study_storage(root))
    study.set_user_attr(HELD_ATTR, True)
    report = check_experiment(root)
    assert report.ok, report.describe()
    assert "a signal stopped the search: 1 stopped trial waits for `tunekit resume` to finish it" in report.notes


def test_a_ledger_left_by_an_earlier_session_is_a_note_and_a_current_one_is_compared(tmp_path: Path) -> None:
    # A killed driver's session writes no ledger.json: the one on disk is the session before's.
    root = consistent(tmp_path)
    clock = json.loads((root / STARTED_FILE).read_text())
    now = time.time()
    clock["sessions"] = [*clock["sessions"], [now - 10, now]]
    (root / STARTED_FILE).write_text(json.dumps(clock))
    (root / LEDGER_FILE).write_text(json.dumps({"metrics": {"epochs_spent": 99.0}, "summary": {}}))
    os.utime(root / LEDGER_FILE, (now - 60, now - 60))
    report = check_experiment(root)
    assert report.ok, report.describe()
    assert any(note.startswith("ledger.json is from an earlier session") for note in report.notes)
    os.utime(root / LEDGER_FILE, (now, now))  # written by the last session: every figure counts
    findings = [str(f) for f in check_experiment(root).findings]
    assert "ledger.json vs summary: epochs_spent: 99.0 vs 5.0" in findings, findings  # the file first


def test_an_mlflow_server_that_does_not_answer_is_a_note_known_in_seconds(tmp_path: Path) -> None:
    # A user's check with the server down waited 4 minutes on MLflow's own retries, then
    # counted the silence as a disagreement.
    import socket

    from tunekit.layout import TRACKING_FILE

    root = consistent(tmp_path)
    with socket.socket() as free:  # a port nothing listens on once closed
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    uri = f"http://127.0.0.1:{port}"
    record = {"tracking_uri": uri, "experiment_name": "gone", "experiment_id": "1", "parent_run_id": "0" * 32}
    (root / TRACKING_FILE).write_text(json.dumps(record))
    started = time.monotonic()
    report = check_experiment(root)
    assert time.monotonic() - started < 10
    assert report.ok and "mlflow" not in report.checked, report.describe()
    assert any(note.startswith(f"MLflow was not compared: no answer from {uri}") for note in report.notes)


def test_a_driver_that_died_leaves_the_study_ahead_of_the_tables_as_a_note(tmp_path: Path) -> None:
    # A second Ctrl-C exits at once: the study had asked a trial the tables never got. The
    # same experiment with the session ended by its driver is a disagreement.
    import socket
    import subprocess
    import sys

    root = consistent(tmp_path, b_untold=True)
    study = optuna.load_study(study_name="summary", storage=study_storage(root))
    study.ask(DISTRIBUTIONS).set_user_attr(RAY_TRIAL_ATTR, "c")  # asked after the last table write
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    clock = json.loads((root / STARTED_FILE).read_text())
    dead = {**clock, "running": True, "driver": {"host": socket.gethostname(), "pid": int(gone.stdout)}}
    (root / STARTED_FILE).write_text(json.dumps(dead))
    report = check_experiment(root)
    assert report.ok, report.describe()
    assert any(note.startswith("the last session's driver died without ending it") for note in report.notes)
    (root / STARTED_FILE).write_text(json.dumps({**dead, "running": False}))
    assert any("trials.csv vs study" in str(f) for f in check_experiment(root).findings)


def test_a_parent_that_names_a_best_the_summary_has_not_is_a_finding() -> None:
    """A user pass: a select rule chose no trial, yet MLflow's parent named the running best and check said ok."""
    from tunekit.results.check_mlflow import _parent_best

    named = {"tunekit.best_trial_id": "de87d1bb", "tunekit.best_trial_number": "0"}
    findings = list(_parent_best(None, "val_accuracy", named, {"best_val_accuracy": 1.0}))
    assert [(f.what, f.expected, f.actual) for f in findings] == [
        ("tunekit.best_trial_id", "none", "de87d1bb"),
        ("tunekit.best_trial_number", "none", "0"),
    ]
    cleared = {"tunekit.best_trial_id": "none", "tunekit.best_trial_number": "none"}
    assert list(_parent_best(None, "val_accuracy", cleared, {"best_val_accuracy": 1.0})) == []
    assert list(_parent_best(None, "val_accuracy", {}, {})) == []


def test_an_epoch_trained_again_after_a_restart_names_both_values_and_otherwise_is_a_disagreement(
    tmp_path: Path,
) -> None:
    # Trial a ran twice (attempts 2) and its second attempt trained epoch 3 again: epochs.csv
    # holds the new value, the study its first (Optuna keeps a step's first report).
    root = consistent(tmp_path)
    epochs = root / EPOCHS_FILE
    epochs.write_text(epochs.read_text().replace("a,3,2,2,40,0.8", "a,3,2,2,40,0.85"))
    report = check_experiment(root, mlflow=False)
    assert report.ok, report.describe()
    assert (
        "trial 0 (a) trained epochs again after a restart, so its val_accuracy has two values (epoch 3: 0.85 in "
        "epochs.csv, 0.8 in the study); epochs.csv and the saved model hold the last attempt's, the study and "
        "MLflow the first's"
    ) in report.notes
    # Trial b ran once: the same difference is a disagreement.
    epochs.write_text(epochs.read_text().replace("b,1,1,0,8,0.6", "b,1,1,0,8,0.65"))
    report = check_experiment(root, mlflow=False)
    assert [str(f) for f in report.findings if "epoch 1" in str(f)] == [
        "epochs.csv vs study: trial 1 (b) val_accuracy at epoch 1: 0.65 vs 0.6"
    ]


def test_a_summary_figure_against_a_table_reads_in_the_order_its_place_names(tmp_path: Path) -> None:
    root = consistent(tmp_path)
    table = (root / TRIALS_FILE).read_text()
    (root / TRIALS_FILE).write_text(
        table.replace("a,0,completed,trained all 4 epochs,4,", "a,0,completed,trained all 4 epochs,5,")
    )
    findings = [str(f) for f in check_experiment(root).findings]
    spent = [f for f in findings if f.startswith("summary vs trials.csv: epochs spent")]
    assert spent == ["summary vs trials.csv: epochs spent: 5 vs 6"], findings


def test_a_dead_driver_s_study_ahead_of_the_tables_is_a_note_for_its_front_too(tmp_path: Path) -> None:
    # Several objectives: a trial the study completed just before the kill is on
    # study.best_trials while the tables still have it running.
    import socket
    import subprocess
    import sys

    from tunekit.results.check import STUDY_LAG, _as_a_dead_driver_s_lag
    from tunekit.results.findings import Finding

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    clock = {"started_at": 0.0, "sessions": [[0.0, 5.0]], "running": True}
    (tmp_path / STARTED_FILE).write_text(
        json.dumps({**clock, "driver": {"host": socket.gethostname(), "pid": int(gone.stdout)}})
    )
    findings = [
        Finding("trials.csv vs study", "trial 6 (f) state", "running", "COMPLETE"),
        Finding("summary vs study's front", "pareto front", [], ["f"]),
        Finding("trials.csv vs epochs.csv", "trial 6 (f) epochs", 3, 2),
    ]
    items = list(_as_a_dead_driver_s_lag(tmp_path, iter(findings), *STUDY_LAG))
    assert items[0] == findings[2]  # another place's finding stands
    notes = [item for item in items[1:] if isinstance(item, str)]
    assert len(items) == 3 and len(notes) == 2
    assert "(summary vs study's front: pareto front: [] vs ['f'])" in notes[1]
