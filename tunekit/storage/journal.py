"""The study journal verified whole: every line, not only the last.

Optuna's journal (``study.journal``) is an append-only log of the study's operations, one JSON
object a line; a trial's id is the count of trials created before it, so every operation after
a lost or altered line can land on the wrong trial. Optuna's reader checks none of this: it
skips a torn *last* line, fails on the first line that does not parse, and quietly drops an
operation on a trial it does not know. So a journal cut in the middle read as a shorter study
(and a resume then failed deep in the searcher), and a changed digit read as another value.

Three things are held against the journal here, and the earliest line any of them names is
its damage:

* **every line parses and is a consistent operation**: a known op code with the fields it needs,
  on a study and a trial created before it (``line_damage``);
* **the seal**: the driver records the journal's length and a CRC-32 of every block of
  ``SEAL_BLOCK`` lines beside it (``study.seal.json``) each time it writes its tables, so a cut
  or a changed byte anywhere in what was sealed is found (``JournalSealer``);
* **the tables**: every trial number ``trials.csv`` names was created in the journal (the
  tables are written after the study, never ahead of it);
* **the trial folders** (a folder experiment's): every trial folder is named by a trial of the
  journal (``RAY_TRIAL_ATTR``), since the searcher writes a trial's Ray id before Ray starts it. A
  cut past the seal that ends mid-line looks like a torn last line; the folder of a trial whose
  ask was in the lost lines tells it (chaos seed 69869: cut back as torn, a completed trial trained
  again and another's folder was left behind).

A last line without its newline is a *torn tail* (a kill or a full disk mid-write): the one
damage cut back (``tunekit.storage.store.repair_torn_tail``), and only when nothing else is wrong.
What the seal cannot know: the writes of the last seconds before a crash, which it never saw.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from tunekit.layout import (
    JOURNAL_SEAL_FILE,
    RAY_TRIAL_ATTR,
    STUDY_FILE,
    TRIALS_FILE,
    number_or_none,
    unnamed_trial_folders,
)
from tunekit.storage.store import read_json, table_rows, write_json

SEAL_BLOCK = 32  # lines per sealed block: a damaged block names at most this many lines
REPAIR_COMMAND = "tunekit check --repair"

# Optuna's operations (optuna.storages.journal._storage.JournalOperation) and what each needs.
CREATE_STUDY, DELETE_STUDY, CREATE_TRIAL, DISCARD_TRIALS = 0, 1, 4, 10
SET_TRIAL_PARAM, SET_TRIAL_STATE_VALUES, SET_TRIAL_INTERMEDIATE_VALUE = 5, 6, 7
_STUDY_OPS = {DELETE_STUDY, 2, 3, CREATE_TRIAL, DISCARD_TRIALS}
_TRIAL_OPS = {SET_TRIAL_PARAM, SET_TRIAL_STATE_VALUES, SET_TRIAL_INTERMEDIATE_VALUE, 8, 9}
_ONE_ATTR = {2: "user_attr", 3: "system_attr", 8: "user_attr", 9: "system_attr"}
_RAY_ID_KEY = f'"{RAY_TRIAL_ATTR}"'.encode()
_STATES = range(5)  # optuna.trial.TrialState: RUNNING, COMPLETE, PRUNED, FAIL, WAITING


@dataclass
class JournalReport:
    """What ``verify_journal`` found.

    Attributes:
        lines: the whole lines read.
        torn_tail: bytes after the last whole line (0: none).
        damage: the first damaged line, and what is wrong from that line on ("line 7 does not
            parse as JSON"), or None.
        trials: per trial id (its number in a one-study journal), its last state.
    """

    lines: int = 0
    torn_tail: int = 0
    damage: tuple[int, str] | None = None
    trials: list[int] = field(default_factory=list)
    ray_ids: set[str] = field(default_factory=set)  # the Ray trial ids its trials name

    def note(self, line: int, problem: str, *, last: int | None = None) -> None:
        """Keeps the damage at the earliest line; ``last``: it is somewhere in lines line-last,
        which a damage named at one of them makes precise."""
        if self.damage is not None and (self.damage[0] <= line or (last is not None and self.damage[0] <= last)):
            return
        where = f"line {line}" if last is None else f"lines {line}-{last}:"
        self.damage = (line, f"{where} {problem}")


def verify_journal(path: Path, *, tables: bool = True) -> JournalReport:
    """Reads the journal at ``path`` whole against itself, its seal and (``tables``) trials.csv."""
    data = path.read_bytes()
    body_end = data.rfind(b"\n") + 1
    lines = data[:body_end].splitlines(keepends=True)
    report = JournalReport(lines=len(lines), torn_tail=len(data) - body_end)
    studies = 0
    for number, line in enumerate(lines, start=1):
        problem, studies = _operation_damage(line, studies, report.trials)
        if problem:
            report.note(number, problem)
            break
        if _RAY_ID_KEY in line:  # set on an asked trial (user_attr), or on one added whole (user_attrs)
            log = json.loads(line)
            attrs = {**(log.get("user_attrs") or {}), **(log.get("user_attr") or {})}
            report.ray_ids.add(str(attrs.get(RAY_TRIAL_ATTR)))
    _against_seal(report, path, data, lines)
    if tables:
        _against_tables(report, path.parent)
        _against_trial_folders(report, path.parent)
    return report


def _operation_damage(line: bytes, studies: int, trials: list[int]) -> tuple[str | None, int]:
    """What is wrong with one line as the next operation, or None; the studies created after it."""
    try:
        log = json.loads(line)
    except ValueError:
        return "does not parse as JSON", studies
    if not isinstance(log, dict) or not isinstance(log.get("worker_id"), str):
        return "is no journal operation (no worker_id)", studies
    op = log.get("op_code")
    if op == CREATE_STUDY:
        ok = isinstance(log.get("study_name"), str) and _ints(log.get("directions"))
        return (None, studies + 1) if ok else ("creates a study without a name and directions", studies)
    if op in _STUDY_OPS:
        study = log.get("study_id")
        if not isinstance(study, int) or not 0 <= study < studies:
            return f"names study {study!r}, which no earlier line created", studies
        if op == CREATE_TRIAL:
            if problem := _created_trial_damage(log):
                return problem, studies
            trials.append(int(log.get("state", 0)))
        return _attr_damage(log, op), studies
    if op in _TRIAL_OPS:
        trial = log.get("trial_id")
        if not isinstance(trial, int) or not 0 <= trial < len(trials):
            return f"names trial {trial!r}, which no earlier line created ({len(trials)} trials so far)", studies
        problem = _trial_op_damage(log, op)
        if problem is None and op == SET_TRIAL_STATE_VALUES:
            trials[trial] = int(log["state"])
        return problem, studies
    return f"has an unknown op_code {op!r}", studies


def _trial_op_damage(log: dict[str, Any], op: int) -> str | None:
    if op == SET_TRIAL_PARAM:
        named = isinstance(log.get("param_name"), str) and _number(log.get("param_value_internal"))
        whole = named and _distribution(log.get("distribution"))
        return None if whole else "sets a parameter without name, value or distribution"
    if op == SET_TRIAL_STATE_VALUES:
        values = log.get("values")
        valued = values is None or (isinstance(values, list) and all(map(_number, values)))
        whole = log.get("state") in _STATES and valued and _dates(log, "datetime_start", "datetime_complete")
        return None if whole else "sets a trial's state without a valid state, values or date"
    if op == SET_TRIAL_INTERMEDIATE_VALUE:
        value = log.get("intermediate_value")
        whole = isinstance(log.get("step"), int) and (value is None or _number(value))
        return None if whole else "reports an epoch without a step or value"
    return _attr_damage(log, op)


def _created_trial_damage(log: dict[str, Any]) -> str | None:
    state = log.get("state", 0)
    distributions = log.get("distributions", {})
    ok = state in _STATES and _dates(log, "datetime_start", "datetime_complete")
    ok = ok and isinstance(distributions, dict) and all(map(_distribution, distributions.values()))
    ok = ok and isinstance(log.get("params", {}), dict) and isinstance(log.get("intermediate_values", {}), dict)
    return None if ok else "creates a trial with a bad state, date or distribution"


def _attr_damage(log: dict[str, Any], op: int) -> str | None:
    key = _ONE_ATTR.get(op)
    if key is None:
        return None
    value = log.get(key)
    return None if isinstance(value, dict) and len(value) == 1 else f"sets an attribute without one {key}"


def _ints(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, int) for v in value)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _distribution(text: Any) -> bool:
    try:
        parsed = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return False
    if not isinstance(parsed, dict):
        return False
    return isinstance(parsed.get("name"), str) and isinstance(parsed.get("attributes"), dict)


def _dates(log: dict[str, Any], *keys: str) -> bool:
    for key in keys:
        value = log.get(key)
        if value is None:
            continue
        try:
            datetime.fromisoformat(value)
        except (TypeError, ValueError):
            return False
    return True


# ------------------------------------------------------------------------ the seal


def _against_seal(report: JournalReport, path: Path, data: bytes, lines: list[bytes]) -> None:
    seal = read_seal(path.parent)
    if seal is None:
        return
    sealed_lines, sealed_bytes, crcs = seal
    if len(data) - report.torn_tail < sealed_bytes or len(lines) < sealed_lines:
        first_lost = min(len(lines), sealed_lines) + 1
        report.note(
            first_lost,
            f"is missing: the journal held {sealed_lines} lines ({sealed_bytes} bytes) when its driver "
            f"sealed it, and has {len(lines)} whole lines ({len(data)} bytes): it was cut",
        )
    for index, crc in enumerate(crcs):
        block = lines[index * SEAL_BLOCK : min((index + 1) * SEAL_BLOCK, sealed_lines)]
        if len(block) == min(SEAL_BLOCK, sealed_lines - index * SEAL_BLOCK) and _crc(block) != crc:
            first, last = index * SEAL_BLOCK + 1, index * SEAL_BLOCK + len(block)
            report.note(first, "one differs from what its driver wrote (the seal's CRC-32)", last=last)
            return


def read_seal(experiment_dir: Path) -> tuple[int, int, list[str]] | None:
    """The journal's seal (lines, bytes, a CRC-32 per block), or None when there is none.

    Raises:
        DamagedFileError: the seal itself does not parse.
    """
    from tunekit.errors import DamagedFileError

    record = read_json(experiment_dir / JOURNAL_SEAL_FILE)
    if record is None:
        return None
    try:
        return int(record["lines"]), int(record["bytes"]), [str(c) for c in record["crc32"]]
    except (KeyError, TypeError, ValueError):
        raise DamagedFileError(experiment_dir / JOURNAL_SEAL_FILE, "not a journal seal") from None


def _crc(block: list[bytes]) -> str:
    crc = 0
    for line in block:
        crc = zlib.crc32(line, crc)
    return f"{crc:08x}"


class JournalSealer:
    """Seals the journal as its driver writes it: each ``seal`` reads only what was appended
    since the last, and rewrites ``study.seal.json`` whole.

    Start one only on a journal verified whole (a new search's, or one a resume verified).
    """

    def __init__(self, experiment_dir: Path) -> None:
        self.journal = experiment_dir / STUDY_FILE  # none in an older experiment's SQLite study
        self.offset = 0
        self.lines = 0
        self.crcs: list[str] = []
        self._block_crc = 0
        self._block_lines = 0

    def seal(self) -> None:
        try:
            with self.journal.open("rb") as handle:
                handle.seek(self.offset)
                new = handle.read()
        except FileNotFoundError:
            return
        whole = new[: new.rfind(b"\n") + 1]
        if not whole:
            return
        for line in whole.splitlines(keepends=True):
            self._block_crc = zlib.crc32(line, self._block_crc)
            self._block_lines += 1
            if self._block_lines == SEAL_BLOCK:
                self.crcs.append(f"{self._block_crc:08x}")
                self._block_crc = self._block_lines = 0
            self.lines += 1
        self.offset += len(whole)
        crcs = self.crcs + ([f"{self._block_crc:08x}"] if self._block_lines else [])
        record = {"lines": self.lines, "bytes": self.offset, "block": SEAL_BLOCK, "crc32": crcs}
        write_json(self.journal.parent / JOURNAL_SEAL_FILE, record)


# ---------------------------------------------------------------------- the tables


def _against_tables(report: JournalReport, experiment_dir: Path) -> None:
    from tunekit.errors import DamagedFileError

    try:
        rows = table_rows(experiment_dir / TRIALS_FILE)
    except DamagedFileError:
        return  # said as the table's own damage
    numbers = [int(n) for row in rows if (n := number_or_none(row.get("number"))) is not None]
    if numbers and max(numbers) >= len(report.trials):
        missing = sorted(n for n in numbers if n >= len(report.trials))
        report.note(
            report.lines + 1,
            f"is missing: {TRIALS_FILE} names trial numbers {_ranges(missing)} that no line of the journal "
            f"created ({len(report.trials)} trials): lines were cut from it",
        )


def _against_trial_folders(report: JournalReport, experiment_dir: Path) -> None:
    from tunekit.storage.buckets import bucket_of

    if report.damage is not None or bucket_of(experiment_dir) is not None:
        return  # a bucket's journal is uploaded apart from the folders Ray uploads: it may lag them
    if unknown := unnamed_trial_folders(experiment_dir, report.ray_ids):
        names = ", ".join(folder.name for folder in unknown)
        report.note(
            report.lines + 1,
            f"is missing: trial folders {names} hold trials no line of the journal names (the searcher writes a "
            "trial's Ray id before Ray starts it): lines were cut from it",
        )


def _ranges(numbers: list[int]) -> str:
    return f"{numbers[0]}" if len(numbers) == 1 else f"{numbers[0]}-{numbers[-1]}"


def journal_repair(experiment_dir: Path) -> str:
    """The one line's second half: what repairs a damaged journal (a bucket's named by its URI)."""
    from tunekit.storage.buckets import shown

    return (
        f"`{REPAIR_COMMAND} {shown(experiment_dir)}` rebuilds the study from what of it is whole, {TRIALS_FILE} and "
        "epochs.csv; then `tunekit resume` continues"
    )


def damage_message(damage: tuple[int, str]) -> str:
    """A journal's damage as a DamagedFileError's problem: the line and what is wrong."""
    return damage[1]
