"""Where an experiment's Optuna study lives: a journal file, or an earlier experiment's SQLite file."""

from __future__ import annotations

import errno
import fcntl
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import pytest

from tunekit.layout import SQLITE_STUDY_FILE, STUDY_FILE, study_file
from tunekit.search.plan import study_storage


def add_trials(storage: optuna.storages.BaseStorage, values: list[float]) -> None:
    study = optuna.create_study(study_name="s", storage=storage, direction="maximize", load_if_exists=True)
    for value in values:
        trial = study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
        study.tell(trial, value)


def test_a_new_experiment_keeps_its_study_in_a_journal_another_process_can_read(tmp_path: Path) -> None:
    assert study_file(tmp_path) == tmp_path / STUDY_FILE
    add_trials(study_storage(tmp_path), [0.2, 0.7])
    add_trials(study_storage(tmp_path), [0.5])  # a resumed driver: a new storage replays the journal
    study = optuna.load_study(study_name="s", storage=study_storage(tmp_path))
    assert [t.value for t in study.trials] == [0.2, 0.7, 0.5]
    assert (tmp_path / STUDY_FILE).read_text().count("\n") > 3 and not (tmp_path / SQLITE_STUDY_FILE).exists()


def test_an_experiment_made_before_the_journal_is_read_from_its_sqlite_file(tmp_path: Path) -> None:
    add_trials(optuna.storages.get_storage(f"sqlite:///{tmp_path / SQLITE_STUDY_FILE}"), [0.4])
    assert study_file(tmp_path) == tmp_path / SQLITE_STUDY_FILE
    add_trials(study_storage(tmp_path), [0.6])  # resumed: the same SQLite study goes on
    study = optuna.load_study(study_name="s", storage=study_storage(tmp_path))
    assert [t.value for t in study.trials] == [0.4, 0.6]
    assert not (tmp_path / STUDY_FILE).exists()


X: dict[str, optuna.distributions.BaseDistribution] = {"x": optuna.distributions.FloatDistribution(0, 1)}


def test_enqueued_trials_are_asked_first_in_their_order_whoever_enqueued_them(tmp_path: Path) -> None:
    study = optuna.create_study(study_name="s", storage=study_storage(tmp_path), direction="maximize")
    study.enqueue_trial({"x": 0.1})
    study.enqueue_trial({"x": 0.2})
    asked = [study.ask(X) for _ in range(7)]
    for trial in asked:
        study.tell(trial, 0.3)
    # A second driver on the same journal (another process) enqueues one more.
    other = optuna.load_study(study_name="s", storage=study_storage(tmp_path))
    other.enqueue_trial({"x": 0.9})
    asked += [study.ask(X) for _ in range(2)]
    assert [t.params["x"] for t in asked[:2]] == [0.1, 0.2] and asked[7].params["x"] == 0.9
    assert [t.number for t in asked] == list(range(9))
    assert not study.get_trials(states=(optuna.trial.TrialState.WAITING,))


class CountedTrials(dict[int, optuna.trial.FrozenTrial]):
    reads = 0

    def __getitem__(self, trial_id: int) -> optuna.trial.FrozenTrial:
        CountedTrials.reads += 1
        return super().__getitem__(trial_id)


def trial_reads_of_three_asks(tmp_path: Path, earlier: int) -> int:
    tmp_path.mkdir()
    storage = study_storage(tmp_path)
    # The random sampler reads no trials itself: what is left is the study's own reads.
    sampler = optuna.samplers.RandomSampler(seed=0)
    study = optuna.create_study(study_name="s", storage=storage, direction="maximize", sampler=sampler)
    study.add_trials([optuna.trial.create_trial(params={"x": 0.5}, distributions=X, value=0.5)] * earlier)
    study.tell(study.ask(X), 0.5)  # the first ask looks at every trial once
    replay = storage._replay_result  # type: ignore[attr-defined]
    replay._trials = CountedTrials(replay._trials)
    CountedTrials.reads = 0
    for _ in range(3):
        study.tell(study.ask(X), 0.5)
    return CountedTrials.reads


def test_an_ask_looks_for_enqueued_trials_among_the_new_trials_only(tmp_path: Path) -> None:
    # The scale benchmark's guard without a clock: Optuna's journal tested every trial for
    # WAITING on every ask (3.7 ms per ask at 10,000 trials).
    assert trial_reads_of_three_asks(tmp_path / "small", 60) == trial_reads_of_three_asks(tmp_path / "large", 600)


def test_the_journal_hands_each_write_to_the_os_without_forcing_it_to_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    monkeypatch.setattr(os, "fsync", synced.append)
    add_trials(study_storage(tmp_path), [0.2, 0.7])
    assert synced == []  # Optuna's own backend syncs after every line
    # Every line is in the file at once: another process (a reader, a resumed driver) sees it.
    assert [t.value for t in optuna.load_study(study_name="s", storage=study_storage(tmp_path)).trials] == [0.2, 0.7]
    # A machine that lost power mid-write leaves a torn last line: the study reads up to it.
    with (tmp_path / STUDY_FILE).open("a") as journal:
        journal.write('{"op_code": 5, "worker_id"')
    assert [t.value for t in optuna.load_study(study_name="s", storage=study_storage(tmp_path)).trials] == [0.2, 0.7]


def recorded(call: Callable[..., Any], calls: list[str]) -> Callable[..., Any]:
    """``call``, noting its name in ``calls`` each time it runs."""

    def run(*args: Any, **kwargs: Any) -> Any:
        calls.append(call.__name__)
        return call(*args, **kwargs)

    return run


def test_a_write_locks_the_journal_itself_and_changes_nothing_else_in_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Optuna's own lock creates, renames and removes a symlink beside the journal at every
    # write (45-60 us a write, 12 writes a trial); flock on the journal's handle changes nothing.
    touched: list[str] = []
    for call in ("symlink", "rename", "unlink"):
        monkeypatch.setattr(os, call, recorded(getattr(os, call), touched))
    add_trials(study_storage(tmp_path), [0.2, 0.7])
    assert touched == [] and sorted(p.name for p in tmp_path.iterdir()) == [STUDY_FILE]


def test_a_write_waits_while_another_process_holds_the_journal_s_lock(tmp_path: Path) -> None:
    storage = study_storage(tmp_path)
    add_trials(storage, [0.2])
    study = optuna.load_study(study_name="s", storage=storage)
    written = threading.Event()
    with (tmp_path / STUDY_FILE).open("ab") as other:  # another open handle: flock excludes it like a process
        fcntl.flock(other, fcntl.LOCK_EX)

        def enqueue() -> None:
            study.enqueue_trial({"x": 0.3})
            written.set()

        writer = threading.Thread(target=enqueue)
        writer.start()
        assert not written.wait(0.3), "the write went through while another handle held the lock"
    writer.join(5)
    assert written.is_set()
    states = [t.state for t in optuna.load_study(study_name="s", storage=study_storage(tmp_path)).trials]
    assert states == [optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.WAITING]


def test_where_the_file_system_refuses_flock_writes_take_optuna_s_own_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(file: object, operation: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", refuse)
    linked: list[str] = []
    monkeypatch.setattr(os, "symlink", recorded(os.symlink, linked))
    add_trials(study_storage(tmp_path), [0.2, 0.7])
    assert linked == ["symlink"] * len(linked) and len(linked) > 3
    assert [t.value for t in optuna.load_study(study_name="s", storage=study_storage(tmp_path)).trials] == [0.2, 0.7]


def test_the_journal_is_read_through_one_handle_and_a_line_being_written_waits_for_its_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Optuna opened the file at each of a trial's ~19 reads: a path lookup in a folder of
    # thousands of trial folders each.
    storage = study_storage(tmp_path)
    add_trials(storage, [0.2])
    opened: list[str] = []
    original = open

    def counted(path: Any, *args: Any, **kwargs: Any) -> Any:
        opened.append(str(path))
        return original(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", counted)
    add_trials(storage, [0.4, 0.6])  # three asks and tells: a dozen reads and writes
    assert opened == []  # the handles opened by the first trial serve them all
    monkeypatch.undo()
    # Another writer's line, half written (no newline yet): not read until it is whole.
    other = study_storage(tmp_path)
    study = optuna.load_study(study_name="s", storage=storage)
    journal = tmp_path / STUDY_FILE
    whole = journal.read_bytes()
    add_trials(other, [0.9])
    *before, last = journal.read_bytes()[len(whole) :].splitlines(keepends=True)  # the last: its tell
    journal.write_bytes(whole + b"".join(before) + last[: len(last) // 2])
    assert [t.value for t in study.trials] == [0.2, 0.4, 0.6, None]  # asked, its tell not whole yet
    journal.write_bytes(whole + b"".join(before) + last)
    assert [t.value for t in study.trials] == [0.2, 0.4, 0.6, 0.9]
