"""What ``tunekit.Tuner.search``'s data becomes: ``build_data`` for the trials.

NumPy arrays (``ArrayData``) travel through Ray's object store: they are put there once,
when Ray first serialises the builder, and every trial reads them from it (also on other
nodes); the driver's saved state holds only the reference. ``tf.data.Dataset``s
(``SavedDatasets``) are saved once under the storage folder and loaded by each trial.
Neither TensorFlow nor Ray is imported here until a trial (or a save) needs it.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunekit.errors import SpecError, TunekitError


class ArrayData:
    """``build_data(config, ctx)`` over NumPy arrays that travel through Ray's object store.

    The arrays go into the object store once, the first time Ray serialises this object
    (when ``tunekit.run`` hands the builders to Ray Tune); every later copy, in a trial or in
    the driver's saved state, carries the reference only. Serialised with no Ray running
    (a deep copy), it carries the arrays themselves.

    Args:
        train: ``(x, y)`` or ``(x, y, sample_weight)``; x and y may be arrays, lists or dicts of arrays.
        validation: the same for the validation set.
        shuffle: reshuffle the training set every epoch (``model.fit``'s default for arrays).
    """

    def __init__(self, train: tuple[Any, ...], validation: tuple[Any, ...], shuffle: bool = True) -> None:
        self.train = train
        self.validation = validation
        self.shuffle = shuffle
        self._refs: tuple[str, Any] | None = None  # (Ray job, the object reference)

    def __repr__(self) -> str:
        if self.train is None:
            return "ArrayData(in Ray's object store)"
        return f"ArrayData({_length(self.train)} training, {_length(self.validation)} validation examples)"

    def __reduce__(self) -> tuple[Any, ...]:
        ref = self._object_ref()
        if ref is None:
            return (ArrayData, (self.train, self.validation, self.shuffle))
        return (_from_object_store, (ref, self.shuffle))

    def _object_ref(self) -> Any:
        ray = sys.modules.get("ray")
        if ray is None or not ray.is_initialized() or self.train is None:
            return self._refs[1] if self._refs else None
        job = ray.get_runtime_context().get_job_id()
        if self._refs is None or self._refs[0] != job:  # a new Ray: the old reference is gone
            self._refs = (job, ray.put((self.train, self.validation)))
        return self._refs[1]

    def arrays(self) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        if self.train is None:
            import ray

            return ray.get(self._refs[1])
        return self.train, self.validation

    def __call__(self, config: Mapping[str, Any], ctx: Any) -> tuple[Any, Any]:
        import tensorflow as tf

        train, validation = self.arrays()
        train_ds = tf.data.Dataset.from_tensor_slices(train)
        if self.shuffle:
            train_ds = train_ds.shuffle(_length(train), seed=ctx.seed, reshuffle_each_iteration=True)
        val_ds = tf.data.Dataset.from_tensor_slices(validation)
        return (
            train_ds.batch(ctx.batch_size).prefetch(tf.data.AUTOTUNE),
            val_ds.batch(ctx.batch_size).prefetch(tf.data.AUTOTUNE),
        )


def _from_object_store(ref: Any, shuffle: bool) -> ArrayData:
    data = ArrayData(None, None, shuffle)  # type: ignore[arg-type]
    data._refs = ("", ref)
    return data


@dataclass(frozen=True)
class SavedDatasets:
    """``build_data(config, ctx)`` over ``tf.data.Dataset``s saved once under the storage folder."""

    train: str
    validation: str

    def __repr__(self) -> str:
        return f"SavedDatasets({Path(self.train).parent})"

    def __call__(self, config: Mapping[str, Any], ctx: Any) -> tuple[Any, Any]:
        import tensorflow as tf

        return tf.data.Dataset.load(self.train), tf.data.Dataset.load(self.validation)


def fit_arguments(args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    names = ("x", "y", "batch_size", "epochs")
    fit = dict(kwargs)
    for name, value in zip(names, args, strict=False):
        if name in fit:
            raise TypeError(f"search() got multiple values for argument {name!r}")
        fit[name] = value
    if len(args) > len(names):
        raise TypeError(f"search() takes at most {len(names)} positional arguments (x, y, batch_size, epochs)")
    return fit


def data_builder(fit: dict[str, Any], data_dir: Path) -> Callable[..., Any]:
    """``build_data`` for ``search``'s data; pops the arguments it used from ``fit``."""
    x, y = fit.pop("x", None), fit.pop("y", None)
    sample_weight = fit.pop("sample_weight", None)
    validation_data = fit.pop("validation_data", None)
    split = fit.pop("validation_split", None) or 0.0
    shuffle = fit.pop("shuffle", True)
    if x is None:
        raise TunekitError("search: x (the training data) is required")
    if is_dataset(x):
        if validation_data is None or not is_dataset(validation_data):
            raise TunekitError("search: with x a tf.data.Dataset, validation_data must be a tf.data.Dataset too")
        return _saved_datasets(x, validation_data, data_dir)
    if y is None:
        raise TunekitError("search: y is required when x is arrays (a tf.data.Dataset carries its own targets)")
    train: tuple[Any, ...] = (x, y) if sample_weight is None else (x, y, sample_weight)
    if validation_data is not None:
        if not isinstance(validation_data, tuple | list) or len(validation_data) not in (2, 3):
            raise TunekitError(
                "search: with x as arrays, validation_data must be (x_val, y_val) or (x_val, y_val, sample_weight); "
                f"got {type(validation_data).__name__}"
            )
        validation = tuple(validation_data)
    elif split:
        train, validation = _split(train, float(split))
    else:
        raise TunekitError(
            "search: tunekit scores every trial on validation data: pass validation_data=(x_val, y_val) "
            "or validation_split=0.2"
        )
    return ArrayData(train, validation, shuffle=bool(shuffle))


def _split(arrays: tuple[Any, ...], split: float) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """Keras's ``validation_split``: the last ``split`` share, before any shuffling."""
    if not 0.0 < split < 1.0:
        raise SpecError("validation_split", "must lie between 0 and 1", split)
    at = int(_length(arrays) * (1.0 - split))
    return _sliced(arrays, slice(0, at)), _sliced(arrays, slice(at, None))


def _sliced(structure: Any, part: slice) -> Any:
    if isinstance(structure, dict):
        return {k: _sliced(v, part) for k, v in structure.items()}
    if isinstance(structure, list | tuple):
        return type(structure)(_sliced(v, part) for v in structure)
    return None if structure is None else structure[part]


def _length(structure: Any) -> int:
    if isinstance(structure, dict):
        return _length(next(iter(structure.values())))
    if isinstance(structure, list | tuple):
        return _length(structure[0])
    return len(structure)


def is_dataset(value: Any) -> bool:
    tf = sys.modules.get("tensorflow")
    return tf is not None and isinstance(value, tf.data.Dataset)


def _saved_datasets(train: Any, validation: Any, data_dir: Path) -> SavedDatasets:
    """Saves both datasets once (a random augmentation is frozen at its saved draw)."""
    paths = []
    for name, dataset in (("train", train), ("validation", validation)):
        digest = hashlib.sha1(repr(dataset.element_spec).encode() + name.encode()).hexdigest()[:8]
        path = data_dir / f"{name}-{digest}"
        if path.exists():
            shutil.rmtree(path)
        dataset.save(str(path))
        paths.append(str(path))
    return SavedDatasets(paths[0], paths[1])


def rebatched(args: tuple[Any, ...], kwargs: dict[str, Any], size: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``model.fit``'s datasets (``x`` and ``validation_data``) batched by ``size`` instead."""

    def rebatch(data: Any) -> Any:
        return data.unbatch().batch(size) if is_dataset(data) else data

    if args:
        args = (rebatch(args[0]), *args[1:])
    elif "x" in kwargs:
        kwargs["x"] = rebatch(kwargs["x"])
    if "validation_data" in kwargs:
        kwargs["validation_data"] = rebatch(kwargs["validation_data"])
    return args, kwargs
