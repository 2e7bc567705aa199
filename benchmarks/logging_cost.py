"""What MLflow tracking costs the Ray driver loop: tunekit's tracker against synchronous logging.

Ray's driver loop runs the recorder's listeners, and every trial's ``tune.report`` waits
on that loop, so time a listener blocks is time trials wait. Two ways of logging the
same made-up search (trials × epochs, seven metrics an epoch, as the digits trainable
reports) to a real ``mlflow server`` on 127.0.0.1, side by side in one process:

* tunekit: ``MlflowTracker`` driven with real ``TrialRecord``/``EpochRow`` objects through
  a real ``Recorder`` (no Ray behind it); the callbacks only queue, a background thread
  sends batched ``log_batch`` calls. Measured: the time the callbacks block, per epoch;
  and the time ``experiment_ended`` waits at the very end for the last flush.
* synchronous: one ``MlflowClient.log_metric`` call per value, as a hand-written
  ``on_epoch_end`` logger would do in the driver.

Afterwards every metric point of both is counted in MLflow: nothing may be missing.
Between epochs the driver "does other work" for a fixed few milliseconds (not counted),
so the tracker's thread runs alongside as it would during a search.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks import common
from tunekit.layout import TrialStatus
from tunekit.testing.servers import MlflowServer

NAME = "logging_cost"
TITLE = "MLflow tracking: blocking time per epoch in the driver, tunekit vs synchronous log_metric"
METRICS = ("accuracy", "loss", "val_accuracy", "val_loss", "epoch_seconds", "samples_per_second", "memory_mb")
SIZES = {"smoke": (2, 4), "quick": (8, 20), "full": (24, 50)}  # trials, epochs
DRIVER_GAP_S = 0.005  # the Ray loop's own work between two results
TARGET_RATIO = 10.0

DEFINITIONS = {
    "blocking per epoch": "wall time spent inside the logging calls on the driver thread for one epoch's "
    "seven metrics, trial start and end callbacks shared out over the trial's epochs",
    "final flush": "time experiment_ended waits for the tracker's thread to send what is still queued",
    "background start-up": "time the tracker's thread takes to import MLflow and open the experiment and "
    "parent run; the driver does not wait for it (experiment_started returns at once)",
    "points present": "metric points found in MLflow afterwards (get_metric_history), over points logged",
}


def main(argv: list[str] | None = None) -> int:
    args = common.parser(NAME, __doc__.splitlines()[0]).parse_args(argv)
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")  # no "View run" lines
    report = common.Report(NAME, TITLE, args.mode, args.out)
    trials, epochs = SIZES[args.mode]
    with common.Workdir(NAME, args.keep) as work:
        server = MlflowServer(work / "server")
        try:
            server.start()
            tunekit_side = _tunekit(server.uri, work, trials, epochs)
            sync_side = _synchronous(server.uri, trials, epochs)
        finally:
            server.stop()
    ratio = common.ratio(sync_side["per_epoch_ms"], tunekit_side["per_epoch_ms"])
    points_expected = trials * epochs * len(METRICS)
    figures = [
        common.figure("tunekit blocking per epoch", tunekit_side["per_epoch_ms"], "ms"),
        common.figure("synchronous log_metric blocking per epoch", sync_side["per_epoch_ms"], "ms"),
        common.figure(
            "synchronous / tunekit",
            ratio,
            "x",
            target=f">= {TARGET_RATIO:g}x",
            met=ratio is not None and ratio >= TARGET_RATIO,
        ),
        common.figure("tunekit final flush", tunekit_side["final_flush_s"], "s"),
        common.figure("tunekit experiment_started call", tunekit_side["experiment_started_ms"], "ms"),
        common.figure(
            "tunekit background start-up (MLflow import, parent run)", tunekit_side["background_start_s"], "s"
        ),
        common.figure(
            "tunekit points present",
            tunekit_side["points_found"],
            f"of {points_expected}",
            target=str(points_expected),
            met=tunekit_side["points_found"] == points_expected,
        ),
        common.figure(
            "synchronous points present",
            sync_side["points_found"],
            f"of {points_expected}",
            target=str(points_expected),
            met=sync_side["points_found"] == points_expected,
        ),
    ]
    ratios = [
        f"driver blocking per epoch: synchronous log_metric {common.fmt(sync_side['per_epoch_ms'])} ms / "
        f"tunekit {common.fmt(tunekit_side['per_epoch_ms'])} ms = {common.fmt(ratio)}x"
    ]
    return report.finish(
        figures,
        ratios,
        DEFINITIONS,
        {
            "trials": trials,
            "epochs": epochs,
            "metrics_per_epoch": len(METRICS),
            "driver_gap_ms": DRIVER_GAP_S * 1000,
            "server": "mlflow server, SQLite backend, 127.0.0.1, 1 worker",
        },
        [
            "tunekit's figure includes the trial start/end and tick callbacks; the synchronous side "
            "counts only its log_metric calls (its run creation is left out, in its favour)."
        ],
        {"tunekit": tunekit_side, "synchronous": sync_side},
    )


# --------------------------------------------------------------------- the two sides


def _tunekit(uri: str, work: Path, trials: int, epochs: int) -> dict[str, Any]:
    from ray.tune.schedulers import FIFOScheduler

    from tunekit.config.spec import load_spec
    from tunekit.driver.recorder import EpochRow, Recorder, TrialRecord
    from tunekit.tracking.tracker import MlflowTracker

    spec = load_spec(
        common.DIGITS_SPEC,
        [
            f"tracking.uri={uri}",
            "tracking.experiment=bench-tunekit",
            f"budget.num_samples={trials}",
            f"budget.max_epochs={epochs}",
        ],
    )
    experiment_dir = work / "experiment"
    experiment_dir.mkdir()
    (experiment_dir / "spec.yaml").write_text(spec.to_yaml())
    recorder = Recorder(spec, experiment_dir, searcher=None, scheduler=FIFOScheduler())
    recorder.clock.begin()  # what Ray's setup does: the search's clock starts
    tracker = MlflowTracker(spec, experiment_dir, flush_timeout=300)
    start_call = _timed(tracker.experiment_started, recorder)
    # The thread imports MLflow and opens the experiment and parent run once, in the
    # background, while Ray starts its workers; the synchronous side has imported MLflow
    # before its clock starts too, so both are timed from a warm start.
    connected = time.perf_counter()
    tracker.flush(timeout=300)
    background_start = time.perf_counter() - connected
    blocked: list[float] = []
    for index in range(trials):
        record = TrialRecord(
            f"bench{index:03d}",
            index,
            {"learning_rate": 10.0 ** -(1 + index % 4), "units": 64, "dropout": 0.1, "batch_size": 32},
        )
        recorder.trials[record.trial_id] = record
        spent = _timed(tracker.trial_started, record)
        for epoch in range(1, epochs + 1):
            if epoch == 1:
                record.info = {"precision": "float32", "replicas": 1, "device_names": ["/CPU:0"]}
            row = EpochRow(
                record.trial_id,
                epoch,
                _metrics(index, epoch),
                1,
                0 if epoch == 1 else None,
                recorder.clock.now(),
            )
            recorder.epochs.append(row)
            record.epochs, record.final_metric = epoch, row.metrics["val_accuracy"]
            spent += _timed(tracker.epoch_reported, record, row)
            spent += _timed(tracker.tick, recorder)
            time.sleep(DRIVER_GAP_S)
        record.status, record.ended_at = TrialStatus.COMPLETED, time.time()
        spent += _timed(tracker.trial_ended, record)
        spent += _timed(tracker.tick, recorder)
        blocked.extend([spent / epochs] * epochs)
    flush_started = time.perf_counter()
    tracker.experiment_ended(recorder)
    final_flush = time.perf_counter() - flush_started
    return {
        "per_epoch_ms": statistics.mean(blocked) * 1000,
        "per_epoch_ms_max_trial": max(blocked) * 1000,
        "final_flush_s": final_flush,
        "experiment_started_ms": start_call * 1000,
        "background_start_s": background_start,
        "points_found": _count_points(uri, "bench-tunekit"),
    }


def _synchronous(uri: str, trials: int, epochs: int) -> dict[str, Any]:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiment_id = client.create_experiment("bench-synchronous")
    blocked: list[float] = []
    for index in range(trials):
        run_id = client.create_run(experiment_id, run_name=f"trial-{index}").info.run_id
        for epoch in range(1, epochs + 1):
            started = time.perf_counter()
            for key, value in _metrics(index, epoch).items():
                client.log_metric(run_id, key, value, step=epoch)
            blocked.append(time.perf_counter() - started)
            time.sleep(DRIVER_GAP_S)
        client.set_terminated(run_id)
    return {
        "per_epoch_ms": statistics.mean(blocked) * 1000,
        "per_epoch_ms_median": statistics.median(blocked) * 1000,
        "points_found": _count_points(uri, "bench-synchronous"),
    }


def _timed(function: Any, *args: Any) -> float:
    started = time.perf_counter()
    function(*args)
    return time.perf_counter() - started


def _metrics(index: int, epoch: int) -> dict[str, float]:
    accuracy = 1.0 - 0.5 / (epoch + index % 3)
    return {
        "accuracy": accuracy,
        "loss": 1.0 / epoch,
        "val_accuracy": accuracy - 0.02,
        "val_loss": 1.1 / epoch,
        "epoch_seconds": 0.12,
        "samples_per_second": 12000.0 + epoch,
        "memory_mb": 830.0,
    }


def _count_points(uri: str, experiment: str) -> int:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        raise RuntimeError(f"no MLflow experiment named {experiment!r} at {uri}")
    experiment_id = found.experiment_id
    total = 0
    for run in client.search_runs([experiment_id], max_results=1000):
        if run.data.tags.get("tunekit.role") == "experiment":
            continue
        total += sum(len(client.get_metric_history(run.info.run_id, key)) for key in METRICS)
    return total


if __name__ == "__main__":
    raise SystemExit(main())
