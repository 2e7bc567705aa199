"""tunekit check over a hand-made experiment with a real SQLite study (no Ray, no TensorFlow).

The experiment is test_summary's (trial a completed in two sessions, trial b pruned); the
study holds what the searcher would have told it, and trial a's last checkpoint its config.
"""

from __future__ import annotations

import json
import os
import pickle
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest

from tunekit.layout import (
    CHECKPOINT_STATE,
    CHECKPOINT_WEIGHTS,
    EPOCHS_FILE,
    FINAL_MODEL,
    FINAL_WEIGHTS,
    KEPT_WEIGHTS,
    LEDGER_FILE,
    RAY_TRIAL_ATTR,
    SPANS_FILE,
    STARTED_FILE,
    TRIALS_FILE,
)
from tunekit.results.check import check_experiment
from tunekit.results.findings import Finding
from tunekit.results.load import load
from tunekit.search.attrs import DUPLICATE_ATTR, FINAL_RESULT_ATTR, HELD_ATTR, LOST_ATTR, PBT_STEPS_ATTR
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
    between: dict[str, Any] | None = None,
) -> Path:
    """The experiment and its study; ``ids`` renames trials a and b everywhere; ``attrs``
    adds user attrs to their study trials; ``b_untold`` leaves b's study trial RUNNING;
    ``between``: a failed study trial with these user attrs numbered between a's and b's (b
    numbered 2 in trials.csv)."""
    experiment(root)
    if between is not None:
        trials = root / TRIALS_FILE
        trials.write_text(trials.read_text().replace("\nb,1,", "\nb,2,"))
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
        if between is not None and trial_id == "a":
            unused = study.ask(DISTRIBUTIONS)
            for key, value in between.items():
                unused.set_user_attr(key, value)
            study.tell(unused, state=optuna.trial.TrialState.FAIL)
    checkpoint = root / ids.get("a", "a") / "checkpoint_000003"
    checkpoint.mkdir(parents=True)
    (checkpoint / CHECKPOINT_STATE).write_text(json.dumps({"epoch": 4, "config": {**PARAMS["a"], "_seed": 1}}))
    write_weights(checkpoint / CHECKPOINT_WEIGHTS)
    write_model(checkpoint / FINAL_MODEL)
    return root


def write_weights(path: Path) -> Path:
    """A checkpoint's weights.npz as tunekit saves it: the weights, then the optimizer's variables."""
    np.savez(path, w0=np.linspace(0.0, 1.0, 64).reshape(8, 8), w1=np.zeros(8), o0=np.ones(3))
    return path


def write_model(path: Path) -> Path:
    """A model.keras as Keras saves it: a zip of its config, metadata and weights (no TensorFlow here)."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("metadata.json", json.dumps({"keras_version": "3.11.3"}))
        archive.writestr("config.json", json.dumps({"class_name": "Sequential", "config": {"layers": []}}))
        archive.writestr("model.weights.h5", bytes(range(256)) * 8)
    return path


def cut(path: Path, keep: float = 0.5) -> int:
    """Truncates ``path`` to ``keep`` of its length, as a copy killed halfway leaves it; the new size."""
    data = path.read_bytes()
    size = int(len(data) * keep)
    path.write_bytes(data[:size])
    return size


def test_an_experiment_that_agrees_with_itself_is_ok(tmp_path: Path) -> None:
    report = check_experiment(consistent(tmp_path))
    assert report.ok, report.describe()
    assert report.checked == [
        "study.journal",
        "trials.csv",
        "epochs.csv",
        "spans.csv",
        "study",
        "checkpoints",
        "trial folders",
        "Ray's saved state",
        "summary",
    ]
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


@pytest.mark.parametrize(
    ("between", "findings"),
    [
        ({}, ["trials.csv vs study: study trial 1: 'the number of a trial, or of a lost one' vs 'unused'"]),
        ({LOST_ATTR: True}, []),  # closed as lost by a resume, which named it
        ({DUPLICATE_ATTR: 0}, []),  # a repeated proposal told to the study (experiments made before they took none)
    ],
)
def test_a_study_trial_no_trial_ran_between_two_that_ran_is_a_gap_in_the_numbers(
    tmp_path: Path, between: dict[str, Any], findings: list[str]
) -> None:
    root = consistent(tmp_path, between=between)
    assert load(root).trials["number"].tolist() == [0, 2]
    assert [str(f) for f in check_experiment(root, mlflow=False).findings] == findings


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
    # holds the new value, the study its first (a study of several objectives, or one written
    # before the study took an epoch's last value).
    root = consistent(tmp_path)
    epochs = root / EPOCHS_FILE
    epochs.write_text(epochs.read_text().replace("a,3,2,2,40,0.8", "a,3,2,2,40,0.85"))
    report = check_experiment(root, mlflow=False)
    assert report.ok, report.describe()
    assert (
        "trial 0 (a) trained epochs again after a restart, so its val_accuracy has two values (epoch 3: 0.85 in "
        "epochs.csv, 0.8 in the study); epochs.csv and the saved model hold the last attempt's, the study the first's"
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


# ------------------------------------------------------------ damaged files


def test_each_file_of_the_best_trial_cut_short_is_a_finding_that_names_it(tmp_path: Path) -> None:
    # A full disk (or a copy killed halfway) left trial a's files cut short: check said ok.
    root = consistent(tmp_path)
    checkpoint = root / "a" / "checkpoint_000003"
    model = cut(checkpoint / FINAL_MODEL)
    weights = cut(checkpoint / CHECKPOINT_WEIGHTS, 0.9)
    (checkpoint / CHECKPOINT_STATE).write_text('{"epoch": 4, "config": {"learning')
    findings = [str(f) for f in check_experiment(root, mlflow=False).findings]
    assert findings == [
        f"checkpoints: trial 0 (a) {checkpoint / FINAL_MODEL}: 'a whole zip archive' vs "
        f"'File is not a zip file ({model} bytes)'",
        f"checkpoints: trial 0 (a) {checkpoint / CHECKPOINT_STATE}: 'a JSON object' vs "
        "'cut short after 33 characters (Unterminated string starting at character 24)'",
        f"checkpoints: trial 0 (a) {checkpoint / CHECKPOINT_WEIGHTS}: 'a whole zip archive' vs "
        f"'File is not a zip file ({weights} bytes)'",
    ]


def test_the_best_trial_s_model_is_read_through_and_other_trials_models_only_opened(tmp_path: Path) -> None:
    # One byte changed inside a member: the archive still opens; only its CRC tells.
    root = consistent(tmp_path)
    model = root / "a" / "checkpoint_000003" / FINAL_MODEL
    data = bytearray(model.read_bytes())
    data[data.index(b"Sequential")] ^= 0x20  # "sequential": the same length, another CRC
    model.write_bytes(bytes(data))
    findings = [str(f) for f in check_experiment(root, mlflow=False).findings]
    assert findings == [
        f"checkpoints: trial 0 (a) {model}: 'a whole zip archive' vs \"member 'config.json' fails its CRC check\""
    ]

    from tunekit.results.check_files import damage

    assert damage(model) is None  # the cheap check, as for every completed trial's model
    assert damage(model, thorough=True) == ("a whole zip archive", "member 'config.json' fails its CRC check")


def test_weights_only_exported_in_hdf5_are_opened_with_h5py_and_a_cut_one_is_a_finding(tmp_path: Path) -> None:
    import h5py

    root = consistent(tmp_path)
    checkpoint = root / "a" / "checkpoint_000003"
    (checkpoint / FINAL_MODEL).unlink()
    weights = checkpoint / FINAL_WEIGHTS  # Keras could not save the model whole: its weights only
    with h5py.File(weights, "w") as file:
        file.create_group("layers/dense/vars").create_dataset("0", data=np.arange(4096.0))
    whole = weights.stat().st_size
    report = check_experiment(root, mlflow=False)
    assert report.ok, report.describe()
    size = cut(weights)
    findings = [str(f) for f in check_experiment(root, mlflow=False).findings]
    assert findings == [
        f"checkpoints: trial 0 (a) {weights}: 'a whole HDF5 file' vs 'Unable to synchronously open file "
        f"(truncated file: eof = {size}, sblock->base_addr = 0, stored_eof = {whole})'"
    ]
    weights.write_bytes(b"<html>Service Unavailable</html>")  # what a proxy put there
    findings = [str(f) for f in check_experiment(root, mlflow=False).findings]
    assert findings == [f"checkpoints: trial 0 (a) {weights}: 'a whole HDF5 file' vs 'no HDF5 signature (32 bytes)'"]


def test_a_stopped_trial_s_last_two_checkpoints_are_checked_since_a_resume_restores_one(tmp_path: Path) -> None:
    root = consistent(tmp_path, b_untold=True)
    (root / TRIALS_FILE).write_text(
        (root / TRIALS_FILE)
        .read_text()
        .replace(
            "b,1,pruned,pruned by ASHA at rung 0 (epoch 1),1,0.6,0.6,0,",
            "b,1,stopped,the search was stopped after 1 epoch,1,0.6,0.6,,",
        )
    )
    optuna.load_study(study_name="summary", storage=study_storage(root)).set_user_attr(HELD_ATTR, True)
    oldest, before, last = (root / "b" / f"checkpoint_00000{index}" for index in range(3))
    for checkpoint in (oldest, before, last):
        checkpoint.mkdir(parents=True)
        (checkpoint / CHECKPOINT_STATE).write_text(json.dumps({"epoch": 1, "config": PARAMS["b"]}))
        write_weights(checkpoint / CHECKPOINT_WEIGHTS)
    (oldest / CHECKPOINT_WEIGHTS).write_bytes(b"")  # out of use: a resume restores one of the newest two
    assert check_experiment(root, mlflow=False).ok
    # The newest may be one the driver never heard of (stored before the stop cut its report
    # off): the resume restores the one before.
    (before / CHECKPOINT_WEIGHTS).write_bytes(b"")
    findings = [str(f) for f in check_experiment(root, mlflow=False).findings]
    assert findings == [f"checkpoints: trial 1 (b) {before / CHECKPOINT_WEIGHTS}: 'a whole zip archive' vs 'empty'"]
    (last / CHECKPOINT_WEIGHTS).unlink()
    findings = [str(f) for f in check_experiment(root, mlflow=False).findings]
    assert findings == [
        f"checkpoints: trial 1 (b) {before / CHECKPOINT_WEIGHTS}: 'a whole zip archive' vs 'empty'",
        f"checkpoints: trial 1 (b) {last / CHECKPOINT_WEIGHTS}: 'a whole zip archive' vs 'missing'",
    ]


def test_a_running_trial_s_checkpoint_cut_short_by_a_dead_driver_is_a_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tunekit.results import check_files

    root = consistent(tmp_path)
    (root / TRIALS_FILE).write_text(
        (root / TRIALS_FILE).read_text().replace("b,1,pruned,pruned by ASHA at rung 0 (epoch 1),", "b,1,running,,")
    )
    last = root / "b" / "checkpoint_000001"
    last.mkdir(parents=True)
    (last / CHECKPOINT_STATE).write_text(json.dumps({"epoch": 1, "config": PARAMS["b"]}))
    cut(write_weights(last / CHECKPOINT_WEIGHTS))
    monkeypatch.setattr(check_files, "died_mid_session", lambda _: True)
    items = list(check_files.checkpoint_file_findings(load(root)))
    assert len(items) == 1 and isinstance(items[0], str)
    assert items[0].startswith(
        "the last session's driver died without ending it (killed, or a second signal): trial 1 (b) was copying "
        f"a checkpoint it cut short ({last / CHECKPOINT_WEIGHTS}: File is not a zip file ("
    )
    monkeypatch.setattr(check_files, "died_mid_session", lambda _: False)
    items = list(check_files.checkpoint_file_findings(load(root)))
    assert [item.where if isinstance(item, Finding) else item for item in items] == ["checkpoints"]


def test_ray_s_saved_state_cut_short_is_a_finding_that_says_a_resume_refuses_it(tmp_path: Path) -> None:
    root = consistent(tmp_path)
    state = {"runner_data": {"_iteration": 12}, "trial_data": [[json.dumps({"trial_id": "a"}), "{}"]]}
    older = root / "experiment_state-2026-01-01_10-00-00.json"
    newest = root / "experiment_state-2026-01-01_11-00-00.json"
    older.write_text("{")  # Ray reads the newest only
    newest.write_text(json.dumps(state))
    # tunekit's searcher saves JSON under Ray's .pkl name; the tuner is a pickle.
    searcher = root / "searcher-state-2026-01-01_11-00-00.pkl"
    searcher.write_text(json.dumps({"numbers": {"a": 0, "b": 1}, "repeated": [], "exhausted": None}))
    tuner = root / "tuner.pkl"
    tuner.write_bytes(pickle.dumps({"param_space": PARAMS, "note": "a. b"}))
    report = check_experiment(root, mlflow=False)
    assert report.ok, report.describe()
    text = newest.read_text()
    newest.write_text(text[:40])
    size = cut(tuner, 0.6)
    findings = [str(f) for f in check_experiment(root, mlflow=False).findings]
    assert findings == [
        f"Ray's saved state: {newest}: 'a JSON object' vs 'cut short after 40 characters (Unterminated string "
        "starting at character 36); `tunekit resume` refuses an experiment whose saved state is damaged'",
        f"Ray's saved state: {tuner}: 'a whole pickle' vs \"cut short after {size} bytes (no STOP at its end); "
        "`tunekit resume` would fail as Ray's Tuner.restore reads it\"",
    ]
    # Cut just after a "." inside a string: it ends like a pickle; its opcodes tell.
    data = pickle.dumps({"param_space": PARAMS, "note": "a. b"})
    tuner.write_bytes(data[: data.index(b"a.") + 2])
    newest.write_text(text)
    (actual,) = [f.actual for f in check_experiment(root, mlflow=False).findings]
    assert actual == (
        f"cut short after {data.index(b'a.') + 2} bytes (expected 4 bytes in a unicodestring1, but only 2 remain); "
        "`tunekit resume` would fail as Ray's Tuner.restore reads it"
    )


def test_a_trial_run_s_metric_logged_twice_at_a_step_is_a_finding(tmp_path: Path) -> None:
    """A real MLflow store (SQLite) holding what `tunekit sync` sent, then a second writer's points."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric

    from tunekit.tracking import sync
    from tunekit.tracking.tags import PARENT_RUN_TAG, TAG_TRIAL_ID

    root = consistent(tmp_path / "experiment")
    synced = sync(root, tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    report = check_experiment(root)
    assert report.ok and "mlflow" in report.checked, report.describe()
    client = MlflowClient(tracking_uri=synced.tracking_uri)
    runs = {
        run.data.tags[TAG_TRIAL_ID]: run.info.run_id
        for run in client.search_runs([synced.experiment_id], f"tags.`{PARENT_RUN_TAG}` = '{synced.parent_run_id}'")
    }
    # Trial b (ran once) has its epoch 1 again with another value: which one is the epoch's?
    later = int(time.time() * 1000) + 1000
    client.log_batch(runs["b"], metrics=[Metric("val_accuracy", 0.65, later, 1)])
    # Trial a ran twice (attempts 2): its epoch 3 trained again is the writer's second point
    # there, no finding of its own; its epoch 2 again with the same value twice is.
    client.log_batch(runs["a"], metrics=[Metric("val_accuracy", 0.85, later, 3)])
    client.log_batch(
        runs["a"], metrics=[Metric("val_accuracy", 0.7, later, 2), Metric("val_accuracy", 0.7, later + 1, 2)]
    )
    findings = [str(f) for f in check_experiment(root).findings]
    assert findings == [
        "mlflow: trial 0 (a) val_accuracy points at a step: 1 vs {2: [0.7, 0.7, 0.7]}",
        "mlflow: trial 1 (b) val_accuracy values at a step: 1 vs {1: [0.6, 0.65]}",
        "files vs mlflow: trial 1 (b) final val_accuracy: 0.6 vs 0.65",
    ]
    # Its last epoch trained again to a value trials.csv lacks: MLflow's latest is held to the files.
    client.log_batch(runs["a"], metrics=[Metric("val_accuracy", 0.95, later, 4)])
    assert "files vs mlflow: trial 0 (a) final val_accuracy: 0.9 vs 0.95" in [
        str(f) for f in check_experiment(root).findings
    ]


def test_a_restarted_trial_pruned_before_where_its_first_attempt_reached_is_a_note() -> None:
    from tunekit.results.check import _epochs_reported

    restarted = {"attempts": 2, "status": "pruned"}
    note = _epochs_reported("trials.csv vs study", "trial 2 (d2b3afda)", restarted, [1, 2, 3, 4], [1, 2, 3, 4, 5])
    assert note == (
        "trial 2 (d2b3afda) reported epochs 5-5 in an earlier attempt, before a restart from an older checkpoint; "
        "its last attempt ended at epoch 4 (pruned), and the study keeps the earlier attempt's epochs"
    )
    # Once: the study missing an epoch, or a trial that ran once, is a disagreement.
    for row, tables, study in (
        ({"attempts": 1, "status": "pruned"}, [1, 2, 3, 4], [1, 2, 3, 4, 5]),
        (restarted, [1, 2, 3, 4], [1, 2, 3]),
        ({"attempts": 2, "status": "completed"}, [1, 2, 3, 4], [1, 2, 3, 4, 5]),
    ):
        assert isinstance(_epochs_reported("trials.csv vs study", "trial 2", row, tables, study), Finding)


def _kept_epochs(root: Path, kept_of_a: int) -> None:
    """trials.csv as this tunekit writes it: a completed trial names its kept epoch (b, pruned, none)."""
    lines = (root / TRIALS_FILE).read_text().splitlines()
    lines[0] = lines[0].replace(",best_metric,", ",best_metric,kept_epoch,")
    lines[1] = lines[1].replace(",0.9,0.9,", f",0.9,0.9,{kept_of_a},")
    lines[2] = lines[2].replace(",0.6,0.6,", ",0.6,0.6,,")
    (root / TRIALS_FILE).write_text("\n".join(lines) + "\n")


def test_a_completed_trial_s_kept_epoch_is_its_last_and_its_figure_the_value_there(tmp_path: Path) -> None:
    root = consistent(tmp_path)
    _kept_epochs(root, 4)
    report = check_experiment(root)
    assert report.ok, report.describe()
    _kept_epochs(consistent(tmp_path / "wrong"), 2)
    findings = [str(f) for f in check_experiment(tmp_path / "wrong").findings]
    assert "trials.csv vs epochs.csv: trial 0 (a) kept_epoch (training.keep: last): 4 vs 2" in findings
    assert "trials.csv vs epochs.csv: trial 0 (a) final val_accuracy: 0.9 vs 0.7" in findings  # 0.7: epoch 2's


def test_keep_best_holds_the_kept_epoch_against_the_epochs_and_the_exported_model(tmp_path: Path) -> None:
    root = consistent(tmp_path)
    spec = root / "spec.yaml"
    spec.write_text(spec.read_text() + "training: {keep: best}\n")
    _kept_epochs(root, 4)  # 0.9 at epoch 4 is a's best
    findings = [str(f) for f in check_experiment(root).findings]
    # Its exported model's checkpoint holds no kept epoch: the model is not shown to be epoch 4's.
    assert findings == [f"trials.csv vs checkpoints: trial 0 (a) {root / 'a' / 'checkpoint_000003' / KEPT_WEIGHTS}: "
                        "'epoch 4' vs 'missing'"]  # fmt: skip
    np.savez(root / "a" / "checkpoint_000003" / KEPT_WEIGHTS, epoch=3, value=0.8, w0=np.zeros(2))
    findings = [str(f) for f in check_experiment(root).findings]
    assert findings == ["trials.csv vs checkpoints: trial 0 (a) kept epoch of its exported model: 4 vs 3"]
    np.savez(root / "a" / "checkpoint_000003" / KEPT_WEIGHTS, epoch=4, value=0.9, w0=np.zeros(2))
    assert check_experiment(root).ok


def test_every_changed_byte_of_a_checkpoint_payload_is_named_against_its_checksum(tmp_path: Path) -> None:
    import random

    from tunekit.storage.checksums import write_checksums

    root = consistent(tmp_path)
    folder = root / "a" / "checkpoint_000003"
    write_checksums(folder)
    assert check_experiment(root).ok
    rng = random.Random(77)
    for name in (CHECKPOINT_WEIGHTS, FINAL_MODEL, CHECKPOINT_STATE):
        whole = (folder / name).read_bytes()
        for position in rng.sample(range(len(whole)), 10):
            data = bytearray(whole)
            data[position] ^= rng.randrange(1, 256)
            (folder / name).write_bytes(bytes(data))
            found = [f for f in check_experiment(root).findings if f.expected == "its recorded checksum"]
            assert [f.what for f in found] == [f"trial 0 (a) {folder / name}"], (name, position)
            assert found[0].actual.startswith("fails its checksum (SHA-256 ")
            assert found[0].actual.endswith(f"`tunekit retrain {root} --trial 0` trains it again, exported beside")
        (folder / name).write_bytes(whole)


def test_a_damaged_checkpoint_in_a_folder_no_row_names_yet_is_named(tmp_path: Path) -> None:
    """Chaos seed 427956: a driver killed before its tables recorded a trial leaves the trial's
    folder for the resume to restore; a cut payload there is the resume's to pass over, said."""
    from tunekit.storage.checksums import write_checksums

    root = consistent(tmp_path)
    folder = root / "5c0ffee5" / "checkpoint_000002"
    folder.mkdir(parents=True)
    np.savez(folder / CHECKPOINT_WEIGHTS, w0=np.arange(64.0))
    (folder / CHECKPOINT_STATE).write_text('{"epoch": 2}\n')
    write_checksums(folder)
    whole = (folder / CHECKPOINT_WEIGHTS).read_bytes()
    (folder / CHECKPOINT_WEIGHTS).write_bytes(whole[: len(whole) // 2])
    found = [f for f in check_experiment(root).findings if f.expected == "its recorded checksum"]
    assert [f.what for f in found] == [f"trial folder 5c0ffee5 {folder / CHECKPOINT_WEIGHTS}"]
    assert found[0].actual.endswith("`tunekit resume` passes over it for the trial's newest whole checkpoint")


def test_a_damaged_last_checkpoint_of_an_ended_trial_without_a_model_says_nothing_reads_it(tmp_path: Path) -> None:
    """Chaos seed 841380: a pruned trial's last checkpoint, damaged; no resume or retrain reads it."""
    from tunekit.storage.checksums import write_checksums

    root = consistent(tmp_path)  # b: pruned
    folder = root / "b" / "checkpoint_000000"
    folder.mkdir(parents=True)
    np.savez(folder / CHECKPOINT_WEIGHTS, w0=np.arange(16.0))
    write_checksums(folder)
    (folder / CHECKPOINT_WEIGHTS).write_bytes(b"cut")
    found = [f for f in check_experiment(root).findings if f.expected == "its recorded checksum"]
    assert [f.what for f in found] == [f"trial 1 (b) {folder / CHECKPOINT_WEIGHTS}"]
    assert found[0].actual.endswith("the trial ended pruned and nothing reads it again; restore it from a copy")


@pytest.mark.parametrize("attempts", [1, 3, 7])
def test_attempts_that_are_not_the_attempts_its_spans_ran_in_are_a_disagreement(tmp_path: Path, attempts: int) -> None:
    root = consistent(tmp_path)
    (root / SPANS_FILE).write_text("trial_id,span,start,end,attempt\na,1,1,30,1\na,2,31,45,2\nb,1,2,9,1\n")
    assert check_experiment(root).ok  # a ran twice: attempts 2 in trials.csv
    trials = (root / TRIALS_FILE).read_text()
    (root / TRIALS_FILE).write_text(trials.replace(",0.9,0.9,1,43.0,,2,", f",0.9,0.9,1,43.0,,{attempts},"))
    assert check_experiment(root).findings == [Finding("trials.csv vs spans.csv", "trial 0 (a) attempts", 2, attempts)]


def test_a_trial_folder_no_record_names_is_a_disagreement_with_what_to_do(tmp_path: Path) -> None:
    root = consistent(tmp_path)
    for name, inside in (("tensorboard", "events"), ("retrain", "1-trial-0")):
        (root / name / inside).mkdir(parents=True)  # not trials' folders
    assert check_experiment(root).ok
    orphan = root / "5c0ffee5"
    (orphan / "checkpoint_000000").mkdir(parents=True)
    (orphan / "output.log").write_text("epoch 1\n")
    found = [f for f in check_experiment(root).findings if f.where == "trials.csv vs trial folders"]
    assert [(f.what, f.expected) for f in found] == [(f"folder {orphan}", "a trial in trials.csv")]
    assert found[0].actual.endswith(f"or remove the folder (`rm -r {orphan}`)")


def test_a_study_trial_whose_state_is_not_its_rows_is_held_to_the_tables_by_check_repair(tmp_path: Path) -> None:
    from tunekit.results.repair import repair_experiment

    root = consistent(tmp_path, b_untold=True)  # b pruned in trials.csv, RUNNING in the study
    report = check_experiment(root)
    assert [f.what for f in report.findings if f.where == "trials.csv vs study"] == ["trial 1 (b) state"]
    assert f"`tunekit check --repair {root}` holds the study's trials to trials.csv and epochs.csv" in report.notes
    lines = (root / "study.journal").read_bytes().count(b"\n")
    repaired = repair_experiment(root)
    assert repaired == [
        f"study.journal: rebuilt (1 trials' states were not trials.csv's): 2 trials from its first {lines} whole "
        "lines, 0 from trials.csv and "
        "epochs.csv, every trial's state and epochs held to them; the damaged file is kept as study.journal.damaged"
    ]
    assert check_experiment(root).ok, check_experiment(root).describe()
    assert repair_experiment(root) == []  # nothing left to repair


def test_the_folder_of_a_trial_the_study_closed_as_lost_is_a_note(tmp_path: Path) -> None:
    from tunekit.search.attrs import LOST_ATTR

    root = consistent(tmp_path)
    study = optuna.load_study(study_name="summary", storage=study_storage(root))
    trial = study.ask(DISTRIBUTIONS)  # Ray started it as its driver died; the resume closed it as lost
    trial.set_user_attr(RAY_TRIAL_ATTR, "1057c0de")
    trial.set_user_attr(LOST_ATTR, True)
    study.tell(trial, state=optuna.trial.TrialState.FAIL)
    (root / "1057c0de" / "checkpoint_000000").mkdir(parents=True)
    report = check_experiment(root)
    assert report.ok, report.describe()
    assert [n for n in report.notes if n.startswith("trial folder 1057c0de is in no row of trials.csv")], report.notes


def test_a_lost_trial_whose_ray_id_only_the_damaged_lines_held_gets_its_folder_back_by_check_repair(
    tmp_path: Path,
) -> None:
    """The journal's damage took the lines naming two lost trials' Ray ids: the repair gives one
    back the folder whose checkpoint holds its parameters, and sets aside the folder that has no
    checkpoint (nothing tells whose it was), so that `check` passes after the repair."""
    from tunekit.results.repair import ORPHANS_DIR, repair_experiment
    from tunekit.search.attrs import LOST_ATTR

    root = consistent(tmp_path)
    study = optuna.load_study(study_name="summary", storage=study_storage(root))
    for ray_id in ("1057c0de", "0ddba11s"):  # Ray started both as the driver died
        trial = study.ask(DISTRIBUTIONS)
        trial.set_user_attr(RAY_TRIAL_ATTR, ray_id)
        trial.set_user_attr(LOST_ATTR, True)
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
    lost = [t for t in study.trials if t.user_attrs.get(LOST_ATTR)]
    checkpoint = root / "1057c0de" / "checkpoint_000001"
    checkpoint.mkdir(parents=True)
    (checkpoint / CHECKPOINT_STATE).write_text(json.dumps({"epoch": 1, "config": {**lost[0].params, "_seed": 1}}))
    (root / "0ddba11s").mkdir()
    (root / "0ddba11s" / "output.log").write_text("--- tunekit: trial started in a worker ---\n")
    assert check_experiment(root).ok
    journal = root / "study.journal"
    lines = journal.read_bytes().splitlines(keepends=True)
    damaged = [i for i, line in enumerate(lines) if b"1057c0de" in line or b"0ddba11s" in line]
    for i in damaged:
        lines[i] = b'{"op_code": 4, "garbage\n'  # each line that named a lost trial's Ray id, changed
    journal.write_bytes(b"".join(lines))
    assert not check_experiment(root).ok
    (repaired,) = repair_experiment(root)
    assert repaired.endswith(f"; trial folders no record names now (0ddba11s) are moved to {ORPHANS_DIR}/")
    assert (root / ORPHANS_DIR / "0ddba11s" / "output.log").is_file() and not (root / "0ddba11s").exists()
    rebuilt = optuna.load_study(study_name="summary", storage=study_storage(root)).trials
    # The second lost trial's creation came after the first damaged line: the prefix never held it.
    assert [t.user_attrs.get(RAY_TRIAL_ATTR) for t in rebuilt] == ["a", "b", "1057c0de"]
    assert [bool(t.user_attrs.get(LOST_ATTR)) for t in rebuilt] == [False, False, True]
    report = check_experiment(root)
    assert report.ok, report.describe()


def test_a_tracking_record_that_does_not_parse_is_a_disagreement_not_an_untracked_search(tmp_path: Path) -> None:
    # Fault explorer seed 219569: a line inserted in tracking.json; `resume` refused it, `check` said ok.
    root = consistent(tmp_path)
    (root / "tracking.json").write_bytes(b'#chaos \x00\xff not a record\n{"tracking_uri": "sqlite:///m.db"}')
    report = check_experiment(root)
    assert not report.ok
    assert [str(f).split(" vs ")[0] for f in report.findings] == ["tracking.json: the record reads whole: 'yes'"]
    assert "not valid JSON" in str(report.findings[0].actual)
    assert not any("not tracked" in note for note in report.notes)
