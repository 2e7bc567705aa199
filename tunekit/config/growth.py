"""Growing a search on resume: ``tunekit resume DIR --set budget.num_samples=N``.

A resumed search may change its budget (more trials, another concurrency, a new time
budget) and nothing else: its study, ASHA's rungs and its MLflow runs only make sense
for the space, metric, epochs and trainable they were made with.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from tunekit.config.files import SPEC_LINE
from tunekit.config.spec import ExperimentSpec, apply_override, parse_spec
from tunekit.contract import Trainable
from tunekit.errors import SpecError
from tunekit.layout import SPEC_FILE, TRIALS_FILE
from tunekit.storage.store import table_rows

GROWABLE = ("budget.num_samples", "budget.max_concurrent", "budget.time_budget_s")


def grow_hint(experiment: str, scheduler: str, from_python: bool) -> str:
    """How a complete search grows, said after "nothing to resume"; nothing for PBT, which cannot
    grow. Builders passed from Python (a Tuner's, ``tunekit.run``'s) come back only from Python.
    ``experiment`` as the user names it: its folder, or a bucket experiment's URI (resuming the
    cache would bypass the bucket)."""
    if scheduler == "pbt":
        return ""
    if from_python:
        return " (more trials grow it: a Tuner's max_trials, or tunekit.resume's overrides=['budget.num_samples=N'])"
    return f" (`tunekit resume {experiment} --set budget.num_samples=N` grows it)"


def resumed_spec(
    experiment_dir: Path, overrides: Iterable[str] = (), trainable: Trainable | None = None
) -> tuple[ExperimentSpec, bool]:
    """The experiment's spec with ``overrides`` applied, and whether they changed it.

    Its ``search.warm_start_from`` directories are not checked again: their history is
    in the study already, and they may have moved since.

    Raises:
        SpecError: an override changes anything but ``GROWABLE``, breaks a spec rule, or
            asks for fewer trials than the search already ran.
    """
    text = (experiment_dir / SPEC_FILE).read_text()
    recorded = yaml.safe_load(text)
    before = _with_origin(parse_spec(recorded, experiment_dir, trainable), text)
    raw = copy.deepcopy(recorded)
    overrides = list(overrides)
    for assignment in overrides:
        apply_override(raw, assignment)
    # The budget's rules about the search so far come before the spec's: PBT's own rule
    # (max_concurrent equal to num_samples) would otherwise answer first, as if setting both
    # could grow a PBT search. A count below 1 is the spec's rule to refuse.
    asked = (raw.get("budget") or {}).get("num_samples")
    ran = trials_run(experiment_dir)
    if isinstance(asked, int) and 1 <= asked < ran:
        raise SpecError("--set budget.num_samples", f"must be at least the {ran} trials this search already ran", asked)
    if before.scheduler.type == "pbt" and isinstance(asked, int) and asked > before.budget.num_samples:
        # Ray's synchronous PBT ranks the population at the same epoch: trials added later
        # start at epoch 0 and rank only among themselves, with nothing of the population's.
        raise SpecError(
            "--set budget.num_samples",
            "cannot grow a PBT search: its population trains together from the first epoch; "
            "start a new search instead (search.warm_start_from takes this one's trials that never stepped)",
            asked,
        )
    after = before
    if overrides:
        grown = parse_spec(raw, experiment_dir, trainable)
        origin = (*before.origin, *(f"resume --set {a}" for a in overrides))
        after = dataclasses.replace(grown, spec_dir=before.spec_dir, origin=origin)
    changed = changed_keys(before.raw, after.raw)
    for key, value in changed.items():
        if key not in GROWABLE:
            raise SpecError(
                f"--set {key}",
                f"cannot change when resuming; only {', '.join(GROWABLE)} can",
                value,
            )
    return after, bool(changed)


def _with_origin(spec: ExperimentSpec, text: str) -> ExperimentSpec:
    """The recorded spec with the header it was written with, and the folder of the spec it started from."""
    origin = tuple(line[2:] for line in itertools.takewhile(lambda line: line.startswith("# "), text.splitlines()))
    started = next((line[len(SPEC_LINE) :] for line in origin if line.startswith(SPEC_LINE)), "")
    return dataclasses.replace(spec, spec_dir=str(Path(started).parent) if started else "", origin=origin)


def changed_keys(before: Mapping[str, Any], after: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Every dotted key whose value differs between two raw specs, with its new value."""
    changed: dict[str, Any] = {}
    for key in [*before, *(k for k in after if k not in before)]:
        path = f"{prefix}{key}"
        old, new = before.get(key), after.get(key)
        if isinstance(old, Mapping) and isinstance(new, Mapping):
            changed.update(changed_keys(old, new, f"{path}."))
        elif old != new:
            changed[path] = new
    return changed


def trials_run(experiment_dir: Path) -> int:
    """How many trials the search has started, by its trials table."""
    return len(table_rows(experiment_dir / TRIALS_FILE))
