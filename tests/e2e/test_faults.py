"""Faults on a real Ray runtime: bad trials, broken trainables, and a driver killed mid-search."""

from __future__ import annotations

import csv
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

import optuna
import psutil
import pytest

import tunekit
from tunekit.errors import DamagedFileError
from tunekit.results.repair import repair_experiment
from tunekit.results.status import read_status
from tunekit.search.plan import study_storage
from tunekit.testing.servers import MlflowServer
from tunekit.tracking.tracker import FLUSH_TIMEOUT_ENV

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("shared_ray")]

REPO = Path(__file__).resolve().parents[2]
DEFAULT_SPEC = REPO / "search_spaces" / "digits_mlp.yaml"
TEST_TRAINABLES = REPO / "tests" / "trainables"
QUIET = ["tracking.enabled=false"]


def test_non_finite_loss_fails_that_trial_and_the_search_goes_on(tmp_path: Path) -> None:
    results = tunekit.run(
        DEFAULT_SPEC,
        overrides=[
            f"trainable={TEST_TRAINABLES / 'nan_for_small.py'}",
            "search.algorithm=grid",
            "budget.num_samples=2",
            "budget.max_epochs=3",
            "scheduler.type=fifo",
            *QUIET,
        ],
        space={
            "units": {"type": "choice", "values": [32, 64]},
            "learning_rate": {"type": "fixed", "value": 0.001},
            "dropout": {"type": "fixed", "value": 0.1},
            "batch_size": {"type": "fixed", "value": 32},
        },
        storage=tmp_path,
        name="nan",
        progress=False,
    )
    by_units = {int(row["params.units"]): row for _, row in results.trials.iterrows()}
    assert by_units[32]["status"] == "failed"
    assert by_units[32]["reason"] == "non-finite loss at epoch 1"
    assert by_units[32]["attempts"] == 1  # not retried: the NaN is the config's fault
    assert by_units[64]["status"] == "completed" and by_units[64]["epochs"] == 3
    study = optuna.load_study(study_name="digits-mlp", storage=study_storage(results.experiment_dir))
    states = {t.params["units"]: t.state for t in study.trials}
    assert states == {32: optuna.trial.TrialState.FAIL, 64: optuna.trial.TrialState.COMPLETE}


def test_same_error_in_the_first_trials_stops_the_search_at_the_third(tmp_path: Path) -> None:
    # A missing TFRecord file: TensorFlow's graph error puts a stack, with line numbers and
    # op names that differ between trials, before its cause.
    with pytest.raises(tunekit.SearchAborted) as raised:
        tunekit.run(
            DEFAULT_SPEC,
            overrides=[f"trainable={TEST_TRAINABLES / 'missing_tfrecord.py'}", "budget.num_samples=12", *QUIET],
            storage=tmp_path,
            name="broken",
            progress=False,
        )
    cause = (
        "NotFoundError: Graph execution error: data/train.tfrecord; No such file or directory "
        "[[{{node IteratorGetNext}}]] [Op:__inference_multi_step_on_iterator_"
    )
    assert str(raised.value).startswith(
        "search stopped: 3 trials failed with the same error before any trial finished an epoch, "
        f"so the trainable is broken, not the configs: {cause}"
    )
    trials = tunekit.load(tmp_path / "broken").trials
    failed = trials[trials["status"] == "failed"]
    assert len(failed) == 3
    assert all(reason.startswith(cause) for reason in failed["reason"])
    assert set(trials["status"]) <= {"failed", "stopped"}  # stopped: in flight when the search ended


def test_a_search_the_guard_stopped_stops_at_once_if_still_broken_and_runs_on_after_the_fix(tmp_path: Path) -> None:
    (tmp_path / "BROKEN").touch()
    experiment = tmp_path / "fixed"
    overrides = [
        f"trainable={TEST_TRAINABLES / 'broken_while_flagged.py'}",
        "budget.num_samples=7",
        "budget.max_epochs=2",
        *QUIET,
    ]
    with pytest.raises(tunekit.SearchAborted, match="so the trainable is broken"):
        tunekit.run(DEFAULT_SPEC, overrides=overrides, storage=tmp_path, name="fixed", progress=False)
    first = tunekit.load(experiment).trials
    assert (first["status"] == "failed").sum() == 3
    in_flight = first[first["status"] == "stopped"]
    assert all(reason.startswith("the failure guard stopped the search") for reason in in_flight["reason"])
    # Resumed unfixed: the guard keeps its counts, so the error's first recurrence stops it
    # (at most the 2 trials started at once fail, not 3 more).
    with pytest.raises(tunekit.SearchAborted, match="so the trainable is broken"):
        tunekit.resume(experiment, progress=False)
    second = tunekit.load(experiment).trials
    assert 1 <= (second["status"] == "failed").sum() - 3 <= 2, second[["status", "reason"]]
    (tmp_path / "BROKEN").unlink()  # the user fixes the data
    # The guard was pickled with its decision: the resume stopped every trial at once before.
    results = tunekit.resume(experiment, progress=False)
    statuses = results.trials.set_index("trial_id")["status"]
    assert len(statuses) == 7 and (statuses == "failed").sum() == (second["status"] == "failed").sum()
    stopped = results.trials[results.trials["status"] == "stopped"]
    assert all(reason.startswith("the failure guard stopped the search") for reason in stopped["reason"])
    assert set(statuses[~statuses.isin(["failed", "stopped"])]) <= {"completed", "pruned"}, statuses.to_dict()
    assert results.best is not None
    # Every trial ran or was stopped for good: the search is finished, and a resume says so.
    assert "search: finished" in read_status(experiment).describe()


def test_import_error_in_the_trainable_is_fatal_at_once(tmp_path: Path) -> None:
    with pytest.raises(tunekit.SearchAborted, match=r"ModuleNotFoundError: No module named 'tunekit_no_such_package'"):
        tunekit.run(
            DEFAULT_SPEC,
            overrides=[f"trainable={TEST_TRAINABLES / 'missing_dependency.py'}", "budget.num_samples=12", *QUIET],
            storage=tmp_path,
            name="fatal",
            progress=False,
        )
    trials = tunekit.load(tmp_path / "fatal").trials
    assert len(trials) <= 3  # the trials already running when the first one failed


def test_workers_that_die_before_reporting_stop_the_search_at_the_third_trial(tmp_path: Path) -> None:
    # No failure result reaches the stopper: Ray ends each trial with an error. The search
    # went on trial after trial (368 in 34 minutes) before the guard heard of these.
    with pytest.raises(tunekit.SearchAborted, match=r"3 trials failed with the same error") as raised:
        tunekit.run(
            DEFAULT_SPEC,
            overrides=[
                f"trainable={TEST_TRAINABLES / 'worker_dies.py'}",
                "budget.num_samples=12",
                "training.max_failures=0",
                *QUIET,
            ],
            storage=tmp_path,
            name="dying",
            progress=False,
        )
    trials = tunekit.load(tmp_path / "dying").trials
    assert (trials["status"] == "failed").sum() == 3, (trials[["status", "reason"]], str(raised.value))
    assert len(trials) <= 4  # the third failure stops the search at Ray's next step
    # Each worker said where it ran as its trial started, before the model it died building:
    # what `tunekit status` showed of these trials, which never reported.
    from tunekit.worker.heartbeat import STARTING, read_heartbeat

    beats = [read_heartbeat(tmp_path / "dying" / t, max_age=None) for t in trials["trial_id"]]
    assert all(b is not None and b.phase == STARTING and b.node_id and b.pid not in (None, os.getpid()) for b in beats)


def _ended_trials(trials_csv: Path) -> list[dict[str, str]]:
    if not trials_csv.exists():
        return []
    with trials_csv.open() as handle:
        return [row for row in csv.DictReader(handle) if row["status"] != "running"]


# Ray's saved state, written in this order by each save (Ray 2.60 TuneController.save_to_dir).
RAY_STATE_FILES = (
    "experiment_state-*.json",
    "search_gen_state-*.json",
    "searcher-state-*.pkl",
    "callback-states-*.pkl",
)


def _snapshot_ray_state(experiment: Path, into: Path, asked: int, stop: threading.Event) -> None:
    """Copies one whole save of Ray's state made once ``asked`` trials were asked, while one ran,
    and the study's journal as it was then."""
    import json

    seen: dict[int, list[str]] = {}  # each save read, by its first file's stamp: the statuses it held
    while not stop.is_set():
        time.sleep(0.05)
        files = [path for pattern in RAY_STATE_FILES for path in experiment.glob(pattern)]
        if len(files) != len(RAY_STATE_FILES):
            continue
        stamps = [path.stat().st_mtime_ns for path in files]
        if stamps[0] < max(stamps):  # an upload is under way: experiment_state, its index, comes last
            continue
        try:
            trials = [json.loads(t) for t, _ in json.loads(files[0].read_text())["trial_data"]]
        except (ValueError, KeyError):
            continue
        seen[stamps[0]] = [t["status"] for t in trials]
        if len(trials) != asked or all(t["status"] == "TERMINATED" for t in trials):
            continue
        for path in [*files, experiment / "study.journal"]:
            shutil.copy2(path, into / path.name)
        if [path.stat().st_mtime_ns for path in files] == stamps:
            return
    saves = [statuses for _, statuses in sorted(seen.items())]
    raise AssertionError(f"no save of Ray's state had {asked} trials asked and one running; the saves read: {saves}")


LATE_SAMPLES = 4


def _search_with_an_early_save(root: Path, concurrent: int) -> tuple[Path, Path]:
    """A search of 4 trials, ``concurrent`` at once, in ``root / "late"``, and a copy of one whole
    save of Ray's state (with the study's journal as it was then) made while a trial ran, in
    ``root / "snapshot"``."""
    experiment, snapshot = root / "late", root / "snapshot"
    snapshot.mkdir()
    stop = threading.Event()
    failures: list[BaseException] = []

    def snap() -> None:
        try:
            _snapshot_ray_state(experiment, snapshot, concurrent, stop)
        except BaseException as error:  # reported by the test's thread
            failures.append(error)

    watcher = threading.Thread(target=snap)
    watcher.start()
    try:
        tunekit.run(
            DEFAULT_SPEC,
            overrides=[
                f"trainable={TEST_TRAINABLES / 'slow_digits.py'}",
                "data.epoch_seconds=1",
                f"budget.num_samples={LATE_SAMPLES}",
                "budget.max_epochs=4",
                f"budget.max_concurrent={concurrent}",
                "scheduler.grace_period=2",
                "scheduler.reduction_factor=2",
                "search.n_startup_trials=2",
                *QUIET,
            ],
            storage=root,
            name="late",
            progress=False,
        )
    finally:
        stop.set()
        watcher.join()
    assert not failures, failures
    return experiment, snapshot


@pytest.fixture(scope="module")
def late_search(tmp_path_factory: pytest.TempPathFactory) -> Callable[[int], tuple[Path, Path]]:
    """``_search_with_an_early_save`` run once per concurrency and shared by the cases that start
    from it (each resumes its own copy): two searches for the four cases, not four."""
    searches: dict[int, tuple[Path, Path]] = {}

    def search(concurrent: int) -> tuple[Path, Path]:
        if concurrent not in searches:
            searches[concurrent] = _search_with_an_early_save(tmp_path_factory.mktemp("late"), concurrent)
        return searches[concurrent]

    return search


@pytest.mark.parametrize(
    ("concurrent", "grown", "journal"),
    [(4, 4, False), (2, 4, False), (2, 6, False), (4, 4, True)],
    ids=["every-trial-saved", "two-asked-after-the-save", "then-grown-to-6", "the-study-as-old-as-ray-s-state"],
)
def test_trials_that_ended_after_ray_s_last_save_keep_their_ending_on_resume(
    tmp_path: Path, late_search: Callable[[int], tuple[Path, Path]], concurrent: int, grown: int, journal: bool
) -> None:
    # As if the driver died right after the search ended but Ray last saved while trials ran:
    # the study, the tables and the checkpoints know endings that Ray's state does not. With
    # 4 at once, the first saves hold every trial unfinished (two wait for a CPU); with 2,
    # the snapshot is of the first two, and the other two were asked after it, as when Ray
    # saves seldom in a search of thousands of short trials. The third case resumes with a
    # larger budget: the 4 stand and 2 more train. Epochs of at least a second, and no ending
    # before the second, hold the first trials unfinished across Ray's saves (one a second):
    # on a warm worker a whole digits trial takes under a second, and the clean-clone CI of
    # b80b511 saw no save with 2 trials asked. The last case: the study's journal as old as Ray's
    # state, the tables newer (once, a bucket's driver killed between two uploads); refused, then
    # repaired by `tunekit check --repair`; before, the resume trained the ended trials again.
    # Each case resumes its own copy of the search made with its concurrency.
    searched, snapshot = late_search(concurrent)
    experiment, samples = tmp_path / "late", LATE_SAMPLES
    shutil.copytree(searched, experiment, symlinks=True)
    ended = {row["trial_id"]: row for row in _ended_trials(experiment / "trials.csv")}
    epochs_before = (experiment / "epochs.csv").read_text().splitlines()
    for saved in snapshot.iterdir():
        if saved.name != "study.journal" or journal:
            shutil.copy2(saved, experiment / saved.name)
    if journal:
        # The study's journal older than its seal and tables (a bucket's uploads now go journal
        # first, tables, then the seal, so only damage leaves it so): the resume refuses it in one
        # line naming the repair, which rebuilds the study from its whole lines and the tables.
        with pytest.raises(DamagedFileError, match="tunekit check --repair"):
            tunekit.resume(experiment, overrides=[f"budget.num_samples={grown}"], progress=False)
        assert repair_experiment(experiment)

    results = tunekit.resume(experiment, overrides=[f"budget.num_samples={grown}"], progress=False)

    trials = results.trials
    assert len(trials) == grown and set(ended) <= set(trials["trial_id"])
    assert set(trials["attempts"]) == {1}  # no trial trained again
    for row in trials[trials["trial_id"].isin(list(ended))].itertuples():  # each ending stands
        assert (row.status, row.epochs) == (ended[row.trial_id]["status"], int(ended[row.trial_id]["epochs"]))
    epochs_after = set((experiment / "epochs.csv").read_text().splitlines()[1:])
    assert epochs_after >= set(epochs_before[1:]) and (len(epochs_after) > len(epochs_before) - 1) == (grown > samples)
    study = optuna.load_study(study_name="digits-mlp", storage=study_storage(experiment))
    by_ray_id = {t.user_attrs.get("ray_trial_id"): t.state.name for t in study.trials}
    assert by_ray_id == {
        row.trial_id: {"completed": "COMPLETE", "pruned": "PRUNED"}[row.status] for row in trials.itertuples()
    }


def test_asha_replay_rebuilds_rungs() -> None:
    from tunekit.compat.ray_asha import asha_rungs
    from tunekit.search.schedulers import RecordingASHA

    scheduler = RecordingASHA(time_attr="epoch", metric="acc", mode="max", max_t=8, grace_period=1, reduction_factor=2)
    scheduler.replay({"a": {1: 0.9, 2: 0.92}, "b": {1: 0.8, 2: 0.85}, "c": {1: 0.7}}, stopped={"c"})
    rungs = {int(milestone): recorded for milestone, recorded in asha_rungs(scheduler)}
    assert rungs[1] == {"a": 0.9, "b": 0.8, "c": 0.7}
    assert rungs[2] == {"a": 0.92, "b": 0.85}
    assert scheduler.stopped == {"c"}


def test_tracking_server_that_disappears_mid_search_does_not_stop_training(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The search's end waits this long for the vanished server (30 s by default) before it
    # gives up on what is left to send.
    monkeypatch.setenv(FLUSH_TIMEOUT_ENV, "5")
    server = MlflowServer(tmp_path / "mlflow").start()
    experiment = tmp_path / "results" / "untracked-half"

    def stop_server_after_two_trials() -> None:
        deadline = time.monotonic() + 240
        while len(_ended_trials(experiment / "trials.csv")) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        server.stop()

    killer = threading.Thread(target=stop_server_after_two_trials, daemon=True)
    killer.start()
    try:
        with caplog.at_level(logging.WARNING, logger="tunekit.tracking.tracker"):
            results = tunekit.run(
                DEFAULT_SPEC,
                overrides=[
                    "budget.num_samples=6",
                    "budget.max_epochs=3",
                    "scheduler.type=fifo",
                    f"tracking.uri={server.uri}",
                    "tracking.experiment=vanishing",
                ],
                storage=tmp_path / "results",
                name="untracked-half",
                progress=False,
            )
    finally:
        killer.join(timeout=300)
        server.stop()
    assert not server.answers()
    assert len(results.trials) == 6
    assert (results.trials["status"] == "completed").all()
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("training goes on" in w for w in warnings), warnings


def test_a_trial_whose_epoch_hangs_is_ended_at_its_deadline_and_the_search_goes_on(tmp_path: Path) -> None:
    # One slot: the hung trial held it until the search's time budget ran out, and the
    # trials behind it never started. 8 s: a digits epoch takes well under a second once
    # started, and the test waits the deadline out in full.
    (tmp_path / "markers").mkdir()
    results = tunekit.run(
        DEFAULT_SPEC,
        overrides=[
            f"trainable={TEST_TRAINABLES / 'hangs_once.py'}",
            "budget.num_samples=3",
            "budget.max_epochs=2",
            "budget.max_concurrent=1",
            "scheduler.type=fifo",
            "training.trial_timeout_s=8",
            *QUIET,
        ],
        data={"marker_dir": str(tmp_path / "markers"), "hang_epoch": 2},
        storage=tmp_path,
        name="hung",
        progress=False,
    )
    trials = results.trials.sort_values("number")
    hung = trials.iloc[0]
    assert hung["status"] == "failed" and hung["attempts"] == 1 and hung["epochs"] == 1
    assert hung["reason"] == (
        "epoch 2 did not end within 8 s of the end of epoch 1 (training.trial_timeout_s: 8); its worker was killed"
    )
    assert list(trials["status"].iloc[1:]) == ["completed", "completed"]
    from tunekit.worker.heartbeat import read_heartbeat

    beat = read_heartbeat(results.experiment_dir / str(hung["trial_id"]), max_age=None)
    assert beat is not None and beat.pid is not None and not psutil.pid_exists(beat.pid)
    study = optuna.load_study(study_name="digits-mlp", storage=study_storage(results.experiment_dir))
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.FAIL] + [optuna.trial.TrialState.COMPLETE] * 2
