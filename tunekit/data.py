"""tf.data pipelines built the right way round, for trainables to call.

Order matters (tensorflow#47755): decode → cache → shuffle → augment → batch → prefetch.
Caching after a random augmentation would freeze it; caching before keeps decoding
paid once while augmentation still differs every epoch. Parallel maps are bounded by
the trial's CPUs so packed trials do not oversubscribe the machine.

Three sources are supported:

* in-memory arrays (``from_arrays``);
* an image folder with one sub-folder per class of PNG or JPEG files
  (``from_image_folder``, or ``split_image_folder`` + ``from_image_files`` to hold out a
  validation share);
* TFRecord files of ``tf.train.Example`` records with an ``image`` (encoded PNG or JPEG
  bytes) and a ``label`` (int64) feature (``from_tfrecord``; ``write_tfrecord`` makes them).

Images come out as float32 in [0, 1], shaped ``(image_size, image_size, channels)``;
labels as int32 class indices.

Random augmentation uses stateless ops. Each example draws its seed from
``tf.data.Dataset.random(seed=ctx.seed, rerandomize_each_iteration=True)``, so every
epoch sees new crops and flips, and two runs with the same ``ctx.seed`` see the same ones.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tunekit.worker.scaling import mark_unit_range

if TYPE_CHECKING:
    import numpy as np
    import tensorflow as tf

    from tunekit.contract import TrialContext

AUGMENTATIONS = ("none", "low", "medium", "high")
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg")

# Shift (as a share of the image side) and colour jitter for each augmentation level.
# Every level above "none" flips left-right; "high" also varies contrast and brightness.
_SHIFT = {"none": 0.0, "low": 1 / 16, "medium": 1 / 8, "high": 3 / 16}
_CONTRAST = {"none": 0.0, "low": 0.0, "medium": 0.0, "high": 0.3}
_BRIGHTNESS = {"none": 0.0, "low": 0.0, "medium": 0.0, "high": 0.15}


# --------------------------------------------------------------------- in memory


def from_arrays(
    features: np.ndarray,
    labels: np.ndarray,
    ctx: TrialContext,
    *,
    training: bool,
) -> tf.data.Dataset:
    """Batches in-memory arrays: cached, shuffled each epoch (seeded) when training, prefetched.

    The arrays pass through unchanged: their dtype and range are the caller's (uint8 images stay
    0-255; scale them, or give the model a ``Rescaling(1/255)``, once).
    """
    import tensorflow as tf

    dataset = tf.data.Dataset.from_tensor_slices((features, labels)).cache()
    if training:
        dataset = dataset.shuffle(len(features), seed=ctx.seed, reshuffle_each_iteration=True)
    return _finish(dataset, ctx)


# ------------------------------------------------------------------- image folder


def list_image_folder(path: str | Path) -> tuple[list[str], list[int], list[str]]:
    """Lists ``path/<class>/<image>`` files in a fixed (sorted) order.

    Returns:
        The file paths, their class indices, and the class names (sorted sub-folder names;
        a class's index is its position in this list).

    Raises:
        ValueError: the folder is missing, or holds no class sub-folder with an image.
    """
    root = Path(path).expanduser()
    if not root.is_dir():
        raise ValueError(f"image folder {str(root)!r} does not exist")
    classes = sorted(child.name for child in root.iterdir() if child.is_dir())
    files: list[str] = []
    labels: list[int] = []
    for index, name in enumerate(classes):
        found = sorted(str(f) for f in (root / name).iterdir() if f.is_file() and f.suffix.lower() in IMAGE_EXTENSIONS)
        files += found
        labels += [index] * len(found)
    if not files:
        raise ValueError(
            f"image folder {str(root)!r} holds no class sub-folders with {', '.join(IMAGE_EXTENSIONS)} files"
        )
    return files, labels, classes


def split_image_folder(
    path: str | Path, val_share: float, seed: int = 0
) -> tuple[tuple[list[str], list[int]], tuple[list[str], list[int]], list[str]]:
    """Splits an image folder into train and validation files, stratified by class.

    The split depends only on the files and ``seed``, never on the trial, so every trial
    of a search is judged on the same validation images.

    Returns:
        ``(train_files, train_labels), (val_files, val_labels), class_names``.
    """
    if not 0 < val_share < 1:
        raise ValueError(f"val_share must lie strictly between 0 and 1, got {val_share!r}")
    files, labels, classes = list_image_folder(path)
    rng = random.Random(seed)
    train: tuple[list[str], list[int]] = ([], [])
    val: tuple[list[str], list[int]] = ([], [])
    for index in range(len(classes)):
        members = [f for f, label in zip(files, labels, strict=True) if label == index]
        rng.shuffle(members)
        held_out = round(len(members) * val_share) if len(members) > 1 else 0
        for position, file in enumerate(sorted(members[:held_out]) + sorted(members[held_out:])):
            target = val if position < held_out else train
            target[0].append(file)
            target[1].append(index)
    return train, val, classes


def from_image_folder(
    path: str | Path,
    ctx: TrialContext,
    *,
    training: bool,
    image_size: int = 32,
    channels: int = 3,
    augmentation: str = "none",
    cache: str = "",
    shuffle_buffer: int | None = None,
) -> tf.data.Dataset:
    """A batched dataset of every image under ``path/<class>/``.

    Args:
        path: a folder with one sub-folder per class of PNG or JPEG files (relative: see
            ``resolve_path``).
        ctx: the trial context (batch size, seed, CPUs).
        training: shuffle and augment (validation data is neither).
        image_size: images are resized to ``image_size`` × ``image_size``.
        channels: 3 for RGB, 1 for grayscale.
        augmentation: one of ``none``, ``low``, ``medium``, ``high``; used when training.
        cache: ``""`` caches decoded images in memory; a file path caches them on disk.
        shuffle_buffer: default: the whole dataset (a perfect shuffle).

    Returns:
        Batches of ``(images, labels)``: images float32 in [0, 1], already scaled (a model
        must not divide by 255 again: no ``Rescaling(1/255)`` layer), shaped ``(batch,
        image_size, image_size, channels)``; labels int32 class indices.
    """
    files, labels, _ = list_image_folder(resolve_path(path, ctx))
    return from_image_files(
        files,
        labels,
        ctx,
        training=training,
        image_size=image_size,
        channels=channels,
        augmentation=augmentation,
        cache=cache,
        shuffle_buffer=shuffle_buffer,
    )


def from_image_files(
    files: Sequence[str],
    labels: Sequence[int],
    ctx: TrialContext,
    *,
    training: bool,
    image_size: int = 32,
    channels: int = 3,
    augmentation: str = "none",
    cache: str = "",
    shuffle_buffer: int | None = None,
) -> tf.data.Dataset:
    """Like ``from_image_folder``, for given files and labels (e.g. one side of a split).

    Returns:
        Batches of ``(images, labels)``: images float32 in [0, 1] (already scaled: no
        ``Rescaling(1/255)`` in the model), labels int32; see ``from_image_folder``.
    """
    import tensorflow as tf

    _check_augmentation(augmentation)
    if not files:
        raise ValueError("no image files given")
    if len(files) != len(labels):
        raise ValueError(f"{len(files)} image files but {len(labels)} labels")
    decode = _file_decoder(image_size, channels)
    dataset = tf.data.Dataset.from_tensor_slices(
        (tf.constant(list(files), tf.string), tf.constant(list(labels), tf.int32))
    )
    dataset = dataset.map(lambda file, label: (decode(file), label), num_parallel_calls=tf.data.AUTOTUNE)
    return _after_decode(dataset, ctx, training, augmentation, cache, shuffle_buffer or len(files), len(files))


# -------------------------------------------------------------------------- paths


def resolve_path(path: str | Path, ctx: TrialContext) -> Path:
    """A data path as the spec means it: absolute as given, else beside the spec, else in the working directory.

    Paths in the spec's ``data`` section that exist arrive absolute already; this finds
    the others (written in code, or a file that appeared later), on any worker.

    Raises:
        FileNotFoundError: naming every place looked.
    """
    given = Path(path).expanduser()
    if given.is_absolute():
        if not given.exists():
            raise FileNotFoundError(f"no such file or folder: {given}")
        return given
    places = [Path(ctx.spec_dir)] if ctx.spec_dir else []
    places += [Path.cwd()] if Path.cwd() not in places else []
    for place in places:
        if (place / given).exists():
            return (place / given).resolve()
    looked = ", ".join(str(place / given) for place in places)
    raise FileNotFoundError(f"no such file or folder: {str(path)!r} (looked for {looked})")


def _resolve_files(paths: str | Path | Sequence[str | Path], ctx: TrialContext) -> list[str]:
    """Local files found by ``resolve_path``, glob patterns expanded (sorted); URLs (``gs://``) as given."""
    names = [paths] if isinstance(paths, str | Path) else list(paths)
    files: list[str] = []
    for name in names:
        text = str(name)
        if "://" in text:
            files.append(text)
        elif any(char in text for char in "*?["):
            folder = resolve_path(Path(text).parent, ctx)
            matched = sorted(str(f) for f in folder.glob(Path(text).name))
            if not matched:
                raise FileNotFoundError(f"no file matches {text!r} (looked in {folder})")
            files += matched
        else:
            files.append(str(resolve_path(text, ctx)))
    return files


# ----------------------------------------------------------------------- TFRecord


def write_tfrecord(path: str | Path, images: np.ndarray, labels: np.ndarray, *, image_format: str = "png") -> Path:
    """Writes images and labels as ``tf.train.Example`` records that ``from_tfrecord`` reads.

    Args:
        path: the file to write.
        images: uint8 array ``(n, height, width, channels)`` (or ``(n, height, width)``).
        labels: integer class indices, one per image.
        image_format: ``png`` (lossless) or ``jpeg``.
    """
    import numpy as np
    import tensorflow as tf

    if image_format not in ("png", "jpeg"):
        raise ValueError(f"image_format must be png or jpeg, got {image_format!r}")
    pixels = np.asarray(images)
    if pixels.ndim == 3:
        pixels = pixels[..., None]
    if pixels.ndim != 4 or pixels.dtype != np.uint8:
        raise ValueError(
            f"images must be uint8 of shape (n, height, width[, channels]), got {pixels.dtype} {pixels.shape}"
        )
    if len(pixels) != len(labels):
        raise ValueError(f"{len(pixels)} images but {len(labels)} labels")
    encode = tf.io.encode_png if image_format == "png" else tf.io.encode_jpeg
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tf.io.TFRecordWriter(str(target)) as writer:
        for image, label in zip(pixels, labels, strict=True):
            example = tf.train.Example(
                features=tf.train.Features(
                    feature={
                        "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[encode(image).numpy()])),
                        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),
                    }
                )
            )
            writer.write(example.SerializeToString())
    return target


def from_tfrecord(
    paths: str | Path | Sequence[str | Path],
    ctx: TrialContext,
    *,
    training: bool,
    image_size: int = 32,
    channels: int = 3,
    augmentation: str = "none",
    cache: str = "",
    shuffle_buffer: int = 10_000,
) -> tf.data.Dataset:
    """A batched dataset of TFRecord files of ``image`` (PNG/JPEG) + ``label`` (int64) examples.

    Files are read in the order given (several at once, deterministically); a relative
    path or glob pattern (``data/train-*.tfrecord``) is looked for as ``resolve_path`` does.
    The dataset's length is unknown to tf.data; tunekit counts the batches it trains on.
    See ``from_image_folder`` for the other arguments.

    Returns:
        Batches of ``(images, labels)``: images float32 in [0, 1] (already scaled: no
        ``Rescaling(1/255)`` in the model), labels int32 (the records' int64 cast).
    """
    import tensorflow as tf

    _check_augmentation(augmentation)
    names = _resolve_files(paths, ctx)
    if not names:
        raise ValueError("no TFRecord files given")
    decode = _bytes_decoder(image_size, channels)
    features = {
        "image": tf.io.FixedLenFeature([], tf.string),
        "label": tf.io.FixedLenFeature([], tf.int64),
    }

    def parse(record: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        example = tf.io.parse_single_example(record, features)
        return decode(example["image"]), tf.cast(example["label"], tf.int32)

    dataset = tf.data.TFRecordDataset(names, num_parallel_reads=min(len(names), max(1, ctx.cpus)))
    dataset = dataset.map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    return _after_decode(dataset, ctx, training, augmentation, cache, shuffle_buffer, None)


# -------------------------------------------------------------- shared pieces


def load_image(file: tf.Tensor, image_size: int, channels: int = 3) -> tf.Tensor:
    """Reads and decodes one PNG/JPEG file into uint8 ``(image_size, image_size, channels)``, 0-255.

    Unlike the pipelines, which scale to float32 in [0, 1] after caching.
    """
    return _file_decoder(image_size, channels)(file)


def augment_image(image: tf.Tensor, seed: tf.Tensor, level: str) -> tf.Tensor:
    """Randomly flips, shifts and (at ``high``) recolours one float image in [0, 1].

    Stateless: the same ``seed`` (an int64 pair) always gives the same result.
    """
    import tensorflow as tf

    _check_augmentation(level)
    if level == "none":
        return image
    flip_seed, crop_seed, contrast_seed, brightness_seed = tf.unstack(
        tf.random.experimental.stateless_split(seed, num=4)
    )
    image = tf.image.stateless_random_flip_left_right(image, seed=flip_seed)
    height, width, depth = image.shape
    if height is None or width is None or depth is None:
        raise ValueError("augment_image needs an image of static shape")
    pad = max(1, round(height * _SHIFT[level]))
    padded = tf.image.pad_to_bounding_box(image, pad, pad, height + 2 * pad, width + 2 * pad)
    image = tf.image.stateless_random_crop(padded, size=[height, width, depth], seed=crop_seed)
    if _CONTRAST[level]:
        low, high = 1 - _CONTRAST[level], 1 + _CONTRAST[level]
        image = tf.image.stateless_random_contrast(image, low, high, seed=contrast_seed)
    if _BRIGHTNESS[level]:
        image = tf.image.stateless_random_brightness(image, _BRIGHTNESS[level], seed=brightness_seed)
    return tf.clip_by_value(image, 0.0, 1.0)


def pipeline_options(ctx: TrialContext) -> tf.data.Options:
    """Deterministic order, and every tf.data thread of the dataset within the trial's CPUs."""
    import tensorflow as tf

    options = tf.data.Options()
    options.threading.private_threadpool_size = ctx.cpus
    options.autotune.cpu_budget = ctx.cpus
    options.deterministic = True
    return options


def _after_decode(
    dataset: tf.data.Dataset,
    ctx: TrialContext,
    training: bool,
    augmentation: str,
    cache: str,
    shuffle_buffer: int,
    size: int | None,
) -> tf.data.Dataset:
    """cache → shuffle → (seeded) augment → batch → prefetch, on decoded uint8 images."""
    import tensorflow as tf

    # Decoded images are cached as uint8: a quarter of the memory of float32.
    dataset = dataset.cache(cache)
    if training:
        dataset = dataset.shuffle(shuffle_buffer, seed=ctx.seed, reshuffle_each_iteration=True)
    level = augmentation if training else "none"
    if level == "none":
        dataset = dataset.map(lambda image, label: (_to_float(image), label), num_parallel_calls=tf.data.AUTOTUNE)
    else:
        # One int64 pair per example: new each epoch, the same across runs with this seed.
        seeds = tf.data.Dataset.random(seed=ctx.seed, rerandomize_each_iteration=True).batch(2)
        dataset = tf.data.Dataset.zip((dataset, seeds)).map(
            lambda example, seed: (augment_image(_to_float(example[0]), seed, level), example[1]),
            num_parallel_calls=tf.data.AUTOTUNE,
        )
    # Full training batches keep one shape, so XLA compiles the step once (tensorflow#62198).
    drop = training and (size is None or size >= ctx.batch_size)
    return mark_unit_range(_finish(dataset, ctx, drop_remainder=drop))  # the worker warns of a Rescaling(1/255)


def _to_float(image: tf.Tensor) -> tf.Tensor:
    import tensorflow as tf

    return tf.cast(image, tf.float32) / 255.0


def _file_decoder(image_size: int, channels: int) -> Callable[[tf.Tensor], tf.Tensor]:
    import tensorflow as tf

    decode = _bytes_decoder(image_size, channels)
    return lambda file: decode(tf.io.read_file(file))


def _bytes_decoder(image_size: int, channels: int) -> Callable[[tf.Tensor], tf.Tensor]:
    import tensorflow as tf

    if channels not in (1, 3):
        raise ValueError(f"channels must be 1 or 3, got {channels!r}")
    if image_size < 1:
        raise ValueError(f"image_size must be >= 1, got {image_size!r}")

    def decode(data: tf.Tensor) -> tf.Tensor:
        image = tf.io.decode_image(data, channels=channels, expand_animations=False)
        image.set_shape([None, None, channels])
        same = tf.reduce_all(tf.equal(tf.shape(image)[:2], [image_size, image_size]))
        image = tf.cond(
            same,
            lambda: image,
            lambda: tf.cast(
                tf.clip_by_value(
                    tf.round(tf.image.resize(image, [image_size, image_size], antialias=True)),
                    0,
                    255,
                ),
                tf.uint8,
            ),
        )
        image.set_shape([image_size, image_size, channels])
        return image

    return decode


def _check_augmentation(level: str) -> None:
    if level not in AUGMENTATIONS:
        raise ValueError(f"augmentation must be one of {', '.join(AUGMENTATIONS)}, got {level!r}")


def _finish(dataset: tf.data.Dataset, ctx: TrialContext, *, drop_remainder: bool = False) -> tf.data.Dataset:
    import tensorflow as tf

    dataset = dataset.batch(ctx.batch_size, drop_remainder=drop_remainder).prefetch(tf.data.AUTOTUNE)
    return dataset.with_options(pipeline_options(ctx))
