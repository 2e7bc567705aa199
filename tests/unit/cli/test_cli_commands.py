"""The CLI's rough edges on a made-up experiment: ``report``'s table and a closed pipe, ``logs``,
``validate``'s warning that this machine cannot run a trial. Real ``tunekit`` processes, no search.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import TUNEKIT, cli_env, run_tunekit

from tunekit.config.spec import load_spec
from tunekit.layout import ERROR_FILE, OUTPUT_FILE

REPO = Path(__file__).resolve().parents[3]
DEFAULT_SPEC = REPO / "search_spaces" / "digits_mlp.yaml"


# --------------------------------------------------------------------------- the CLI


def _fake_experiment(root: Path) -> Path:
    """An experiment directory as a finished search leaves it (tables only, no Ray)."""
    directory = root / "fake"
    directory.mkdir()
    (directory / "spec.yaml").write_text(load_spec(DEFAULT_SPEC).to_yaml())
    long_reason = "ValueError: " + "y" * 100
    (directory / "trials.csv").write_text(
        "trial_id,number,status,reason,epochs,final_metric,best_metric,rung,wall_seconds,samples_per_second,"
        "node_id,attempts,started_at,ended_at,params.units\n"
        "aaaa0001,0,completed,trained all 2 epochs,2,0.9,0.9,,3.0,100,n,1,1.0,4.0,32\n"
        f"aaaa0002,1,failed,{long_reason},0,,,,1.0,,n,1,1.0,2.0,64\n"
    )
    (directory / "epochs.csv").write_text(
        "trial_id,epoch,attempt,resumed_from_epoch,time,val_accuracy\naaaa0001,1,1,,1.0,0.8\naaaa0001,2,1,,2.0,0.9\n"
    )
    (directory / "aaaa0001").mkdir()
    (directory / "aaaa0001" / OUTPUT_FILE).write_text("epoch 1\nepoch 2\n")
    (directory / "aaaa0002").mkdir()
    (directory / "aaaa0002" / OUTPUT_FILE).write_text("building the model\n")
    (directory / "aaaa0002" / ERROR_FILE).write_text("Traceback (most recent call last):\nValueError: yyy\n")
    return directory


def test_report_table_has_a_truncated_reason_column(tmp_path: Path) -> None:
    directory = _fake_experiment(tmp_path)
    done = run_tunekit("report", str(directory))
    assert done.returncode == 0, done.stderr
    header, best, failed = done.stdout.splitlines()[:3]
    assert header.split()[-1] == "reason"
    assert best.rstrip().endswith("trained all 2 epochs")
    assert failed.rstrip().endswith("ValueError: " + "y" * 45 + "...")


def test_report_ends_with_the_mlflow_link_and_says_when_mlflow_lacks_records(tmp_path: Path) -> None:
    from tunekit.tracking.record import TrackingRecord

    directory = _fake_experiment(tmp_path)
    assert "mlflow:" not in run_tunekit("report", str(directory)).stdout  # never tracked
    ui = "http://127.0.0.1:5000/#/experiments/1"
    TrackingRecord("http://127.0.0.1:5000", "digits", "1", "abc", ui_url=ui).write(directory)
    done = run_tunekit("report", str(directory))
    assert done.returncode == 0, done.stderr
    assert (
        done.stdout.splitlines()[-1] == f"mlflow: {ui} (incomplete: `tunekit sync {directory}` sends what MLflow lacks)"
    )


def test_report_into_a_closed_pipe_exits_quietly(tmp_path: Path) -> None:
    directory = _fake_experiment(tmp_path)
    done = subprocess.run(
        f"set -o pipefail; {TUNEKIT} report {directory} --format json | head -c 1; echo; echo status=$?",
        shell=True,
        executable="/bin/bash",
        cwd=REPO,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.stdout.splitlines()[-1] == "status=0"
    assert done.stderr == ""


def test_logs_prints_the_output_then_the_error(tmp_path: Path) -> None:
    directory = _fake_experiment(tmp_path)
    by_number = run_tunekit("logs", str(directory), "1")
    assert by_number.returncode == 0, by_number.stderr
    assert by_number.stdout == (
        f"building the model\n--- {directory / 'aaaa0002' / ERROR_FILE}\n"
        "Traceback (most recent call last):\nValueError: yyy\n"
    )
    by_id = run_tunekit("logs", str(directory), "aaaa0001")
    assert (by_id.returncode, by_id.stdout) == (0, "epoch 1\nepoch 2\n")
    # A trial retried after a failed attempt keeps that attempt's traceback: said to be an earlier one.
    (directory / "aaaa0001" / ERROR_FILE).write_text("ActorUnavailableError: Socket closed\n")
    retried = run_tunekit("logs", str(directory), "0")
    assert retried.stdout == (
        f"epoch 1\nepoch 2\n--- {directory / 'aaaa0001' / ERROR_FILE} (an earlier attempt's; the trial was "
        "retried and completed)\nActorUnavailableError: Socket closed\n"
    )
    (directory / "aaaa0001" / ERROR_FILE).unlink()
    missing = run_tunekit("logs", str(directory), "7")
    assert missing.returncode == 1
    assert missing.stderr == (
        f"tunekit: error: trial 7: not in {directory / 'trials.csv'}; trials: 0 (aaaa0001), 1 (aaaa0002)\n"
    )
    (directory / "aaaa0001" / OUTPUT_FILE).unlink()
    empty = run_tunekit("logs", str(directory), "0")
    assert empty.returncode == 1
    assert empty.stderr == (
        f"tunekit: error: trial 0 (aaaa0001): neither {OUTPUT_FILE} nor {ERROR_FILE} in {directory / 'aaaa0001'}\n"
    )


def test_validate_warns_when_this_machine_cannot_run_a_trial() -> None:
    done = run_tunekit("validate", str(DEFAULT_SPEC), "--set", "resources.gpu=1", timeout=30)
    assert done.returncode == 0
    assert done.stdout == "ok\n"
    assert done.stderr == (
        "tunekit: warning: resources.gpu: 1 per trial, but this machine has 0 GPUs; a local run stops at once "
        "(a cluster joined with --address may have more)\n"
    )
