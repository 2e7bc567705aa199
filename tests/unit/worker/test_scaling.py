"""A model that divides tunekit.data's [0, 1] images by 255 again is warned about before the first epoch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tunekit import data
from tunekit.contract import TrialContext
from tunekit.worker.checks import check_model_takes_data
from tunekit.worker.scaling import rescaled_twice


def _ctx(tmp_path: Path) -> TrialContext:
    return TrialContext(
        batch_size=4, per_replica_batch_size=4, replicas=1, precision="float32", seed=0, workdir=str(tmp_path),
        cpus=1, max_epochs=1, jit_compile=False,
    )  # fmt: skip


def _model(*first: Any) -> Any:
    import keras

    return keras.Sequential([keras.Input((8, 8, 3)), *first, keras.layers.Flatten(), keras.layers.Dense(2)])


def test_rescaling_by_255_on_the_image_pipelines_output_is_warned_about(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import keras

    images = (np.arange(4 * 8 * 8 * 3) % 256).astype("uint8").reshape(4, 8, 8, 3)
    records = data.write_tfrecord(tmp_path / "train.tfrecord", images, np.array([0, 1, 0, 1]))
    train = data.from_tfrecord(records, _ctx(tmp_path), training=True, image_size=8)
    check_model_takes_data(_model(keras.layers.Rescaling(1 / 255, name="scale")), train, "train")
    err = capsys.readouterr().err
    assert err == (
        "tunekit: warning: the model starts with scale = Rescaling(scale=0.003922), but tunekit.data's images are "
        "already float32 in [0, 1]: they reach the model in [0, 0.0039] and training stalls near chance; remove "
        "the Rescaling layer\n"
    )
    assert rescaled_twice(_model(), train) is None  # no Rescaling
    assert rescaled_twice(_model(keras.layers.Rescaling(2.0, offset=-1.0)), train) is None  # [0, 1] to [-1, 1]
    arrays = data.from_arrays(images, np.array([0, 1, 0, 1]), _ctx(tmp_path), training=True)  # 0-255, as given
    assert rescaled_twice(_model(keras.layers.Rescaling(1 / 255)), arrays) is None
