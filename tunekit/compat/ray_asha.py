"""Reaches into Ray Tune's private ASHA: its rungs, the sign of its metric, its ``max_t``, and
a rung's cutoff kept as trials arrive (see ``tunekit.compat``)."""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ray.tune.schedulers.async_hyperband import _Bracket

if TYPE_CHECKING:
    from ray.tune.schedulers import ASHAScheduler


def asha_rungs(scheduler: ASHAScheduler) -> list[tuple[float, dict[str, float]]]:
    """Every (milestone, {trial id: signed metric}) rung of every bracket of an ASHA scheduler.

    Why: Ray does not save scheduler state with an experiment; to resume a search, tunekit
    refills the rungs from the recorded epochs (``RecordingASHA.replay``) so a restored
    ASHA does not promote every trial. The dictionaries returned are ASHA's own: writing
    to them fills the rungs. Checked against Ray 2.60 (``_brackets``, ``_Bracket._rungs``).
    """
    return [(milestone, recorded) for bracket in scheduler._brackets for milestone, recorded in bracket._rungs]


def bracket_rungs(scheduler: ASHAScheduler) -> list[list[tuple[float, dict[str, float]]]]:
    """Each bracket's (milestone, {trial id: signed metric}) rungs, as ``asha_rungs`` but bracket by bracket.

    Why: a resumed Hyperband refills each trial's own bracket only. Checked against Ray 2.60
    (``_brackets`` in bracket order, ``_Bracket._rungs``).
    """
    return [list(bracket._rungs) for bracket in scheduler._brackets]


def assign_bracket(scheduler: ASHAScheduler, trial_id: str, index: int) -> None:
    """Puts a trial in bracket ``index`` of an ASHA scheduler with several brackets (Hyperband).

    Why: Ray's ``on_trial_add`` draws the bracket with numpy's global random state, which a
    resume cannot replay and the search's seed does not fix. Checked against Ray 2.60
    (``_trial_info``: trial id -> ``_Bracket``, read by ``on_trial_result``/``on_trial_complete``).
    """
    scheduler._trial_info[trial_id] = scheduler._brackets[index]


def asha_metric_sign(scheduler: ASHAScheduler) -> float:
    """+1 when ASHA maximises its metric, -1 when it minimises: how it stores rung values.

    Why: replayed rung values must be signed as ASHA signs the ones it records itself.
    Checked against Ray 2.60 (``_metric_op``, None before the metric is set).
    """
    return float(scheduler._metric_op or 1.0)


def asha_max_t(scheduler: ASHAScheduler) -> float:
    """The epoch at which ASHA lets a trial finish (its ``max_t``).

    Why: a STOP decision before ``max_t`` is a pruning, one at ``max_t`` is the trial's
    end; Ray keeps ``max_t`` private. Checked against Ray 2.60 (``_max_t``).
    """
    return float(scheduler._max_t)


class SortedRung(dict[str, float]):
    """One ASHA rung's ``{trial id: signed metric}``, which also keeps its values sorted.

    Why: Ray's rung cutoff is ``np.nanpercentile`` of the rung's every value, computed again
    each time a trial reaches the rung: a list, a NaN filter and a partition of every trial
    recorded there so far. The first rung holds every trial, so at 10,000 trials this cost
    1.1 ms of the driver's main thread per trial against 0.2 ms over the first 1,000 (the
    scale benchmark's profile). Values kept sorted as they arrive (one ``bisect.insort``)
    answer the same percentile at once (``percentile_of_sorted``). Ray only assigns items
    to a rung and reads its values (``_Bracket.on_result``, ``cutoff``); so do tunekit's
    replay and the tests.
    """

    def __init__(self, items: Iterable[tuple[str, float]] = ()) -> None:
        super().__init__()
        self.ordered: list[float] = []  # the values other than NaN, ascending
        for key, value in items:
            self[key] = value

    def __setitem__(self, key: str, value: float) -> None:
        if key in self:
            self._unorder(self[key])
        super().__setitem__(key, value)
        if not math.isnan(value):
            bisect.insort(self.ordered, float(value))

    def __delitem__(self, key: str) -> None:
        self._unorder(self[key])
        super().__delitem__(key)

    def _unorder(self, value: float) -> None:
        if not math.isnan(value):
            del self.ordered[bisect.bisect_left(self.ordered, float(value))]

    def __reduce__(self) -> tuple[Any, ...]:  # pickled whole: pickle's default sets items before ``ordered`` exists
        return SortedRung, (list(self.items()),)


class _SortedBracket(_Bracket):
    """Ray's ASHA bracket, its cutoff read from ``SortedRung``'s sorted values."""

    def cutoff(self, recorded: dict[str, float]) -> float | None:
        if not recorded:
            return None
        assert isinstance(recorded, SortedRung)
        return percentile_of_sorted(recorded.ordered, (1 - 1 / self.rf) * 100)


def sorted_rungs(scheduler: ASHAScheduler) -> None:
    """Every rung of an ASHA scheduler keeps its values sorted, and its brackets read their
    cutoffs from them (see ``SortedRung``). Decisions are unchanged: the cutoff is the same
    number numpy computes. Checked against Ray 2.60: ``_brackets``, ``_Bracket._rungs``
    ([(milestone, dict)]), ``_Bracket.cutoff`` (``np.nanpercentile(values, (1 - 1/rf) * 100)``)
    called by ``_Bracket.on_result`` with the rung's dict.
    """
    for bracket in scheduler._brackets:
        bracket.__class__ = _SortedBracket
        bracket._rungs = [(milestone, SortedRung(recorded.items())) for milestone, recorded in bracket._rungs]


def percentile_of_sorted(values: list[float], q: float) -> float:
    """``np.nanpercentile(values, q)`` of ascending values without NaN, computed step by step
    as numpy's default "linear" method does (NumPy 2: ``_quantile``, ``_get_indexes``,
    ``_lerp``), so the result is the same float; NaN for no values, as numpy's all-NaN answer."""
    if not values:
        return math.nan
    index = (len(values) - 1) * (q / 100)
    if index >= len(values) - 1:
        return values[-1]
    below = math.floor(index)
    gamma = index - below
    low, high = values[below], values[below + 1]
    difference = high - low
    return high - difference * (1 - gamma) if gamma >= 0.5 else low + difference * gamma
