"""`tunekit plan --probe` on a tiny spec, then the search it predicts: the prediction is filed with
the experiment, the report compares it with what happened, and the MLflow parent run holds the
compute ledger. Real Ray, real TensorFlow trials, real SQLite (MLflow), as a user runs them.

The search's command is watched to its end as well: after its closing lines nothing runs that the
exit would wait for (Ray's shutdown, the interpreter's exit handlers and teardown), and yet its
MLflow records are whole and its Ray's processes gone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psutil
from conftest import REPO, cli_env, run_tunekit

from tunekit.layout import LEDGER_FILE, PREDICTION_FILE, PROBES_DIR, TRACKING_FILE

SPEC = """\
name: probe-e2e
trainable: trainables.digits_mlp
metric: {{name: val_accuracy, mode: max}}
budget: {{num_samples: 4, max_epochs: 3, max_concurrent: 2}}
search: {{algorithm: random, seed: 0}}
scheduler: {{type: asha, grace_period: 1, reduction_factor: 2}}
resources: {{cpu: 1, gpu: 0}}
training: {{precision: float32, seed: 0}}
space:
  learning_rate: {{type: loguniform, low: 1.0e-3, high: 1.0e-2}}
  units: {{type: choice, values: [16, 32]}}
storage: {{path: {root}/results}}
tracking: {{uri: "sqlite:///{root}/mlflow.db"}}
"""
PROBE_SECONDS = 60  # a bound: the probe ends with its trials, in about 15 s on an idle 2-core machine

# `tunekit ARGS` with its end noted in the file EVENTS, line by line: what it prints (the Ray
# processes alive as the closing lines go out), each ray.shutdown call, and the interpreter's exit
# handlers, whose first registered runs last, after Ray's own shutdown.
WATCHED_COMMAND = """\
import atexit, json, sys
import psutil, ray
import tunekit.cli

events = open(sys.argv[1], "a", buffering=1)
atexit.register(events.write, "the interpreter's exit handlers ran\\n")
shutdown = ray.shutdown


def noted_shutdown(*args, **kwargs):
    events.write("ray.shutdown\\n")
    return shutdown(*args, **kwargs)


ray.shutdown = noted_shutdown
write = sys.stdout.write


def noted_write(text):
    if text.startswith("experiment:") and "\\ntrials:" in text:
        ray_pids = [p.pid for p in psutil.Process().children(recursive=True)]
        events.write(f"closing lines; Ray's processes: {json.dumps(ray_pids)}\\n")
    elif text.strip():
        events.write("printed\\n")
    return write(text)


sys.stdout.write = noted_write
sys.argv = ["tunekit", *sys.argv[2:]]  # the process's own command line, as the tunekit script runs it
sys.exit(tunekit.cli.main())
"""


def test_probe_predicts_the_search_and_the_report_and_mlflow_hold_the_ledger(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(root=tmp_path))

    # The user's --set shapes the predicted search (8 trials of 6 epochs); the probe still
    # runs its own 4 configurations of 3 epochs each, as it announces.
    probe = run_tunekit(
        "plan",
        str(spec),
        "--probe",
        "--probe-seconds",
        str(PROBE_SECONDS),
        "--format",
        "json",
        "--set",
        "budget.num_samples=8",
        "--set",
        "budget.max_epochs=6",
        timeout=PROBE_SECONDS + 30,
    )
    assert probe.returncode == 0, probe.stderr[-2000:]
    announced = "4 configurations at the corners of the space's cost, up to 3 epochs each, 2 at a time"
    assert f"{announced}; at most {PROBE_SECONDS} s" in probe.stderr
    predicted = json.loads(probe.stdout)
    measured = predicted["measurement"]
    assert (measured["probe_trials"], measured["probe_epochs"]) == (4, 12)
    assert predicted["trials"] == 8
    assert 0 < measured["startup_s"] < predicted["predicted_wall_seconds"] < PROBE_SECONDS * 8
    assert measured["new_worker_first_epoch_s"] > measured["epoch_s"] > 0
    # Each configuration's own epoch, the space's two cost corners first (units 32 and 16, at once).
    costs = measured["config_costs"]
    assert {c["config"]["units"] for c in costs[:2]} == {16, 32} and len(costs) == 4
    assert all(c["epoch_s"] > 0 and 1e-3 <= c["config"]["learning_rate"] <= 1e-2 for c in costs)
    assert 8 * 1 <= predicted["predicted_epochs"] <= 8 * 6  # at least the first rung, at most every epoch
    assert predicted["slot_hours"] > 0 and predicted["slot_unit"] == "CPU" and predicted["concurrency"] == 2
    assert Path(predicted["saved"]).parent == tmp_path / "results" / PROBES_DIR

    # The measurement holds for any num_samples of the same spec (its fingerprint leaves it
    # out): a smaller search than the one probed keeps this test short.
    events = tmp_path / "events.txt"
    command = ["run", str(spec), "--name", "searched", "--set", "budget.num_samples=2"]
    search = subprocess.run(
        [sys.executable, "-c", WATCHED_COMMAND, str(events), *command],
        cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert search.returncode == 0, search.stderr[-2000:]
    assert search.stdout.splitlines()[-1].startswith("best config: "), search.stdout[-2000:]
    # Nothing after the closing lines: no Ray shutdown to wait for, no interpreter teardown.
    *_, closing = events.read_text().splitlines()
    assert closing.startswith("closing lines; Ray's processes: "), events.read_text()
    ray_pids = json.loads(closing.split(": ", 1)[1])
    assert ray_pids  # its own local Ray's: they end with the command, none outlives it
    _, alive = psutil.wait_procs(_still_running(ray_pids), timeout=5)
    assert alive == []
    assert "Traceback" not in search.stderr
    experiment = tmp_path / "results" / "searched"
    # Filed with the experiment: the probe's measurement, predicted again for the budget run.
    filed = json.loads((experiment / PREDICTION_FILE).read_text())
    assert filed["measurement"] == measured
    assert 0 < filed["predicted_wall_seconds"] < predicted["predicted_wall_seconds"]
    assert filed["predicted_epochs"] <= 2 * 3

    report = run_tunekit("report", str(experiment), "--format", "json", "--price-per-hour", "2")
    assert report.returncode == 0, report.stderr[-2000:]
    record = json.loads(report.stdout)
    figures = {row["figure"]: row for row in record["predicted_vs_actual"]}
    assert set(figures) == {"trials", "wall seconds", "epochs", "CPU-hours"}
    assert (figures["trials"]["predicted"], figures["trials"]["actual"]) == (2, 2)  # like with like
    assert all(row["actual"] > 0 and row["error_percent"] is not None for row in figures.values())
    ledger = record["ledger"]
    assert sum(r["epochs"] for r in ledger["rungs"]) == ledger["epochs"] == figures["epochs"]["actual"]
    assert ledger["cost"] == ledger["slot_hours"] * 2 > 0
    assert all(t["samples_per_second"] > 0 and t["peak_memory_mb"] > 0 for t in ledger["trials"])

    import mlflow

    tracking = json.loads((experiment / TRACKING_FILE).read_text())
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    parent = client.get_run(tracking["parent_run_id"])
    written = json.loads((experiment / LEDGER_FILE).read_text())
    assert parent.data.metrics["ledger_slot_hours"] == written["slot_hours"] > 0
    assert parent.data.metrics["predicted_wall_seconds"] == filed["predicted_wall_seconds"]
    assert LEDGER_FILE in [artifact.path for artifact in client.list_artifacts(parent.info.run_id)]


def _still_running(pids: list[int]) -> list[psutil.Process]:
    """The processes of ``pids`` not ended yet (one that ended as it was looked up is ended)."""
    running = []
    for pid in pids:
        try:
            running.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    return running
