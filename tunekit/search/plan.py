"""Searcher and scheduler construction, and the ASHA budget planner.

tunekit drives Optuna through its ask/tell API from a Ray ``Searcher`` of its own
rather than Ray's ``OptunaSearch``, for three reasons seen in Ray 2.60:

* ``OptunaSearch.on_trial_complete`` tells Optuna that a trial ASHA stopped early is
  COMPLETE, valued at its early score. Here a trial that did not train to
  ``max_epochs`` is PRUNED, with every epoch's value kept as an intermediate value.
* ``points_to_evaluate`` is ignored with define-by-run spaces; here warm starts are
  enqueued in the study, so they are the first trials asked for.
* The study lives in SQLite in the experiment directory, so a resume continues it and
  optuna-dashboard can open it.

Ray is imported lazily: the planner and ``tunekit plan`` must stay fast.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from tunekit.config.rungs import asha_milestones, bracket_of
from tunekit.config.spec import ExperimentSpec, MetricMode
from tunekit.layout import SQLITE_STUDY_FILE, TrialStatus, finite, study_file

if TYPE_CHECKING:
    import optuna

T = TypeVar("T")
# Schedulers that compare trials at rungs and stop the weak ones.
EARLY_STOPPING = ("asha", "hyperband")


def study_storage(experiment_dir: str | Path) -> optuna.storages.BaseStorage:
    """The experiment's study storage; opening a journal that does not exist creates it empty."""
    import optuna

    from tunekit.compat.optuna_study import journal_storage

    path = study_file(experiment_dir)
    if path.name == SQLITE_STUDY_FILE:
        return optuna.storages.get_storage(f"sqlite:///{path}")
    return journal_storage(path)


# --------------------------------------------------------------------------- planner


@dataclass(frozen=True)
class Rung:
    index: int
    epoch: int  # a trial reaching this epoch is compared with its peers
    trials: int  # trials expected to reach it


@dataclass(frozen=True)
class Plan:
    rungs: tuple[Rung, ...]
    max_epochs: int
    num_samples: int
    planned_epochs: int  # what the search spends when ASHA keeps 1/rf at each rung
    exhaustive_epochs: int  # what training every trial to the end would cost
    grid_size: int | None = None  # distinct configurations, for grid search
    repeats: int = 1  # how many times grid search trains each configuration
    perturbation_interval: int = 0  # PBT: epochs between rankings of the population; 0 otherwise
    brackets: tuple[int, ...] = ()  # Hyperband: the trials in each bracket

    def describe(self) -> str:
        lines = []
        if self.grid_size is not None:
            lines.append(f"grid: {_count(self.grid_size, 'configuration')} x {_count(self.repeats, 'repeat')}")
        if self.perturbation_interval:
            lines.append(
                f"pbt: every trial trains {self.max_epochs} epochs, the population ranked every "
                f"{_count(self.perturbation_interval, 'epoch')}; epochs: {self.exhaustive_epochs}"
            )
            return "\n".join(lines)
        if not self.rungs:  # FIFO: nothing is stopped, there are no rungs to show
            lines.append(f"fifo: every trial trains {self.max_epochs} epochs; epochs: {self.exhaustive_epochs}")
            return "\n".join(lines)
        lines.append(f"{'rung':>4}  {'at epoch':>8}  {'trials':>6}")
        # The last level is the end, not a rung ASHA cuts at: trials.csv numbers a completed
        # trial's rung as the last rung it passed, and so does this table.
        lines += [
            f"{'end' if r.epoch == self.max_epochs else r.index:>4}  {r.epoch:>8}  {r.trials:>6}" for r in self.rungs
        ]
        if self.brackets:
            firsts = [r.epoch for r in self.rungs]
            shares = ", ".join(
                f"{n} never stopped" if firsts[b] == self.max_epochs else f"{n} from epoch {firsts[b]}"
                for b, n in enumerate(self.brackets)
            )
            lines.append(f"hyperband: {_count(len(self.brackets), 'bracket')} (trials compared first: {shares})")
        share = self.planned_epochs / self.exhaustive_epochs
        lines.append(
            f"epochs: about {self.planned_epochs} planned against {self.exhaustive_epochs} "
            f"for every trial to the end ({share:.0%})"
        )
        return "\n".join(lines)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def plan_budget(spec: ExperimentSpec) -> Plan:
    """Predicts rung occupancy and epochs spent, assuming ASHA keeps the top 1/rf at each rung.

    Under hyperband each bracket is planned so over its own trials (``bracket_of``), from its
    first rung on, and a rung's count adds the brackets' trials that reach it.
    """
    budget, scheduler = spec.budget, spec.scheduler
    n, max_epochs = budget.num_samples, budget.max_epochs
    grid_size = spec.space.grid_size() if spec.search.algorithm == "grid" else None
    repeats = n // grid_size if grid_size else 1
    if scheduler.type not in EARLY_STOPPING:  # FIFO and PBT train every trial to the end
        interval = scheduler.perturbation_interval if scheduler.type == "pbt" else 0
        return Plan((), max_epochs, n, n * max_epochs, n * max_epochs, grid_size, repeats, interval)
    milestones = asha_milestones(scheduler.grace_period, scheduler.reduction_factor, max_epochs)
    levels = [*milestones, max_epochs]  # the last: trials that train to the end
    reaching = [0] * len(levels)
    sizes = [sum(bracket_of(i, scheduler.brackets) == b for i in range(n)) for b in range(scheduler.brackets)]
    for first, size in enumerate(sizes):  # bracket b's trials all train to its first rung, ASHA's rung b
        for level in range(len(levels)):
            reaching[level] += math.ceil(size / scheduler.reduction_factor ** max(0, level - first)) if size else 0
    # The epochs between two levels are trained by the trials that reached the later one.
    epochs = sum(c * (epoch - before) for c, epoch, before in zip(reaching, levels, [0, *levels[:-1]], strict=True))
    rungs = tuple(Rung(i, epoch, max(1, count)) for i, (epoch, count) in enumerate(zip(levels, reaching, strict=True)))
    shown = tuple(sizes) if scheduler.type == "hyperband" else ()
    return Plan(rungs, max_epochs, n, epochs, n * max_epochs, grid_size, repeats, brackets=shown)


def spec_milestones(spec: ExperimentSpec) -> list[int]:
    """The epochs of the spec's ASHA rungs (Hyperband's brackets' are among them); none for any other scheduler."""
    if spec.scheduler.type not in EARLY_STOPPING:
        return []
    return asha_milestones(spec.scheduler.grace_period, spec.scheduler.reduction_factor, spec.budget.max_epochs)


def rung_of(epochs: int, spec: ExperimentSpec) -> int | None:
    """The highest ASHA rung a trial that trained ``epochs`` epochs passed through (under hyperband,
    numbered over ASHA's rungs whatever its bracket: ``tunekit.config.rungs``)."""
    if spec.scheduler.type not in EARLY_STOPPING:
        return None
    milestones = spec_milestones(spec)
    reached = [i for i, m in enumerate(milestones) if epochs >= m]
    return reached[-1] if reached else None


# -------------------------------------------------------------------- best trial


def pick_best(candidates: Sequence[tuple[str, float | None, T]], mode: MetricMode) -> T | None:
    """The best item among (status, final metric, item) triples.

    Trials that trained to the end are preferred: a pruned trial's early score is not
    a model one can ship. Failed trials and trials without a metric never win.
    """
    scored = [
        (status, number, item)
        for status, value, item in candidates
        if (number := finite(value)) is not None and status != TrialStatus.FAILED
    ]
    pool = [c for c in scored if c[0] == TrialStatus.COMPLETED] or scored
    if not pool:
        return None
    sign = 1.0 if mode == "max" else -1.0
    return max(pool, key=lambda c: sign * c[1])[2]
