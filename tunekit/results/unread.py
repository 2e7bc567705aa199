"""Space names that no completed trial read: a key renamed in the code only, or a branch that never ran.

Each attempt's first report carries the names its builders (and tunekit, for the training
settings and its own compile) read: ``info.space_read`` in trials.csv, ';'-joined. A name of
the space that none of the completed trials read was searched for nothing: its values never
reached a model. The search's end and ``tunekit report`` warn of it (``closing_lines``).
"""

from __future__ import annotations

import math
from typing import Any

from tunekit.layout import INFO_PREFIX, TrialStatus
from tunekit.results.load import ExperimentResults

SPACE_READ_COLUMN = f"{INFO_PREFIX}space_read"
REPORTED_COLUMN = f"{INFO_PREFIX}precision"  # every first report of an attempt carries it


def unread_names(results: ExperimentResults) -> list[str]:
    """The space's names, in its order, that no completed trial read; none when the reads were not
    recorded (an experiment from before they were, or builders whose reads are not checked)."""
    trials = results.trials
    if trials.empty or SPACE_READ_COLUMN not in trials.columns or REPORTED_COLUMN not in trials.columns:
        return []
    completed = trials[trials["status"] == TrialStatus.COMPLETED]
    # A completed trial whose attempt reported nothing (it resumed from its last checkpoint) has no info.
    reported = completed[completed[REPORTED_COLUMN].notna()]
    if reported.empty:
        return []
    read = set().union(*(_names(cell) for cell in reported[SPACE_READ_COLUMN]))
    return [name for name in results.spec.space.names if name not in read]


def unread_warning(results: ExperimentResults) -> str | None:
    """The closing line naming the space's unread names, or None when every name was read."""
    names = unread_names(results)
    if not names:
        return None
    listed = ", ".join(f"space.{name}" for name in names)
    it = "it" if len(names) == 1 else "them"
    return (
        f"warning: {listed}: no completed trial's builders read {it}, so the search varied {it} "
        "for nothing (a name the code spells otherwise, or a branch that never ran)"
    )


def _names(cell: Any) -> set[str]:
    """A cell's names: ';'-joined text; empty (NaN in a CSV) when the trial read none."""
    if cell is None or (isinstance(cell, float) and math.isnan(cell)) or cell == "":
        return set()
    return set(str(cell).split(";"))  # MLflow's loader reads a lone name as YAML: a number stays one
