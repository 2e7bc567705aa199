"""Tables with any damage are refused by every reader with one line naming the file and the
line (tunekit.storage.store.table_damage); a table missing beside its partner, or the study missing,
is said by every reader.

Positions are sampled with a seeded RNG over every row of each table, not chosen.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tunekit.errors import DamagedFileError, DamagedRecordWarning
from tunekit.layout import EPOCHS_FILE, STUDY_FILE, TRIALS_FILE, number_columns
from tunekit.results.check import check_experiment
from tunekit.results.load import load
from tunekit.results.status import read_status

from .made_up_experiments import asha_experiment


def checked(root: Path) -> None:
    """``check``, which reports a damaged table as its disagreement, raised as the readers raise it."""
    report = check_experiment(root, mlflow=False)
    if report.findings and report.findings[0].what == "read whole":
        problem = str(report.findings[0].actual).removesuffix("; restore it from a copy")
        raise DamagedFileError(root / report.findings[0].where, problem)


READERS: dict[str, Callable[[Path], object]] = {"load": load, "status": read_status, "check": checked}
SAMPLES = 12
KINDS = ("not UTF-8", "NUL", "a cell lost", "a cell added", "a number that is none", "a row copied in")


def damaged(data: bytes, kind: str, rng: random.Random, table: str) -> tuple[bytes, int]:
    """``data`` with one damage of ``kind`` in a row after the header; the damaged line's number."""
    header_end = data.index(b"\n") + 1
    numbers = number_columns(table, data[: header_end - 1].decode().split(","))
    lines = data[header_end:].splitlines(keepends=True)
    row = rng.randrange(len(lines))
    if kind == "a row copied in":  # the copy right after the row, or at the end
        copy_at = rng.choice([row + 1, len(lines)])
        lines.insert(copy_at, lines[row])
        return data[:header_end] + b"".join(lines), copy_at + 2
    line = bytearray(lines[row])
    at = rng.randrange(len(line) - 1)  # not the newline
    match kind:
        case "not UTF-8":
            line[at] = rng.choice([0x80, 0xBF, 0xC3, 0xFF])
        case "NUL":
            line[at] = 0
        case "a cell lost":
            commas = [i for i, byte in enumerate(line) if byte == ord(",")]
            del line[rng.choice(commas)]
        case "a cell added":
            line.insert(at, ord(","))
        case "a number that is none":  # a cell of a number column (params.* may hold text)
            cells = bytes(line).split(b",")
            index = rng.choice([i for i in numbers if cells[i].strip()])
            cells[index] = cells[index][:1] + rng.choice([b"x", b"#", b"e"]) + cells[index][1:]
            line = bytearray(b",".join(cells))
        case "a status that is none":
            header = data[: header_end - 1].decode().split(",")
            cells = bytes(line).split(b",")
            at = header.index("status")
            cells[at] = cells[at][:-1] + rng.choice([b"3", b"D", b" "]) if rng.random() < 0.5 else cells[at] + b"x"
            line = bytearray(b",".join(cells))
    lines[row] = bytes(line)
    return data[:header_end] + b"".join(lines), row + 2


@pytest.mark.parametrize(
    ("table", "kind"),
    [
        *((table, kind) for table in (TRIALS_FILE, EPOCHS_FILE) for kind in KINDS),
        (TRIALS_FILE, "a status that is none"),
    ],
)
def test_every_reader_refuses_a_damaged_table_naming_the_file_and_line(tmp_path: Path, table: str, kind: str) -> None:
    root = asha_experiment(tmp_path / "asha")
    whole = (root / table).read_bytes()
    rng = random.Random(f"{table}:{kind}")
    for _ in range(SAMPLES):
        data, line = damaged(whole, kind, rng, table)
        (root / table).write_bytes(data)
        for name, read in READERS.items():
            with pytest.raises(DamagedFileError) as refused:
                read(root)
            assert refused.value.path == root / table, name
            assert re.search(rf"\bline {line}\b", refused.value.problem), (name, kind, refused.value.problem)


def test_the_cli_readers_say_a_damaged_table_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tunekit.cli import main

    root = asha_experiment(tmp_path / "asha")
    data = bytearray((root / TRIALS_FILE).read_bytes())
    data[data.index(b"\n", data.index(b"\n") + 1) + 5] = 0xFE  # in the second row
    (root / TRIALS_FILE).write_bytes(bytes(data))
    for command in (["report"], ["status"]):
        assert main([*command, str(root)]) == 1
        err = capsys.readouterr().err
        assert (
            err
            == f"tunekit: error: {root / TRIALS_FILE}: line 3 is not UTF-8 text (byte 0xfe); `tunekit check {root}` for details\n"
        )
    # check says it as its disagreement, with the repair, where it pointed to itself
    assert main(["check", "--no-mlflow", str(root)]) == 1
    said = capsys.readouterr()
    assert said.out.splitlines()[:3] == [
        f"{root}: 1 disagreement",
        f"compared: {TRIALS_FILE}",
        f"  {TRIALS_FILE}: read whole: 'yes' vs 'line 3 is not UTF-8 text (byte 0xfe); restore it from a copy'",
    ], said


@pytest.mark.parametrize("missing", [TRIALS_FILE, EPOCHS_FILE])
def test_a_table_missing_beside_its_partner_is_said_by_every_reader(tmp_path: Path, missing: str) -> None:
    root = asha_experiment(tmp_path / "asha")
    (root / missing).unlink()
    for name, read in READERS.items():
        with pytest.raises(DamagedFileError, match=f"{missing}: missing, while") as said:
            read(root)
        assert said.value.path == root / missing, name


def test_a_missing_study_is_said_by_every_reader_and_report_says_it_is_read_from_the_tables(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tunekit.cli import main

    root = asha_experiment(tmp_path / "asha")
    assert not (root / STUDY_FILE).exists()
    (root / "experiment_state-2026-12-07_12-00-00.json").write_text("{}")  # Ray ran the search
    for read in (load, read_status):
        with pytest.warns(DamagedRecordWarning, match=f"{STUDY_FILE}: missing, while {TRIALS_FILE} holds"):
            read(root)
    report = check_experiment(root, mlflow=False)
    assert [f.what for f in report.findings if f.where == STUDY_FILE] == ["the study"]
    for command in ("report", "status"):
        assert main([command, str(root)]) == 0
        err = capsys.readouterr().err
        assert err.startswith(f"tunekit: warning: {root / STUDY_FILE}: missing, while {TRIALS_FILE} holds"), err
        assert "these results are read from the tables alone" in err


def test_a_started_json_that_does_not_parse_is_refused_by_every_reader(tmp_path: Path) -> None:
    # Held out by the lead: started.json cut to `{"sessions": [[1, ` read as no clock; `report`
    # exited 0 with the active time missing, and `check` said the file was missing.
    from tunekit.layout import STARTED_FILE

    root = asha_experiment(tmp_path / "asha")
    (root / STARTED_FILE).write_text('{"sessions": [[1, ')
    for read in (summarize_of, read_status, checked):
        with pytest.raises(DamagedFileError, match="not valid JSON") as refused:
            read(root)
        assert refused.value.path == root / STARTED_FILE


def summarize_of(root: Path) -> object:
    from tunekit.results.summary import summarize

    return summarize(load(root))
