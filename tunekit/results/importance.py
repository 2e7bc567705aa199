"""Parameter importance of an experiment, from every trial: completed and pruned alike.

An ASHA search completes few trials: a 10-trial search may train 4 to the end. Counting
completed trials only leaves importance empty exactly where it is wanted, although the
pruned trials' values at the rungs they reached hold most of what the search learned. So
importance is computed at the deepest epoch that enough trials reached: the last epoch
(completed trials, with their final values) when at least ``MIN_TRIALS_FOR_IMPORTANCE``
trained to the end, else the deepest ASHA rung at least that many reached, each trial with
its value at that rung's epoch. Every trial there was trained exactly as long, so the values
compare. The values come from the experiment's epoch table, so an experiment loaded from
MLflow has importance too; the estimate is Optuna's own evaluator (fANOVA by default) over an
in-memory study of those values.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tunekit.config.space import Choice, FloatRange, IntRange
from tunekit.layout import PARAM_PREFIX, TrialStatus, finite
from tunekit.search.plan import spec_milestones

if TYPE_CHECKING:
    import pandas as pd

# ExperimentResults is not imported: tunekit.results.load imports this module (its ``importance``).
ExperimentResults = Any


class FewTrialsWarning(UserWarning):
    """Parameter importance was asked of an experiment in which too few trials reached any one epoch."""


# fANOVA fits a random forest to (config, value) pairs: from fewer trials than this, its
# ranking is noise (from 2 it always split importance between whatever differed).
MIN_TRIALS_FOR_IMPORTANCE = 5


@dataclass(frozen=True)
class Importance(Mapping[str, float]):
    """Each parameter's share of the metric's variance (summing to 1), most important first.

    A mapping ``{parameter: share}``; empty when it could not be estimated, and then ``note``
    says why. ``to_series()`` gives a pandas Series.

    Attributes:
        shares: the mapping itself.
        metric: the metric whose values were explained.
        epoch: the epoch whose values were used (None when there are none).
        rung: that epoch's ASHA rung (0 is the first), or None for the last epoch.
        trials: how many trials' values were used; ``pruned`` of them were pruned (there or later).
        note: how it was computed, or why there is none.
    """

    shares: dict[str, float]
    metric: str
    epoch: int | None
    rung: int | None
    trials: int
    pruned: int
    note: str
    evaluator: str = "fANOVA"
    few_trials: bool = False  # empty because no epoch had enough trials (FewTrialsWarning's case)

    def __getitem__(self, name: str) -> float:
        return self.shares[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.shares)

    def __len__(self) -> int:
        return len(self.shares)

    def to_series(self) -> pd.Series:
        import pandas as pd

        return pd.Series(self.shares, name="importance", dtype=float)

    def __repr__(self) -> str:
        if not self.shares:
            return f"Importance: none ({self.note})"
        width = max(len(name) for name in self.shares)
        lines = [f"Importance for {self.metric}, {self.note}:"]
        lines += [f"  {name:<{width}}  {share:.3f}" for name, share in self.shares.items()]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        if not self.shares:
            return f"<p><b>Parameter importance:</b> none; {html.escape(self.note)}</p>"
        rows = "".join(
            f'<tr><td style="text-align:left">{html.escape(name)}</td><td>{share:.3f}</td>'
            f'<td style="text-align:left"><div style="background:#1f77b4;height:10px;width:{round(share * 160)}px">'
            "</div></td></tr>"
            for name, share in self.shares.items()
        )
        return (
            f"<p><b>Parameter importance</b> for {html.escape(self.metric)}, {html.escape(self.note)}</p>"
            f"<table>{rows}</table>"
        )


def importance(
    results: ExperimentResults,
    *,
    evaluator: Any = None,
    min_trials: int = MIN_TRIALS_FOR_IMPORTANCE,
    warn: bool = True,
) -> Importance:
    """Parameter importance from every trial's value at the deepest epoch enough trials reached.

    Args:
        results: a loaded experiment.
        evaluator: an Optuna importance evaluator (default: ``FanovaImportanceEvaluator(seed=0)``;
            ``optuna.importance.PedAnovaImportanceEvaluator()`` and
            ``MeanDecreaseImpurityImportanceEvaluator()`` fit as well).
        min_trials: the fewest trials an epoch needs for an estimate there.
        warn: warn (``FewTrialsWarning``) when no epoch has enough trials.

    Returns:
        An ``Importance``: ``{parameter: share}`` with the epoch and rung it used, or empty with
        the reason in ``note``.
    """
    import warnings

    with warnings.catch_warnings():
        # optuna's importance module imports tqdm.auto, which warns in Jupyter without ipywidgets;
        # imported here, under the filter, whether or not an estimate follows (as before: other
        # cells, MLflow's among them, then find it imported and quiet)
        warnings.filterwarnings("ignore", message="IProgress not found")
        import optuna
        import optuna.importance
        import tqdm.auto  # noqa: F401

    metric = results.metric
    chosen = _deepest_epoch(results, min_trials)
    if isinstance(chosen, str):
        few = chosen.startswith("needs at least")
        if warn and few:
            warnings.warn(f"parameter importance {chosen}", FewTrialsWarning, stacklevel=2)
        return Importance({}, metric, None, None, 0, 0, chosen, few_trials=few)
    epoch, rung, values = chosen
    distributions, configs = _configurations(results, values)
    if not distributions:
        return Importance({}, metric, epoch, rung, len(values), 0, "the space has no searched parameter")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize" if results.mode == "max" else "minimize")
    for trial_id, value in values.items():
        params = configs.get(trial_id)
        if params is None:
            continue
        dists = {name: distributions[name] for name in params}
        study.add_trial(optuna.trial.create_trial(params=params, distributions=dists, value=value))
    statuses = _statuses(results)
    used = [t for t in values if t in configs]
    pruned = sum(statuses.get(t) == TrialStatus.PRUNED for t in used)
    evaluator = evaluator or optuna.importance.FanovaImportanceEvaluator(seed=0)
    name = _evaluator_name(evaluator)
    where = f"epoch {epoch}" + (f", ASHA rung {rung}" if rung is not None else ", the last")
    how = f"{name} over {len(used)} trials' values at {where} ({pruned} of them pruned)"
    try:
        found = optuna.importance.get_param_importances(study, evaluator=evaluator)
    except (ValueError, RuntimeError) as error:
        return Importance({}, metric, epoch, rung, len(used), pruned, f"Optuna could not estimate it: {error}", name)
    if not found or not all(math.isfinite(v) for v in found.values()):
        why = f"the {len(used)} trials' values at {where} do not differ, so nothing explains them"
        return Importance({}, metric, epoch, rung, len(used), pruned, why, name)
    shares = {str(k): float(v) for k, v in found.items()}
    return Importance(shares, metric, epoch, rung, len(used), pruned, how, name)


# ------------------------------------------------------------------- internals


def _deepest_epoch(results: ExperimentResults, min_trials: int) -> tuple[int, int | None, dict[str, float]] | str:
    """(epoch, its rung or None for the last epoch, {trial id: value there}), or why none will do."""
    metric, epochs, trials = results.metric, results.epochs, results.trials
    if trials.empty or epochs.empty or metric not in epochs.columns:
        return f"no epoch reported {metric}"
    rows = epochs.dropna(subset=[metric]).drop_duplicates(["trial_id", "epoch"], keep="last")
    rows = rows.assign(trial_id=rows["trial_id"].astype(str))
    last = results.spec.budget.max_epochs
    # The last epoch: every trial that trained to the end, with its final value (a model's own
    # callback may end it before max_epochs: it is complete all the same).
    finals = {
        str(row.trial_id): value
        for row in trials.itertuples()
        if row.status == TrialStatus.COMPLETED and (value := finite(row.final_metric)) is not None
    }
    candidates: list[tuple[int, int | None, dict[str, float]]] = [(last, None, finals)]
    for rung, epoch in reversed(list(enumerate(spec_milestones(results.spec)))):
        if epoch >= last:
            continue
        at = rows[rows["epoch"] == epoch]
        values = {t: v for t, raw in zip(at["trial_id"], at[metric], strict=True) if (v := finite(raw)) is not None}
        candidates.append((epoch, rung, values))
    for candidate in candidates:
        if len(candidate[2]) >= min_trials:
            return candidate
    why = f"needs at least {min_trials} trials at one epoch: {len(finals)} trained to the end"
    if len(candidates) > 1:
        why += f", at most {max(len(values) for _, _, values in candidates[1:])} reached an ASHA rung"
    return why


def _configurations(
    results: ExperimentResults, values: Mapping[str, float]
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The searched parameters' Optuna distributions, and each trial's configuration in them."""
    from tunekit.search.history import optuna_distribution

    searched = {
        p.name: p.distribution
        for p in getattr(results.spec.space, "params", ())
        if isinstance(p.distribution, FloatRange | IntRange | Choice)
    }
    distributions = {name: optuna_distribution(dist) for name, dist in searched.items()}
    configs: dict[str, dict[str, Any]] = {}
    for row in results.trials.to_dict("records"):
        trial_id = str(row["trial_id"])
        if trial_id not in values:
            continue
        params = {}
        for name, dist in searched.items():
            value = _in_space(dist, row.get(f"{PARAM_PREFIX}{name}"))
            if value is not None:
                params[name] = value
        if params:
            configs[trial_id] = params
    return distributions, configs


def _in_space(dist: FloatRange | IntRange | Choice, value: Any) -> Any:
    """A table cell as the distribution's value (a choice's own option; a range's number, clamped), or None."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(dist, Choice):
        for option in dist.values:
            if str(option) == str(value) or (finite(option) is not None and finite(option) == finite(value)):
                return option
        return None
    number = finite(value)
    if number is None:
        return None
    number = min(max(number, dist.low), dist.high)
    return round(number) if isinstance(dist, IntRange) else number


def _statuses(results: ExperimentResults) -> dict[str, str]:
    if results.trials.empty:
        return {}
    return {str(t): str(s) for t, s in zip(results.trials["trial_id"], results.trials["status"], strict=True)}


def _evaluator_name(evaluator: Any) -> str:
    name = type(evaluator).__name__.replace("ImportanceEvaluator", "")
    return {"Fanova": "fANOVA", "PedAnova": "PED-ANOVA", "MeanDecreaseImpurity": "mean decrease in impurity"}.get(
        name, name
    )
