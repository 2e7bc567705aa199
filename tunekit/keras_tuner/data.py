"""``search``'s ``tf.data.Dataset`` arguments on their way to the workers: saved once, loaded in each trial.

A dataset cannot travel by Ray's serialisation; NumPy arrays and everything else do, as given.
The datasets among ``search``'s positional arguments and keywords (``x``, ``validation_data``)
are saved under the storage folder, beside the experiment (``tunekit.tuner.data``'s folder), and
each trial gets them back loaded, so ``run_trial`` and ``HyperModel.fit`` receive datasets.
"""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunekit.tuner.data import is_dataset


@dataclass(frozen=True)
class SavedDataset:
    """A ``tf.data.Dataset`` saved at ``path`` (``tf.data.Dataset.save``)."""

    path: str

    def load(self) -> Any:
        import tensorflow as tf

        return tf.data.Dataset.load(self.path)


def saved(args: tuple[Any, ...], kwargs: dict[str, Any], data_dir: Path) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``search``'s arguments with each dataset saved under ``data_dir`` and named by a ``SavedDataset``."""

    def save(name: str, value: Any) -> Any:
        if not is_dataset(value):
            return value
        digest = hashlib.sha1(repr(value.element_spec).encode() + name.encode()).hexdigest()[:8]
        path = data_dir / f"{name}-{digest}"
        if path.exists():
            shutil.rmtree(path)
        value.save(str(path))
        return SavedDataset(str(path))

    return (
        tuple(save(f"arg{i}", value) for i, value in enumerate(args)),
        {key: save(key, value) for key, value in kwargs.items()},
    )


def loaded(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The arguments ``saved`` made, with each ``SavedDataset`` loaded again (in a trial)."""

    def load(value: Any) -> Any:
        return value.load() if isinstance(value, SavedDataset) else value

    return tuple(load(value) for value in args), {key: load(value) for key, value in kwargs.items()}
