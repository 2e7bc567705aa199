"""A check's findings: one disagreement between two records of an experiment, and the report
of all of them (``tunekit check``; ``tunekit.results.check`` and ``check_mlflow`` fill it)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunekit.layout import finite
from tunekit.storage.buckets import shown

if TYPE_CHECKING:
    import pandas as pd

# Times are written rounded to milliseconds, and a table is written a moment apart from the
# clock file: figures within this many seconds agree.
TIME_SLACK_S = 0.05
# Relative tolerance of derived floats (slot-hours recomputed from rounded spans).
RELATIVE_SLACK = 1e-6


@dataclass(frozen=True)
class Finding:
    """One disagreement: where it was seen, what, and the two values side by side."""

    where: str  # f"{TRIALS_FILE} vs study"
    what: str  # "trial 3 (abc12) state"
    expected: Any
    actual: Any

    def __str__(self) -> str:
        return f"{self.where}: {self.what}: {self.expected!r} vs {self.actual!r}"


@dataclass
class CheckReport:
    experiment_dir: Path
    findings: list[Finding] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)  # the places compared, in order
    notes: list[str] = field(default_factory=list)  # what was not compared, and why

    @property
    def ok(self) -> bool:
        return not self.findings

    def describe(self) -> str:
        places = ", ".join(self.checked)
        count = len(self.findings)
        verdict = "ok" if self.ok else f"{count} disagreement{'' if count == 1 else 's'}"
        lines = [f"{shown(self.experiment_dir)}: {verdict}"]
        lines.append(f"compared: {places}")
        lines += [f"  {finding}" for finding in self.findings]
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)


def finding_of(disagreement: tuple[str, str, Any, Any]) -> Finding:
    """A ``Finding`` from a (where, what, expected, actual) tuple, as the Pareto checks give them."""
    return Finding(*disagreement)


def same(a: float | None, b: float | None, *, absolute: float = 1e-9) -> bool:
    """Two figures agree: both missing, or equal within ``RELATIVE_SLACK`` (or ``absolute``)."""
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(a, b, rel_tol=RELATIVE_SLACK, abs_tol=absolute)


def table_rows_of(table: pd.DataFrame) -> list[dict[str, Any]]:
    """A table's rows as dicts (none for an empty table)."""
    return [] if table.empty else table.to_dict("records")


def trial_label(row: dict[str, Any]) -> str:
    """How a finding names a trial: ``trial 3 (abc12)``."""
    number = finite(row.get("number"))
    return f"trial {int(number) if number is not None else '?'} ({row['trial_id']})"


def dead_driver_lag(where: str, ran_ahead: str, lagging: list[Finding]) -> str:
    """One note for the differences a driver that died mid-session leaves between two records it
    wrote at different paces (``ran_ahead`` says which, and by what): ``tunekit resume`` reconciles them."""
    shown = "; ".join(f"{finding.what}: {finding.expected!r} vs {finding.actual!r}" for finding in lagging[:3])
    more = f" and {len(lagging) - 3} more" if len(lagging) > 3 else ""
    return (
        f"the last session's driver died without ending it (killed, or a second signal): {ran_ahead}, "
        f"which `tunekit resume` reconciles ({where}: {shown}{more})"
    )
