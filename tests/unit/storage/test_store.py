"""The experiment's store: whole writes, torn tails cut back, damage said, a full disk typed."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from tunekit.errors import DamagedFileError, NoSpaceError
from tunekit.storage.store import (
    no_space_error,
    no_space_in,
    read_json,
    repair_torn_tail,
    table_rows,
    torn_tail,
    write_json,
    write_text,
)

TABLE = (
    'trial_id,number,status,reason\r\nab12,0,completed,"trained all 20 epochs"\r\ncd34,1,pruned,"pruned, by ASHA"\r\n'
)


def test_a_write_replaces_the_file_whole_and_leaves_no_partial(tmp_path: Path) -> None:
    path = tmp_path / "trials.csv"
    write_text(path, TABLE)
    write_text(path, TABLE + "ef56,2,running,\r\n")
    assert path.read_bytes().endswith(b"ef56,2,running,\r\n")
    assert [p.name for p in tmp_path.iterdir()] == ["trials.csv"]


def test_a_write_that_fails_midway_leaves_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "ledger.json"
    write_json(path, {"best": 1})

    def disk_full(*args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", disk_full)
    with pytest.raises(NoSpaceError) as full:
        write_json(path, {"best": 2})
    assert str(full.value) == f"no space left on the device of {path}"
    assert full.value.path == path
    assert json.loads(path.read_text()) == {"best": 1}  # nothing lost
    assert [p.name for p in tmp_path.iterdir()] == ["ledger.json"]  # no partial left behind


def test_a_table_is_read_with_every_cell_as_written(tmp_path: Path) -> None:
    path = tmp_path / "trials.csv"
    path.write_text(TABLE, newline="")
    assert table_rows(path) == [
        {"trial_id": "ab12", "number": "0", "status": "completed", "reason": "trained all 20 epochs"},
        {"trial_id": "cd34", "number": "1", "status": "pruned", "reason": "pruned, by ASHA"},
    ]
    assert table_rows(tmp_path / "missing.csv") == []


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (TABLE[:-20], "cut short (its last line has no end)"),
        (TABLE.replace(',"pruned, by ASHA"', ""), "cut short (line 3 has 3 cells where the header has 4)"),
        ("", "empty (not even its header)"),
    ],
)
def test_a_damaged_table_is_refused_naming_the_file_never_read_in_part(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "trials.csv"
    path.write_text(text, newline="")
    with pytest.raises(DamagedFileError) as damaged:
        table_rows(path)
    assert str(damaged.value) == f"{path}: {problem}; `tunekit check {tmp_path}` for details"


def test_json_missing_is_none_and_damaged_is_said(tmp_path: Path) -> None:
    path = tmp_path / "started.json"
    assert read_json(path) is None
    path.write_text('{"started_at": 17')
    with pytest.raises(DamagedFileError, match=r"started.json: not valid JSON \(Expecting"):
        read_json(path)
    path.write_text("")
    with pytest.raises(DamagedFileError, match=r"started\.json: empty;"):
        read_json(path)


def test_a_torn_tail_is_cut_back_to_the_last_whole_line(tmp_path: Path) -> None:
    journal = tmp_path / "study.journal"
    whole = b'{"op_code":0,"worker_id":"a"}\n{"op_code":4,"trial_id":0}\n'
    journal.write_bytes(whole + b'{"op_code":6,"tri')
    assert torn_tail(journal) == 17
    assert repair_torn_tail(journal) == 17
    assert journal.read_bytes() == whole
    assert repair_torn_tail(journal) == 0  # a whole file is left as it is
    assert repair_torn_tail(tmp_path / "none.journal") == 0


def test_a_tail_longer_than_a_block_is_found(tmp_path: Path) -> None:
    journal = tmp_path / "study.journal"
    journal.write_bytes(b"{}\n" + b"x" * 200_000)
    assert repair_torn_tail(journal) == 200_000
    assert journal.read_bytes() == b"{}\n"


def test_a_full_disk_is_found_anywhere_in_an_error_s_chain(tmp_path: Path) -> None:
    full = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "trials.csv.partial"))
    try:
        try:
            raise full
        except OSError as error:
            raise RuntimeError("a callback failed") from error
    except RuntimeError as wrapped:
        assert no_space_in(wrapped) is full
    assert no_space_in(ValueError("other")) is None


def test_the_no_space_line_names_the_storage_the_file_and_the_space_needed(tmp_path: Path) -> None:
    experiment = tmp_path / "exp"
    checkpoint = experiment / "ab12" / "checkpoint_000001"
    checkpoint.mkdir(parents=True)
    (checkpoint / "weights.npz").write_bytes(b"0" * 30 * 2**20)
    full = OSError(errno.ENOSPC, "No space left on device", str(experiment / "trials.csv.partial"))
    error = no_space_error(experiment, full, checkpoints=2)
    text = str(error)
    assert text.startswith(f"no space left on the storage {tmp_path} (writing {experiment / 'trials.csv.partial'}): ")
    assert "the search needs at least 60 MiB;" in text  # two checkpoints of the largest trial
    assert text.endswith(f"`tunekit resume {experiment}` continues the search (nothing it recorded is lost)")
    assert error.experiment_dir == experiment
