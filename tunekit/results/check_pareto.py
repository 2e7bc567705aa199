"""``tunekit check`` with several objectives: the front, feasibility, the study and MLflow's ranks agree.

``tunekit.results.check`` calls these for a multi-objective experiment. The front is the
summary's (``tunekit.results.pareto``, the one computation); here it is held against:

* the definition itself, recomputed pair by pair: every front trial is non-dominated among
  the feasible completed trials, every other one is dominated by a front trial;
* ``trials.csv``'s ``feasible`` column, recomputed from its ``final.*`` values and the constraints;
* ``ledger.json``'s copy of the front, when the last session wrote it (``check.py``);
* the study: each COMPLETE trial's values, the feasibility its constraints give, and
  Optuna's own front of the search's trials (a warm start's history left out);
* MLflow: every trial run's ``tunekit.pareto_rank`` tag.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from tunekit.compat.optuna_study import pareto_front_of
from tunekit.layout import FEASIBLE_COLUMN, LEDGER_FILE, TRIALS_FILE, TrialStatus, finite
from tunekit.results.load import ExperimentResults
from tunekit.results.pareto import ParetoFront, final_values
from tunekit.results.summary import Summary
from tunekit.search.pareto import dominates, is_feasible, to_minimize

# (where, what, expected, actual): check.py makes each a Finding (this module does not
# import check.py, which imports it).
Disagreement = tuple[str, str, Any, Any]
FRONT_VS_STUDY = "summary vs study's front"  # where the summary's front meets Optuna's


def front_findings(results: ExperimentResults, summary: Summary) -> Iterator[Disagreement]:
    """The summary's front against its definition, the feasible column and ledger.json."""
    pareto = summary.pareto
    if pareto is None:
        return
    spec = results.spec
    rows = [] if results.trials.empty else results.trials.to_dict("records")
    vectors: dict[str, tuple[float, ...]] = {}
    labels = {str(row["trial_id"]): _label(row) for row in rows}
    for row in rows:
        values, label = final_values(row), _label(row)
        feasible = is_feasible(values, spec.constraints)
        recorded = row.get(FEASIBLE_COLUMN)
        if _known(recorded) and _truth(recorded) != feasible:
            yield (f"{TRIALS_FILE} feasible vs constraints", label, feasible, recorded)
        vector = to_minimize(values, spec.objectives)
        if str(row["status"]) == TrialStatus.COMPLETED and feasible and vector is not None:
            vectors[str(row["trial_id"])] = vector
    on_front = {t.trial_id for t in pareto.front}
    for trial_id, vector in vectors.items():
        beaten_by = [other for other, v in vectors.items() if dominates(v, vector)]
        if trial_id in on_front and beaten_by:
            yield ("summary's front vs dominance", f"front {labels[trial_id]}", "non-dominated", beaten_by)
        if trial_id not in on_front and not any(dominates(vectors[t], vector) for t in on_front if t in vectors):
            yield ("summary's front vs dominance", labels[trial_id], "dominated by a front trial", "not")


def ledger_front_findings(ledger: Mapping[str, Any], pareto: ParetoFront) -> Iterator[Disagreement]:
    """``ledger.json``'s front (its parsed record) against the summary's."""
    recorded = ((ledger.get("summary") or {}).get("pareto") or {}).get("front") or []
    ids = [str(t.get("trial_id")) for t in recorded]
    if ids != [t.trial_id for t in pareto.front]:
        yield (f"{LEDGER_FILE} vs summary", "pareto front", ids, [t.trial_id for t in pareto.front])


def study_findings(
    results: ExperimentResults, summary: Summary, study: Any, ours: Mapping[str, Any]
) -> Iterator[Disagreement]:
    """Each COMPLETE study trial's values and constraints against trials.csv; Optuna's front of
    the search's own trials (``ours``: no warm-start history) against the summary's."""
    pareto = summary.pareto
    if pareto is None:
        return
    where = f"{TRIALS_FILE} vs study"
    rows = {str(r["trial_id"]): r for r in ([] if results.trials.empty else results.trials.to_dict("records"))}
    for trial_id, row in rows.items():
        trial = ours.get(trial_id)
        if trial is None or trial.state.name != "COMPLETE":
            continue
        values = final_values(row)
        expected = [values.get(o.name) for o in results.spec.objectives]
        if not all(_close(a, b) for a, b in zip(expected, trial.values, strict=True)):
            yield (where, f"{_label(row)} values", expected, trial.values)
        feasible = all(v <= 0 for v in trial.constraints.values())
        if feasible != is_feasible(values, results.spec.constraints):
            yield (where, f"{_label(row)} feasible by its constraints", not feasible, feasible)
    ray_ids = {trial.number: trial_id for trial_id, trial in ours.items()}
    best = {ray_ids[t.number] for t in pareto_front_of(list(ours.values()), study.directions)}
    front = {t.trial_id for t in pareto.front}
    if best != front:
        yield (FRONT_VS_STUDY, "pareto front", sorted(front), sorted(best))


def mlflow_findings(summary: Summary, runs: Mapping[str, list[Any]]) -> Iterator[Disagreement]:
    """Every trial run's ``tunekit.pareto_rank`` tag against the summary's rank."""
    from tunekit.tracking.tags import TAG_PARETO_RANK

    pareto = summary.pareto
    if pareto is None:
        return
    for trial_id in sorted({*pareto.ranks, *pareto.unranked}):
        found = runs.get(trial_id, [])
        if len(found) == 1 and found[0].data.tags.get(TAG_PARETO_RANK) != pareto.rank_text(trial_id):
            tagged = found[0].data.tags.get(TAG_PARETO_RANK)
            yield ("summary vs mlflow", f"trial {trial_id} {TAG_PARETO_RANK}", pareto.rank_text(trial_id), tagged)


def _label(row: Mapping[str, Any]) -> str:
    number = finite(row.get("number"))
    return f"trial {int(number) if number is not None else '?'} ({row['trial_id']})"


def _known(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and value != value)


def _truth(value: Any) -> bool:
    return value is True or str(value).lower() == "true"


def _close(a: float | None, b: float | None) -> bool:
    return a is not None and b is not None and abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))
