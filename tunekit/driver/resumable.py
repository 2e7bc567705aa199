"""Before a resume starts Ray: is every record it continues from whole?

A resume continues from the study, the tables, the clock and Ray's saved state. Any of them
missing or damaged used to surface only after Ray had started and trials had trained (a
missing study: an ``IndexError`` after 24 s, and an empty journal left behind). Here each is
read first, in a second or so, and a resume that cannot continue is refused with one line
naming the file (the journal's line: ``tunekit.storage.journal`` reads it whole); the one damage a
resume mends itself, the study journal's torn last line, is cut back and said once, and only
when every line before it is whole.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from tunekit.compat.ray_saved_state import damaged_saved_state, name_the_last_save_newest
from tunekit.errors import DamagedFileError
from tunekit.layout import (
    CLUSTER_FILE,
    EPOCHS_FILE,
    EXPLOITS_FILE,
    SPANS_FILE,
    STARTED_FILE,
    STUDY_FILE,
    TRACKING_FILE,
    TRIALS_FILE,
    study_file,
)
from tunekit.storage.buckets import bucket_of
from tunekit.storage.journal import damage_message, journal_repair, verify_journal
from tunekit.storage.store import check_table, read_json, repair_torn_tail

TABLES = (TRIALS_FILE, EPOCHS_FILE, SPANS_FILE, EXPLOITS_FILE)
RECORDS = (STARTED_FILE, TRACKING_FILE, CLUSTER_FILE)


def check_resumable(experiment_dir: Path) -> list[str]:
    """Verifies what a resume reads, and mends the journal's torn tail; returns what was mended.

    Call it with the experiment's lease held (it may write the journal).

    Raises:
        DamagedFileError: a file the resume needs is missing or damaged beyond repair.
    """
    started = _ran(experiment_dir)
    mended = _study(experiment_dir, required=started)
    for name in TABLES:
        check_table(experiment_dir / name)
    for name in RECORDS:
        read_json(experiment_dir / name)
    if bucket_of(experiment_dir) is None and (renamed := name_the_last_save_newest(experiment_dir)):
        mended.append(renamed)
    if damage := damaged_saved_state(experiment_dir):  # Ray would start the search over
        name, problem = damage
        raise DamagedFileError(
            experiment_dir / name,
            f"{problem}, as Ray's saved state (its driver was killed while Ray wrote it)",
            "a resume would start a new search over this one's records; its results stay readable "
            "(`tunekit report`), and `tunekit run` starts the search again elsewhere",
        )
    return mended


def _ran(experiment_dir: Path) -> bool:
    """Whether the search got as far as its first trial or Ray's first save."""
    return (experiment_dir / TRIALS_FILE).is_file() or any(experiment_dir.glob("experiment_state-*.json"))


def _study(experiment_dir: Path, *, required: bool) -> list[str]:
    path = study_file(experiment_dir)
    if path.name != STUDY_FILE:
        return []  # an older experiment's SQLite study: SQLite keeps itself whole
    if not path.is_file():
        if required:
            raise DamagedFileError(
                path,
                "missing, while the search has run (its trials and configurations are recorded there)",
                journal_repair(experiment_dir),
            )
        return []
    report = verify_journal(path)
    if report.damage is not None:
        raise DamagedFileError(path, damage_message(report.damage), journal_repair(path.parent))
    mended = []
    if cut := repair_torn_tail(path):
        mended.append(
            f"{STUDY_FILE}: cut back a torn last line ({cut} bytes, a write cut short by a kill or a "
            "full disk) before appending; the study lost that one write, which the resume redoes"
        )
    return mended


def stand_in_for_rotated_checkpoints(experiment_dir: Path) -> list[Path]:
    """Empty stand-ins for checkpoints that Ray's last saved state names but rotation deleted.

    A killed driver leaves Ray's experiment state up to a second old (up to 30 s with
    thousands of trials); meanwhile trials kept reporting and their oldest checkpoints were
    rotated away. Ray refuses to restore a trial whose recorded checkpoint is gone. Nor can
    the trial resume from a newer kept checkpoint: the epochs in between reached only the
    driver that died, so its epochs table would have a gap, and a trial whose newest
    checkpoint is its last epoch would end without reporting it (as "stopped"). So each
    missing name becomes an empty directory: the trainable finds no state in it and trains
    the trial again from its first epoch, reporting every epoch (each row it had is
    replaced). It costs the epochs of trials whose checkpoints turned over faster than Ray
    saved its state: short epochs, so little.

    A bucket experiment's (``experiment_dir`` its fresh cache, which holds each kept checkpoint's
    small files) get their stand-ins in the bucket, where Ray looks: its saved state there is up
    to ``SAVE_STATE_TO_A_BUCKET_EVERY_S`` old, or older when an outage kept it from saving (chaos
    seed 724138: Ray's ``Path not found`` traceback as it rotated a checkpoint already gone, and a
    trial trained again). Remove them with ``remove_stand_ins``.

    Every missing index below a trial's newest checkpoint gets one, not only those below its
    oldest: a rotation's delete that failed in a storage outage leaves an old checkpoint behind
    (kept ``checkpoint_000004``, ``_000013``, ``_000014`` while Ray's state named the rotated
    ``_000012``: the trial failed with ``Could not recover from checkpoint``).
    """
    bucket = bucket_of(experiment_dir)
    stand_ins: list[Path] = []
    for trial_dir in (p for p in experiment_dir.iterdir() if p.is_dir()):
        kept = {int(p.name[11:]) for p in trial_dir.glob("checkpoint_*") if p.name[11:].isdigit()}
        for index in sorted(set(range(max(kept, default=0))) - kept):
            stand_in = trial_dir / f"checkpoint_{index:06d}"
            stand_in.mkdir()
            if bucket is not None:
                bucket.make_empty_folder(stand_in.relative_to(experiment_dir).as_posix())
            stand_ins.append(stand_in)
    return stand_ins


def remove_stand_ins(experiment_dir: Path, stand_ins: list[Path]) -> None:
    """The stand-ins Ray's own rotation left, once the search is over (in the bucket too)."""
    bucket = bucket_of(experiment_dir)
    for stand_in in stand_ins:
        with contextlib.suppress(OSError):  # Ray's own rotation may have removed it
            stand_in.rmdir()
        if bucket is not None:
            bucket.remove_empty_folder(stand_in.relative_to(experiment_dir).as_posix())
