"""The recorder's saved state, and the best trial it keeps as trials end instead of scanning for it."""

from __future__ import annotations

import pickle
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from ray.tune.schedulers import FIFOScheduler

from tunekit.driver.recorder import Recorder
from tunekit.driver.saved_records import records_of
from tunekit.layout import ENDED_STATUSES, EPOCH_KEY, INFO_KEY, KEPT_EPOCH, TrialStatus
from tunekit.search.plan import pick_best

from .test_trial_endings import spec


class Numbers:
    """The searcher's one duty the recorder needs: a trial's number."""

    def trial_number(self, trial_id: str) -> int:
        return int(trial_id[1:])

    def lost_note(self) -> str | None:
        return None


def recorder(tmp: Path) -> Recorder:
    return Recorder(spec(), tmp, searcher=Numbers(), scheduler=FIFOScheduler())


def run_trial(rec: Recorder, number: int, values: list[float]) -> None:
    trial: Any = SimpleNamespace(trial_id=f"t{number}", config={"lr": number / 10})
    rec.on_trial_start(0, [], trial)
    for epoch, value in enumerate(values, start=1):
        # A trial's last report at its budget's end names the epoch it keeps, as the worker's does.
        kept = {KEPT_EPOCH: epoch} if epoch == rec.spec.budget.max_epochs else {}
        result = {EPOCH_KEY: epoch, "acc": value, INFO_KEY: {"metrics": ["acc"], **kept}, "pid": 7}
        rec.on_trial_result(0, [], trial, result)
    rec.on_trial_complete(0, [], trial)


def table_texts(directory: Path) -> list[str]:
    return [(directory / name).read_text() for name in ("trials.csv", "epochs.csv", "spans.csv")]


def test_the_saved_state_restores_the_same_tables_and_so_do_earlier_tunekits_states(tmp_path: Path) -> None:
    first = recorder(tmp_path / "a")
    (tmp_path / "a").mkdir()
    for number, values in enumerate([[0.2] * 9, [0.5, 0.6], [0.3] * 9]):
        run_trial(first, number, values)
    first.end_session()
    saved = pickle.loads(pickle.dumps(first.get_state()))  # as Ray writes and reads it
    as_dicts = {
        "trials": [asdict(r) for r in first.trials.values()],
        "epochs": [asdict(r) for r in first.epochs],
        "clock": asdict(first.clock),
        "exploits": [],
    }
    as_records = {"trials": list(first.trials.values()), "epochs": first.epochs, "clock": first.clock}
    for name, state in (("b", saved), ("c", as_dicts), ("d", as_records)):
        (tmp_path / name).mkdir()
        restored = recorder(tmp_path / name)
        restored.set_state(state)
        restored.write_tables()
        assert restored.trials == first.trials and restored.epochs == first.epochs, name
        assert table_texts(tmp_path / name) == table_texts(tmp_path / "a"), name
        assert restored.best() is restored.trials["t2"], name  # completed and higher than t0


def test_each_ended_trial_is_pickled_once_and_a_restore_keeps_every_row_in_its_place(tmp_path: Path) -> None:
    # The regression guard for the saves' cost (benchmarks/scale.py): a save re-pickled every
    # record and row, so the driver's CPU per trial grew with the search.
    first = recorder(tmp_path / "a")
    (tmp_path / "a").mkdir()
    running: Any = SimpleNamespace(trial_id="t9", config={"lr": 0.9})
    first.on_trial_start(0, [], running)
    run_trial(first, 0, [0.2] * 3)
    first.on_trial_result(0, [], running, {EPOCH_KEY: 1, "acc": 0.4, INFO_KEY: {"metrics": ["acc"]}})
    run_trial(first, 1, [0.5, 0.6])
    before = first.get_state()["records"]
    run_trial(first, 2, [0.7, 0.8])
    first.on_trial_result(0, [], running, {EPOCH_KEY: 2, "acc": 0.5, INFO_KEY: {"metrics": ["acc"]}})
    after = first.get_state()
    assert len(after["records"]["ended"]) == 3
    assert all(old is new for old, new in zip(before["ended"], after["records"]["ended"], strict=False))
    assert [record.trial_id for record, _ in after["records"]["running"]] == ["t9"]

    restored = recorder(tmp_path / "b")
    (tmp_path / "b").mkdir()
    restored.set_state(pickle.loads(pickle.dumps(after)))
    assert list(restored.trials) == list(first.trials)
    assert all(restored.trials[key] == first.trials[key] for key in ("t0", "t1", "t2"))
    assert restored.trials["t9"].epochs == 2 and restored.trials["t9"].spans == [[0.0, 0.0]]  # closed at the restore
    assert restored.epochs == first.epochs  # t9's first row between t0's and t1's, as reported

    first.trials["t0"].reason = "changed after it ended"  # then the next save pickles it again
    first._saved.changed("t0")
    trials, _ = records_of(first.get_state()["records"])
    assert trials["t0"].reason == "changed after it ended" and len(trials) == 4


def test_the_best_kept_as_trials_end_equals_a_scan_of_every_record(tmp_path: Path) -> None:
    rec = recorder(tmp_path)
    tmp_path.mkdir(exist_ok=True)
    finals = [0.4, 0.7, 0.55, 0.7, 0.9, 0.1]  # t5 is pruned-looking (two epochs): not completed
    for number, value in enumerate(finals):
        run_trial(rec, number, [value] * (2 if number == 4 else 9))
        scanned = pick_best([(r.status, r.final_metric, r) for r in rec.trials.values()], "max")
        assert rec.best() is scanned, number
    best = rec.best()
    assert best is not None and best.trial_id == "t1"  # t4's 0.9 did not complete; t1 ties t3 and is first
    assert rec.counts()[TrialStatus.COMPLETED] == 5


def test_ray_saves_its_state_every_second_until_a_save_costs_more_than_2_percent_and_at_least_every_30_s() -> None:
    from ray.tune.execution.experiment_state import _ExperimentCheckpointManager

    from tunekit.compat.ray_tune import bound_experiment_state_saves
    from tunekit.driver.session import SAVE_STATE_AT_MOST_EVERY_S, SAVE_STATE_EVERY_S, SAVE_STATE_SHARE

    bound_experiment_state_saves(SAVE_STATE_EVERY_S, SAVE_STATE_AT_MOST_EVERY_S, SAVE_STATE_SHARE)
    manager: Any = SimpleNamespace(_checkpoint_period=1.0)
    periods = []
    for seconds_taken in (0.01, 0.1, 4.0, 0.01):
        _ExperimentCheckpointManager._update_auto_checkpoint_time(manager, seconds_taken)
        periods.append(manager._checkpoint_period)
    assert periods == [1.0, pytest.approx(5.0), 30.0, 1.0]


def test_a_trial_trained_again_from_its_first_epoch_has_the_best_of_its_new_rows(tmp_path: Path) -> None:
    rec = recorder(tmp_path)
    tmp_path.mkdir(exist_ok=True)
    trial: Any = SimpleNamespace(trial_id="t1", config={"lr": 0.1})
    rec.on_trial_start(0, [], trial)
    for epoch, value in enumerate([0.5, 0.9], start=1):  # the attempt a killed driver lost track of
        rec.on_trial_result(0, [], trial, {EPOCH_KEY: epoch, "acc": value, INFO_KEY: {"metrics": ["acc"]}})
    rec.on_trial_start(0, [], trial)  # resumed from no checkpoint: trains epoch 1 again
    rec.on_trial_result(0, [], trial, {EPOCH_KEY: 1, "acc": 0.4, INFO_KEY: {"metrics": ["acc"]}})
    record = rec.trials["t1"]
    assert (record.epochs, record.final_metric, record.best_metric) == (1, 0.4, 0.4)
    assert [(row.epoch, row.metrics["acc"]) for row in rec.epochs] == [(1, 0.4), (2, 0.9)]


def test_a_stop_ray_saved_while_the_trial_s_checkpoint_was_stored_counts_as_asha_s_pruning(tmp_path: Path) -> None:
    # The killed driver's ASHA stopped t1 and t2 at epoch 1; Ray saved both decisions,
    # waiting on the checkpoints, with the trials still running in every record. t2's
    # last result was a failure: the guard stopped it, not ASHA.
    import json

    from tunekit.layout import FAILURE_KEY
    from tunekit.search.schedulers import RecordingASHA

    def asha() -> RecordingASHA:
        return RecordingASHA(time_attr=EPOCH_KEY, metric="acc", mode="max", max_t=9, grace_period=1, reduction_factor=3)

    first = Recorder(spec(), tmp_path, searcher=Numbers(), scheduler=asha())
    for number in (1, 2):
        trial: Any = SimpleNamespace(trial_id=f"t{number}", config={"lr": 0.1})
        first.on_trial_start(0, [], trial)
        first.on_trial_result(0, [], trial, {EPOCH_KEY: 1, "acc": 0.2, INFO_KEY: {"metrics": ["acc"]}})
    results = {"t1": {EPOCH_KEY: 1, "acc": 0.2}, "t2": {EPOCH_KEY: 1, FAILURE_KEY: "boom"}}
    saved = {
        "runner_data": {"_cached_trial_decisions": {"t1": "STOP", "t2": "STOP"}, "_queued_trial_decisions": {}},
        "trial_data": [[json.dumps({"trial_id": t}), json.dumps({"last_result": r})] for t, r in results.items()],
    }
    (tmp_path / "experiment_state-2026-11-24_12-00-00.json").write_text(json.dumps(saved))
    resumed = Recorder(spec(), tmp_path, searcher=Numbers(), scheduler=asha())
    resumed.set_state(pickle.loads(pickle.dumps(first.get_state())))
    for number in (1, 2):  # the resumed controller carries out the saved STOPs: no new report
        trial = SimpleNamespace(trial_id=f"t{number}", config={"lr": 0.1})
        resumed.on_trial_start(0, [], trial)
        resumed.on_trial_complete(0, [], trial)
    assert resumed.trials["t1"].status == TrialStatus.PRUNED
    assert resumed.trials["t1"].reason == "pruned by ASHA at rung 0 (epoch 1)"
    assert resumed.trials["t2"].status == TrialStatus.STOPPED  # not ASHA's


def scanned_counts(rec: Recorder) -> dict[Any, int]:
    counts = dict.fromkeys(rec.counts(), 0)
    for record in rec.trials.values():
        counts[record.status] += 1
    return counts


def scanned_running_and_ended_epochs(rec: Recorder) -> tuple[list[str], tuple[int, int]]:
    ended = [r for r in rec.trials.values() if r.status in ENDED_STATUSES]
    running = sorted(r.trial_id for r in rec.trials.values() if r.status == TrialStatus.RUNNING)
    return running, (len(ended), sum(r.epochs for r in ended))


def kept_running_and_ended_epochs(rec: Recorder) -> tuple[list[str], tuple[int, int]]:
    return sorted(r.trial_id for r in rec.running()), rec.ended_epochs()


class Unreadable(dict[str, Any]):
    """Records the console must not scan: counts() reads its tally."""

    def values(self) -> Any:
        raise AssertionError("counts() scanned every record")

    def __iter__(self) -> Any:
        raise AssertionError("counts() scanned every record")


def test_the_status_tally_follows_every_change_and_survives_a_restore_without_a_scan(tmp_path: Path) -> None:
    rec = recorder(tmp_path)
    tmp_path.mkdir(exist_ok=True)
    run_trial(rec, 0, [0.2] * 9)  # completed
    run_trial(rec, 1, [0.5, 0.6])  # stopped around (two epochs, FIFO)
    failed: Any = SimpleNamespace(trial_id="t2", config={"lr": 0.2}, error_msg="ValueError: boom")
    rec.on_trial_start(0, [], failed)
    assert scanned_counts(rec) == rec.counts() and rec.counts()[TrialStatus.RUNNING] == 1
    rec.on_trial_recover(0, [], failed)  # its worker died; Ray retries it
    rec.on_trial_start(0, [], failed)
    rec.on_trial_error(0, [], failed)
    running: Any = SimpleNamespace(trial_id="t3", config={"lr": 0.3})
    rec.on_trial_start(0, [], running)
    expected = {
        TrialStatus.RUNNING: 1,
        TrialStatus.COMPLETED: 1,
        TrialStatus.PRUNED: 0,
        TrialStatus.STOPPED: 1,
        TrialStatus.FAILED: 1,
    }
    assert rec.counts() == scanned_counts(rec) == expected
    # The console's estimate reads the running trials and the ended ones' epochs, kept alike.
    kept = kept_running_and_ended_epochs(rec)
    assert kept == scanned_running_and_ended_epochs(rec) == (["t3"], (3, 9 + 2 + 0))

    restored = recorder(tmp_path)
    restored.set_state(pickle.loads(pickle.dumps(rec.get_state())))
    older: Any = pickle.loads(pickle.dumps(rec))  # a recorder pickled by a tunekit without the tally
    older._tally = expected  # an earlier tunekit kept the tally as a dict, beside the trials counted
    older.__setstate__(older.__dict__)
    for each in (restored, older):
        each.trials = Unreadable(each.trials)
        assert each.counts() == expected
        assert kept_running_and_ended_epochs(each) == kept


def test_a_trial_still_running_when_the_session_ends_is_stopped_and_the_console_hears_it(tmp_path: Path) -> None:
    # Ctrl-C while PBT has a trial paused: Ray stops the running trials through callbacks,
    # never the paused one, which stayed "running" in trials.csv after the process exited.
    rec = recorder(tmp_path)
    tmp_path.mkdir(exist_ok=True)
    paused: Any = SimpleNamespace(trial_id="t1", config={"lr": 0.1})
    rec.on_trial_start(0, [], paused)
    rec.on_trial_result(0, [], paused, {EPOCH_KEY: 2, "acc": 0.4, INFO_KEY: {"metrics": ["acc"]}})
    ended: list[str] = []
    rec.listeners = [SimpleNamespace(trial_ended=lambda r: ended.append(r.trial_id))]
    rec.end_session()
    record = rec.trials["t1"]
    assert (record.status, record.reason) == (TrialStatus.STOPPED, "the search was stopped after 2 epochs")
    assert record.spans[-1][1] is not None and ended == ["t1"]
    assert rec.counts()[TrialStatus.RUNNING] == 0
    assert ",stopped,the search was stopped after 2 epochs," in (tmp_path / "trials.csv").read_text()


def test_a_restarted_trial_starts_from_the_checkpoint_ray_names_not_the_last_one_its_driver_heard_of(
    tmp_path: Path,
) -> None:
    from tunekit.layout import CHECKPOINTED

    rec = recorder(tmp_path)
    trial: Any = SimpleNamespace(trial_id="t1", config={"lr": 0.1}, latest_checkpoint_result=None)
    rec.on_trial_start(0, [], trial)
    for epoch in range(1, 8):  # checkpoints at 4 and 7; the driver then died before Ray saved epoch 7's
        bookkeeping = {"metrics": ["acc"], **({CHECKPOINTED: True} if epoch in (4, 7) else {})}
        rec.on_trial_result(0, [], trial, {EPOCH_KEY: epoch, "acc": 0.5, INFO_KEY: bookkeeping})
    assert rec.trials["t1"].checkpoint_epoch == 7
    trial.latest_checkpoint_result = SimpleNamespace(metrics={EPOCH_KEY: 4, "acc": 0.5})
    rec.on_trial_start(0, [], trial)  # the resume: Ray restores the checkpoint its saved state names
    assert (rec.trials["t1"].attempts, rec.trials["t1"].checkpoint_epoch) == (2, 4)
    trial.latest_checkpoint_result = None  # a worker that died before any checkpoint Ray knew of
    rec.on_trial_start(0, [], trial)
    assert (rec.trials["t1"].attempts, rec.trials["t1"].checkpoint_epoch) == (3, 0)


def test_a_run_a_killed_driver_started_after_ray_s_save_keeps_its_slot_time_as_an_earlier_attempt(
    tmp_path: Path,
) -> None:
    # Ray saved while t2 waited to start; t2 then ran an epoch, without a checkpoint, and the
    # driver died. The resume starts t2 afresh: its first run was dropped from every table.
    first = recorder(tmp_path)
    t1: Any = SimpleNamespace(trial_id="t1", config={"lr": 0.1}, latest_checkpoint_result=None)
    first.on_trial_start(0, [], t1)
    saved = pickle.loads(pickle.dumps(first.get_state()))  # Ray's last save
    t2: Any = SimpleNamespace(trial_id="t2", config={"lr": 0.2}, latest_checkpoint_result=None)
    first.on_trial_start(0, [], t2)
    first.on_trial_result(0, [], t2, {EPOCH_KEY: 1, "acc": 0.5, INFO_KEY: {"metrics": ["acc"]}, "pid": 7})
    first.write_tables()  # what the dead driver left on disk
    dead_span = first.trials["t2"].spans[0][0]

    resumed = recorder(tmp_path)
    resumed.set_state(saved)
    resumed.on_trial_start(0, [], t2)
    record = resumed.trials["t2"]
    assert (record.attempts, record.number, record.params) == (2, 2, {"lr": 0.2})
    assert [span[0] for span in record.spans] == [dead_span, record.spans[1][0]]
    assert record.spans[0][1] is not None and record.span_workers[0]["attempt"] == 1
    resumed.on_trial_start(0, [], t1)  # saved before the kill: its own record, as ever
    assert resumed.trials["t1"].attempts == 2 and len(resumed.trials["t1"].spans) == 2


def test_completed_trials_of_a_tunekit_before_training_keep_kept_their_last_epoch(tmp_path: Path) -> None:
    first = recorder(tmp_path / "a")
    (tmp_path / "a").mkdir()
    for number, values in enumerate([[0.2] * 9, [0.5, 0.6]]):
        run_trial(first, number, values)
    older = [{k: v for k, v in asdict(r).items() if k != "kept_epoch"} for r in first.trials.values()]
    trials, _ = records_of({"trials": older, "epochs": [asdict(r) for r in first.epochs]})
    assert (trials["t0"].status, trials["t0"].kept_epoch) == (TrialStatus.COMPLETED, 9)
    assert trials["t1"].status != TrialStatus.COMPLETED and trials["t1"].kept_epoch is None  # kept nothing
