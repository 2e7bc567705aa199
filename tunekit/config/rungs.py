"""Where ASHA and Hyperband compare trials: the rungs' epochs, and which bracket a trial is in.

Ray's asynchronous Hyperband (``AsyncHyperBandScheduler(brackets=B)``) is ASHA with B brackets;
bracket b makes its first comparison at ASHA's rung b (``grace_period × rf^b``), so every
bracket's rungs are among ASHA's own. Rungs are numbered over ASHA's epochs whichever the
bracket: rung 1 is the second of them for every trial. Bracket b's trials are the ones whose
number is b modulo B (Ray draws the bracket at random, which neither a resume nor the same seed
could repeat); the last bracket, when there is one more than the rungs, stops nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from tunekit.config import _validate as v
from tunekit.errors import SpecError

# Hyperband's brackets when scheduler.brackets is not given (fewer when the rungs are fewer).
DEFAULT_BRACKETS = 3


def asha_milestones(grace_period: int, reduction_factor: float, max_epochs: int) -> list[int]:
    """Epochs at which ASHA compares trials: grace × rf^k below max_epochs (as Ray computes them)."""
    count = int(math.log(max_epochs / grace_period, reduction_factor) + 1e-9) + 1
    milestones = sorted({int(grace_period * reduction_factor**k) for k in range(count)})
    return [m for m in milestones if m < max_epochs]


def most_brackets(grace_period: int, reduction_factor: float, max_epochs: int) -> int:
    """One more bracket than the rungs: the last then trains every trial to the end."""
    return len(asha_milestones(grace_period, reduction_factor, max_epochs)) + 1


def bracket_of(number: int, brackets: int) -> int:
    """The bracket of trial ``number`` (its number in the study and trials.csv)."""
    return number % brackets


def parse_rungs(section: Mapping[str, Any], kind: str, max_epochs: int) -> tuple[int, float, int]:
    """ASHA's and Hyperband's ``grace_period``, ``reduction_factor`` and ``brackets`` (1 for ASHA);
    FIFO's section may hold the first two, unused."""
    grace = v.integer(section.get("grace_period", 1), "scheduler.grace_period", minimum=1)
    if kind in ("asha", "hyperband") and grace > max_epochs:
        raise SpecError("scheduler.grace_period", f"must be <= budget.max_epochs ({max_epochs})", grace)
    factor = v.number(section.get("reduction_factor", 3), "scheduler.reduction_factor", above=1)
    if kind != "hyperband":
        if "brackets" in section:
            rule = "is a hyperband setting; set scheduler.type: hyperband"
            raise SpecError("scheduler.brackets", rule, section["brackets"])
        return grace, factor, 1
    most = most_brackets(grace, factor, max_epochs)
    if "brackets" not in section:
        return grace, factor, min(DEFAULT_BRACKETS, most)
    brackets = v.integer(section["brackets"], "scheduler.brackets", minimum=1)
    if brackets > most:
        rungs = ", ".join(map(str, asha_milestones(grace, factor, max_epochs))) or "none"
        raise SpecError(
            "scheduler.brackets",
            f"must be <= {most}: one more than the rungs (grace_period {grace}, reduction_factor {factor:g} "
            f"and budget.max_epochs {max_epochs} give rungs at epochs {rungs})",
            brackets,
        )
    return grace, factor, brackets
