"""``tunekit check``'s journal part: is the study journal whole, every line of it?

``tunekit.storage.journal`` reads it against itself, its seal and trials.csv. Damage before its last
line is a disagreement with the command that repairs it; a torn last line alone is a note,
since the next resume cuts it back.
"""

from __future__ import annotations

from pathlib import Path

from tunekit.errors import DamagedFileError
from tunekit.layout import STUDY_FILE, TRIALS_FILE, study_file
from tunekit.results.findings import Finding
from tunekit.storage.journal import journal_repair, verify_journal


def journal_findings(experiment_dir: Path) -> list[Finding | str]:
    path = study_file(experiment_dir)
    if path.name != STUDY_FILE:
        return []  # an older experiment's SQLite study: SQLite keeps itself whole
    if not path.is_file():
        if not (experiment_dir / TRIALS_FILE).is_file():
            return []  # the search ended before its first trial
        return [Finding(STUDY_FILE, "the study", "present", f"missing; {journal_repair(experiment_dir)}")]
    try:
        report = verify_journal(path)
    except DamagedFileError as error:  # the seal itself
        return [Finding(STUDY_FILE, "its seal", "whole", f"{error.problem}; {journal_repair(experiment_dir)}")]
    if report.damage is not None:
        return [Finding(STUDY_FILE, "every line whole", "yes", f"{report.damage[1]}; {journal_repair(experiment_dir)}")]
    if report.torn_tail:
        return [
            f"{STUDY_FILE}: its last line is torn ({report.torn_tail} bytes, a write cut short by a kill or a full "
            "disk); `tunekit resume` cuts it back, and the resume redoes that write"
        ]
    return []
