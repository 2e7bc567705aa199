"""Whether a search is complete: one rule for ``tunekit resume`` (nothing left to run) and
``tunekit status`` ("finished"), so the two never disagree about the same experiment; and why
a search has no result, one line for its run and for its resume alike."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tunekit.config.objectives import headline_metric
from tunekit.config.spec import ExperimentSpec
from tunekit.layout import ERROR_FILE, LEDGER_FILE, TrialStatus, finite, stopped_by_time_budget, stopped_for_good
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


def no_result_reason(spec: ExperimentSpec, experiment_dir: Path, records: Sequence[Any], elapsed: float) -> str:
    """Why no trial reported the metric, in one line, or "" when one did.

    Args:
        spec: the experiment's spec (metric name, time budget).
        experiment_dir: where each trial's ``error.txt`` lives.
        records: the recorder's ``TrialRecord``s, or ``trials.csv``'s rows (NaN where empty).
        elapsed: active seconds the search ran.
    """
    if any(finite(r.final_metric) is not None or finite(r.best_metric) is not None for r in records):
        return ""
    name = headline_metric(spec).name
    failed = [r for r in records if r.status == TrialStatus.FAILED]
    budget = spec.budget.time_budget_s
    if failed:
        first = min(failed, key=lambda r: r.ended_at or r.started_at)
        text = f"no trial reported {name}: {len(failed)} failed (first: {first.reason or 'no reason recorded'})"
        error_file = experiment_dir / first.trial_id / ERROR_FILE
        return text + (f", see {error_file}" if error_file.is_file() else "")
    if budget is not None and elapsed >= budget * 0.95:
        trained = any(r.epochs for r in records)
        what = "before any trial reported it" if trained else "before any trial finished an epoch"
        return f"no trial reported {name}: the time budget of {budget:g} s ran out {what}"
    if not records:
        return f"no trial reported {name}: no trial started"
    return f"no trial reported {name}: {len(records)} trials ended without reporting it"
