"""A trial's checkpoints: weights and optimizer state at each epoch's end, the final model export, restore."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunekit.errors import FatalTrialError, describe_error
from tunekit.layout import (
    CHECKPOINT_STATE,
    CHECKPOINT_WEIGHTS,
    FINAL_MODEL,
    FINAL_WEIGHTS,
)


def save_checkpoint(directory: Path, model: Any, epoch: int) -> None:
    """Weights and optimizer state (the optimizer's learning rate included) at an epoch's end."""
    import numpy as np

    optimizer = model.optimizer
    arrays = {f"w{i}": v.numpy() for i, v in enumerate(model.weights)}
    arrays.update({f"o{i}": v.numpy() for i, v in enumerate(optimizer.variables)})
    np.savez(directory / CHECKPOINT_WEIGHTS, **arrays)
    (directory / CHECKPOINT_STATE).write_text(json.dumps({"epoch": epoch}))


def export_model(directory: Path, model: Any) -> str:
    """Saves the trained model; returns "" or, when only the weights could be saved, why.

    Keras cannot save a subclassed model or a custom layer without ``get_config`` whole;
    its weights always save, and ``build_model`` plus ``load_weights`` bring it back. A
    trained trial never fails over its export.
    """
    try:
        model.save(directory / FINAL_MODEL)
        return ""
    except Exception as error:
        (directory / FINAL_MODEL).unlink(missing_ok=True)
        why = describe_error(error)
    try:
        model.save_weights(directory / FINAL_WEIGHTS)
    except Exception as error:
        (directory / FINAL_WEIGHTS).unlink(missing_ok=True)
        weights_why = describe_error(error)
        return f"nothing saved: {FINAL_MODEL} failed ({why}) and so did {FINAL_WEIGHTS} ({weights_why})"
    return f"saved weights only ({FINAL_WEIGHTS}): {FINAL_MODEL} failed ({why})"


def restore_checkpoint(checkpoint: Any, model: Any, train_ds: Any) -> int:
    """Loads weights and optimizer state; returns the number of epochs already trained."""
    if checkpoint is None:
        return 0
    import numpy as np

    with checkpoint.as_directory() as directory:
        if not (Path(directory) / CHECKPOINT_STATE).is_file():
            # Ray's record of this trial predates the driver's death and points at a
            # checkpoint already rotated away; training again from scratch is correct.
            return 0
        state = json.loads((Path(directory) / CHECKPOINT_STATE).read_text())
        with np.load(Path(directory) / CHECKPOINT_WEIGHTS) as arrays:
            if not model.weights:
                # A subclassed model creates its weights on its first call.
                model(next(iter(train_ds))[0], training=False)
            saved = sum(1 for name in arrays.files if name.startswith("w"))
            if saved != len(model.weights):
                raise FatalTrialError(
                    f"the checkpoint in {directory} holds {saved} weights but build_model's model has "
                    f"{len(model.weights)}: the model changed since the checkpoint was written"
                )
            for i, variable in enumerate(model.weights):
                variable.assign(arrays[f"w{i}"])
            model.optimizer.build(model.trainable_variables)
            for i, variable in enumerate(model.optimizer.variables):
                variable.assign(arrays[f"o{i}"])
    return int(state["epoch"])


@dataclass
class TrialProgress:
    epoch: int = 0  # epochs completed, whether trained now or restored from a checkpoint
