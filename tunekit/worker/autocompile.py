"""tunekit's compile of a model ``build_model`` left uncompiled, from the trial's config.

``optimizer`` and ``learning_rate`` make the optimizer. ``loss`` is one Keras loss for
every output, or a mapping of output names to losses. Each output gets its own loss and
its own ``accuracy`` metric, as Keras needs for dict and list outputs (a bare
``metrics=["accuracy"]`` is rejected there); Keras names them after the output, so the
spec's metric can be ``val_digit_accuracy``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tunekit.contract import TrialContext
from tunekit.errors import FatalTrialError

DEFAULT_LOSS = "sparse_categorical_crossentropy"
# One unit is a yes/no output: a sparse categorical loss has only class 0 to put it in.
ONE_UNIT_LOSS = "binary_crossentropy"


def compile_from_config(model: Any, config: Mapping[str, Any], ctx: TrialContext) -> None:
    import keras

    optimizer = keras.optimizers.get(
        {
            "class_name": str(config.get("optimizer", "adam")),
            "config": {"learning_rate": float(config.get("learning_rate", 1e-3))},
        }
    )
    loss, metrics = losses_and_metrics(model, config.get("loss"))
    model.compile(optimizer=optimizer, loss=loss, metrics=metrics, jit_compile=ctx.jit_compile)


def losses_and_metrics(model: Any, setting: object) -> tuple[Any, Any]:
    """``loss`` and ``metrics`` for ``compile``, shaped like the model's outputs.

    Raises:
        FatalTrialError: ``loss`` maps names that are not the model's outputs, or is
            a mapping for a model with one output.
    """
    structure = _outputs(model)
    if isinstance(structure, Mapping):
        names = list(structure)
        losses = _per_output(setting, names, [structure[n] for n in names])
        return losses, {name: ["accuracy"] for name in names}
    if isinstance(structure, list | tuple) and len(structure) > 1:
        names = list(model.output_names)
        return list(_per_output(setting, names, list(structure)).values()), [["accuracy"] for _ in names]
    if isinstance(setting, Mapping):
        raise FatalTrialError(
            f"config loss is a mapping ({', '.join(map(str, setting))}) but the model has one output; "
            "give one loss, e.g. sparse_categorical_crossentropy"
        )
    single = structure[0] if isinstance(structure, list | tuple) else structure
    return setting or _default_loss(single), ["accuracy"]


def _outputs(model: Any) -> Any:
    """The model's symbolic outputs in their structure, or None for a subclassed model (unknown)."""
    if not getattr(model, "outputs", None):
        return None
    try:
        return model.output
    except AttributeError:  # a Sequential model has ``outputs`` but no ``output`` structure
        return list(model.outputs)


def _per_output(setting: object, names: list[str], tensors: list[Any]) -> dict[str, Any]:
    if not isinstance(setting, Mapping):
        return {name: setting or _default_loss(t) for name, t in zip(names, tensors, strict=True)}
    unknown = [str(k) for k in setting if k not in names]
    missing = [n for n in names if n not in setting]
    if unknown or missing:
        wrong = f"names {', '.join(unknown)}" if unknown else f"misses {', '.join(missing)}"
        raise FatalTrialError(f"config loss {wrong}; the model's outputs are {', '.join(names)}")
    return {name: setting[name] for name in names}


def _default_loss(tensor: Any) -> str:
    shape = getattr(tensor, "shape", None)
    return ONE_UNIT_LOSS if shape is not None and len(shape) >= 2 and shape[-1] == 1 else DEFAULT_LOSS
