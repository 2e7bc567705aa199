"""Checksums of a checkpoint's payloads, written beside them and verified before they are trusted.

A checkpoint's ``weights.npz`` and an exported ``model.keras`` are zip archives whose CRCs a
reader may or may not check (NumPy reads an array's bytes without one), ``model.weights.h5``
and ``state.json`` carry none: one changed byte inside a weight reads as another weight, and
a resume trained on from it. So the worker records the SHA-256 of each payload it wrote in
``checksums.json`` in the same folder, written last; ``tunekit check`` and a restoring worker
compare them. A checkpoint written before checksums has none: only its structure is checked.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tunekit.layout import CHECKSUMMED, CHECKSUMS_FILE

_CHUNK = 1 << 20


def write_checksums(directory: Path) -> None:
    """Records the checksum of every payload in ``directory`` (call it after the last is written)."""
    sums = {name: file_sha256(directory / name) for name in CHECKSUMMED if (directory / name).is_file()}
    # Written beside, then renamed: a full disk mid-write must leave no record rather than a torn
    # one, which ``tunekit check`` rightly reports as damage to a checkpoint that is whole.
    partial = directory / f"{CHECKSUMS_FILE}.partial"
    try:
        partial.write_text(json.dumps(sums, indent=1, sort_keys=True) + "\n")
        partial.replace(directory / CHECKSUMS_FILE)
    finally:
        partial.unlink(missing_ok=True)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def recorded_checksums(directory: Path) -> dict[str, str] | None:
    """The checksums recorded beside a checkpoint's payloads; None when there are none (an older
    checkpoint) or the record is itself damaged (then ``checksum_damage`` says so)."""
    try:
        sums = json.loads((directory / CHECKSUMS_FILE).read_bytes())
    except (OSError, ValueError):
        return None
    return {str(k): str(v) for k, v in sums.items()} if isinstance(sums, dict) else None


def checksum_damage(path: Path) -> str | None:
    """What is wrong with one payload against its recorded checksum, or None when it matches
    (or none was recorded for it)."""
    directory = path.parent
    if (directory / CHECKSUMS_FILE).is_file() and recorded_checksums(directory) is None:
        return f"its {CHECKSUMS_FILE} does not parse"
    expected = (recorded_checksums(directory) or {}).get(path.name)
    if expected is None:
        return None
    try:
        actual = file_sha256(path)
    except FileNotFoundError:
        return "missing, though its checksum was recorded"
    except OSError as error:
        return f"unreadable ({error.strerror or error})"
    return None if actual == expected else f"fails its checksum (SHA-256 {actual[:12]}..., written {expected[:12]}...)"


def damaged_payloads(directory: Path) -> list[tuple[str, str]]:
    """Every payload of a checkpoint folder that fails its recorded checksum: (name, problem)."""
    sums = recorded_checksums(directory)
    if sums is None:
        return [(CHECKSUMS_FILE, "does not parse")] if (directory / CHECKSUMS_FILE).is_file() else []
    return [(name, problem) for name in sorted(sums) if (problem := checksum_damage(directory / name))]
