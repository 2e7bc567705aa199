"""KerasTuner's ``hyperparameters=``, ``tune_new_entries`` and ``allow_new_entries``: a space given in advance.

A ``HyperParameters`` passed to the tuner registers parameters before ``build_model`` runs, as
KerasTuner's oracle does: a parameter it declares replaces the code's declaration of the same
name (``hp.Fixed("learning_rate", 1e-3)`` pins it; ``hp.Float("dropout", 0, 0.2)`` narrows it),
and one the code never declares is searched as well. With ``tune_new_entries=False`` every
parameter the given object lacks keeps its default (a ``fixed`` one in the spec, so the trials
still record it); with ``allow_new_entries=False`` a code declaring one is refused.
"""

from __future__ import annotations

from typing import Any

from tunekit.errors import SpecError
from tunekit.tuner.discover import Discovery
from tunekit.tuner.hp import Declared, HyperParameters, among


def declared_in(given: Any) -> dict[str, Declared]:
    """The parameters a ``tunekit.HyperParameters`` or a ``keras_tuner.HyperParameters`` declares, in order."""
    if isinstance(given, HyperParameters):
        return dict(given.declared)
    space = getattr(given, "space", None)
    if space is None:
        raise SpecError("hyperparameters", "must be a HyperParameters object (tunekit's or keras_tuner's)", given)
    found: dict[str, Declared] = {}
    for item in space:
        found.setdefault(item.name, _from_kerastuner(item))
    return found


def _from_kerastuner(item: Any) -> Declared:
    """One of keras_tuner's ``HyperParameter`` objects, through its ``get_config()``."""
    kind = type(item).__name__
    config = item.get_config()
    conditions = tuple(
        (c["config"]["name"], tuple(c["config"]["values"])) for c in config.get("conditions", []) if "config" in c
    )
    if kind in ("Int", "Float"):
        args = {k: config.get(k) for k in ("min_value", "max_value", "step")}
        args["sampling"] = config.get("sampling") or "linear"
        default = config.get("default")
        return Declared(item.name, kind, args, args["min_value"] if default is None else default, conditions)
    if kind == "Choice":
        values = list(config["values"])
        default = config.get("default")
        ordered = config.get("ordered")
        return Declared(
            item.name,
            kind,
            {"values": values, "ordered": ordered},
            values[0] if default is None else default,
            conditions,
        )
    if kind == "Boolean":
        return Declared(item.name, kind, {}, bool(config.get("default")), conditions)
    if kind == "Fixed":
        return Declared(item.name, kind, {"value": config["value"]}, config["value"], conditions)
    raise SpecError("hyperparameters", f"holds a {kind}, which tunekit does not know", item.name)


def restricted(found: Discovery, given: Any, *, tune_new_entries: bool, allow_new_entries: bool) -> Discovery:
    """The space ``found`` in the code, with the ``given`` parameters over it (the module's docstring).

    Raises:
        SpecError: ``allow_new_entries`` is False and the code declares a parameter ``given`` lacks.
    """
    declared = declared_in(given) if given is not None else {}
    if given is None and not (tune_new_entries and allow_new_entries):
        rule = "tune_new_entries=False" if not tune_new_entries else "allow_new_entries=False"
        raise SpecError("hyperparameters", f"is needed with {rule} (the parameters to search)", got=False)
    new = [name for name in found.params if name not in declared]
    if new and not allow_new_entries:
        raise SpecError(
            "allow_new_entries",
            f"is False, but build_model declares {', '.join(new)}, which hyperparameters lacks; "
            f"it has {', '.join(declared) or 'nothing'}",
            got=False,
        )
    result = Discovery(builds=found.builds, notes=list(found.notes))
    for name, item in declared.items():  # registered first, as KerasTuner's oracle registers them
        if name not in found.params:
            result.params[name] = item
            if item.conditions:
                result.when[name] = dict(item.conditions)
    for name, item in found.params.items():
        if name in declared:
            result.params[name] = declared[name]
        elif tune_new_entries:
            result.params[name] = item
        else:  # KerasTuner: new entries keep their default value
            result.params[name] = Declared(name, "Fixed", {"value": item.default}, item.default, item.conditions)
        if found.when.get(name):
            result.when[name] = found.when[name]
    return _reachable(result)


def _reachable(space: Discovery) -> Discovery:
    """Without the parameters whose conditions can never hold (a fixed parent at another value)."""
    for name in list(space.params):
        for parent, allowed in space.when.get(name, {}).items():
            parent_item = space.params.get(parent)
            if parent_item is None or (parent_item.kind == "Fixed" and not among(parent_item.default, allowed)):
                del space.params[name]
                space.when.pop(name, None)
                break
    return space
