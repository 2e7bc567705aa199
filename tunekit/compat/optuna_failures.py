"""Reaches into Optuna's private study listing so that failed trials teach TPE (see ``tunekit.compat``).

Optuna's samplers ignore FAIL trials (optuna#685, #1015, #3472): a configuration that failed
is, to TPE, one it never tried, so a search whose trainable fails in one region of the space
(a learning rate that diverges, a model too big for the memory) keeps proposing there. The
study must keep saying FAIL (``tunekit check`` compares its states with trials.csv, and
Optuna's own tools show it), so the sampler is shown a view of the study instead, in which
each failed trial it should learn from is an infeasible one: PRUNED, with a constraint
violated without bound. TPE puts infeasible trials after every feasible one (its
``_split_trials``), so they join its "bad" density and pull proposals away from their
region, with one objective or several (MOTPE), whatever constraints the spec has, and
without inventing a value the trial never had.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Collection
from typing import Any

from optuna.trial import FrozenTrial, TrialState

# The constraint a failed trial shows the sampler: the name says why to anyone debugging it.
FAILED_CONSTRAINT = "tunekit: the trial failed"
# Violated without bound: after every trial a real constraint made infeasible.
FAILED_VIOLATION = math.inf


def failures_as_infeasible(
    study: Any, teaches: Callable[[FrozenTrial], bool], presented: dict[int, FrozenTrial]
) -> Any:
    """``study`` as a sampler sees it, each FAIL trial ``teaches`` accepts shown PRUNED and infeasible.

    ``study`` is an ``optuna.Study`` or a view of one (``recent_trials_study``); ``presented``
    keeps the trials already shown, by number, across proposals (a finished trial never
    changes). Nothing is written to the study.

    Why: TPE reads the study's trials through the private ``Study._get_trials`` and asks for
    COMPLETE and PRUNED ones (RUNNING ones too with constant liar); the search space it
    models is the intersection over the trials ``_get_trials`` lists. This view answers
    ``_get_trials`` with those trials, the failed ones that teach added in their place
    (states filtered after), and passes every other attribute to the study. The trial shown
    is a shallow copy set through ``FrozenTrial``'s public ``state``, ``system_attrs`` and
    ``set_constraint``. Checked against Optuna 5.0: ``TPESampler._sample_relative``,
    ``sample_independent`` and ``_sample`` call ``study._get_trials(deepcopy=False,
    states=..., use_cache=...)``; ``IntersectionSearchSpace.calculate`` calls it without
    states; ``_split_trials`` ranks a trial whose ``constraints`` sum above 0 as infeasible
    before it looks at its state, and infeasible trials after the pruned ones.
    """
    return _FailuresTaught(study, teaches, presented)


def shown_failure(frozen: FrozenTrial) -> FrozenTrial:
    """The trial as the sampler sees it: PRUNED, with ``FAILED_CONSTRAINT`` violated."""
    shown = copy.copy(frozen)
    shown.state = TrialState.PRUNED
    shown.system_attrs = dict(frozen.system_attrs)  # the copy's own: the study's trial keeps its attrs
    shown.set_constraint(FAILED_CONSTRAINT, FAILED_VIOLATION)
    return shown


class _FailuresTaught:
    """The view ``failures_as_infeasible`` returns; every other attribute is the study's."""

    def __init__(self, study: Any, teaches: Callable[[FrozenTrial], bool], presented: dict[int, FrozenTrial]) -> None:
        self._study, self._teaches, self._presented = study, teaches, presented

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)

    def _get_trials(
        self, deepcopy: bool = True, states: Collection[TrialState] | None = None, use_cache: bool = False
    ) -> list[Any]:
        asked = states
        if states is not None and TrialState.PRUNED in states and TrialState.FAIL not in states:
            asked = (*states, TrialState.FAIL)
        listed = self._study._get_trials(deepcopy=False, states=asked, use_cache=use_cache)
        shown = []
        for trial in listed:
            if trial.state == TrialState.FAIL and self._teaches(trial):
                if trial.number not in self._presented:
                    self._presented[trial.number] = shown_failure(trial)
                trial = self._presented[trial.number]
            if states is None or trial.state in states:
                shown.append(trial)
        return copy.deepcopy(shown) if deepcopy else shown
