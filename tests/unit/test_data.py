"""tf.data pipelines on real files: labels, caching before augmentation, seeds, TFRecord, threads."""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tunekit.contract import TrialContext

tf = pytest.importorskip("tensorflow")
data = pytest.importorskip("tunekit.data")

pytestmark = pytest.mark.slow  # imports TensorFlow


def context(batch_size: int = 32, seed: int = 0, cpus: int = 2) -> TrialContext:
    return TrialContext(
        batch_size=batch_size,
        per_replica_batch_size=batch_size,
        replicas=1,
        precision="float32",
        seed=seed,
        workdir="/tmp",
        cpus=cpus,
        max_epochs=2,
        jit_compile=False,
    )


def epoch(dataset: Iterable[tuple[Any, Any]]) -> tuple[np.ndarray, np.ndarray]:
    images, labels = zip(*[(x.numpy(), y.numpy()) for x, y in dataset], strict=True)
    return np.concatenate(images), np.concatenate(labels)


def copy_folder(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


def test_image_folder_yields_every_image_with_its_label(small_digits_folder: Path) -> None:
    from PIL import Image

    files, labels, classes = data.list_image_folder(small_digits_folder)
    assert classes == [str(d) for d in range(10)]
    assert Counter(labels) == dict.fromkeys(range(10), 30)
    assert all(Path(f).parent.name == classes[label] for f, label in zip(files, labels, strict=True))

    dataset = data.from_image_folder(small_digits_folder, context(), training=False, image_size=16)
    assert dataset.element_spec[0].shape.as_list() == [None, 16, 16, 3]
    assert dataset.element_spec[0].dtype == tf.float32
    assert dataset.element_spec[1].dtype == tf.int32
    images, got_labels = epoch(dataset)
    assert images.shape == (300, 16, 16, 3)
    assert got_labels.tolist() == labels  # validation data keeps the folder order
    for position in (0, 151, 299):  # decoded pixels are the file's pixels, scaled to [0, 1]
        expected = np.asarray(Image.open(files[position]).convert("RGB"), dtype=np.float32) / 255.0
        np.testing.assert_allclose(images[position], expected, atol=1e-6)


def test_images_are_resized_and_can_be_grayscale(small_digits_folder: Path) -> None:
    dataset = data.from_image_folder(small_digits_folder, context(), training=False, image_size=8, channels=1)
    images, _ = epoch(dataset)
    assert images.shape == (300, 8, 8, 1)
    assert images.min() >= 0.0 and images.max() <= 1.0 and images.max() > 0.5


def test_training_batches_are_full_and_shuffled(small_digits_folder: Path) -> None:
    dataset = data.from_image_folder(small_digits_folder, context(batch_size=64), training=True, image_size=16)
    batches = [y.numpy() for _, y in dataset]
    assert [len(b) for b in batches] == [64] * (300 // 64)  # remainder dropped: one shape for XLA
    assert np.concatenate(batches).tolist() != sorted(np.concatenate(batches).tolist())


def test_decoding_runs_once_while_augmentation_changes_every_epoch(small_digits_folder: Path, tmp_path: Path) -> None:
    folder = copy_folder(small_digits_folder, tmp_path / "images")
    # shuffle_buffer=1 keeps the order fixed, so any change between epochs is augmentation.
    augmented = data.from_image_folder(
        folder, context(), training=True, image_size=16, augmentation="medium", shuffle_buffer=1
    )
    plain = data.from_image_folder(folder, context(), training=True, image_size=16, shuffle_buffer=1)
    first, first_labels = epoch(augmented)
    plain_first, _ = epoch(plain)

    shutil.rmtree(folder)  # epoch 2 can only come from the cache of decoded images

    second, second_labels = epoch(augmented)
    plain_second, _ = epoch(plain)
    assert first_labels.tolist() == second_labels.tolist()
    np.testing.assert_array_equal(plain_first, plain_second)  # no augmentation: identical epochs
    changed = [not np.array_equal(a, b) for a, b in zip(first, second, strict=True)]
    assert sum(changed) > 0.8 * len(changed)  # a few examples draw the identity transform
    assert not np.array_equal(first, plain_first)  # and augmentation did change the images


def test_same_seed_gives_the_same_first_epoch(small_digits_folder: Path) -> None:
    def first_epoch(seed: int) -> tuple[np.ndarray, np.ndarray]:
        dataset = data.from_image_folder(
            small_digits_folder, context(seed=seed), training=True, image_size=16, augmentation="high"
        )
        return epoch(dataset)

    images, labels = first_epoch(seed=7)
    again_images, again_labels = first_epoch(seed=7)
    other_images, other_labels = first_epoch(seed=8)
    np.testing.assert_array_equal(images, again_images)
    np.testing.assert_array_equal(labels, again_labels)
    assert not np.array_equal(labels, other_labels) or not np.array_equal(images, other_images)


@pytest.mark.parametrize("level", data.AUGMENTATIONS)
def test_augmentation_levels_keep_shape_and_range(level: str) -> None:
    image = tf.random.stateless_uniform([16, 16, 3], seed=[1, 2])
    out = data.augment_image(image, tf.constant([3, 4], tf.int64), level).numpy()
    assert out.shape == (16, 16, 3)
    assert out.min() >= 0.0 and out.max() <= 1.0
    again = data.augment_image(image, tf.constant([3, 4], tf.int64), level).numpy()
    np.testing.assert_array_equal(out, again)  # stateless: the seed decides everything
    if level == "none":
        np.testing.assert_array_equal(out, image.numpy())


def test_unknown_augmentation_level_is_refused(small_digits_folder: Path) -> None:
    with pytest.raises(ValueError, match="augmentation must be one of none, low, medium, high, got 'extreme'"):
        data.from_image_folder(small_digits_folder, context(), training=True, augmentation="extreme")


def test_missing_or_empty_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        data.list_image_folder(tmp_path / "nope")
    (tmp_path / "empty" / "cats").mkdir(parents=True)
    with pytest.raises(ValueError, match="holds no class sub-folders"):
        data.list_image_folder(tmp_path / "empty")


def test_validation_split_is_stratified_disjoint_and_fixed(small_digits_folder: Path) -> None:
    (train_files, train_labels), (val_files, val_labels), classes = data.split_image_folder(
        small_digits_folder, 0.2, seed=0
    )
    assert len(classes) == 10
    assert Counter(val_labels) == dict.fromkeys(range(10), 6)
    assert Counter(train_labels) == dict.fromkeys(range(10), 24)
    assert not set(train_files) & set(val_files)
    assert data.split_image_folder(small_digits_folder, 0.2, seed=0)[1][0] == val_files
    assert data.split_image_folder(small_digits_folder, 0.2, seed=1)[1][0] != val_files


def test_tfrecord_round_trip(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(50, 12, 12, 3), dtype=np.uint8)
    labels = rng.integers(0, 5, size=50)
    path = data.write_tfrecord(tmp_path / "train.tfrecord", images, labels)

    dataset = data.from_tfrecord(path, context(batch_size=16), training=False, image_size=12)
    got_images, got_labels = epoch(dataset)
    np.testing.assert_array_equal(got_labels, labels)
    np.testing.assert_array_equal(np.round(got_images * 255).astype(np.uint8), images)  # PNG is lossless

    training = data.from_tfrecord(
        [path, path], context(batch_size=16), training=True, image_size=12, augmentation="low"
    )
    _, train_labels = epoch(training)
    assert len(train_labels) == 96  # 100 records, full batches of 16 only
    assert Counter(train_labels.tolist()) <= Counter(labels.tolist() * 2)


def test_tfrecord_of_grayscale_jpeg(tmp_path: Path) -> None:
    images = np.full((4, 8, 8), 200, dtype=np.uint8)
    path = data.write_tfrecord(tmp_path / "g.tfrecord", images, np.arange(4), image_format="jpeg")
    got, labels = epoch(data.from_tfrecord(path, context(), training=False, image_size=8, channels=1))
    assert got.shape == (4, 8, 8, 1) and labels.tolist() == [0, 1, 2, 3]
    assert np.allclose(got, 200 / 255, atol=3 / 255)


@pytest.mark.parametrize("cpus", [1, 3])
def test_thread_pool_is_capped_at_the_trial_cpus(small_digits_folder: Path, tmp_path: Path, cpus: int) -> None:
    ctx = context(cpus=cpus)
    record = data.write_tfrecord(tmp_path / "r.tfrecord", np.zeros((2, 4, 4, 3), np.uint8), np.arange(2))
    pipelines = [
        data.from_image_folder(small_digits_folder, ctx, training=True, augmentation="low"),
        data.from_image_folder(small_digits_folder, ctx, training=False),
        data.from_tfrecord(record, ctx, training=True),
        data.from_arrays(np.zeros((4, 2), np.float32), np.arange(4), ctx, training=True),
    ]
    for dataset in pipelines:
        options = dataset.options()
        assert options.threading.private_threadpool_size == cpus
        assert options.autotune.cpu_budget == cpus
        assert options.deterministic is True
    epoch(pipelines[0])  # and the capped pipeline runs


def test_a_relative_data_path_is_found_beside_the_spec_then_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec_dir, cwd = tmp_path / "project", tmp_path / "elsewhere"
    (spec_dir / "data").mkdir(parents=True)
    (cwd / "data").mkdir(parents=True)
    (spec_dir / "data" / "train.tfrecord").write_bytes(b"")
    (cwd / "data" / "val.tfrecord").write_bytes(b"")
    monkeypatch.chdir(cwd)
    ctx = TrialContext(**{**context().__dict__, "spec_dir": str(spec_dir)})

    assert data.resolve_path("data/train.tfrecord", ctx) == spec_dir / "data" / "train.tfrecord"
    assert data.resolve_path("data/val.tfrecord", ctx) == cwd / "data" / "val.tfrecord"
    with pytest.raises(FileNotFoundError) as raised:
        data.from_tfrecord("data/test.tfrecord", ctx, training=False)
    assert str(raised.value) == (
        f"no such file or folder: 'data/test.tfrecord' (looked for {spec_dir}/data/test.tfrecord, "
        f"{cwd}/data/test.tfrecord)"
    )


def test_tfrecord_shards_are_found_by_a_glob_pattern(tmp_path: Path) -> None:
    images = np.zeros((4, 8, 8), dtype=np.uint8)
    for shard in (1, 0):
        data.write_tfrecord(tmp_path / f"train-{shard}.tfrecord", images + shard, np.full(4, shard))
    ctx = TrialContext(**{**context(batch_size=8).__dict__, "spec_dir": str(tmp_path)})

    _, labels = epoch(data.from_tfrecord("train-*.tfrecord", ctx, training=False, image_size=8, channels=1))

    # Shards are read several at once, interleaved, starting with the first in sorted order.
    assert (sorted(labels), labels[0]) == ([0, 0, 0, 0, 1, 1, 1, 1], 0)
