"""What a KerasTuner tuner becomes in a tunekit spec: its oracle's algorithm, budget, objective and space.

Pure functions over the oracle's attributes (read by name, so this module imports neither
keras-tuner nor TensorFlow): ``RandomSearchOracle`` searches ``random``, ``GridSearchOracle``
``grid`` (every point once unless ``max_trials`` says otherwise), ``BayesianOptimizationOracle``
tunekit's ``tpe`` (KerasTuner's Gaussian process is not ported), ``HyperbandOracle`` samples at
random under tunekit's ``hyperband`` scheduler with the oracle's ``factor``, ``max_epochs`` and
the trials KerasTuner's brackets start. None of them stops a trial early except Hyperband, as in
KerasTuner; ``scheduler={"type": "asha"}`` (or ``search={"algorithm": "tpe"}``) turns tunekit's on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tunekit.errors import TunekitError
from tunekit.tuner.discover import Discovery, spec_name
from tunekit.tuner.hp import Declared
from tunekit.tuner.hp_given import declared_in
from tunekit.tuner.tuner import _merged, kerastuner_trials

ALGORITHMS = {
    "RandomSearchOracle": "random",
    "GridSearchOracle": "grid",
    "BayesianOptimizationOracle": "tpe",
    "HyperbandOracle": "random",
}
# Spec sections a tuner takes as keywords beside KerasTuner's arguments.
SECTIONS = ("budget", "search", "scheduler", "resources", "training", "tracking", "data", "storage")


def algorithm_of(oracle: Any) -> str:
    """The tunekit algorithm that proposes what the oracle would, by the oracle's class."""
    for klass in type(oracle).__mro__:
        if klass.__name__ in ALGORITHMS:
            return ALGORITHMS[klass.__name__]
    raise TunekitError(
        f"oracle: {type(oracle).__name__} has no tunekit counterpart; "
        f"pass one of keras_tuner.oracles.{', '.join(ALGORITHMS)}"
    )


def objectives_of(oracle: Any) -> list[dict[str, str]]:
    """The spec's metrics: KerasTuner's objective, or each of a ``MultiObjective``'s (a Pareto search)."""
    objective = oracle.objective
    items = getattr(objective, "objectives", None) or [objective]
    return [{"name": str(item.name), "mode": str(item.direction)} for item in items]


def space_of(oracle: Any, fixed: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The spec's ``space``: the parameters the oracle holds (what the tuner's code declared),
    then the ``fixed`` ones (kept at their default, as KerasTuner keeps new entries it does not tune)."""
    found = Discovery()
    for name, declared in declared_in(oracle.hyperparameters).items():
        found.params[name] = declared
        if declared.conditions:
            found.when[name] = dict(declared.conditions)
    for name, value in fixed.items():
        found.params[name] = Declared(name, "Fixed", {"value": value}, value, ())
    return found.to_space()


def names_of(oracle: Any) -> dict[str, str]:
    """Spec name → KerasTuner name of every parameter (``block/units`` is ``block__units`` in the spec)."""
    return {spec_name(item.name): item.name for item in oracle.hyperparameters.space}


def spec_for(
    oracle: Any,
    fixed: Mapping[str, Any],
    project_name: str,
    epochs: int | None,
    sections: Mapping[str, Any],
    storage: str | None,
) -> dict[str, Any]:
    """The spec a tuner's ``search`` runs: the oracle's settings and ``fixed`` parameters, then the
    user's ``sections`` over them."""
    algorithm = algorithm_of(oracle)
    metrics = objectives_of(oracle)
    hyperband = type(oracle).__name__ == "HyperbandOracle"
    max_epochs = int(oracle.max_epochs) if hyperband else int(epochs or 1)  # model.fit's default is one epoch
    budget: dict[str, Any] = {"max_epochs": max_epochs}
    if hyperband:
        budget["num_samples"] = oracle.hyperband_iterations * kerastuner_trials(oracle.max_epochs, oracle.factor)
        scheduler: dict[str, Any] = {"type": "hyperband", "grace_period": 1, "reduction_factor": oracle.factor}
    else:
        if oracle.max_trials is not None:
            budget["num_samples"] = int(oracle.max_trials)
        elif algorithm != "grid":
            raise TunekitError(f"max_trials: {type(oracle).__name__} needs a number of trials, got None")
        scheduler = {"type": "fifo"}  # KerasTuner's random, grid and Bayesian searches stop no trial early
    spec: dict[str, Any] = {
        "name": project_name,
        "metric": metrics[0] if len(metrics) == 1 else metrics,
        "budget": budget,
        "search": {"algorithm": algorithm, "seed": int(oracle.seed or 0)},
        "scheduler": scheduler,
        # KerasTuner scores a trial by its best epoch and restores that epoch's weights.
        "training": {
            "seed": int(oracle.seed or 0),
            "keep": "best" if len(metrics) == 1 else "last",
            "max_consecutive_failures": _positive_or_none(getattr(oracle, "max_consecutive_failed_trials", None)),
        },
        "space": space_of(oracle, fixed),
    }
    if algorithm == "tpe" and getattr(oracle, "num_initial_points", None):
        spec["search"]["n_startup_trials"] = int(oracle.num_initial_points)
    if storage is not None:
        spec["storage"] = {"path": storage}
    return _merged(spec, sections)


def _positive_or_none(value: Any) -> int | None:
    """KerasTuner's limit as the spec's: a number below 1 never stops its search (no limit)."""
    return int(value) if value is not None and int(value) >= 1 else None
