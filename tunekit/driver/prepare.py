"""The prepare stage of a search: its spec, the builders passed from Python, the Ray it runs on
and the console, checked before anything starts (``Prepared``).

A run prepares from the spec it was given; a resume from the folder it opened: the spec there
with its overrides, every record the search continues from checked whole (the journal's torn
tail cut back, said), the study caught up with the tables, and a complete search said and
closed without Ray. ``tunekit.driver.runner`` runs the stages in turn.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from tunekit.config.growth import grow_hint, resumed_spec
from tunekit.config.spec import ExperimentSpec, load_spec
from tunekit.contract import Trainable
from tunekit.driver.connect import Target, resume_target, run_target
from tunekit.driver.folders import Experiment
from tunekit.driver.outages import check_writable
from tunekit.driver.resumable import check_resumable
from tunekit.errors import NoResultError
from tunekit.layout import TRIALS_FILE, unstarted_by_time_budget
from tunekit.results.completion import no_result_reason, search_complete
from tunekit.results.load import load
from tunekit.storage.buckets import shown
from tunekit.storage.clock import SearchClock
from tunekit.storage.store import table_rows
from tunekit.tracking.preflight import check_reachable, complete_record


@dataclass(frozen=True)
class Prepared:
    """What the prepare stage hands on: everything the later stages read of the search but its folder."""

    spec: ExperimentSpec
    builders: Trainable | None  # passed from Python: the results hold them for their rebuilds
    target: Target  # the Ray the search runs on (joined next)
    stream: TextIO | None  # the console's progress and closing lines; None for silence
    grown: bool = False  # a resume that grows the search: spec.yaml says so once the cluster is joined


def progress_stream(progress: TextIO | bool | None) -> TextIO | None:
    """``run``'s and ``resume``'s ``progress``: True for stdout, False or None for silence."""
    return sys.stdout if progress is True else (progress or None)


def prepare_run(
    spec: str | Path | Mapping[str, Any] | ExperimentSpec,
    overrides: Sequence[str],
    sections: Mapping[str, Any],
    builders: Trainable | None,
    address: str | None,
    progress: TextIO | bool | None,
) -> Prepared:
    """A new search's spec, loaded and checked (``SpecError``), its tracking reachable when required."""
    if not isinstance(spec, ExperimentSpec):
        spec = load_spec(spec, overrides, sections, builders)
    elif builders is not None:
        spec = dataclasses.replace(spec, trainable=builders)
    check_reachable(spec)  # tracking.required: refuse before anything is written or started
    return Prepared(spec, builders, run_target(address), progress_stream(progress))


def prepare_resume(
    experiment: Experiment,
    overrides: Sequence[str],
    address: str | None,
    local: bool,
    builders: Trainable | None,
    stream: TextIO | None,
) -> Prepared | None:
    """A stopped search's spec with ``overrides``, its records checked whole, its folder writable;
    None when the search is complete (said on ``stream``: nothing to resume, no Ray).

    Raises:
        SpecError: an override the resume does not take.
        DamagedFileError: a record the resume continues from is missing or damaged.
        NoResultError: the search is complete and no trial reported the metric, as its run said.
    """
    directory = experiment.directory
    spec, grown = resumed_spec(directory, overrides, builders)
    experiment.lease.outage_s = spec.storage.outage_s  # writes wait for its confirmation as long as for the storage
    # Before anything is read as whole, and before Ray starts: every record the resume continues
    # from is (the journal's torn tail is cut back here, and said); a complete search's too.
    for mended in check_resumable(directory):
        if stream is not None:
            stream.write(f"tunekit: {mended}\n")
    from tunekit.driver.study_catch_up import caught_up

    caught_up(directory, spec, stream)  # a study behind its tables takes their endings: before anything reads it
    rows = table_rows(directory / TRIALS_FILE)
    if not grown and search_complete(directory, spec.name, spec.budget.num_samples, rows):
        _said_complete(spec, directory, rows, stream, from_python=builders is not None)
        return None
    check_writable(spec, directory)  # a read-only folder or a full disk: one line, before Ray starts
    check_reachable(spec)
    return Prepared(spec, builders, resume_target(directory, address, local=local), stream, grown)


def _said_complete(
    spec: ExperimentSpec,
    directory: Path,
    rows: Sequence[Mapping[str, str]],
    stream: TextIO | None,
    *,
    from_python: bool,
) -> None:
    """A complete search: says there is nothing to resume (no Ray, no session: its figures stay as
    they are), and fails as its run did (exit 1) when no trial reported the metric."""
    if stream is not None:
        said = f"nothing to resume{grow_hint(shown(directory), spec.scheduler.type, from_python)}"
        endings = [(row.get("status"), row.get("reason")) for row in rows]
        if unstarted_by_time_budget(spec.budget.num_samples, endings):
            said = (
                f"its time budget of {spec.budget.time_budget_s or 0:g} s ran out (`tunekit resume "
                f"{shown(directory)} --set budget.time_budget_s=N` runs the rest for up to N seconds)"
            )
        stream.write(f"the search is complete: {said}\n")
    if (done := complete_record(spec, directory)) is not None and stream is not None:
        stream.write(done + "\n")
    results = load(directory)
    clock = SearchClock.read(directory)
    trials = list(results.trials.itertuples())  # trials.csv's rows, read as the run's records are
    reason = no_result_reason(spec, directory, trials, clock.active_seconds if clock else 0.0)
    if reason:
        raise NoResultError(reason, directory)
