"""Mixed precision as Keras's guide has it: the float32 boundary on the final activation.

Under a mixed policy layers compute in float16 or bfloat16. A softmax or sigmoid computed
there loses the small probabilities the loss needs (tensorflow#34406, keras#16552), and a
cast added after it leaves it in low precision. So the last activation itself runs in
float32: ``Dense(n, activation="softmax")`` becomes ``Dense(n)`` then
``Activation("softmax", dtype="float32")``, under the output's own name, for every output
of a functional or Sequential model, compiled or not (a compiled one is compiled again
with its own arguments). A subclassed model is not a graph tunekit can rewrite: when its
outputs are not float32, the trials under a mixed policy fail with the reason, and the
search stops only when no configuration it can still draw runs in float32.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tunekit.compat.tf_keras import keras_compile_arguments, layer_calls, producing_layer
from tunekit.config.space import Choice, Fixed
from tunekit.config.spec import ExperimentSpec
from tunekit.errors import FatalTrialError, TrialFailure

# Layers that apply their ``activation`` last in ``call``: the activation can move into a
# float32 layer of its own. (A recurrent layer's ``activation`` is its cell's, not a last step.)
_SPLITTABLE = (
    "Dense",
    "EinsumDense",
    "Conv1D",
    "Conv2D",
    "Conv3D",
    "Conv1DTranspose",
    "Conv2DTranspose",
    "Conv3DTranspose",
    "SeparableConv1D",
    "SeparableConv2D",
    "DepthwiseConv1D",
    "DepthwiseConv2D",
)


def with_float32_outputs(model: Any, precision: str, first_inputs: Callable[[], Any], input_spec: Any) -> Any:
    """The model with float32 outputs under a mixed policy; the model itself under float32.

    Args:
        model: what ``build_model`` returned, inside the strategy's scope.
        precision: the dtype policy in force.
        first_inputs: gives one batch of inputs (to learn a subclassed model's output dtype).
        input_spec: the dataset's input ``element_spec`` (to build an unbuilt Sequential model).

    Raises:
        PrecisionError: the outputs are not float32 and the model cannot be rewritten.
    """
    if precision == "float32":
        return model
    import keras

    if not _is_graph_model(model):
        dtypes = {_dtype(x) for x in keras.tree.flatten(model(first_inputs(), training=False))}
        if dtypes <= {"float32"}:
            return model
        raise PrecisionError(
            f"build_model returned a subclassed model ({type(model).__name__}) whose output is "
            f"{', '.join(sorted(dtypes - {'float32'}))} under {precision}; tunekit moves the float32 boundary "
            "only in functional and Sequential models: end call() with a float32 layer, "
            "e.g. keras.layers.Activation('softmax', dtype='float32')"
        )
    if isinstance(model, keras.Sequential):
        model = _as_functional(model, input_spec)
    if all(_dtype(x) == "float32" for x in model.outputs):
        return model
    rebuilt = keras.Model(model.input, keras.tree.map_structure(lambda x: _float32_head(x, precision), model.output))
    rebuilt.name = model.name
    if model.compiled:
        _compile_like(rebuilt, model, precision)
    return rebuilt


class PrecisionError(Exception):
    """A model whose outputs cannot be made float32; which failure it is depends on the space."""


def precision_failure(error: PrecisionError, spec: ExperimentSpec, resolve: Callable[[str], str]) -> Exception:
    """A trial failure while some configuration the search can draw runs in float32, else a fatal one."""
    if "float32" in {resolve(p) for p in drawable_precisions(spec)}:
        return TrialFailure(f"{error}; only trials under a mixed precision fail")
    return FatalTrialError(str(error))


def drawable_precisions(spec: ExperimentSpec) -> set[str]:
    """Every precision a trial of this search can get: the space's values, else ``training.precision``."""
    param = next((p for p in spec.space.params if p.name == "precision"), None)
    if param is None:
        return {spec.training.precision}
    dist = param.distribution
    values = {str(v) for v in dist.values} if isinstance(dist, Choice) else set()
    if isinstance(dist, Fixed):
        values = {str(dist.value)}
    # A conditional precision leaves the trials where it is inactive on the training setting.
    return values | ({spec.training.precision} if param.when else set())


def _is_graph_model(model: Any) -> bool:
    """A plain functional or Sequential model: a subclass may override train_step and cannot be rebuilt."""
    kind = type(model)
    return kind.__module__.startswith("keras.") and kind.__qualname__ in ("Functional", "Sequential")


def _as_functional(model: Any, input_spec: Any) -> Any:
    """A Sequential model's graph as a functional model (only functional graphs take new layers)."""
    import keras

    if not model.built or not getattr(model, "outputs", None):
        # Without an Input layer it is built on the dataset's shape, batch size left open.
        model.build(keras.tree.map_structure(lambda s: tuple(s.shape), input_spec))
    return keras.Model(model.inputs, model.outputs, name=model.name)


def _float32_head(output: Any, precision: str) -> Any:
    """``output`` recomputed so that its last step runs in float32, under its own layer name."""
    import keras

    if _dtype(output) == "float32":
        return output
    layer = producing_layer(output)
    name = layer.name
    activation = getattr(layer, "activation", None)
    single_use = layer_calls(layer) == 1
    layer.name = f"{name}_{precision}"  # the float32 layer takes the name the output is known by
    if (
        single_use
        and type(layer).__name__ in _SPLITTABLE
        and activation is not None
        and activation is not keras.activations.linear
    ):
        layer.activation = keras.activations.linear
        return keras.layers.Activation(activation, dtype="float32", name=name)(output)
    if single_use and isinstance(layer, keras.layers.Activation | keras.layers.Softmax) and layer.input is not None:
        config = {**layer.get_config(), "dtype": "float32", "name": name}
        return type(layer).from_config(config)(layer.input)
    return keras.layers.Activation("linear", dtype="float32", name=name)(output)


def _dtype(tensor: Any) -> str:
    import keras

    return str(keras.backend.standardize_dtype(tensor.dtype))


def _compile_like(rebuilt: Any, original: Any, precision: str) -> None:
    try:
        rebuilt.compile(**keras_compile_arguments(original))
    except Exception as error:
        raise PrecisionError(
            f"build_model returned a compiled model whose outputs are not float32 under {precision}, and "
            f"recompiling it with float32 outputs failed ({type(error).__name__}: {error}); end it with a "
            "float32 layer, e.g. keras.layers.Activation('softmax', dtype='float32')"
        ) from error
