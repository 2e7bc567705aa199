"""The image CNN and MNIST MLP trainables, and the CIFAR specs end to end in smoke mode."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tunekit
from tunekit import load_spec
from tunekit.contract import TrainableRef, TrialContext

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SPECS = REPO / "search_spaces"
CIFAR_SPECS = ["cifar_resnet_base", "cifar_resnet_grid", "cifar_resnet_asha", "cifar_resnet_schedules"]


def smoke(folder: Path) -> list[str]:
    """Overrides that shrink a CIFAR spec to seconds: tiny images and model, 2 epochs, CPU."""
    return [
        f"data.path={folder}",
        "data.image_size=16",
        "budget.max_epochs=2",
        "budget.max_concurrent=2",
        "resources.gpu=0",
        "resources.cpu=1",
        "training.batch_size=32",
        "training.precision=float32",
        "tracking.enabled=false",
        "space.depth.values=[1]",
        "space.width.values=[8]",
    ]


def context(folder: Path | None = None, **changes: Any) -> TrialContext:
    values: dict[str, Any] = {
        "batch_size": 32,
        "per_replica_batch_size": 32,
        "replicas": 1,
        "precision": "float32",
        "seed": 0,
        "workdir": "/tmp",
        "cpus": 2,
        "max_epochs": 4,
        "jit_compile": False,
        "data": {"path": str(folder), "image_size": 16} if folder else {},
    }
    values.update(changes)
    return TrialContext(**values)


# ------------------------------------------------------------------------ specs


@pytest.mark.parametrize("name", CIFAR_SPECS)
def test_cifar_specs_are_valid(name: str) -> None:
    spec = load_spec(SPECS / f"{name}.yaml")
    assert isinstance(spec.trainable, TrainableRef) and spec.trainable.reference == "trainables.image_cnn"
    assert spec.budget.max_epochs == 50
    assert spec.training.batch_size == 64
    assert spec.resources.gpu == 0.25
    assert spec.data["path"] == "data/cifar10/train"


def test_grid_and_asha_specs_search_the_same_space() -> None:
    grid = load_spec(SPECS / "cifar_resnet_grid.yaml")
    asha = load_spec(SPECS / "cifar_resnet_asha.yaml")
    assert grid.space == asha.space
    assert grid.space.grid_size() == 27 == grid.budget.num_samples
    assert (grid.search.algorithm, grid.scheduler.type) == ("grid", "fifo")
    assert (asha.search.algorithm, asha.scheduler.type) == ("tpe", "asha")
    assert grid.space.grid()["learning_rate"] == [1e-3, 5e-4, 1e-4]
    assert grid.space.grid()["weight_decay"] == [1e-4, 5e-5, 1e-5]
    assert grid.space.grid()["augmentation"] == ["low", "medium", "high"]


def test_schedules_spec_compares_every_schedule() -> None:
    spec = load_spec(SPECS / "cifar_resnet_schedules.yaml")
    grid = spec.space.grid()
    assert grid["schedule"] == ["step", "cosine", "exponential"]
    assert spec.budget.num_samples == spec.space.grid_size() == 6


# -------------------------------------------------------------- trainable units


def test_image_cnn_builds_float32_output_and_trains(small_digits_folder: Path) -> None:
    import keras

    from trainables import image_cnn

    config = {
        "depth": 1,
        "width": 8,
        "learning_rate": 0.05,
        "augmentation": "low",
        "label_smoothing": 0.1,
        "optimizer": "sgd",
        "schedule": "step",
        "warmup_epochs": 1,
    }
    ctx = context(small_digits_folder)
    train, val = image_cnn.build_data(config, ctx)
    assert train.element_spec[0].shape.as_list() == [32, 16, 16, 3]
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        model = image_cnn.build_model(config, ctx)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert model.compiled
    assert model.outputs[0].dtype == "float32"
    assert model.output_shape == (None, 10)
    assert isinstance(model.optimizer.inner_optimizer, keras.optimizers.SGD)  # loss-scaled under float16
    # float16 is emulated (slow) on CPU: train the float32 build.
    history = image_cnn.build_model(config, ctx).fit(train, validation_data=val, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])


def test_image_cnn_uses_a_separate_validation_folder(small_digits_folder: Path, tmp_path: Path) -> None:
    from trainables import image_cnn

    ctx = context(data={"path": str(small_digits_folder), "val_path": str(small_digits_folder), "image_size": 16})
    _, val = image_cnn.build_data({}, ctx)
    assert sum(int(y.shape[0]) for _, y in val) == 300  # the whole folder, not a share of path
    (tmp_path / "other" / "cat").mkdir(parents=True)
    any_image = next((small_digits_folder / "0").iterdir())
    (tmp_path / "other" / "cat" / "a.png").write_bytes(any_image.read_bytes())
    bad = context(data={"path": str(small_digits_folder), "val_path": str(tmp_path / "other")})
    with pytest.raises(ValueError, match=r"data\.val_path has classes"):
        image_cnn.build_data({}, bad)
    with pytest.raises(ValueError, match=r"image_cnn needs data\.path"):
        image_cnn.build_data({}, context())


@pytest.mark.parametrize("schedule", ["cosine", "step", "exponential", "constant"])
def test_schedules_warm_up_then_decay(schedule: str) -> None:
    import keras

    from trainables import image_cnn

    peak, steps, epochs = 1e-2, 10, 20
    rate = image_cnn.learning_rate_schedule(
        {"schedule": schedule, "learning_rate": peak, "warmup_epochs": 2}, steps, epochs
    )
    values = np.array([float(rate(step)) for step in range(steps * epochs)])
    np.testing.assert_allclose(values[:20], peak * np.arange(1, 21) / 20, rtol=1e-5)  # linear warm-up
    assert values[20] == pytest.approx(peak, rel=1e-5)
    assert np.all(np.diff(values[20:]) <= 1e-9)  # never rises after the warm-up
    if schedule == "constant":
        assert values[-1] == pytest.approx(peak)
    else:
        assert values[-1] < 0.2 * peak
    restored = keras.optimizers.schedules.deserialize(keras.optimizers.schedules.serialize(rate))
    assert float(restored(57)) == pytest.approx(float(rate(57)))  # saved with the model


def test_unknown_schedule_and_optimizer_are_refused() -> None:
    from trainables import image_cnn

    with pytest.raises(ValueError, match="schedule must be one of cosine, step, exponential, constant"):
        image_cnn.learning_rate_schedule({"schedule": "linear"}, 10, 5)
    with pytest.raises(ValueError, match="optimizer must be one of adamw, sgd"):
        image_cnn._optimizer({"optimizer": "lamb"}, context(), 10)


def test_label_smoothing_loss_matches_keras_on_one_hot_labels() -> None:
    import keras

    from trainables import image_cnn

    rng = np.random.default_rng(0)
    probabilities = keras.ops.softmax(rng.normal(size=(6, 4)).astype("float32"))
    labels = np.array([0, 1, 2, 3, 1, 0])
    ours = image_cnn.SparseSmoothedCrossentropy(4, 0.1)(labels, probabilities)
    reference = keras.losses.CategoricalCrossentropy(label_smoothing=0.1)(np.eye(4)[labels], probabilities)
    assert float(ours) == pytest.approx(float(reference), rel=1e-5)


def test_weight_decay_skips_biases_and_batch_norm(small_digits_folder: Path) -> None:
    from trainables import image_cnn

    model = image_cnn.build_model({"depth": 1, "width": 8, "weight_decay": 1e-4}, context(small_digits_folder))
    decayed = {v.name for v in model.trainable_variables if model.optimizer._use_weight_decay(v)}
    assert decayed == {"kernel"}


def test_mnist_mlp_reads_an_image_folder(small_digits_folder: Path) -> None:
    from trainables import mnist_mlp

    ctx = context(data={"path": str(small_digits_folder)})
    train, _ = mnist_mlp.build_data({}, ctx)
    assert train.element_spec[0].shape.as_list() == [32, 28, 28, 1]
    model = mnist_mlp.build_model({}, ctx)
    assert [layer.units for layer in model.layers if hasattr(layer, "units")] == [512, 256, 10]
    assert model.input_shape == (None, 28, 28, 1)


# ------------------------------------------------------------------- end to end


def run_spec(name: str, overrides: list[str], storage: Path) -> tunekit.ExperimentResults:
    return tunekit.run(SPECS / f"{name}.yaml", overrides=overrides, storage=storage, name=name, progress=False)


def test_grid_spec_smoke(shared_ray: None, small_digits_folder: Path, tmp_path: Path) -> None:
    results = run_spec(
        "cifar_resnet_grid",
        [
            *smoke(small_digits_folder),
            "space.learning_rate.values=[1.0e-3, 5.0e-4]",
            "space.weight_decay.values=[1.0e-4]",
            "space.augmentation.values=[high]",
            "budget.num_samples=2",
        ],
        tmp_path,
    )
    trials = results.trials
    assert trials["status"].tolist() == ["completed"] * 2, trials.to_dict("records")
    assert (trials["attempts"] == 1).all()  # the end of the grid is not a failed trial
    assert sorted(trials["params.learning_rate"]) == [5e-4, 1e-3]
    assert results.epochs.groupby("trial_id")["epoch"].max().tolist() == [2, 2]
    assert results.best_metric is not None and results.best_metric > 0.1


def test_asha_spec_smoke(shared_ray: None, small_digits_folder: Path, tmp_path: Path) -> None:
    results = run_spec(
        "cifar_resnet_asha",
        [
            *smoke(small_digits_folder),
            "budget.num_samples=3",
            "search.n_startup_trials=2",
            "scheduler.grace_period=1",
            "scheduler.reduction_factor=2",
        ],
        tmp_path,
    )
    trials = results.trials
    assert len(trials) == 3
    assert set(trials["status"]) <= {"completed", "pruned"}, trials.to_dict("records")
    assert "completed" in set(trials["status"])


def test_schedules_spec_smoke(shared_ray: None, small_digits_folder: Path, tmp_path: Path) -> None:
    results = run_spec(
        "cifar_resnet_schedules",
        [
            *smoke(small_digits_folder),
            "space.warmup_epochs.values=[1]",
            "space.label_smoothing.values=[0.1]",
            "budget.num_samples=3",
        ],
        tmp_path,
    )
    trials = results.trials
    assert trials["status"].tolist() == ["completed"] * 3, trials.to_dict("records")
    assert sorted(trials["params.schedule"]) == ["cosine", "exponential", "step"]


def test_mnist_mlp_on_upscaled_digits(shared_ray: None, tmp_path: Path) -> None:
    spec = {
        "name": "mnist-mlp",
        "trainable": "trainables.mnist_mlp",
        "metric": {"name": "val_accuracy", "mode": "max"},
        "budget": {"num_samples": 1, "max_epochs": 3},
        "search": {"algorithm": "random"},
        "scheduler": {"type": "fifo"},
        "resources": {"cpu": 1, "gpu": 0},
        "training": {"precision": "float32", "batch_size": 64},
        "tracking": {"enabled": False},
        "space": {"learning_rate": {"type": "choice", "values": [1e-3]}, "dropout": {"type": "fixed", "value": 0.2}},
    }
    results = tunekit.run(spec, storage=tmp_path, name="mnist", progress=False)
    assert results.trials["status"].tolist() == ["completed"], results.trials.to_dict("records")
    assert results.best_metric is not None and results.best_metric > 0.8
