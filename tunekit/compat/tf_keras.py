"""Reaches into private TensorFlow and Keras APIs: the gradient registry, layers, compile
arguments, the training state (see ``tunekit.compat``)."""

from __future__ import annotations

from typing import Any

# ----------------------------------------------------------------------- TensorFlow


def drop_custom_gradients() -> int:
    """Removes the ``CustomGradient-<uid>`` entries of TensorFlow's global gradient registry.

    Why: tracing a ``tf.custom_gradient`` op (Keras's losses and optimizers have some)
    registers a function there that is never removed; its closure holds the whole
    FuncGraph of the trial that traced it (tensorflow#97697, tensorflow#80895), ~7 MB a
    trial for the digits MLP. Only a trace looks entries up, and every trace registers
    fresh ones, so once a trial is over they are dead weight. A TensorFlow without the
    private registry is left alone. Checked against TensorFlow 2.21
    (``ops._gradient_registry._registry``).

    Returns:
        How many entries were removed.
    """
    from tensorflow.python.framework import ops

    registry: Any = getattr(getattr(ops, "_gradient_registry", None), "_registry", None)
    if not isinstance(registry, dict):
        return 0
    names = [name for name in registry if isinstance(name, str) and name.startswith("CustomGradient-")]
    for name in names:
        del registry[name]
    return len(names)


# ----------------------------------------------------------------------------- Keras


def producing_layer(tensor: Any) -> Any:
    """The layer (or operation) of a functional model that produced a symbolic tensor.

    Why: moving the float32 boundary of a mixed-precision model onto its final activation
    (``tunekit.worker.precision``) rewrites the layer behind each output; Keras keeps that
    link only in the tensor's private ``_keras_history``. Checked against Keras 3.15.
    """
    return tensor._keras_history.operation


def layer_calls(layer: Any) -> int:
    """How many times a layer is called in the graphs it belongs to.

    Why: an output layer that is also called elsewhere (shared) must keep its activation
    there, so tunekit only splits the activation off a layer called once; Keras counts the
    calls only in the private ``_inbound_nodes``. Checked against Keras 3.15.
    """
    return len(layer._inbound_nodes)


def keras_compile_arguments(model: Any) -> dict[str, Any]:
    """The arguments a model was compiled with, as the objects passed (optimizer, losses, metrics).

    Why: a compiled model rebuilt with float32 outputs must be compiled again as its author
    compiled it. ``get_compile_config()`` serialises the arguments, and deserialising them
    fails for any loss or metric function not registered with Keras (a plain function, a
    lambda); Keras keeps the objects themselves in the private ``_compile_config``. The
    optimizer there is the user's own, before the loss-scale wrapper ``compile`` adds for
    mixed_float16, so compiling again wraps it once. Without it (another Keras), the public
    config is deserialised. Checked against Keras 3.15.
    """
    import keras

    recorded = getattr(model, "_compile_config", None)
    if recorded is not None and isinstance(getattr(recorded, "config", None), dict):
        return dict(recorded.config)
    return dict(keras.saving.deserialize_keras_object(model.get_compile_config()))


def build_training_state(model: Any, batch_spec: Any) -> bool:
    """Creates the optimizer's, compiled metrics' and losses' variables before ``fit`` traces.

    Why: Keras's TensorFlow trainer builds them up front only under a distribution strategy
    (``_maybe_symbolic_build``); otherwise the first traced train and test steps create
    them, and TensorFlow traces each such step twice, once creating variables and once
    without. Building first, as Keras does under a strategy, saves those second traces: on
    the digits MLP the first epoch went from 0.79 to 0.47 s. ``Trainer._symbolic_build``
    reads only each element's shape and dtype, which a dataset's ``element_spec`` has, so no
    data is read, and it builds symbolically, so no state changes. Returns False where it
    cannot (another Keras; a model it cannot build symbolically), and Keras builds inside
    the first trace as before, raising there whatever it raises. Checked against Keras 3.15.
    """
    build = getattr(model, "_symbolic_build", None)
    if build is None:
        return False
    try:
        build(data_batch=batch_spec)
    except Exception:
        return False
    return True


def unregistered_classes(model: Any) -> list[str]:
    """The model's own classes (the model's, its layers') that ``keras.models.load_model``
    would not find: neither Keras's nor registered with Keras.

    Why: Keras saves such a class in a ``.keras`` file by its name and module without a
    word, and loading looks the name up only in its registry (and Keras's own modules), so
    the file fails to load ("could not be deserialized properly") without ``custom_objects``:
    a file that does not load on its own is not a saved model. ``_flatten_layers`` walks the
    layers nested in layers too. Checked against Keras 3.15
    (``serialization_lib._retrieve_class_or_fn``).
    """
    import keras

    names: list[str] = []
    for layer in model._flatten_layers(include_self=True, recursive=True):
        cls = type(layer)
        if cls.__module__.split(".")[0] == "keras" or cls.__name__ in names:
            continue
        if keras.saving.get_registered_object(keras.saving.get_registered_name(cls)) is not cls:
            names.append(cls.__name__)
    return names
