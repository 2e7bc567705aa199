"""KerasTuner's API on tunekit: ``from tunekit import keras_tuner`` is a script's only change.

``HyperParameters``, ``HyperModel``, ``Objective``, ``Oracle``, ``oracles``, ``errors``,
``applications`` and ``engine`` are keras-tuner's own (imported from it, so a script's objects
and subclasses are exactly KerasTuner's). The tuners are keras-tuner's classes with tunekit's
``search``: each trial runs the tuner's own ``run_trial`` in a Ray worker, and the search is a
tunekit experiment (``tunekit.keras_tuner.tuners``). Importing ``tunekit`` imports none of this.
"""

from keras_tuner import (
    HyperModel,
    HyperParameters,
    Objective,
    Oracle,
    applications,
    engine,
    errors,
    oracles,
    synchronized,
)

from tunekit.keras_tuner.tuners import BayesianOptimization, GridSearch, Hyperband, RandomSearch, Tuner

__all__ = [
    "BayesianOptimization",
    "GridSearch",
    "HyperModel",
    "HyperParameters",
    "Hyperband",
    "Objective",
    "Oracle",
    "RandomSearch",
    "Tuner",
    "applications",
    "engine",
    "errors",
    "oracles",
    "synchronized",
]
