"""Checks of what a trainable's builders return, so a mistake ends in one line naming what came back."""

from __future__ import annotations

import difflib
import math
import sys
from typing import Any

from tunekit.contract import Builders, TrialContext
from tunekit.errors import FatalTrialError, TrialFailure
from tunekit.worker.scaling import rescaled_twice

# Arguments of model.fit that tunekit sets itself, and why a trainable cannot.
OWNED_FIT_ARGUMENTS = {
    "x": "build_data returns the training set",
    "y": "build_data returns the training set",
    "validation_data": "build_data returns the validation set",
    "epochs": "budget.max_epochs sets it",
    "initial_epoch": "tunekit resumes from its checkpoints",
    "verbose": "tunekit reports every epoch itself",
    "batch_size": "batch the datasets with ctx.batch_size instead",
    "validation_split": "build_data returns the validation set",
}


def checked_fit_options(builders: Builders, model: Any, config: dict[str, Any], ctx: TrialContext) -> dict[str, Any]:
    """The trainable's further ``model.fit`` arguments: callbacks, class weights, steps."""
    if builders.fit_options is None:
        return {}
    import inspect

    import keras

    options = builders.fit_options(config, ctx)
    if not isinstance(options, dict):
        raise FatalTrialError(f"fit_options must return a dict of model.fit arguments; it returned {_kind(options)}")
    accepted = set(inspect.signature(model.fit).parameters)
    for key in options:
        if key in OWNED_FIT_ARGUMENTS:
            raise FatalTrialError(f"fit_options returned {key!r}, which tunekit sets ({OWNED_FIT_ARGUMENTS[key]})")
        if key not in accepted:
            raise FatalTrialError(
                f"fit_options returned {key!r}, which model.fit does not take; it takes "
                + ", ".join(sorted(accepted - set(OWNED_FIT_ARGUMENTS) - {"kwargs"}))
            )
    callbacks = options.get("callbacks") or []
    if not isinstance(callbacks, list | tuple) or not all(isinstance(c, keras.callbacks.Callback) for c in callbacks):
        raise FatalTrialError(
            f"fit_options' callbacks must be a list of keras.callbacks.Callback; got {_kind(callbacks)}"
        )
    for callback in callbacks:
        if isinstance(callback, keras.callbacks.TensorBoard):
            in_trial_dir(callback, ctx.trial_dir)
    return {**options, "callbacks": list(callbacks)}


def in_trial_dir(callback: Any, trial_dir: str) -> None:
    """A ``keras.callbacks.TensorBoard`` given a relative ``log_dir`` (Keras' default ``logs``)
    writes under the trial's folder in the experiment, not the launch directory, where every
    trial's runs would land in one folder. An absolute ``log_dir`` is the user's choice and kept.
    The path the user gave is remembered, so a callback reused by the next trial moves again."""
    import os

    given = str(getattr(callback, "_tunekit_given_log_dir", callback.log_dir))
    callback._tunekit_given_log_dir = given
    if trial_dir and not os.path.isabs(given):
        callback.log_dir = os.path.join(trial_dir, given)


def checked_data(data: Any) -> tuple[Any, Any]:
    """Two batched ``tf.data.Dataset``s, or a fatal error naming what came back instead."""
    import tensorflow as tf

    expected = "build_data must return (train_ds, val_ds), two tf.data.Datasets batched with ctx.batch_size"
    if not isinstance(data, tuple | list) or len(data) != 2:
        raise FatalTrialError(f"{expected}; it returned {_kind(data)}")
    for name, dataset in zip(("train", "validation"), data, strict=True):
        if not isinstance(dataset, tf.data.Dataset):
            raise FatalTrialError(
                f"{expected}; its {name} set is {_kind(dataset)} (wrap arrays: "
                "tf.data.Dataset.from_tensor_slices((x, y)).batch(ctx.batch_size))"
            )
        element = dataset.element_spec
        if not isinstance(element, tuple) or len(element) not in (2, 3):
            raise FatalTrialError(
                f"{expected}; its {name} set yields {_spec_text(element)}, "
                "not (inputs, targets) or (inputs, targets, sample_weights)"
            )
        for part in tf.nest.flatten(element[1]):
            if part.shape.rank == 0:
                raise FatalTrialError(
                    f"{expected}; its {name} set is not batched: its elements have shapes "
                    f"{_spec_text(element)}, with scalar targets; add .batch(ctx.batch_size)"
                )
    return data[0], data[1]


def checked_model(model: Any) -> Any:
    import keras

    if not isinstance(model, keras.Model):
        raise FatalTrialError(f"build_model must return a keras.Model; it returned {_kind(model)}")
    return model


def check_model_takes_data(model: Any, dataset: Any, name: str) -> None:
    """A functional model's inputs against the dataset's: catches unbatched and mis-shaped sets."""
    import tensorflow as tf

    inputs = getattr(model, "inputs", None)
    if not inputs:
        return  # a subclassed model declares no inputs before its first call
    given = tf.nest.flatten(dataset.element_spec[0])
    if len(given) != len(inputs):
        raise FatalTrialError(
            f"build_data's {name} set gives {len(given)} input(s) but the model takes {len(inputs)} "
            f"({_spec_text(dataset.element_spec[0])} against {_shapes(inputs)})"
        )
    for spec, model_input in zip(given, inputs, strict=True):
        want = len(model_input.shape)
        if spec.shape.rank == want - 1:
            raise FatalTrialError(
                f"build_data's {name} set is not batched: its inputs have shape {_shape(spec.shape)} but the "
                f"model takes {_shape(model_input.shape)}; add .batch(ctx.batch_size)"
            )
        if spec.shape.rank != want:
            raise FatalTrialError(
                f"build_data's {name} set gives inputs of shape {_shape(spec.shape)} but the model takes "
                f"{_shape(model_input.shape)}"
            )
    if name == "train" and (note := rescaled_twice(model, dataset)):
        print(f"tunekit: warning: {note}", file=sys.stderr)  # into the trial's output.log


def _kind(value: Any) -> str:
    if isinstance(value, tuple | list):
        inner = ", ".join(_kind(v) for v in value[:4])
        return f"a {type(value).__name__} of {len(value)} ({inner})"
    if value is None:
        return "None"
    return f"{type(value).__module__.split('.')[0]}.{type(value).__qualname__}"


def _spec_text(element: Any) -> str:
    import tensorflow as tf

    return str(tf.nest.map_structure(lambda s: _shape(s.shape), element)).replace("'", "")


def _shapes(tensors: Any) -> str:
    return ", ".join(_shape(t.shape) for t in tensors)


def _shape(shape: Any) -> str:
    dims = ["None" if d is None else str(d) for d in (list(shape) if shape is not None else [])]
    return f"({dims[0]},)" if len(dims) == 1 else f"({', '.join(dims)})"


def check_epoch_metrics(metrics: dict[str, float], name: str, epoch: int) -> None:
    """The spec's metric is among what the model reported, and the loss and metric are finite."""
    if name not in metrics:
        close = difflib.get_close_matches(name, metrics, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise FatalTrialError(
            f"metric {name!r} was never reported{hint}; the trainable reported: {', '.join(sorted(metrics))}"
        )
    if not math.isfinite(metrics.get("loss", 0.0)) or not math.isfinite(metrics[name]):
        raise TrialFailure(f"non-finite loss at epoch {epoch}")
