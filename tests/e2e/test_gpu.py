"""Checks that need a real NVIDIA GPU; skipped (``needs a real NVIDIA GPU``) everywhere else.

* four trials at ``resources.gpu: 0.25`` share one GPU at the same time without running
  out of memory (TensorFlow would map the whole GPU in the first trial without tunekit's
  memory set-up);
* mixed precision makes a ResNet training step faster than float32 (tensor cores).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import trial_infos

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SPECS = REPO / "search_spaces"


def test_four_quarter_gpu_trials_share_one_gpu(digits_folder: Path, tmp_path: Path) -> None:
    import ray

    import tunekit
    from tunekit.driver.session import ray_init_options

    ray.init(address="local", num_gpus=1, **ray_init_options())
    try:
        results = tunekit.run(
            SPECS / "cifar_resnet_grid.yaml",
            overrides=[
                f"data.path={digits_folder}",
                "budget.max_epochs=3",
                "budget.max_concurrent=4",
                "budget.num_samples=4",
                "space.learning_rate.values=[1.0e-3, 5.0e-4]",
                "space.weight_decay.values=[1.0e-4, 1.0e-5]",
                "space.augmentation.values=[medium]",
                "resources.gpu=0.25",
                "resources.cpu=1",
                "tracking.enabled=false",
            ],
            storage=tmp_path,
            name="quarter-gpus",
            progress=False,
        )
    finally:
        ray.shutdown()
    trials = results.trials
    assert trials["status"].tolist() == ["completed"] * 4, trials.to_dict("records")  # no OOM
    assert trials["started_at"].max() < trials["ended_at"].min()  # all four at once
    infos = trial_infos(results)
    assert len(infos) == 4
    for info in infos:
        assert info["ray_gpu_ids"] == ["0"]
        assert len(info["device_names"]) == 1 and "GPU" in info["device_names"][0].upper()
        assert info["precision"] in ("mixed_float16", "float32")  # auto: float16 on tensor cores
    assert results.best_metric is not None and results.best_metric > 0.5


# Times ResNet training steps under float32 and mixed_float16 on the same synthetic
# batches, in a fresh process (the pytest process must not map GPU memory).
SPEED_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    import tensorflow as tf

    for gpu in tf.config.list_physical_devices("GPU"):
        tf.config.experimental.set_memory_growth(gpu, True)
    import keras
    from tunekit.contract import TrialContext
    from trainables import image_cnn

    folder, width, batch, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    images = tf.random.stateless_uniform([batch * 8, 32, 32, 3], seed=[0, 1])
    labels = tf.random.stateless_uniform([batch * 8], seed=[2, 3], maxval=10, dtype=tf.int32)
    dataset = tf.data.Dataset.from_tensor_slices((images, labels)).batch(batch).cache().repeat()
    seconds = {}
    for precision in ("float32", "mixed_float16"):
        keras.backend.clear_session()
        keras.mixed_precision.set_global_policy(precision)
        keras.utils.set_random_seed(0)
        ctx = TrialContext(
            batch_size=batch, per_replica_batch_size=batch, replicas=1, precision=precision,
            seed=0, workdir="/tmp", cpus=4, max_epochs=1, jit_compile=False,
            data={"path": folder, "image_size": 32},
        )
        model = image_cnn.build_model({"depth": 3, "width": width}, ctx)
        model.fit(dataset.prefetch(2), steps_per_epoch=max(2, steps // 4), epochs=1, verbose=0)  # trace, warm up
        start = time.perf_counter()
        model.fit(dataset.prefetch(2), steps_per_epoch=steps, epochs=1, verbose=0)
        seconds[precision] = (time.perf_counter() - start) / steps
    keras.mixed_precision.set_global_policy("float32")
    print("RESULT " + json.dumps(seconds))
    """
)


def time_steps(folder: Path, width: int, batch: int, steps: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(
        [sys.executable, "-c", SPEED_SCRIPT, str(folder), str(width), str(batch), str(steps)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT ") :])


def test_mixed_precision_speeds_up_a_resnet_step(small_digits_folder: Path) -> None:
    seconds = time_steps(small_digits_folder, width=64, batch=256, steps=40)
    speedup = seconds["float32"] / seconds["mixed_float16"]
    assert speedup >= 1.2, f"mixed_float16 step {seconds['mixed_float16']:.4f}s vs float32 {seconds['float32']:.4f}s"
