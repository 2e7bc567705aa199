"""Images scaled twice: ``tunekit.data``'s pipelines give float32 in [0, 1], and a model that
starts with ``Rescaling(1/255)`` divides them again, to [0, 0.004]. Training then sits near
chance while nothing fails (6 of 10 trials of a user's search did). The worker says so in the
trial's ``output.log`` before the first epoch.
"""

from __future__ import annotations

import contextlib
from typing import Any

# Set on the datasets tunekit.data's image pipelines return (a dataset the trainable transforms
# further is a new object without it, and is not judged).
UNIT_RANGE_ATTR = "_tunekit_unit_range"
# A Rescaling scale at most this small is a divide by 255 (or 127.5): meant for 0-255 pixels.
PIXEL_SCALE = 1 / 100
FIRST_LAYERS = 4  # how deep into the model a preprocessing layer is looked for


def mark_unit_range(dataset: Any) -> Any:
    """``dataset``, marked as holding images in [0, 1]."""
    with contextlib.suppress(AttributeError):  # a dataset type that takes no attributes: nothing is judged
        setattr(dataset, UNIT_RANGE_ATTR, True)
    return dataset


def rescaled_twice(model: Any, dataset: Any) -> str | None:
    """Why the model scales tunekit.data's [0, 1] images again, or None."""
    if not getattr(dataset, UNIT_RANGE_ATTR, False):
        return None
    import keras

    for layer in _first_layers(model, keras):
        if isinstance(layer, keras.layers.Rescaling):
            scale = layer.scale
            if isinstance(scale, int | float) and 0 < abs(scale) <= PIXEL_SCALE:
                return (
                    f"the model starts with {layer.name} = Rescaling(scale={scale:.4g}), but tunekit.data's images "
                    "are already float32 in [0, 1]: they reach the model in [0, "
                    f"{abs(scale):.2g}] and training stalls near chance; remove the Rescaling layer"
                )
    return None


def _first_layers(model: Any, keras: Any) -> list[Any]:
    """The model's first layers, those of a nested model first among them included."""
    found: list[Any] = []
    for layer in list(getattr(model, "layers", []))[:FIRST_LAYERS]:
        if isinstance(layer, keras.Model):
            found += _first_layers(layer, keras)
        else:
            found.append(layer)
    return found[:FIRST_LAYERS]
