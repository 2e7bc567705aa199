"""GPU shares on logical GPUs: packing fractional trials, and whole GPUs under MirroredStrategy.

Ray hands out two logical GPUs on this CPU machine (``ray.init(num_gpus=2)``), and
``TUNEKIT_LOGICAL_GPUS=1`` lets trials run on CPU with them: a fractional share trains
on the CPU, and two whole "GPUs" become two logical CPU devices for MirroredStrategy.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import trial_infos

import tunekit

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
DIGITS_SPEC = REPO / "search_spaces" / "digits_mlp.yaml"


@pytest.fixture(scope="module", autouse=True)
def ray_with_logical_gpus() -> Iterator[None]:
    ray = pytest.importorskip("ray")
    # address="local": a private Ray, even if a cluster was started on this machine
    ray.init(address="local", num_cpus=2, num_gpus=2, **tunekit.ray_init_options(logical_gpus=True))
    yield
    ray.shutdown()


def run_digits(
    tmp_path: Path, name: str, trials: int, resources: dict[str, float], *overrides: str
) -> tunekit.ExperimentResults:
    return tunekit.run(
        DIGITS_SPEC,
        overrides=["tracking.enabled=false", *overrides],
        budget={"num_samples": trials, "max_epochs": 2, "max_concurrent": trials},
        search={"algorithm": "random", "seed": 0},
        scheduler={"type": "fifo"},
        resources=resources,
        storage=tmp_path,
        name=name,
        progress=False,
    )


def test_four_half_gpu_trials_run_at_once_two_per_gpu(tmp_path: Path) -> None:
    results = run_digits(tmp_path, "packed", 4, {"gpu": 0.5, "cpu": 0.5})
    trials = results.trials
    assert trials["status"].tolist() == ["completed"] * 4, trials.to_dict("records")
    # Every trial was running while every other was: the latest start precedes the first end.
    assert trials["started_at"].max() < trials["ended_at"].min()

    infos = trial_infos(results)
    assert len(infos) == 4
    gpu_ids = Counter(tuple(info["ray_gpu_ids"]) for info in infos)
    assert gpu_ids == {("0",): 2, ("1",): 2}, gpu_ids  # one logical GPU each, two trials per GPU
    assert all(info["replicas"] == 1 for info in infos)


def test_two_whole_gpus_train_under_mirrored_strategy(tmp_path: Path) -> None:
    # The suite's invariant check then compares the best config with the checkpoint's: the
    # search's learning rate, not the scaled one the trainable was given.
    results = run_digits(tmp_path, "mirrored", 1, {"gpu": 2, "cpu": 1}, "training.scale_lr=true")
    assert results.trials["status"].tolist() == ["completed"], results.trials.to_dict("records")
    assert results.best_metric is not None and results.best_metric > 0.2

    [info] = trial_infos(results)
    assert info["replicas"] == 2
    assert sorted(info["ray_gpu_ids"]) == ["0", "1"]
    assert [name.rsplit("/", 1)[-1] for name in info["device_names"]] == ["device:CPU:0", "device:CPU:1"]
    [batch_size] = results.trials["params.batch_size"].tolist()
    assert info["batch_size"] == 2 * batch_size  # the global batch spans both replicas
    [learning_rate] = results.trials["params.learning_rate"].tolist()
    assert info["scaled_learning_rate"] == pytest.approx(2 * learning_rate)  # scale_lr: times the replicas
    assert results.best is not None and results.best.config["learning_rate"] == pytest.approx(learning_rate)
    assert results.best.ran_on == (
        f"float32, 2 replicas on {', '.join(info['device_names'])}, global batch {2 * batch_size}, "
        f"learning rate {2 * learning_rate:.6g} (scaled by training.scale_lr)"
    )
    # This module's Ray is the caller's: a resume from the command line is told to start it again.
    assert (results.experiment_dir / "cluster.json").read_text() == '{"address": null, "callers_ray": true}\n'
    [trial_id] = results.trials["trial_id"].tolist()
    log = (results.experiment_dir / trial_id / "output.log").read_text()
    assert "tunekit: steps_per_execution 1 (auto: MirroredStrategy over 2 replicas" in log
