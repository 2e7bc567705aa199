"""tunekit's compile of a model ``build_model`` left uncompiled, from the trial's config.

``optimizer`` and ``learning_rate`` make the optimizer. ``loss`` is one Keras loss for
every output, or a mapping of output names to losses. Each output gets its own loss and
its own ``accuracy`` metric, as Keras needs for dict and list outputs (a bare
``metrics=["accuracy"]`` is rejected there); Keras names them after the output, so the
spec's metric can be ``val_digit_accuracy``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

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


# Batches per compiled call when tunekit picks. On the default digits MLP (one CPU) a later
# epoch fell from 94 to 35 ms (batch 32) and from 175 to 82 ms (batch 16): most of a small
# model's step is Python dispatching it. 8 to 32 all sit near the knee; results are
# identical to 1 (the same steps in the same order, inside one tf.while_loop).
AUTO_STEPS_PER_EXECUTION = 16

_BATCH_HOOKS = (
    "on_batch_begin",
    "on_batch_end",
    "on_train_batch_begin",
    "on_train_batch_end",
    "on_test_batch_begin",
    "on_test_batch_end",
)


def steps_per_execution(
    setting: int | Literal["auto"],
    compiled_by_tunekit: bool,
    callbacks: Sequence[Any],
    steps_per_epoch: int | None,
    replicas: int = 1,
) -> tuple[int | None, str]:
    """Batches per compiled call for this trial, and why; None keeps the model's own compile's.

    An integer is the user's choice and applies to every model. ``auto`` runs
    ``AUTO_STEPS_PER_EXECUTION`` batches per call for a model tunekit compiled whose epoch
    length is known, unless a ``fit_options`` callback acts on batches: Keras calls batch
    hooks once per call, so such a callback would see every 16th batch. An epoch of unknown
    length (TFRecords, ``filter``) runs one batch per call: Keras numbers the last call's
    batches as if it were full, and the epoch's steps_per_second counts batches from those
    numbers. Under MirroredStrategy (several replicas) it runs one: Keras 3.15's multi-step
    loop fails there on TensorFlow 2.21 ("You must feed a value for placeholder tensor
    .../while/cond/Placeholder"). A model the trainable compiled keeps its compile's setting
    (``model.compile(steps_per_execution=...)``).
    """
    if setting != "auto":
        return setting, "training.steps_per_execution"
    if not compiled_by_tunekit:
        return None, "auto: the trainable compiled the model; its compile's setting stands"
    if steps_per_epoch is None:
        return 1, "auto: the training data's length is unknown, so batches are counted one per call"
    if replicas > 1:
        return 1, f"auto: MirroredStrategy over {replicas} replicas runs one batch per call"
    batch_callbacks = sorted({type(c).__name__ for c in callbacks if _acts_on_batches(c)})
    if batch_callbacks:
        return 1, f"auto: callback {', '.join(batch_callbacks)} acts on batches and must see each one"
    return AUTO_STEPS_PER_EXECUTION, "auto: tunekit compiled the model and no callback acts on batches"


def _acts_on_batches(callback: Any) -> bool:
    import keras

    return any(
        getattr(type(callback), hook, None) is not getattr(keras.callbacks.Callback, hook) for hook in _BATCH_HOOKS
    )
