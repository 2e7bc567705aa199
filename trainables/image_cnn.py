"""A ResNet-style CNN on an image folder (CIFAR-10 laid out as PNGs, or your own images).

Data (the spec's ``data`` section, handed over as ``ctx.data``):

* ``path``: a folder with one sub-folder per class of PNG or JPEG files. Relative paths
  resolve against the directory ``tunekit run`` was started in.
* ``val_path``: a folder of validation images laid out the same way; without it,
  ``val_share`` (default 0.2) of ``path`` is held out, stratified by class, the same
  images for every trial (``split_seed``, default 0).
* ``image_size``: images are resized to this square side (default 32).
* ``cache``: ``""`` (default) keeps decoded images in memory; a file path caches on disk.

Config (the search space; every key has a default):

* model: ``depth`` residual blocks per stage (3 stages; depth 3 is ResNet-20),
  ``width`` filters of the first stage (doubled at each later stage);
* optimizer: ``optimizer`` ``adamw`` or ``sgd`` (with ``momentum``, Nesterov),
  ``learning_rate`` (the peak), ``weight_decay`` (decoupled; not applied to biases and
  batch-norm parameters);
* ``schedule``: ``cosine``, ``step`` (×``step_factor`` at 50% and 75% of training),
  ``exponential`` (down to 1% of the peak at the last epoch) or ``constant``, each after
  ``warmup_epochs`` of linear warm-up;
* ``label_smoothing``; ``augmentation``: ``none``, ``low``, ``medium`` or ``high``.

The model is compiled here, because the learning-rate schedule needs the number of
steps. Its output layer is float32, so mixed precision trains with a stable loss.
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from tunekit.contract import TrialContext
from tunekit.data import from_image_files, list_image_folder, split_image_folder

SCHEDULES = ("cosine", "step", "exponential", "constant")
OPTIMIZERS = ("adamw", "sgd")
NO_DECAY = ["bias", "gamma", "beta"]  # biases and batch-norm scale/offset are not decayed
STAGES = 3
# Keras' default (0.99) needs thousands of steps before the moving statistics used at
# validation time settle; short trials (ASHA's first rungs) would be judged on noise.
BN_MOMENTUM = 0.9


# --------------------------------------------------------------------------- data


def build_data(config: dict[str, Any], ctx: TrialContext) -> tuple[tf.data.Dataset, tf.data.Dataset]:
    (train_files, train_labels), (val_files, val_labels), _ = _split(ctx)
    image_size, cache = _image_size(ctx), str(ctx.data.get("cache", ""))
    train = from_image_files(
        train_files,
        train_labels,
        ctx,
        training=True,
        augmentation=str(config.get("augmentation", "medium")),
        image_size=image_size,
        cache=cache,
    )
    val = from_image_files(val_files, val_labels, ctx, training=False, image_size=image_size, cache=cache)
    return train, val


def _split(
    ctx: TrialContext,
) -> tuple[tuple[list[str], list[int]], tuple[list[str], list[int]], list[str]]:
    if not ctx.data.get("path"):
        raise ValueError("image_cnn needs data.path: a folder with one sub-folder of images per class")
    path = str(ctx.data["path"])
    val_path = ctx.data.get("val_path")
    if not val_path:
        share = float(ctx.data.get("val_share", 0.2))
        return split_image_folder(path, share, seed=int(ctx.data.get("split_seed", 0)))
    files, labels, classes = list_image_folder(path)
    val_files, val_labels, val_classes = list_image_folder(str(val_path))
    if val_classes != classes:
        raise ValueError(f"data.val_path has classes {val_classes}, data.path has {classes}")
    return (files, labels), (val_files, val_labels), classes


def _image_size(ctx: TrialContext) -> int:
    return int(ctx.data.get("image_size", 32))


# -------------------------------------------------------------------------- model


def build_model(config: dict[str, Any], ctx: TrialContext) -> keras.Model:
    (train_files, _), _, classes = _split(ctx)
    depth = int(config.get("depth", 3))
    width = int(config.get("width", 16))
    size = _image_size(ctx)
    conv_options = {"use_bias": False, "kernel_initializer": "he_normal"}

    inputs = keras.Input(shape=(size, size, 3), name="image")
    x = keras.layers.Rescaling(2.0, offset=-1.0)(inputs)  # [0, 1] -> [-1, 1]
    x = keras.layers.Conv2D(width, 3, padding="same", **conv_options)(x)
    x = keras.layers.BatchNormalization(momentum=BN_MOMENTUM)(x)
    x = keras.layers.Activation("relu")(x)
    for stage in range(STAGES):
        filters = width * 2**stage
        for block in range(depth):
            stride = 2 if stage > 0 and block == 0 else 1
            x = _residual_block(x, filters, stride, conv_options)
    x = keras.layers.GlobalAveragePooling2D()(x)
    x = keras.layers.Dense(len(classes), name="logits")(x)
    # float32 even under mixed precision: softmax and the loss need the range.
    outputs = keras.layers.Activation("softmax", dtype="float32", name="probabilities")(x)
    model = keras.Model(inputs, outputs, name=f"resnet_d{depth}_w{width}")

    steps_per_epoch = max(1, len(train_files) // ctx.batch_size)
    smoothing = float(config.get("label_smoothing", 0.0))
    model.compile(
        optimizer=_optimizer(config, ctx, steps_per_epoch),
        loss=SparseSmoothedCrossentropy(len(classes), smoothing)
        if smoothing
        else keras.losses.SparseCategoricalCrossentropy(),
        metrics=["accuracy"],
        jit_compile=ctx.jit_compile,
    )
    return model


def _residual_block(x: Any, filters: int, stride: int, conv: dict[str, Any]) -> Any:
    shortcut = x
    y = keras.layers.Conv2D(filters, 3, strides=stride, padding="same", **conv)(x)
    y = keras.layers.BatchNormalization(momentum=BN_MOMENTUM)(y)
    y = keras.layers.Activation("relu")(y)
    y = keras.layers.Conv2D(filters, 3, padding="same", **conv)(y)
    y = keras.layers.BatchNormalization(momentum=BN_MOMENTUM)(y)
    if stride != 1 or x.shape[-1] != filters:
        shortcut = keras.layers.Conv2D(filters, 1, strides=stride, **conv)(x)
        shortcut = keras.layers.BatchNormalization(momentum=BN_MOMENTUM)(shortcut)
    return keras.layers.Activation("relu")(keras.layers.Add()([y, shortcut]))


# ----------------------------------------------------------------- optimization


def _optimizer(config: dict[str, Any], ctx: TrialContext, steps_per_epoch: int) -> keras.optimizers.Optimizer:
    name = str(config.get("optimizer", "adamw"))
    if name not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {name!r}")
    schedule = learning_rate_schedule(config, steps_per_epoch, ctx.max_epochs)
    weight_decay = float(config.get("weight_decay", 1e-4)) or None
    if name == "adamw":
        optimizer: keras.optimizers.Optimizer = keras.optimizers.AdamW(
            learning_rate=schedule, weight_decay=weight_decay or 0.0
        )
    else:
        optimizer = keras.optimizers.SGD(
            learning_rate=schedule,
            momentum=float(config.get("momentum", 0.9)),
            nesterov=True,
            weight_decay=weight_decay,
        )
    optimizer.exclude_from_weight_decay(var_names=NO_DECAY)
    return optimizer


def learning_rate_schedule(
    config: dict[str, Any], steps_per_epoch: int, epochs: int
) -> keras.optimizers.schedules.LearningRateSchedule:
    """The schedule named by ``config["schedule"]``, over ``epochs`` epochs, after warm-up."""
    name = str(config.get("schedule", "cosine"))
    if name not in SCHEDULES:
        raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, got {name!r}")
    peak = float(config.get("learning_rate", 1e-3))
    warmup_steps = round(float(config.get("warmup_epochs", 0)) * steps_per_epoch)
    total_steps = max(1, epochs * steps_per_epoch)
    decay_steps = max(1, total_steps - warmup_steps)
    schedules = keras.optimizers.schedules
    after: Any
    if name == "cosine":
        after = schedules.CosineDecay(peak, decay_steps)
    elif name == "step":
        factor = float(config.get("step_factor", 0.1))
        boundaries = [max(1, int(decay_steps * 0.5)), max(2, int(decay_steps * 0.75))]
        after = schedules.PiecewiseConstantDecay(boundaries, [peak, peak * factor, peak * factor**2])
    elif name == "exponential":
        # Per epoch, so that the last epoch trains at 1% of the peak.
        decay_epochs = max(1.0, decay_steps / steps_per_epoch)
        after = schedules.ExponentialDecay(peak, steps_per_epoch, 0.01 ** (1 / decay_epochs))
    else:
        after = ConstantLearningRate(peak)
    return WarmUp(after, peak, warmup_steps) if warmup_steps else after


@keras.saving.register_keras_serializable(package="tunekit")
class WarmUp(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up from ``peak / warmup_steps`` to ``peak``, then ``after`` (counted from 0)."""

    def __init__(self, after: Any, peak: float, warmup_steps: int) -> None:
        self.after = keras.optimizers.schedules.deserialize(after) if isinstance(after, dict) else after
        self.peak = float(peak)
        self.warmup_steps = int(warmup_steps)

    def __call__(self, step: Any) -> Any:
        step = keras.ops.cast(step, "float32")
        warm = self.peak * (step + 1.0) / float(self.warmup_steps)
        later = self.after(keras.ops.maximum(step - float(self.warmup_steps), 0.0))
        return keras.ops.where(step < float(self.warmup_steps), warm, later)

    def get_config(self) -> dict[str, Any]:
        return {
            "after": keras.optimizers.schedules.serialize(self.after),
            "peak": self.peak,
            "warmup_steps": self.warmup_steps,
        }


@keras.saving.register_keras_serializable(package="tunekit")
class ConstantLearningRate(keras.optimizers.schedules.LearningRateSchedule):
    def __init__(self, value: float) -> None:
        self.value = float(value)

    def __call__(self, step: Any) -> Any:
        return keras.ops.cast(self.value, "float32")

    def get_config(self) -> dict[str, Any]:
        return {"value": self.value}


@keras.saving.register_keras_serializable(package="tunekit")
class SparseSmoothedCrossentropy(keras.losses.Loss):
    """Cross-entropy with label smoothing on integer labels (the sparse Keras loss has none)."""

    def __init__(
        self,
        num_classes: int,
        label_smoothing: float,
        name: str = "smoothed_crossentropy",
        **kwargs: Any,
    ) -> None:
        super().__init__(name=name, **kwargs)
        self.num_classes = int(num_classes)
        self.label_smoothing = float(label_smoothing)

    def call(self, y_true: Any, y_pred: Any) -> Any:
        labels = keras.ops.cast(keras.ops.reshape(y_true, (-1,)), "int32")
        one_hot = keras.ops.one_hot(labels, self.num_classes, dtype=y_pred.dtype)
        return keras.losses.categorical_crossentropy(one_hot, y_pred, label_smoothing=self.label_smoothing)

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "num_classes": self.num_classes,
            "label_smoothing": self.label_smoothing,
        }
