"""The experiment's files: one owner for every driver-side read and write.

Like Ray Tune's ``StorageContext`` and Optuna's ``BaseStorage``, every record of an
experiment that the driver keeps (the tables, the clock, the ledger, the tracking record,
PBT's steps, Ray's saved state as tunekit mends it, the study journal) is written and read
through here, so each guarantee is made once:

* **Whole files or none.** Tables and JSON are written to a temporary file beside the
  target, then renamed over it (``os.replace``): a reader, or a crash, sees the old file or
  the new one, never half of one.
* **Appends after a whole line.** The study journal is append-only; a last line cut short (a
  kill mid-write, a full disk) is cut back to the last whole line before anything is
  appended (``repair_torn_tail``), or the next append would turn it into a bad line in the
  middle of the file that no reader gets past (Optuna's journal reader skips a torn *last*
  line only).
* **Damage is said, never read around.** ``table_rows`` and ``read_json`` raise
  ``DamagedFileError`` naming the file (and a table's line) for a table cut, torn or changed
  (a row of the wrong length, a byte that is no UTF-8, a NUL, a number that is none) or JSON
  that does not parse;
  a missing file is ``[]`` or None, which the caller tells from damage.
* **Typed failures.** A full disk is ``NoSpaceError`` (``no_space_error`` names the storage
  and the space a search needs), a refused write a ``StorageError``.
* **One writer.** ``DriverLease`` (``tunekit.storage.lease``) keeps a second driver out, and every
  write here first checks (``tunekit.storage.fences``) that this process still holds its lease.

Its backend is a local or shared directory; the functions take paths, and the few that
touch the file system are the seam a bucket backend replaces.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import io
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tunekit.errors import DamagedFileError, NoSpaceError, StorageError
from tunekit.layout import key_columns, number_columns, number_or_none, word_columns
from tunekit.storage.fences import check_fences

_PARTIAL = ".partial"


# --------------------------------------------------------------------------- writes


def write_text(path: Path, text: str) -> None:
    """Writes ``text`` to ``path`` whole: to ``<name>.partial`` first, then renamed over ``path``."""
    write_bytes(path, text.encode("utf-8"))


def write_bytes(path: Path, data: bytes) -> None:
    """Writes ``data`` to ``path`` whole, once the writer has proved it still holds its lease."""
    check_fences()
    replace_whole(path, data)


def replace_whole(path: Path, data: bytes) -> None:
    """``write_bytes`` without the lease's check: for the lease's own heartbeat."""
    partial = path.with_name(path.name + _PARTIAL)
    with storage_errors(path):
        try:
            with partial.open("wb") as handle:
                handle.write(data)
            os.replace(partial, path)
        except BaseException:
            with contextlib.suppress(OSError):
                partial.unlink()
            raise


def write_json(path: Path, value: Any, *, indent: int | None = None) -> None:
    """``value`` as JSON, written whole (``write_text``); ends with a newline when indented."""
    text = json.dumps(value, indent=indent, default=str)
    write_text(path, text + "\n" if indent is not None else text)


@contextlib.contextmanager
def storage_errors(path: Path) -> Iterator[None]:
    """OSErrors of a write to ``path`` as tunekit's typed errors: a full disk, a refused write."""
    try:
        yield
    except OSError as error:
        if error.errno == errno.ENOSPC:
            raise NoSpaceError(f"no space left on the device of {path}", path=path) from error
        if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            from tunekit.storage.faults import permanent_problem

            raise StorageError(permanent_problem(error, path) or f"cannot write {path}: {error.strerror}") from error
        raise


# ---------------------------------------------------------------------------- reads


def read_json(path: Path) -> Any | None:
    """The JSON in ``path``, or None when it is missing; ``DamagedFileError`` when it does not parse."""
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        return None
    if not text.strip():
        raise DamagedFileError(path, "empty")
    try:
        return json.loads(text)
    except ValueError as error:
        raise DamagedFileError(path, f"not valid JSON ({error})") from None


def table_rows(path: Path) -> list[dict[str, str]]:
    """A table's rows (trials.csv, epochs.csv, ...) with every cell as written, or [] when it
    is missing: readers that must not turn ids or params into numbers (see ``ID_COLUMNS``).

    Raises:
        DamagedFileError: the table is not whole (``table_damage``), naming its line.
    """
    text = _table_text(path)
    if text is None:
        return []
    reader = csv.reader(io.StringIO(text, newline=""))
    header = next(reader)
    return [dict(zip(header, cells, strict=True)) for cells in reader if cells]


def table_damage(data: bytes, name: str = "") -> str | None:
    """What is wrong with a table's bytes, or None when it is whole.

    Tables are written whole (``write_text``) as UTF-8 text with every line ended, so a last
    line without an end, a row whose cell count is not the header's, a byte that is no UTF-8
    or a NUL, or a number column (``layout.number_columns`` of the table ``name``) holding
    something else, means the file was cut, torn or changed after it was written.
    """
    if not data:
        return "empty (not even its header)"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        return f"line {_line_at(data, error.start)} is not UTF-8 text (byte {data[error.start]:#04x})"
    if (nul := data.find(b"\0")) >= 0:
        return f"line {_line_at(data, nul)} holds a NUL byte"
    if not text.endswith("\n"):
        return "cut short (its last line has no end)"
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
        numbers, keys, words = number_columns(name, header), key_columns(name, header), word_columns(name, header)
        named: dict[tuple[str, ...], int] = {}
        for cells in reader:
            if not cells:
                continue
            if len(cells) != len(header):
                return f"cut short (line {reader.line_num} has {len(cells)} cells where the header has {len(header)})"
            for index in numbers:
                if cells[index] and number_or_none(cells[index]) is None:
                    return f"line {reader.line_num} has {cells[index]!r} for the number {header[index]}"
            for index, allowed in words.items():
                if cells[index] not in allowed:
                    words_allowed = ", ".join(sorted(allowed))
                    return f"line {reader.line_num} has {cells[index]!r} for {header[index]} (one of {words_allowed})"
            if (
                keys
                and (first := named.setdefault(key := tuple(cells[i] for i in keys), reader.line_num))
                != reader.line_num
            ):
                row = ", ".join(f"{header[i]} {value}" for i, value in zip(keys, key, strict=True))
                return f"line {reader.line_num} repeats line {first}'s row ({row})"
    except csv.Error as error:
        return f"cut short (line {reader.line_num}: {error})"
    return None


def _line_at(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


def check_table(path: Path) -> None:
    """Raises ``DamagedFileError`` when the table at ``path`` is damaged (a missing one is fine)."""
    _table_text(path)


def _table_text(path: Path) -> str | None:
    """The table's text, None when it is missing; ``DamagedFileError`` when it is damaged."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    if problem := table_damage(data, path.name):
        raise DamagedFileError(path, problem)
    return data.decode("utf-8")


# ------------------------------------------------------------------ append-only logs


def torn_tail(path: Path) -> int:
    """Bytes after the last whole line of an append-only file (0: none, or no file)."""
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            if size == 0:
                return 0
            # Journal lines are short; read back in blocks until a newline is found.
            position, block = size, 64 * 1024
            while position > 0:
                start = max(0, position - block)
                handle.seek(start)
                chunk = handle.read(position - start)
                newline = chunk.rfind(b"\n")
                if newline >= 0:
                    return size - (start + newline + 1)
                position = start
            return size
    except FileNotFoundError:
        return 0


def repair_torn_tail(path: Path) -> int:
    """Cuts an append-only file back to its last whole line; returns the bytes cut (0: none).

    Why: Optuna's journal reader skips a torn last line, but the next append lands right
    after it, and the torn line becomes a bad line in the middle of the file that every
    later read fails on (``JSONDecodeError``): the experiment could never be resumed again.
    """
    cut = torn_tail(path)
    if cut:
        with storage_errors(path), path.open("r+b") as handle:
            handle.truncate(handle.seek(0, os.SEEK_END) - cut)
    return cut


# ------------------------------------------------------------------------ full disks


def no_space_in(error: BaseException) -> OSError | None:
    """The ``ENOSPC`` OSError in ``error``'s chain (causes and contexts), if any."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno == errno.ENOSPC:
            return current
        if isinstance(current, NoSpaceError):
            return OSError(errno.ENOSPC, "No space left on device", str(current.path or ""))
        current = current.__cause__ or current.__context__
    return None


def no_space_error(experiment_dir: Path, error: BaseException | None, *, checkpoints: int = 2) -> NoSpaceError:
    """The one line a search ends with when its storage filled up: which storage, the space
    free and the space the search needs to go on, and how to continue it.

    The need: ``checkpoints`` of the largest trial's folder (each running trial writes one
    at a time, Ray keeps the one before until the new one is whole), plus the driver's own
    records twice over (each is rewritten beside itself), and at least 16 MiB.
    """
    from tunekit.storage.buckets import shown

    storage = experiment_dir.parent
    free, need = free_bytes(storage), space_needed(experiment_dir, checkpoints)
    failed = getattr(error, "filename", None) or getattr(error, "path", None)
    writing = f" (writing {failed})" if failed else ""
    message = (
        f"no space left on the storage {storage}{writing}: {_mib(free)} free, the search needs at least "
        f"{_mib(need)}; free some, then `tunekit resume {shown(experiment_dir)}` continues the search (nothing "
        "it recorded is lost)"
    )
    return NoSpaceError(message, experiment_dir, failed)


def space_needed(experiment_dir: Path, checkpoints: int) -> int:
    """The bytes a search needs free to go on (``no_space_error`` says how they are counted)."""
    return max(16 * 2**20, checkpoints * _largest_trial_bytes(experiment_dir) + 2 * _records_bytes(experiment_dir))


def free_bytes(path: Path) -> int:
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return 0


def _largest_trial_bytes(experiment_dir: Path) -> int:
    largest = 0
    with contextlib.suppress(OSError):
        for trial_dir in experiment_dir.iterdir():
            if trial_dir.is_dir():
                checkpoints = [p for p in trial_dir.glob("checkpoint_*") if p.is_dir()]
                for checkpoint in checkpoints:
                    largest = max(largest, _tree_bytes(checkpoint))
    return largest


def _records_bytes(experiment_dir: Path) -> int:
    with contextlib.suppress(OSError):
        return sum(p.stat().st_size for p in experiment_dir.iterdir() if p.is_file())
    return 0


def _tree_bytes(path: Path) -> int:
    with contextlib.suppress(OSError):
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return 0


def _mib(count: int) -> str:
    return f"{count / 2**20:.0f} MiB" if count >= 2**20 else f"{count / 2**10:.0f} KiB"
