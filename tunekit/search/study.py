"""The Optuna study a search asks, and its sampler.

``open_study`` creates the study in the experiment's journal (with its warm-start history and
points) or loads it unchanged; ``build_sampler`` gives ``search.algorithm``'s sampler, seeded past
the trials the study already holds, wrapped so that a grid point or the searcher's own pick can
be pinned (``PinnableSampler``), and, for TPE, shown the trials that failed on their own as
infeasible (``teaches``; why: ``tunekit.search.searcher``'s docstring). The sampler also proposes
apart from the study (``PinnableSampler.propose``), so that a proposal the searcher does not train
takes no trial number. The Ray searcher that asks and tells it is ``tunekit.search.searcher``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import FrozenTrial, TrialState

from tunekit.compat.optuna_failures import failures_as_infeasible
from tunekit.compat.optuna_study import (
    lagged_study,
    proposing_apart,
    recent_trials_study,
    study_trial_count,
    with_repeats,
)
from tunekit.config.spec import ExperimentSpec
from tunekit.layout import study_file
from tunekit.search.history import add_history
from tunekit.search.plan import study_storage

# On a FAIL study trial whose trial failed for its own reasons (FAILURE_KIND_KEY "trial"):
# the reason. TPE learns from these failures (tunekit.search.searcher's docstring).
TRIAL_FAILURE_ATTR = "tunekit_trial_failure"


def teaches(frozen: FrozenTrial) -> bool:
    """Whether a FAIL study trial tells the sampler its configuration failed: it failed on its own."""
    return TRIAL_FAILURE_ATTR in frozen.user_attrs


class PinnableSampler(optuna.samplers.BaseSampler):
    """The study's sampler, or a fixed point when one is pinned.

    Pinning is how grid points, proposals made apart from the study (``propose``) and the
    searcher's own fallback choices reach the study through the public sampler interface: the
    trial's params are exactly the point, and no WAITING trial is left behind if the driver dies
    mid-ask (as ``enqueue_trial`` would).
    """

    def __init__(
        self, base: optuna.samplers.BaseSampler, history: int | None = None, teach_failures: bool = False
    ) -> None:
        self.base = base
        self.point: Mapping[str, Any] | None = None
        self.history = history  # search.tpe_history: the finished trials the base models
        # Failed trials (``teaches``) shown to the base as infeasible; those shown so far, by number.
        self.shown_failures: dict[int, FrozenTrial] | None = {} if teach_failures else None
        # Study number -> how many proposals repeated that trial's configuration (the searcher's).
        self.repeats: Mapping[int, int] = {}
        self._apart: optuna.Study | None = None  # the throwaway study ``propose`` samples on

    def propose(
        self, study: optuna.Study, sample: Callable[[optuna.Trial], dict[str, Any]]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """What this sampler proposes next for ``study``, with no trial added to it: ``sample`` of
        a trial of a throwaway in-memory study, sampled as a trial of ``study`` numbered next; and
        the system attributes the base set on that trial (NSGA-II's generation), which the
        study's trial taking the proposal must carry.

        The base sees what it would see asked by the study (views included; ``repeats`` listed
        again) and draws from its generator as it would: the same seed, the same proposals.
        """
        apart = optuna.create_study(storage=optuna.storages.InMemoryStorage(), directions=study.directions)
        apart.sampler = _ForStudy(self, study, study_trial_count(study))
        self._apart = apart
        try:
            config = sample(apart.ask())
        finally:
            self._apart = None
        return config, dict(apart.get_trials(deepcopy=False)[0].system_attrs)

    def _modelled(self, study: optuna.Study) -> optuna.Study:
        # search.reproducible: the trials a proposal may not see yet are shown RUNNING (ask_lagged).
        modelled = lagged_study(study if self.history is None else recent_trials_study(study, self.history), self)
        if self.shown_failures is not None:
            modelled = failures_as_infeasible(modelled, teaches, self.shown_failures)
        if self.repeats:
            modelled = with_repeats(modelled, self.repeats)
        return modelled if self._apart is None else proposing_apart(modelled, self._apart)

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        if self.point is not None:
            return {}
        # From the modelled trials too: every trial has the spec's distributions, so the
        # intersection is the same, and it is not read from the whole study per ask.
        return self.base.infer_relative_search_space(self._modelled(study), trial)

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        if self.point is not None:
            return {}
        return self.base.sample_relative(self._modelled(study), trial, search_space)

    def sample_independent(
        self, study: optuna.Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        if self.point is not None:
            return self.point[param_name]
        return self.base.sample_independent(self._modelled(study), trial, param_name, param_distribution)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.base.before_trial(study if self._apart is None else proposing_apart(study, self._apart), trial)

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState, values: Any) -> None:
        self.base.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.base.reseed_rng()


class _ForStudy(optuna.samplers.BaseSampler):
    """The throwaway study's sampler in ``PinnableSampler.propose``: ``sampler`` asked for a trial
    of ``study`` numbered ``number`` (the number it takes there), in place of the throwaway's."""

    def __init__(self, sampler: PinnableSampler, study: optuna.Study, number: int) -> None:
        self.sampler, self.study, self.number = sampler, study, number

    def _numbered(self, trial: FrozenTrial) -> FrozenTrial:
        numbered = copy.copy(trial)
        numbered.number = self.number  # constant liar leaves the proposal's own number out of its listing
        return numbered

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return self.sampler.infer_relative_search_space(self.study, self._numbered(trial))

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        return self.sampler.sample_relative(self.study, self._numbered(trial), search_space)

    def sample_independent(
        self, study: optuna.Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        return self.sampler.sample_independent(self.study, self._numbered(trial), param_name, param_distribution)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.sampler.before_trial(self.study, self._numbered(trial))


def build_sampler(spec: ExperimentSpec, history: int = 0, *, teach_failures: bool = True) -> PinnableSampler:
    """The study's sampler for ``search.algorithm``, seeded, wrapped so points can be pinned.

    ``history`` is the number of trials the study already holds: a reopened study (a
    resume) or one warm-started from earlier trials seeds its sampler past them, or the
    seed's first proposals would come again and be spent as repeats.

    ``teach_failures``: TPE (one objective or several) sees the trials that failed on their
    own as infeasible (``teaches``); False gives Optuna's plain behaviour, which ignores
    them (benchmarks/failures.py compares the two). NSGA-II builds its generations from
    COMPLETE trials and their values, which a failure has none of, so it is left as Optuna
    made it; the random sampler and the grid learn from nothing.
    """
    search = spec.search
    seed = search.seed + history
    if search.algorithm in ("grid", "random"):
        # Grid search pins every trial's point; the random sampler is never asked.
        return PinnableSampler(optuna.samplers.RandomSampler(seed=seed))
    if search.algorithm == "nsga2":
        return PinnableSampler(optuna.samplers.NSGAIISampler(seed=seed))
    # constant_liar: running trials count as bad guesses, so parallel trials spread out.
    # TPE takes several objectives as it is (MOTPE), and the constraints each trial
    # carries (Trial.set_constraint, which Optuna 5.0 reads in place of constraints_func).
    return PinnableSampler(
        optuna.samplers.TPESampler(
            seed=seed, n_startup_trials=search.n_startup_trials, constant_liar=True, multivariate=True
        ),
        search.tpe_history,
        teach_failures=teach_failures,
    )


def open_study(
    spec: ExperimentSpec, experiment_dir: Path, storage: optuna.storages.BaseStorage | None = None
) -> optuna.Study:
    """Creates the study (with its warm-start history and points) or, when it exists, loads it unchanged.

    The study lives in the experiment's journal file (``tunekit.layout.study_file``) unless
    ``storage`` is given (tests pass an in-memory one). A new study first takes the finished trials of
    ``search.warm_start_from`` as history (``tunekit.search.history``), then the
    ``search.warm_start`` points are enqueued.
    """
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    stored = storage is not None or study_file(experiment_dir).is_file()
    store = storage if storage is not None else study_storage(experiment_dir)  # one replay of the journal
    existed = stored and spec.name in {s.study_name for s in store.get_all_studies()}
    history = len(optuna.load_study(study_name=spec.name, storage=store).trials) if existed else 0
    study = optuna.create_study(
        storage=store,
        study_name=spec.name,
        directions=["maximize" if o.mode == "max" else "minimize" for o in spec.objectives],
        sampler=build_sampler(spec, history),
        load_if_exists=True,
    )
    if not existed:
        if spec.search.warm_start_from:
            add_history(study, spec, experiment_dir if storage is None else None)
            # Seeded past the history, as a resumed study is: with fewer earlier trials than
            # n_startup_trials TPE samples at random from its seed, and the earlier search's
            # seed would propose the earlier search's first points again.
            study.sampler = build_sampler(spec, len(study.trials))
        for point in spec.search.warm_start:
            study.enqueue_trial(spec.space.check_point(point, "search.warm_start"))
    return study
