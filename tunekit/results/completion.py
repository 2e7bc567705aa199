"""Whether a search is complete: one rule for ``tunekit resume`` (nothing left to run) and
``tunekit status`` ("finished"), so the two never disagree about the same experiment."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from tunekit.layout import LEDGER_FILE, TrialStatus, stopped_by_time_budget, stopped_for_good
from tunekit.search.attrs import EXHAUSTED_ATTR
from tunekit.storage.clock import ended_by_its_driver


def search_complete(experiment_dir: Path, study_name: str, num_samples: int, rows: Sequence[Mapping[str, str]]) -> bool:
    """The search ended by itself with its whole budget spent.

    Its last session was ended by its driver, which then wrote the ledger (a signal's stop
    leaves trials stopped for the resume, and a killed driver never ends its session), every
    trial in ``rows`` (``trials.csv``) ended, and it ran ``num_samples`` trials, its space
    ran out, or its time budget did (trials stopped by it; the rest of ``num_samples`` waits
    for a resume with a new ``budget.time_budget_s``). Trials the failure guard stopped are
    ended for good, as the time budget's are: a resume after the fix runs the trials not yet
    started. An experiment from a tunekit that did not record the session's end is never
    complete: resuming it is how it finds out.
    """
    if not ended_by_its_driver(experiment_dir) or not (experiment_dir / LEDGER_FILE).is_file():
        return False
    for_good = sum(stopped_for_good(row.get("status"), row.get("reason")) for row in rows)
    if for_good < sum(row.get("status") in (TrialStatus.RUNNING, TrialStatus.STOPPED) for row in rows):
        return False  # a signal stopped it, or its driver died: a resume trains those on
    if any(stopped_by_time_budget(row.get("status"), row.get("reason")) for row in rows):
        return True  # its time budget is spent: a new one (--set budget.time_budget_s) runs the rest
    return len(rows) >= num_samples or space_ran_out(experiment_dir, study_name) is not None


def space_ran_out(experiment_dir: Path, study_name: str) -> str | None:
    """Why the search ended before ``num_samples`` trials (a grid or a finite space had no
    configuration left), as the study recorded it, or None. Imports Optuna: ``search_complete``
    asks only once the cheaper rules passed."""
    import optuna

    from tunekit.search.plan import study_storage

    study = optuna.load_study(study_name=study_name, storage=study_storage(experiment_dir))
    reason = study.user_attrs.get(EXHAUSTED_ATTR)
    return str(reason) if reason else None
