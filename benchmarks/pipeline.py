"""tunekit's image-folder pipeline against a naive one: epoch throughput on the same data and model.

Both sides train the same ResNet-style CNN (``trainables.image_cnn``, seeded, same config)
on the same training images, a folder of JPEG files with one sub-folder per class (made
from scikit-learn's digits: upscaled, lightly noised and saved at ``disk_size`` pixels,
as photos are, then resized to 32 pixels for training), with the same seeded augmentation
(``tunekit.data.augment_image``) and the same global batch:

* default: ``trainables.image_cnn.build_data``, i.e. ``tunekit.data.from_image_files``:
  parallel decode → cache → shuffle → parallel augment → batch → prefetch, tf.data threads
  capped at the CPUs given;
* naive: what a first tf.data script often looks like: shuffle the file names, then one
  sequential map that reads, decodes, resizes and augments, then batch; no cache, no
  prefetch, no options. tf.data's default graph rewrites stay on for it, as they would for
  anyone (they fuse map and batch, which already overlaps some input work with training).

Both sides run in one child process, each with its own dataset (its own cache) and model,
their epochs interleaved (naive, default, default, naive, ...) so that load from anything
else on the machine falls on both alike. The first epoch is reported but not counted in
the ratio: it holds graph tracing for both sides and filling the cache for the default one.
The input side alone is then timed the same way, iterating fresh datasets with no model.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks import common

if TYPE_CHECKING:
    import tensorflow as tf

    from tunekit.contract import TrialContext

NAME = "pipeline"
TITLE = "image-folder pipeline: tunekit's default vs a naive tf.data pipeline"
TARGET = 1.3

MODES: dict[str, dict[str, int]] = {
    # per_class: images of each digit written (the digits hold ~180 per class);
    # copies: each image is written this many times with different noise.
    "smoke": {"per_class": 20, "copies": 1, "epochs": 2, "disk_size": 64},
    "quick": {"per_class": 1000, "copies": 1, "epochs": 7, "disk_size": 160},
    "full": {"per_class": 1000, "copies": 4, "epochs": 8, "disk_size": 160},
}
IMAGE_SIZE = 32
BATCH_SIZE = 64
SEED = 0
CONFIG: dict[str, Any] = {
    "depth": 1,
    "width": 16,
    "learning_rate": 1e-3,
    "weight_decay": 5e-5,
    "augmentation": "medium",
    "schedule": "cosine",
}

DEFINITIONS = {
    "epoch time": "seconds of one model.fit call over one epoch, training only (no validation)",
    "throughput": "training images per second over an epoch: steps x batch / epoch time",
    "steady epochs": "every epoch after the first; the first holds tracing (both) and the cache fill (default)",
    "throughput ratio": "median steady-epoch throughput of the default pipeline / that of the naive one",
    "input-only ratio": "the same, iterating the training dataset without a model (the input side alone)",
}


# --------------------------------------------------------------------------- data


def write_image_folder(root: Path, per_class: int, copies: int, disk_size: int) -> int:
    """Writes digits as ``root/<digit>/<n>.jpg`` RGB JPEGs of side ``disk_size``; returns the count."""
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    rng = np.random.default_rng(SEED)
    seen: dict[int, int] = {}
    written = 0
    for index, (pixels, label) in enumerate(zip(digits.images, digits.target, strict=True)):
        label = int(label)
        if seen.get(label, 0) >= per_class:
            continue
        seen[label] = seen.get(label, 0) + 1
        gray = Image.fromarray((pixels / 16.0 * 255).astype(np.uint8)).resize(
            (disk_size, disk_size), Image.Resampling.BILINEAR
        )
        base = np.asarray(gray.convert("RGB"), dtype=np.float32)
        folder = root / str(label)
        folder.mkdir(parents=True, exist_ok=True)
        for copy in range(copies):
            noisy = np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)
            Image.fromarray(noisy).save(folder / f"{index:04d}_{copy}.jpg", quality=90)
            written += 1
    return written


def naive_pipeline(
    files: list[str], labels: list[int], ctx: TrialContext, *, image_size: int, augmentation: str
) -> tf.data.Dataset:
    """Shuffle names → one sequential read/decode/resize/augment map → batch. No cache, no prefetch."""
    import tensorflow as tf

    from tunekit.data import augment_image, load_image

    dataset = tf.data.Dataset.from_tensor_slices((tf.constant(files), tf.constant(labels, tf.int32)))
    dataset = dataset.shuffle(len(files), seed=ctx.seed, reshuffle_each_iteration=True)
    seeds = tf.data.Dataset.random(seed=ctx.seed, rerandomize_each_iteration=True).batch(2)

    def load(example: tuple[tf.Tensor, tf.Tensor], seed: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        file, label = example
        image = tf.cast(load_image(file, image_size), tf.float32) / 255.0
        return augment_image(image, seed, augmentation), label

    dataset = tf.data.Dataset.zip((dataset, seeds)).map(load)  # sequential: no num_parallel_calls
    return dataset.batch(ctx.batch_size, drop_remainder=True)


# ---------------------------------------------------------------- measurement

SIDES = ("default", "naive")


def pipeline(side: str, data_dir: Path, ctx: TrialContext) -> tf.data.Dataset:
    """The training dataset of one side, built anew (with an empty cache)."""
    from trainables import image_cnn
    from tunekit.data import split_image_folder

    if side == "default":
        return image_cnn.build_data(CONFIG, ctx)[0]
    (files, labels), _, _ = split_image_folder(data_dir, 0.2, seed=0)
    return naive_pipeline(files, labels, ctx, image_size=IMAGE_SIZE, augmentation=CONFIG["augmentation"])


def measure(data_dir: Path, epochs: int) -> dict[str, Any]:
    """Trains one model per side, alternating epochs between the sides; returns per-epoch times.

    Interleaving (naive, default, default, naive, ...) makes any load from elsewhere on the
    machine fall on both sides alike. Then both datasets are iterated without a model.
    """
    import keras

    from trainables import image_cnn
    from tunekit.contract import TrialContext

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    ctx = TrialContext(
        batch_size=BATCH_SIZE,
        per_replica_batch_size=BATCH_SIZE,
        replicas=1,
        precision="float32",
        seed=SEED,
        workdir=str(data_dir.parent),
        cpus=cpus,
        max_epochs=epochs,
        jit_compile=False,
        data={"path": str(data_dir), "image_size": IMAGE_SIZE, "val_share": 0.2},
    )
    datasets, models, history = {}, {}, {}
    results: dict[str, dict[str, Any]] = {}
    for side in SIDES:
        keras.utils.set_random_seed(SEED)
        datasets[side] = pipeline(side, data_dir, ctx)
        models[side] = image_cnn.build_model(CONFIG, ctx)
        results[side] = {"epoch_seconds": [], "steps_per_epoch": [], "input_only_seconds": []}
    for epoch in range(epochs):
        for side in SIDES if epoch % 2 else reversed(SIDES):
            steps = int(datasets[side].cardinality())
            start = time.perf_counter()
            history[side] = models[side].fit(datasets[side], initial_epoch=epoch, epochs=epoch + 1, verbose=0)
            results[side]["epoch_seconds"].append(time.perf_counter() - start)
            results[side]["steps_per_epoch"].append(steps)
    # The input side alone, on fresh datasets (empty caches): what each can deliver per pass.
    fresh = {side: pipeline(side, data_dir, ctx) for side in SIDES}
    for turn in range(epochs):
        for side in SIDES if turn % 2 else reversed(SIDES):
            start = time.perf_counter()
            for _batch in fresh[side]:
                pass
            results[side]["input_only_seconds"].append(time.perf_counter() - start)
    for side, result in results.items():
        images = [steps * BATCH_SIZE for steps in result["steps_per_epoch"]]
        result["images_per_second"] = [n / s for n, s in zip(images, result["epoch_seconds"], strict=True)]
        result["input_only_images_per_second"] = [
            n / s for n, s in zip(images, result["input_only_seconds"], strict=True)
        ]
        result["final_loss"] = history[side].history["loss"][-1]
        result["final_accuracy"] = history[side].history["accuracy"][-1]
        result["cpus"] = cpus
    return results


# ----------------------------------------------------------------------------- main


def analyse(sides: dict[str, dict[str, Any]]) -> dict[str, Any]:
    steady = {name: side["images_per_second"][1:] or side["images_per_second"] for name, side in sides.items()}
    rate = {name: statistics.median(values) for name, values in steady.items()}
    ratio = common.ratio(rate["default"], rate["naive"])
    first = {name: side["epoch_seconds"][0] for name, side in sides.items()}
    alone = {
        name: statistics.median(side["input_only_images_per_second"][1:] or side["input_only_images_per_second"])
        for name, side in sides.items()
    }
    alone_ratio = common.ratio(alone["default"], alone["naive"])
    figures = [
        common.figure(
            "throughput ratio (default / naive)", ratio, "x", f">= {TARGET}", ratio is not None and ratio >= TARGET
        ),
        common.figure("default pipeline", rate["default"], "images/s", note="median over steady epochs"),
        common.figure("naive pipeline", rate["naive"], "images/s", note="median over steady epochs"),
        common.figure(
            "input-only ratio (default / naive)",
            alone_ratio,
            "x",
            note="iterating the training dataset with no model, steady passes",
        ),
        common.figure("first epoch, default", first["default"], "s", note="includes tracing and the cache fill"),
        common.figure("first epoch, naive", first["naive"], "s", note="includes tracing"),
    ]
    ratios = [
        f"steady-epoch throughput: default {common.fmt(rate['default'])} images/s vs naive "
        f"{common.fmt(rate['naive'])} images/s = {common.fmt(ratio)}x",
        f"input side alone: default {common.fmt(alone['default'])} images/s vs naive "
        f"{common.fmt(alone['naive'])} images/s = {common.fmt(alone_ratio)}x",
    ]
    return {"figures": figures, "ratios": ratios, "ratio": ratio}


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = common.parser(NAME, __doc__.splitlines()[0])
    p.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    settings = MODES[args.mode]
    if args.measure:
        common.write_json(args.result, common.clean(measure(args.data, settings["epochs"])))
        return 0

    report = common.Report(NAME, TITLE, args.mode, args.out)
    with common.Workdir(NAME, args.keep) as workdir:
        data_dir = workdir / "images"
        count = write_image_folder(data_dir, settings["per_class"], settings["copies"], settings["disk_size"])
        print(f"[{NAME}] wrote {count} JPEGs of {settings['disk_size']}px to {data_dir}", flush=True)
        print(f"[{NAME}] training on both pipelines, epochs interleaved ({args.mode}) ...", flush=True)
        sides = common.run_child(
            f"benchmarks.{NAME}", [f"--{args.mode}", "--measure", "--data", str(data_dir)], workdir, "measure"
        )
    analysis = analyse(sides)
    setup = {
        "images": count,
        "training images": f"{count} x 0.8 (a stratified 20% is held out, as image_cnn does)",
        "on disk": f"RGB JPEG, quality 90, {settings['disk_size']}x{settings['disk_size']} px",
        "trained at": f"{IMAGE_SIZE}x{IMAGE_SIZE} px",
        "model": f"trainables.image_cnn {CONFIG}",
        "batch": BATCH_SIZE,
        "epochs": settings["epochs"],
        "cpus": sides["default"]["cpus"],
        "machine": common.machine_info(),
        "stack": common.stack_versions(),
    }
    notes = [
        "The gain depends on how much of a step is input work: larger or more compressed images, "
        "or a smaller model, raise it; a model whose step dwarfs decoding lowers it.",
        "Both sides run on the same cores; other load on the machine during the run skews both.",
    ]
    return report.finish(analysis["figures"], analysis["ratios"], DEFINITIONS, setup, notes, {"sides": sides})


if __name__ == "__main__":
    sys.exit(main())
