"""The rules of ``scheduler: {type: pbt}``: which parameters may mutate, and what PBT needs.

Population-based training copies a trial's weights and optimizer state into another
trial and goes on training them under a perturbed configuration. The copy only makes
sense when the new configuration builds a model of the same shape, so the rule is
simple and checked here, before anything runs: a parameter may mutate when it is a
continuous float (``uniform`` or ``loguniform``) that every configuration has (no
``when``). ``int`` and ``choice`` parameters (units, layers, the optimizer, the batch
size) are refused: tunekit cannot know which of them change the architecture, and most
do. A float that changes a weight's shape anyway is caught when the trial restores the
copied checkpoint (``tunekit.worker.checkpoints``), with the weight and both shapes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tunekit.config import _validate as v
from tunekit.config.space import FloatRange, SearchSpace, kind_name
from tunekit.errors import SpecError

PBT_KEYS = ("perturbation_interval", "quantile_fraction", "resample_probability", "mutate")
ASHA_KEYS = ("grace_period", "reduction_factor")


def mutable_names(space: SearchSpace) -> tuple[str, ...]:
    """The parameters PBT may mutate by default: every unconditional float of the space."""
    return tuple(p.name for p in space.params if isinstance(p.distribution, FloatRange) and not p.when)


def parse_mutate(raw: object, space: SearchSpace) -> tuple[str, ...]:
    """``scheduler.mutate``: the names listed (each checked), or by default every mutable one."""
    if raw is None:
        names = mutable_names(space)
        if not names:
            rule = "PBT needs a parameter to mutate, and the space has no unconditional uniform or loguniform one"
            raise SpecError("scheduler.mutate", f"{rule} (it has {', '.join(space.names)})", got=False)
        return names
    listed = v.sequence(raw, "scheduler.mutate", non_empty=True)
    params = {p.name: p for p in space.params}
    for index, name in enumerate(listed):
        path = v.join("scheduler.mutate", index)
        if not isinstance(name, str) or name not in params:
            raise SpecError(path, f"is not a parameter of the space; it has {', '.join(space.names)}", name)
        param = params[name]
        if not isinstance(param.distribution, FloatRange):
            raise SpecError(
                path,
                f"must be a uniform or loguniform parameter; {name} is {kind_name(param.distribution)}, "
                "which may change the model's shape, so PBT cannot carry weights across it",
                name,
            )
        if param.when:
            raise SpecError(path, f"must not be conditional; {name} has when: {dict(param.when)}", name)
        if name in listed[:index]:
            raise SpecError(path, "is listed twice", name)
    return tuple(listed)


def parse_pbt_settings(
    section: Mapping[str, Any], num_samples: int, max_epochs: int, max_concurrent: int
) -> dict[str, Any]:
    """``perturbation_interval``, ``quantile_fraction`` and ``resample_probability``, checked
    with the rules PBT adds to the spec: no ASHA keys, and a population that lives at once."""
    for key in ASHA_KEYS:
        if key in section:
            raise SpecError(f"scheduler.{key}", "is an ASHA setting; PBT uses perturbation_interval", section[key])
    if num_samples < 2:
        raise SpecError("budget.num_samples", "must be >= 2 with scheduler.type pbt (the population)", num_samples)
    if max_concurrent != num_samples:
        raise SpecError(
            "budget.max_concurrent",
            f"must equal budget.num_samples ({num_samples}) with scheduler.type pbt: the whole population "
            "lives at once, and Ray takes turns training it on the CPUs and GPUs there are",
            max_concurrent,
        )
    interval = v.integer(section.get("perturbation_interval", 1), "scheduler.perturbation_interval", minimum=1)
    if interval >= max_epochs:
        raise SpecError("scheduler.perturbation_interval", f"must be < budget.max_epochs ({max_epochs})", interval)
    return {
        "perturbation_interval": interval,
        "quantile_fraction": _fraction(section, "quantile_fraction", 0.25, high=0.5),
        "resample_probability": _fraction(section, "resample_probability", 0.25, high=1.0),
    }


def check_searched_by(algorithm: str) -> None:
    """The initial population comes from TPE or random search; a grid pins what PBT moves."""
    if algorithm == "grid":
        raise SpecError(
            "search.algorithm",
            "must be tpe or random with scheduler.type pbt: PBT moves the configurations grid search pins",
            algorithm,
        )


def check_asha_section(section: Mapping[str, Any]) -> None:
    """PBT's keys under another scheduler would be silently ignored: refuse them."""
    for key in PBT_KEYS:
        if key in section:
            raise SpecError(f"scheduler.{key}", "is a PBT setting; set scheduler.type: pbt to use it", section[key])


def _fraction(section: Mapping[str, Any], key: str, default: float, *, high: float) -> float:
    """A fraction or probability in [0, high]; quantile_fraction must also be above 0."""
    value = v.number(section.get(key, default), f"scheduler.{key}", at_least=0)
    if value > high or (key == "quantile_fraction" and value == 0):
        low = "0 <" if key == "quantile_fraction" else "0 <="
        raise SpecError(f"scheduler.{key}", f"must be {low} x <= {high:g}", value)
    return value
