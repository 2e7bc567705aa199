"""An experiment's Pareto front and each trial's rank, computed from its records once.

With several objectives, the trials that count are the feasible ones that trained to the
end (as ``study.best_trials`` counts Optuna's COMPLETE trials): they are sorted into
non-dominated fronts (``tunekit.search.pareto``), rank 1 being the Pareto front. Every
other trial is left unranked with the reason (pruned, stopped, failed, running,
infeasible). ``tunekit.results.summary`` puts this on the ``Summary`` that every report,
the ledger and MLflow render; ``tunekit.results.best`` picks the exported model among
the front by the ``select`` rule; ``tunekit check`` holds the study and MLflow against it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tunekit.config.objectives import selection_of
from tunekit.config.spec import ExperimentSpec
from tunekit.layout import FINAL_PREFIX, TrialStatus, finite
from tunekit.search.pareto import is_feasible, nondominated_ranks, to_minimize

if TYPE_CHECKING:
    import pandas as pd

INFEASIBLE = "infeasible"  # a trained trial that breaks a constraint: never on the front


@dataclass(frozen=True)
class FrontTrial:
    trial_id: str
    number: int | None
    values: dict[str, float]  # each objective's final value


@dataclass(frozen=True)
class ParetoFront:
    """The front (rank 1), best first by the first objective, and every trial's rank or why it has none."""

    objectives: list[str]  # "val_accuracy (max)", in the spec's order
    constraints: list[str]
    front: list[FrontTrial]
    ranks: dict[str, int]  # trial id -> front, from 1, for feasible completed trials
    unranked: dict[str, str]  # trial id -> why it is not ranked: its status, or INFEASIBLE

    def rank_text(self, trial_id: str) -> str:
        """``1`` for the front, ``2``..., or why the trial has no rank: what MLflow's tag and the tables show."""
        if trial_id in self.ranks:
            return str(self.ranks[trial_id])
        return self.unranked.get(trial_id, "")


def pareto_of(trials: pd.DataFrame, spec: ExperimentSpec) -> ParetoFront | None:
    """The front of a trials table (``trials.csv``); None for a single-objective experiment."""
    if not spec.multi_objective:
        return None
    ranked: list[tuple[str, int | None, dict[str, float], tuple[float, ...]]] = []
    unranked: dict[str, str] = {}
    for row in _rows(trials):
        trial_id = str(row["trial_id"])
        values = final_values(row)
        vector = to_minimize(values, spec.objectives)
        if str(row["status"]) != TrialStatus.COMPLETED or vector is None:
            unranked[trial_id] = str(row["status"])
        elif not is_feasible(values, spec.constraints):
            unranked[trial_id] = INFEASIBLE
        else:
            number = finite(row.get("number"))
            objectives = {o.name: values[o.name] for o in spec.objectives}
            ranked.append((trial_id, None if number is None else int(number), objectives, vector))
    ranks = nondominated_ranks([vector for *_, vector in ranked])
    first = spec.objectives[0]
    sign = -1.0 if first.mode == "max" else 1.0
    front = sorted(
        (
            FrontTrial(trial_id, number, values)
            for (trial_id, number, values, _), rank in zip(ranked, ranks, strict=True)
            if rank == 1
        ),
        key=lambda t: (sign * t.values[first.name], t.number if t.number is not None else -1),
    )
    return ParetoFront(
        objectives=[f"{o.name} ({o.mode})" for o in spec.objectives],
        constraints=[c.text for c in spec.constraints],
        front=front,
        ranks={trial_id: rank for (trial_id, *_), rank in zip(ranked, ranks, strict=True)},
        unranked=unranked,
    )


def selectable_trials(trials: pd.DataFrame, spec: ExperimentSpec) -> set[str]:
    """The trials the ``select`` rule could pick by their final values (feasible, meeting its
    ``subject_to``): with several objectives, the only ones whose epochs count toward the best
    so far (the time to best, the best-so-far plot), as the best itself is one of them."""
    rule = selection_of(spec)
    return {
        str(row["trial_id"])
        for row in _rows(trials)
        if is_feasible(values := final_values(row), spec.constraints)
        and all(c.holds(values.get(c.name)) for c in rule.subject_to)
    }


def final_values(row: Any) -> dict[str, float]:
    """A trial's last value of every metric trials.csv records for it (``final.<name>``)."""
    values: dict[str, float] = {}
    for key in row.keys():  # noqa: SIM118 - a pandas Series iterates over its values, a dict over its keys
        if str(key).startswith(FINAL_PREFIX) and (value := finite(row[key])) is not None:
            values[str(key)[len(FINAL_PREFIX) :]] = value
    return values


def _rows(trials: pd.DataFrame) -> list[dict[str, Any]]:
    if trials.empty:
        return []
    return [dict(zip(trials.columns, values, strict=True)) for values in trials.itertuples(index=False)]
