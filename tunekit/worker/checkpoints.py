"""A trial's checkpoints: when one is due, weights and optimizer state at an epoch's end, the final export, restore."""

from __future__ import annotations

import json
import sys
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tunekit.config.spec import ExperimentSpec
from tunekit.errors import FatalTrialError, TrialFailure, describe_error
from tunekit.layout import (
    CHECKPOINT_STATE,
    CHECKPOINT_WEIGHTS,
    FINAL_MODEL,
    FINAL_WEIGHTS,
    KEPT_WEIGHTS,
)
from tunekit.storage.checksums import damaged_payloads
from tunekit.worker.keep import KeptEpoch


@dataclass(frozen=True)
class CheckpointPolicy:
    """When a trial saves a checkpoint: where one is needed, not after every epoch.

    A checkpoint costs the worker a save and Ray a copy into the trial's storage, about a
    tenth of a small model's epoch. It is needed where a trial may end or be compared:
    at each ASHA rung (ASHA may stop the trial there, and a resume restarts it there), at
    its end (the model that is exported), after every epoch under PBT (an exploit copies
    the source's recent checkpoint), and otherwise once the last checkpoint is
    ``every_s`` old. A worker that dies, or a search stopped and resumed, retrains at most
    the epochs since the last checkpoint: ``every_s`` seconds, or up to the last rung.
    """

    milestones: frozenset[int]
    every_epoch: bool
    every_s: float

    @classmethod
    def for_spec(cls, spec: ExperimentSpec) -> CheckpointPolicy:
        from tunekit.search.plan import spec_milestones

        every_s = spec.training.checkpoint_every_s
        return cls(frozenset(spec_milestones(spec)), spec.scheduler.type == "pbt" or every_s == 0, every_s)

    def due(self, epoch: int, since_last_s: float) -> bool:
        """Whether the epoch just completed is checkpointed (the trial's last one always is)."""
        return self.every_epoch or epoch in self.milestones or since_last_s >= self.every_s


# The one mutable parameter the checkpoint itself carries (the optimizer's variable); every
# other parameter reaches the model through build_model, which gets the new config.
LEARNING_RATE = "learning_rate"


def save_checkpoint(directory: Path, model: Any, epoch: int, config: dict[str, Any]) -> None:
    """Weights and optimizer state (the optimizer's learning rate included) at an epoch's end,
    with the configuration they were trained under (so a restore can tell it was mutated)."""
    import numpy as np

    # A model trained by a loop of its own (a KerasTuner run_trial) may never have been compiled.
    optimizer = getattr(model, "optimizer", None)
    arrays = {f"w{i}": v.numpy() for i, v in enumerate(model.weights)}
    arrays.update({f"o{i}": v.numpy() for i, v in enumerate(optimizer.variables if optimizer else [])})
    np.savez(directory / CHECKPOINT_WEIGHTS, **arrays)
    (directory / CHECKPOINT_STATE).write_text(json.dumps({"epoch": epoch, "config": config}, default=str))


def export_model(directory: Path, model: Any) -> str:
    """Saves the trained model; returns "" or, when only the weights could be saved, why.

    The model is saved whole (``model.keras``) when that file loads on its own. Keras cannot
    save a subclassed model or a custom layer without ``get_config`` whole, and a class
    not registered with Keras saves but does not load; the weights always save, and
    ``build_model`` plus ``load_weights`` bring the model back. A trained trial never fails
    over its export.
    """
    from tunekit.compat.tf_keras import unregistered_classes

    try:
        model.save(directory / FINAL_MODEL)
        unregistered = unregistered_classes(model)
        if not unregistered:
            return ""
        why = (
            f"would not load on its own ({', '.join(unregistered)}: not registered with "
            "@keras.saving.register_keras_serializable())"
        )
    except Exception as error:
        why = f"failed ({describe_error(error)})"
    (directory / FINAL_MODEL).unlink(missing_ok=True)
    try:
        model.save_weights(directory / FINAL_WEIGHTS)
    except Exception as error:
        (directory / FINAL_WEIGHTS).unlink(missing_ok=True)
        weights_why = describe_error(error)
        return f"nothing saved: {FINAL_MODEL} {why} and {FINAL_WEIGHTS} failed ({weights_why})"
    return f"saved weights only ({FINAL_WEIGHTS}): {FINAL_MODEL} {why}"


def restore_checkpoint(
    checkpoint: Any,
    model: Any,
    train_ds: Any,
    config: dict[str, Any],
    built_with: dict[str, Any] | None = None,
    kept: KeptEpoch | None = None,
) -> tuple[int, str]:
    """Loads weights and optimizer state; returns the number of epochs already trained, and a
    note when the checkpoint given was damaged and an older one restored instead ("" if not).

    The checkpoint may be another trial's, copied by PBT, with ``config`` a perturbed copy
    of that trial's configuration: the model was built from ``config`` already, and a new
    learning rate is set on the optimizer after its state (the source's rate) is loaded.
    ``built_with`` is the config the trainable was given when it differs from the trial's
    (``training.scale_lr``): the rate set is its rate. ``kept`` (``training.keep: best``)
    takes the best epoch the checkpoint remembers.

    A payload that fails its recorded checksum (``tunekit.storage.checksums``) is never loaded: the
    newest older checkpoint of the trial that is whole is, or none (the trial trains from its
    first epoch); the note says which, and the trial's output.log has it.
    """
    if checkpoint is None:
        return 0, ""
    with checkpoint.as_directory() as directory:
        if not (Path(directory) / CHECKPOINT_STATE).is_file():
            # Ray's record of this trial predates the driver's death and points at a
            # checkpoint already rotated away; training again from scratch is correct.
            return 0, ""
        # Named where the trial's storage keeps it: as_directory may be a download's copy.
        stored = Path(getattr(checkpoint, "path", None) or directory)
        damaged = damaged_payloads(Path(directory))
        if not damaged:
            return _restore_from(Path(directory), stored, model, train_ds, config, built_with, kept), ""
        name, problem = damaged[0]
        older = _newest_whole_before(stored)
        epoch = 0 if older is None else _restore_from(older, older, model, train_ds, config, built_with, kept)
        instead = (
            f"restored {older.name} (epoch {epoch}) instead"
            if older is not None
            else "no older checkpoint of the trial is whole, so it trains again from its first epoch"
        )
        note = f"checkpoint {stored / name}: {problem}; {instead}"
        print(f"tunekit: warning: {note}", file=sys.stderr)  # into the trial's output.log
        return epoch, note


def _newest_whole_before(stored: Path) -> Path | None:
    """The trial's newest checkpoint older than ``stored`` whose payloads are whole (local storage)."""
    index = _checkpoint_index(stored)
    older = [p for p in stored.parent.glob("checkpoint_*") if -1 < _checkpoint_index(p) < index]
    for candidate in sorted(older, key=_checkpoint_index, reverse=True):
        if (candidate / CHECKPOINT_STATE).is_file() and not damaged_payloads(candidate):
            return candidate
    return None


def _checkpoint_index(path: Path) -> int:
    suffix = path.name.rpartition("_")[2]  # Ray's checkpoint_000007
    return int(suffix) if path.name.startswith("checkpoint_") and suffix.isdigit() else -1


def _restore_from(
    directory: Path,
    stored: Path,
    model: Any,
    train_ds: Any,
    config: dict[str, Any],
    built_with: dict[str, Any] | None,
    kept: KeptEpoch | None,
) -> int:
    import numpy as np

    with _damaged(stored / CHECKPOINT_STATE):
        state = json.loads((directory / CHECKPOINT_STATE).read_text())
    weights = stored / CHECKPOINT_WEIGHTS
    with _damaged(weights):
        arrays = np.load(directory / CHECKPOINT_WEIGHTS)
    with arrays:
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
            with _damaged(weights):
                value = arrays[f"w{i}"]
            _check_shape(value, variable, str(directory))
            variable.assign(value)
        model.optimizer.build(model.trainable_variables)
        for i, variable in enumerate(model.optimizer.variables):
            with _damaged(weights):
                value = arrays[f"o{i}"]
            variable.assign(value)
    if kept is not None:
        with _damaged(stored / KEPT_WEIGHTS):
            kept.restore(directory)
    _apply_new_learning_rate(model.optimizer, state.get("config", {}), config, built_with or config)
    return int(state["epoch"])


# What reading a file cut short or overwritten raises: zipfile's and zlib's errors, NumPy's
# (EOFError on an empty file, ValueError on one that is no .npz), JSON's (a ValueError), and
# the file system's.
_READ_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, ValueError, OSError)


@contextmanager
def _damaged(path: Path) -> Iterator[None]:
    """A read of ``path`` that fails names it: the trial's recorded reason says which file
    (``checkpoint /.../checkpoint_000004/weights.npz: damaged (File is not a zip file)``).

    The trial fails for its own reasons (its checkpoint): a retry would read the same file.
    """
    try:
        yield
    except FileNotFoundError as error:
        raise TrialFailure(f"checkpoint {path}: missing") from error
    except OSError as error:
        raise TrialFailure(f"checkpoint {path}: unreadable ({error.strerror or error})") from error
    except _READ_ERRORS as error:
        raise TrialFailure(f"checkpoint {path}: damaged ({str(error) or type(error).__name__})") from error


def _check_shape(saved: Any, variable: Any, directory: str) -> None:
    if tuple(saved.shape) != tuple(variable.shape):
        raise FatalTrialError(
            f"the checkpoint in {directory} holds {variable.path} with shape {tuple(saved.shape)} but "
            f"build_model's model has {tuple(variable.shape)}: a parameter that changed since the "
            "checkpoint was written (a PBT mutation?) changes the architecture; remove it from scheduler.mutate"
        )


def _apply_new_learning_rate(
    optimizer: Any, saved: dict[str, Any], config: dict[str, Any], built_with: dict[str, Any]
) -> None:
    """Sets ``built_with``'s learning rate when ``config``'s differs from the one the checkpoint
    trained with.

    A restore that is no mutation (a retry, a resume) keeps the restored rate, which the
    trainable's callbacks (ReduceLROnPlateau) may have lowered. The rate is a variable the
    compiled train step reads, so setting it retraces nothing.
    """
    if LEARNING_RATE not in config or saved.get(LEARNING_RATE) == config[LEARNING_RATE]:
        return
    try:
        optimizer.learning_rate = float(built_with[LEARNING_RATE])
    except TypeError:
        # Keras refuses to set a LearningRateSchedule's rate; build_model made the schedule
        # from the new config, so it already follows the mutated learning_rate.
        return


@dataclass
class TrialProgress:
    epoch: int = 0  # epochs completed, whether trained now or restored from a checkpoint
    config: dict[str, Any] = field(default_factory=dict)  # the trial's config; saved in checkpoints
    # training.scale_lr's learning rate, the one the trainable was given (None: not scaled).
    scaled_learning_rate: float | None = None
    # The space names read for the trial so far (tunekit.worker.reads); None: not checked.
    space_read: set[str] | None = None
    # Why the restore passed over a damaged checkpoint (restore_checkpoint); "" once reported.
    restore_note: str = ""
