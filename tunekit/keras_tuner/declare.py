"""The parameters a KerasTuner search's code declares, found in ``search`` before the first trial.

KerasTuner's constructor builds the model once, and its oracle adds each parameter a trial
declares later (another branch of the build, a ``HyperModel.fit``, a ``run_trial`` override) the
first time a trial declares it. tunekit's searcher proposes whole configurations, so the space
must hold them before the search starts: ``declare`` runs the code once more without training
(``DryModel``), and once for each other value of each discrete parameter (``declare_branches``),
and the oracle takes what they declared, as KerasTuner's ``update_space`` takes a trial's. With
``tune_new_entries=False`` the new parameters keep their defaults, as in KerasTuner: ``declare``
returns them, and the spec holds them as fixed, so every trial records them.

A pass without training stops where the code needs a trained model (a custom loop calling the
model, a ``fit`` reading its history): the parameters declared after that point are not found.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

import keras_tuner

from tunekit.tuner.discover import ENUMERATED_INT_VALUES, MAX_BUILDS
from tunekit.tuner.hypermodel import DryModel, fit_function
from tunekit.tuner.tuner import _drop_keras_graphs


def declare(tuner: Any, fit_args: tuple[Any, ...], fit_kwargs: dict[str, Any]) -> dict[str, Any]:
    """Grows ``tuner.oracle``'s space with what the code declares beyond the constructor's build.

    Returns the parameters that keep their default (name → value): the new ones when the oracle
    does not tune new entries; none otherwise.
    """
    oracle = tuner.oracle
    if not oracle.allow_new_entries:
        return {}  # a trial declaring one fails, as in KerasTuner
    if oracle.tune_new_entries:
        declare_branches(tuner)
    if not _declares_beyond_build(tuner):
        return {} if oracle.tune_new_entries else _defaults(oracle, _built(tuner))
    hp = oracle.get_space()
    # It fails where it needs what a dry pass did not give (a trained model, a history): the
    # hp calls before that point are found.
    with contextlib.suppress(Exception):
        if _own_run_trial(tuner):
            trial = keras_tuner.engine.trial.Trial(hp, trial_id="declare")
            with _training_nothing(tuner):
                tuner.run_trial(trial, *fit_args, **copy.copy(fit_kwargs))
        else:
            fit = fit_function(tuner.hypermodel)
            fit(hp, DryModel(tuner.hypermodel.build(hp)), *fit_args, **fit_kwargs)  # type: ignore[misc]
    _drop_keras_graphs()
    if oracle.tune_new_entries:
        oracle.update_space(hp)
        return {}
    return _defaults(oracle, hp)


def declare_branches(tuner: Any) -> None:
    """Builds once more for each other value of each discrete parameter (from the build that
    declared it), so a parameter only some values declare (``units_2`` under ``num_layers=3``)
    is searched from the first trial. At most ``MAX_BUILDS`` builds, in ``search`` (the
    constructor stays as cheap as KerasTuner's); a build that raises for a value declares what
    it reached first, as in a trial."""
    oracle = tuner.oracle
    if type(tuner.hypermodel).__module__.startswith("keras_tuner.src.applications"):
        return  # they declare every parameter in the first build (HyperResNet's branches took 15 s)
    bases: dict[str, dict[str, Any]] = {item.name: {} for item in oracle.hyperparameters.space}
    queue, builds = list(bases), 0
    while queue and builds < MAX_BUILDS:
        name = queue.pop(0)
        declared = next(item for item in oracle.hyperparameters.space if item.name == name)
        for value in _other_values(declared)[: MAX_BUILDS - builds]:
            hp = oracle.get_space()
            hp.values.update({**bases[name], name: value})
            builds += 1
            with contextlib.suppress(Exception):
                tuner.hypermodel.build(hp)
            oracle.update_space(hp)
            for item in oracle.hyperparameters.space:
                if item.name not in bases:  # found here: its own values are tried from these
                    bases[item.name] = {key: hp.values[key] for key in (*bases[name], name)}
                    queue.append(item.name)
    if builds:
        _drop_keras_graphs()


def _declares_beyond_build(tuner: Any) -> bool:
    """The tuner's code declares parameters outside ``build`` too: a HyperModel's own ``fit``, or
    a ``run_trial`` of the script's own (keras-tuner's, Hyperband's included, declare none)."""
    return _own_run_trial(tuner) or fit_function(tuner.hypermodel) is not None


def _own_run_trial(tuner: Any) -> bool:
    owner = next(klass for klass in type(tuner).__mro__ if "run_trial" in vars(klass))
    return not owner.__module__.startswith("keras_tuner.")


def _built(tuner: Any) -> Any:
    """The oracle's space after one build at the defaults (what KerasTuner's constructor built)."""
    hp = tuner.oracle.get_space()
    with contextlib.suppress(Exception):  # the constructor's build raised too: a trial will say why
        tuner.hypermodel.build(hp)
    _drop_keras_graphs()
    return hp


def _defaults(oracle: Any, hp: Any) -> dict[str, Any]:
    """The parameters ``hp`` declared that the oracle lacks, at the value a trial gives them (the default)."""
    known = {item.name for item in oracle.hyperparameters.space}
    return {
        item.name: hp.values[item.name]
        for item in hp.space
        if item.name not in known and item.name in hp.values and not item.conditions
    }


@contextlib.contextmanager
def _training_nothing(tuner: Any) -> Iterator[None]:
    """The tuner's builds give a ``DryModel`` (a custom loop calling it stops there) and KerasTuner's
    ``_build_and_fit_model`` fits one, so that ``run_trial`` runs without training."""
    hypermodel = tuner.hypermodel
    own_build = vars(hypermodel).get("build")  # a build_model function is the instance's own
    build = hypermodel.build

    def dry_build(hp: Any) -> DryModel:
        return DryModel(build(hp))

    def dry_build_and_fit(trial: Any, *args: Any, **kwargs: Any) -> Any:
        hp = trial.hyperparameters
        return hypermodel.fit(hp, dry_build(hp), *args, **kwargs)

    hypermodel.build = dry_build
    tuner._build_and_fit_model = dry_build_and_fit
    try:
        yield
    finally:
        if own_build is None:
            del hypermodel.build
        else:
            hypermodel.build = own_build
        del tuner._build_and_fit_model


def _other_values(declared: Any) -> list[Any]:
    """A discrete parameter's values but its default (a ``Choice``, a ``Boolean``, an ``Int`` of at
    most ``ENUMERATED_INT_VALUES`` values); none for any other."""
    kind = type(declared).__name__
    if kind == "Choice":
        values = list(declared.values)
    elif kind == "Boolean":
        values = [False, True]
    elif kind == "Int" and declared.sampling == "linear":
        values = list(range(declared.min_value, declared.max_value + 1, declared.step or 1))
        values = values if len(values) <= ENUMERATED_INT_VALUES else []
    else:
        return []
    default = declared.default if declared.default is not None else values[0] if values else None
    return [value for value in values if value != default]
