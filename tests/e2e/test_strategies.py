"""Distribution strategies and precision: MirroredStrategy on two logical CPUs, mixed precision on CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import trial_infos

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]

DIGITS_SPEC = REPO / "search_spaces" / "digits_mlp.yaml"

# Trains the image CNN twice on the same data and seed, once under the default strategy
# and once under MirroredStrategy over two logical CPU devices, with the same global
# batch. Logical devices must be set before TensorFlow initialises, hence a subprocess.
MIRRORED_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

    import keras
    from tunekit.contract import TrialContext
    from trainables import image_cnn

    folder, epochs = sys.argv[1], int(sys.argv[2])
    config = {"depth": 1, "width": 8, "learning_rate": 3e-3, "weight_decay": 1e-4,
              "augmentation": "none", "schedule": "cosine"}
    global_batch = 32
    results = {}
    for name in ("default", "mirrored"):
        keras.backend.clear_session()
        keras.utils.set_random_seed(0)
        if name == "default":
            strategy = tf.distribute.get_strategy()
        else:
            devices = [d.name for d in tf.config.list_logical_devices("CPU")]
            strategy = tf.distribute.MirroredStrategy(devices=devices)
        replicas = strategy.num_replicas_in_sync
        ctx = TrialContext(
            batch_size=global_batch, per_replica_batch_size=global_batch // replicas,
            replicas=replicas, precision="float32", seed=0, workdir="/tmp", cpus=2,
            max_epochs=epochs, jit_compile=False, data={"path": folder, "image_size": 16},
        )
        train, val = image_cnn.build_data(config, ctx)
        with strategy.scope():
            model = image_cnn.build_model(config, ctx)
        history = model.fit(train, validation_data=val, epochs=epochs, verbose=0)
        results[name] = {
            "replicas": replicas,
            "variable_type": type(model.trainable_weights[0].value).__name__,
            "val_accuracy": history.history["val_accuracy"][-1],
        }
    print("RESULT " + json.dumps(results))
    """
)


def test_mirrored_strategy_matches_default_strategy(digits_folder: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(
        [sys.executable, "-c", MIRRORED_SCRIPT, str(digits_folder), "4"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    results = json.loads(lines[-1][len("RESULT ") :])
    default, mirrored = results["default"], results["mirrored"]
    assert default["replicas"] == 1
    assert mirrored["replicas"] == 2
    assert mirrored["variable_type"] == "MirroredVariable"
    # Both learn (chance is 0.1), and to the same accuracy within the noise of 360
    # validation images and per-replica batch-norm statistics.
    assert default["val_accuracy"] > 0.8, results
    assert mirrored["val_accuracy"] > 0.8, results
    assert abs(default["val_accuracy"] - mirrored["val_accuracy"]) < 0.08, results


# ------------------------------------------------------------------ mixed precision


@pytest.mark.parametrize("precision", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_trial_runs_on_cpu(shared_ray: None, tmp_path: Path, precision: str) -> None:
    import tunekit

    results = tunekit.run(
        DIGITS_SPEC,
        overrides=[f"training.precision={precision}", "tracking.enabled=false"],
        budget={"num_samples": 1, "max_epochs": 2, "max_concurrent": 1},
        search={"algorithm": "random"},
        scheduler={"type": "fifo"},
        storage=tmp_path,
        name=precision,
        progress=False,
    )
    assert results.trials["status"].tolist() == ["completed"], results.trials.to_dict("records")
    assert results.best_metric is not None and results.best_metric > 0.2
    [info] = trial_infos(results)
    assert info["precision"] == precision
    assert info["replicas"] == 1

    # The saved model computes in the low precision and answers in float32.
    import keras

    [saved] = list(results.experiment_dir.rglob("model.keras"))
    model = keras.models.load_model(saved, compile=False)
    dense = [layer for layer in model.layers if layer.weights]
    assert [layer.dtype_policy.name for layer in dense[:-1]] == [precision] * (len(dense) - 1)
    assert dense[-1].dtype_policy.name == "float32"
    assert model.outputs[0].dtype == "float32"
