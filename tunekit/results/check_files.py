"""``tunekit check``'s file part: do the trials' model and checkpoint files, and Ray's saved
state, open whole?

A file cut short (a full disk, a copy killed halfway, a bucket upload that stopped) reads
as another kind of disagreement: the experiment says the file is there, the file says it
is not whole. Each is read without TensorFlow, so the check stays a fast reader: a
``.keras`` model and ``weights.npz`` are zip archives, ``model.weights.h5`` an HDF5 file
(h5py, a Keras dependency, imported only when there is one), ``state.json`` JSON, and
Ray's pickles are walked opcode by opcode, never loaded.

Cheap checks (the archive's directory, the HDF5 superblock's length) go over every file
named below; the best trial's files are read through (every zip member's CRC, every HDF5
dataset), since that is the model a user takes away.
"""

from __future__ import annotations

import json
import pickletools
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tunekit.layout import (
    CHECKPOINT_STATE,
    CHECKPOINT_WEIGHTS,
    FINAL_MODEL,
    FINAL_WEIGHTS,
    KEPT_WEIGHTS,
    RAY_TRIAL_ATTR,
    TRIALS_FILE,
    TrialStatus,
    study_file,
    unnamed_trial_folders,
)
from tunekit.results.findings import Finding, table_rows_of, trial_label
from tunekit.results.load import ExperimentResults
from tunekit.storage.buckets import shown
from tunekit.storage.checksums import damaged_payloads
from tunekit.storage.clock import died_mid_session

CHECKPOINT_FILES = "checkpoints"  # how a damaged trial file's finding is headed
SAVED_STATE = "Ray's saved state"  # ... and a damaged file of Ray's

ZIP_WHOLE = "a whole zip archive"
HDF5_WHOLE = "a whole HDF5 file"
JSON_OBJECT = "a JSON object"
PICKLE_WHOLE = "a whole pickle"

# The first bytes of every HDF5 file Keras writes (no user block).
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
# Ray's pickles larger than this have only their last byte checked (STOP): walking a
# pickle's opcodes costs about a second per 20 MB, and a cut one rarely ends in STOP.
PICKLE_WALK_LIMIT = 16 * 2**20
PICKLE_STOP = b"."  # the opcode that ends every pickle
# Ray's newest file of each of these (by name, as Ray picks it) is what ``Tuner.restore`` reads:
# the controller's, the search generator's and the callbacks' state (SAVED_STATE_PATTERNS of
# tunekit.compat.ray_saved_state), the base searcher's (Ray 2.60: Searcher.CKPT_FILE_TMPL) and
# the tuner itself. Their names do not tell their format: the controller's is JSON, the
# searcher's is what the searcher's ``save`` writes (tunekit's: JSON), the rest are pickles.
JSON, PICKLE, EITHER = "json", "pickle", "either"
RAY_FILES = {
    "experiment_state-*.json": JSON,
    "search_gen_state-*.json": PICKLE,
    "callback-states-*.pkl": PICKLE,
    "searcher-state-*.pkl": EITHER,
    "tuner.pkl": PICKLE,
}
# How every pickle Ray writes begins (protocol 2 and later: PROTO).
PICKLE_PROTO = b"\x80"


# -------------------------------------------------------------- one file


def damage(path: Path, *, thorough: bool = False) -> tuple[str, str] | None:
    """What is wrong with a trial's file, as (what it should be, what it is), or None when it
    opens whole. ``thorough`` reads every byte (every zip member's CRC, every HDF5 dataset)."""
    name = path.name
    if name == CHECKPOINT_STATE:
        return _json_damage(path)
    if name.endswith(".h5"):
        return _hdf5_damage(path, thorough)
    return _zip_damage(path, thorough)  # model.keras, weights.npz


def _size_or_missing(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def _zip_damage(path: Path, thorough: bool) -> tuple[str, str] | None:
    size = _size_or_missing(path)
    if size is None:
        return ZIP_WHOLE, "missing"
    if size == 0:
        return ZIP_WHOLE, "empty"
    try:
        # Opening reads the central directory at the end: a file cut short has none.
        with zipfile.ZipFile(path) as archive:
            for member in archive.infolist():
                if member.header_offset + member.compress_size > size:
                    return ZIP_WHOLE, f"member {member.filename!r} runs past the file's end ({size} bytes)"
            if thorough:
                bad = archive.testzip()
                if bad is not None:
                    return ZIP_WHOLE, f"member {bad!r} fails its CRC check"
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError) as error:
        return ZIP_WHOLE, f"{_text(error)} ({size} bytes)"
    return None


def _hdf5_damage(path: Path, thorough: bool) -> tuple[str, str] | None:
    size = _size_or_missing(path)
    if size is None:
        return HDF5_WHOLE, "missing"
    if size == 0:
        return HDF5_WHOLE, "empty"
    with path.open("rb") as file:
        if file.read(len(HDF5_SIGNATURE)) != HDF5_SIGNATURE:
            return HDF5_WHOLE, f"no HDF5 signature ({size} bytes)"
    try:
        import h5py
    except ImportError:  # Keras installs it; without it the signature is all there is to see
        return None
    try:
        # Opening compares the superblock's recorded end of file with the file's length.
        with h5py.File(path, "r") as file:
            if thorough:
                file.visititems(_read_dataset)
    except (OSError, RuntimeError, ValueError, KeyError) as error:
        return HDF5_WHOLE, _text(error)
    return None


def _read_dataset(_: str, item: Any) -> None:
    import h5py

    if isinstance(item, h5py.Dataset):
        item[()]
    # None: visititems goes on to the next item


def _json_damage(path: Path) -> tuple[str, str] | None:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return JSON_OBJECT, "missing"
    except (OSError, UnicodeDecodeError) as error:
        return JSON_OBJECT, _text(error)
    if not text.strip():
        return JSON_OBJECT, "empty"
    try:
        state = json.loads(text)
    except json.JSONDecodeError as error:
        where = f"{error.msg.removesuffix(' at')} at character {error.pos}"
        # The parser ran out of text (inside a string, or after a value): the file ends too soon.
        if error.msg.startswith("Unterminated string") or not text[error.pos :].strip():
            return JSON_OBJECT, f"cut short after {len(text)} characters ({where})"
        return JSON_OBJECT, f"not JSON ({where})"
    if not isinstance(state, dict):
        return JSON_OBJECT, f"a JSON {type(state).__name__}"
    return None


def _pickle_damage(path: Path) -> tuple[str, str] | None:
    """A pickle stream's opcodes read to its STOP, without loading (running) any of it."""
    size = _size_or_missing(path)
    if size is None:
        return PICKLE_WHOLE, "missing"
    if size == 0:
        return PICKLE_WHOLE, "empty"
    with path.open("rb") as file:
        file.seek(size - 1)
        if file.read(1) != PICKLE_STOP:
            return PICKLE_WHOLE, f"cut short after {size} bytes (no STOP at its end)"
        if size > PICKLE_WALK_LIMIT:
            return None
        file.seek(0)
        data = file.read()
    try:
        for _ in pickletools.genops(data):
            pass
    except ValueError as error:
        return PICKLE_WHOLE, f"cut short after {size} bytes ({_text(error)})"
    return None


def _saved_state_damage(path: Path, kind: str) -> tuple[str, str] | None:
    if kind == EITHER:
        with path.open("rb") as file:
            kind = PICKLE if file.read(1) == PICKLE_PROTO else JSON
    return _pickle_damage(path) if kind == PICKLE else _json_damage(path)


def _text(error: BaseException) -> str:
    return str(error) or type(error).__name__


# ----------------------------------------------------------- the trials


def checkpoint_file_findings(results: ExperimentResults) -> Iterator[Finding | str]:
    """Every completed trial's exported model, the best trial's last checkpoint (read through,
    with its model) and the last two checkpoints of every trial a resume would continue.

    A running trial's file damaged after its driver died mid-session is a note: the copy of
    the checkpoint it was making into the trial's folder was cut short with the driver's
    workers, and Ray recorded only the checkpoints it finished copying; ``tunekit resume``
    restores the last of those.
    """
    from tunekit.tracking.artifacts import final_model_path

    directory = results.experiment_dir
    best = results.best
    rows = {str(row["trial_id"]): row for row in table_rows_of(results.trials)}
    files: dict[Path, tuple[str, bool]] = {}  # file -> (trial id, read through)
    for trial_id, row in rows.items():
        status = str(row["status"])
        is_best = best is not None and best.trial_id == trial_id
        if status == TrialStatus.COMPLETED and (model := final_model_path(directory, trial_id)) is not None:
            files[model] = (trial_id, is_best)
        resumed = status in (TrialStatus.RUNNING, TrialStatus.STOPPED)
        # A stopped trial's newest checkpoint may be one its driver never heard of (see
        # check._checkpoint_records): a resume restores it or the one before.
        for last in last_checkpoints(directory / trial_id, 2 if resumed else 1 if is_best else 0):
            for name in (CHECKPOINT_STATE, CHECKPOINT_WEIGHTS, FINAL_MODEL, FINAL_WEIGHTS):
                # The two checkpoint files are always saved; a model only at the trial's end.
                if name in (CHECKPOINT_STATE, CHECKPOINT_WEIGHTS) or (last / name).is_file():
                    files[last / name] = (trial_id, is_best)
    died: bool | None = None  # asked once, and only when a running trial's file is damaged
    for path, (trial_id, thorough) in sorted(files.items()):
        found = damage(path, thorough=thorough)
        if found is None:
            continue
        row = rows[trial_id]
        if str(row["status"]) == TrialStatus.RUNNING:
            died = died_mid_session(directory) if died is None else died
            if died:
                yield (
                    f"the last session's driver died without ending it (killed, or a second signal): "
                    f"{trial_label(row)} was copying a checkpoint it cut short ({path}: {found[1]}); "
                    "`tunekit resume` continues the trial from the last checkpoint Ray finished copying"
                )
                continue
        yield Finding(CHECKPOINT_FILES, f"{trial_label(row)} {path}", *found)
    yield from _checksum_findings(directory, rows)


def _checksum_findings(directory: Path, rows: dict[str, dict[str, Any]]) -> Iterator[Finding | str]:
    """Every payload of every kept checkpoint against the checksum its worker recorded beside it
    (``tunekit.storage.checksums``): a changed byte inside a weight opens whole and reads as a weight.

    A damaged checkpoint older than the trial's newest is a note: a restore passes over it (chaos
    seed 389070: a worker outliving its killed driver wrote a newer one after Ray's last save named
    the damaged one), and nothing else reads it; the newest, and with it the trial's model, is a
    disagreement. The folders of trials no row names yet count too: a driver killed within the
    tables' two seconds leaves them for the resume to restore (chaos seed 427956: a cut weights.npz
    in one of them passed ``check``).
    """
    from tunekit.tracking.artifacts import checkpoint_order

    unnamed = {folder.name: {"trial_id": folder.name} for folder in unnamed_trial_folders(directory, set(rows))}
    lost: set[str] | None = None  # read once, and only when an unnamed folder's checkpoint is damaged
    for trial_id, row in {**rows, **unnamed}.items():
        label, number = trial_label(row) if trial_id in rows else f"trial folder {trial_id}", row.get("number")
        folders = sorted((directory / trial_id).glob("checkpoint_*"), key=checkpoint_order)
        for folder in folders:
            for name, problem in damaged_payloads(folder):
                if folder != folders[-1]:
                    yield (
                        f"{label} {folder / name}: {problem}; a newer checkpoint is whole, and a resume that "
                        "restores this one (Ray's state saved before a kill can name it) passes over it for "
                        "the newest whole one before it, or the first epoch, and says so"
                    )
                    continue
                if trial_id not in rows:
                    lost = _lost_trials(directory) if lost is None else lost
                    if trial_id in lost:
                        continue  # closed as lost: nothing reads its folder (orphan_folder_findings says so)
                if trial_id in rows and ((folder / FINAL_MODEL).is_file() or (folder / FINAL_WEIGHTS).is_file()):
                    repair = f"`tunekit retrain {shown(directory)} --trial {number}` trains it again, exported beside"
                elif str(row.get("status", TrialStatus.RUNNING)) in (TrialStatus.RUNNING, TrialStatus.STOPPED):
                    repair = "`tunekit resume` passes over it for the trial's newest whole checkpoint"
                else:  # an ended trial's last checkpoint, with no model: no command reads it again
                    repair = f"the trial ended {row.get('status')} and nothing reads it again; restore it from a copy"
                yield Finding(
                    CHECKPOINT_FILES, f"{label} {folder / name}", "its recorded checksum", f"{problem}; {repair}"
                )


def orphan_folder_findings(directory: Path, trial_ids: set[str]) -> Iterator[Finding | str]:
    """Trial folders (a checkpoint or an output.log inside) that no row of trials.csv names.

    A driver that died mid-session can leave one (Ray started the trial before a table write
    recorded it): a note, since ``tunekit resume`` records it. Otherwise nothing will ever read
    it: a disagreement, with what to do.
    """
    died: bool | None = None
    lost: set[str] | None = None  # read once, and only when a folder no row names is found
    for folder in unnamed_trial_folders(directory, trial_ids):
        lost = _lost_trials(directory) if lost is None else lost
        if folder.name in lost:
            yield (
                f"trial folder {folder.name} is in no row of {TRIALS_FILE}: Ray started the trial as its driver died, "
                "and the resume closed it in the study as lost (it was never recorded); nothing reads the folder"
            )
            continue
        died = died_mid_session(directory) if died is None else died
        if died:
            yield (
                f"trial folder {folder.name} is in no row of {TRIALS_FILE}: the last session's driver died before "
                "its tables recorded the trial; `tunekit resume` records it"
            )
            continue
        yield Finding(
            f"{TRIALS_FILE} vs trial folders",
            f"folder {folder}",
            f"a trial in {TRIALS_FILE}",
            f"none; no record names it: restore {TRIALS_FILE} from a copy, or remove the folder (`rm -r {folder}`)",
        )


def _lost_trials(directory: Path) -> set[str]:
    """Ray's ids of the study's trials a resume closed as lost (``LOST_ATTR``)."""
    import optuna

    from tunekit.search.attrs import LOST_ATTR
    from tunekit.search.plan import study_storage

    if not study_file(directory).is_file():
        return set()  # opening a missing journal would create it
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        storage = study_storage(directory)
        trials = [t for s in storage.get_all_studies() for t in storage.get_all_trials(s._study_id, deepcopy=False)]
    except (ValueError, KeyError):  # a damaged journal: its own finding says so
        return set()
    return {
        str(t.user_attrs[RAY_TRIAL_ATTR])
        for t in trials
        if LOST_ATTR in t.user_attrs and RAY_TRIAL_ATTR in t.user_attrs
    }


def kept_checkpoint_findings(trial_dir: Path, label: str, kept_epoch: int) -> Iterator[Finding]:
    """``training.keep: best``: the checkpoint of the trial's export holds the kept epoch's
    weights (``kept.npz``), the epoch trials.csv names: the model is the one its figure describes."""
    from tunekit.tracking.artifacts import final_model_path
    from tunekit.worker.keep import read_kept

    model = final_model_path(trial_dir.parent, trial_dir.name)
    if model is None:  # no export here (a bucket experiment's checkpoints stay in the bucket)
        return
    saved = read_kept(model.parent)
    where = f"{TRIALS_FILE} vs {CHECKPOINT_FILES}"
    if saved is None:
        yield Finding(where, f"{label} {model.parent / KEPT_WEIGHTS}", f"epoch {kept_epoch}", "missing")
    elif saved[0] != kept_epoch:
        yield Finding(where, f"{label} kept epoch of its exported model", kept_epoch, saved[0])


def last_checkpoints(trial_dir: Path, count: int = 1) -> list[Path]:
    """The trial's ``count`` newest checkpoint folders that hold a ``state.json``, newest first
    (a folder without one is a stand-in a resume left, or one Ray's rotation is removing)."""
    from tunekit.tracking.artifacts import checkpoint_order

    found: list[Path] = []
    for checkpoint in sorted(trial_dir.glob("checkpoint_*"), key=checkpoint_order, reverse=True):
        if len(found) >= count:
            break
        if (checkpoint / CHECKPOINT_STATE).is_file():
            found.append(checkpoint)
    return found


# ------------------------------------------------------------ Ray's state


def saved_state_findings(experiment_dir: Path) -> Iterator[Finding]:
    """Ray's newest saved state files, which ``tunekit resume`` hands to ``Tuner.restore``:
    each JSON parses, and each pickle is whole."""
    from tunekit.compat.ray_saved_state import damaged_saved_state

    refused = damaged_saved_state(experiment_dir)  # the resume's own test, which refuses to start
    for pattern, kind in RAY_FILES.items():
        path = max(experiment_dir.glob(pattern), default=None)
        if path is None or (found := _saved_state_damage(path, kind)) is None:
            continue
        expected, actual = found
        if refused is not None and path.name == refused[0]:
            consequence = "`tunekit resume` refuses an experiment whose saved state is damaged"
        else:
            consequence = "`tunekit resume` would fail as Ray's Tuner.restore reads it"
        yield Finding(SAVED_STATE, str(path), expected, f"{actual}; {consequence}")
