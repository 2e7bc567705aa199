"""Keras projects written by someone else, run unchanged, on a real Ray runtime.

The project in ``tests/projects/own_keras`` is what a new user brings: a file trainable
importing a module beside it, a subclassed model with a custom ``train_step`` and no
``get_config``, EarlyStopping, ReduceLROnPlateau and class weights. It runs from another
working directory. The notebook test passes builder functions defined in ``__main__``.
"""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest

import tunekit
from tunekit.contract import TrialContext, load_builders
from tunekit.layout import FINAL_MODEL, FINAL_WEIGHTS, OUTPUT_FILE
from tunekit.search.plan import study_storage

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("shared_ray")]

PROJECT = Path(__file__).resolve().parents[1] / "projects" / "own_keras"


@pytest.fixture(scope="module")
def project_run(tmp_path_factory: pytest.TempPathFactory) -> tunekit.ExperimentResults:
    """The project copied to a folder of its own and searched from an unrelated directory."""
    project = tmp_path_factory.mktemp("user") / "project"
    shutil.copytree(PROJECT, project)
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(elsewhere)
        return tunekit.run(project / "spec.yaml", name="own", progress=False)


def _trial(results: tunekit.ExperimentResults, early_stop: bool) -> Any:
    rows = results.trials[results.trials["params.early_stop"] == early_stop]
    assert len(rows) == 1, results.trials
    return rows.iloc[0]


def test_no_trial_fails_and_the_self_stopped_one_is_completed(project_run: tunekit.ExperimentResults) -> None:
    assert list(project_run.trials["status"]) == ["completed", "completed"], project_run.trials[["status", "reason"]]
    stopped, full = _trial(project_run, True), _trial(project_run, False)
    assert (stopped.epochs, stopped.reason) == (
        2,
        "stopped by the model at epoch 2; the model restored its best weights",
    )
    assert (full.epochs, full.reason) == (5, "trained all 5 epochs")
    assert project_run.best is not None and project_run.best.status == "completed"


def test_self_stopped_trial_is_complete_in_optuna_with_its_final_value(
    project_run: tunekit.ExperimentResults,
) -> None:
    study = optuna.load_study(study_name="own-keras", storage=study_storage(project_run.experiment_dir))
    by_ray_id = {t.user_attrs["ray_trial_id"]: t for t in study.trials}
    for row in project_run.trials.itertuples():
        trial = by_ray_id[row.trial_id]
        assert trial.state == optuna.trial.TrialState.COMPLETE, row
        assert trial.value == pytest.approx(row.final_metric)
        assert sorted(trial.intermediate_values) == list(range(1, row.epochs + 1))


def test_every_trial_leaves_weights_that_load_into_a_rebuilt_model(project_run: tunekit.ExperimentResults) -> None:
    builders = load_builders(tunekit.load_spec(project_run.experiment_dir / "spec.yaml").trainable)
    for row in project_run.trials.itertuples():
        final = sorted((project_run.experiment_dir / row.trial_id).glob("checkpoint_*"))[-1]
        assert not (final / FINAL_MODEL).exists()
        assert (final / FINAL_WEIGHTS).is_file()
        config = {
            "early_stop": bool(project_run.trials.loc[row.Index, "params.early_stop"]),
            "units": 24,
            "learning_rate": 0.01,
        }
        ctx = _context(project_run.experiment_dir)
        _, val = builders.build_data(config, ctx)
        model = builders.build_model(config, ctx)
        model(next(iter(val))[0])  # a subclassed model makes its weights on its first call
        model.load_weights(final / FINAL_WEIGHTS)
        _, accuracy = model.evaluate(val, verbose=0)
        # The saved model scores what the trial reported last, even where EarlyStopping put
        # back its first epoch's weights (the trial's last metrics are re-measured on them).
        assert accuracy == pytest.approx(row.final_metric, abs=1e-6)
    model_path = project_run.model_path()
    assert model_path is not None and model_path.name == FINAL_WEIGHTS


def test_checkpoint_keeps_the_learning_rate_reduce_lr_on_plateau_lowered(
    project_run: tunekit.ExperimentResults,
) -> None:
    for early_stop, epochs in ((True, 2), (False, 5)):
        row = _trial(project_run, early_stop)
        final = sorted((project_run.experiment_dir / row.trial_id).glob("checkpoint_*"))[-1]
        with np.load(final / "weights.npz") as arrays:
            scalars = [float(arrays[k]) for k in arrays.files if k.startswith("o") and arrays[k].shape == ()]
        halved = 0.01 * 0.5 ** (epochs - 1)
        assert any(value == pytest.approx(halved, rel=1e-5) for value in scalars), (epochs, scalars)


def test_trainable_output_lands_in_each_trial_folder(project_run: tunekit.ExperimentResults) -> None:
    for row in project_run.trials.itertuples():
        log = (project_run.experiment_dir / row.trial_id / OUTPUT_FILE).read_text()
        assert "building data for units=24" in log
        assert f"building the model of trial {row.number}\n" in log  # ctx.trial_number, as trials.csv numbers it
        assert "saved weights only (model.weights.h5): model.keras failed (NotImplementedError:" in log
        # The trainable compiled its model: tunekit leaves its compile's steps_per_execution alone.
        assert "tunekit: steps_per_execution 1 (auto: the trainable compiled the model" in log


def test_the_users_tensorboard_callback_logs_into_each_trial_folder_beside_tunekits_logs(
    project_run: tunekit.ExperimentResults, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from tunekit.testing.runs import read_events

    # keras.callbacks.TensorBoard() with its relative default log_dir, "logs": in the trial's
    # folder, not in the directory the search ran from.
    assert not any(tmp_path_factory.getbasetemp().glob("elsewhere*/logs"))
    for row in project_run.trials.itertuples():
        logs = project_run.experiment_dir / row.trial_id / "logs"
        for split in ("train", "validation"):
            assert list((logs / split).glob("events.out.tfevents.*")), (row.trial_id, split)
        # tunekit's own logs of the same trial, one run per trial number.
        steps = [
            event.step
            for event in read_events(project_run.experiment_dir / "tensorboard" / f"trial-{row.number}")
            for value in event.summary.value
            if value.tag == "val_accuracy"
        ]
        assert steps == list(range(1, row.epochs + 1)), (row.number, steps)


def test_spec_yaml_records_where_the_trainable_file_was_found(project_run: tunekit.ExperimentResults) -> None:
    trainable = Path(project_run.spec["trainable"])
    assert trainable.is_absolute() and trainable.name == "model.py"
    assert trainable.parent.name == "project"


NOTEBOOK = """
import keras
import tensorflow as tf
from sklearn.datasets import load_digits

def arrays():
    x, y = load_digits(return_X_y=True)
    return (x / 16.0).astype("float32"), y

def build_data(config, ctx):
    x, y = arrays()
    targets = {"digit": y, "parity": (y % 2).astype("float32")}
    split = 1400
    train = tf.data.Dataset.from_tensor_slices((x[:split], {k: v[:split] for k, v in targets.items()}))
    val = tf.data.Dataset.from_tensor_slices((x[split:], {k: v[split:] for k, v in targets.items()}))
    return train.batch(ctx.batch_size), val.batch(ctx.batch_size)

def build_model(config, ctx):
    inputs = keras.Input((64,))
    hidden = keras.layers.Dense(config["units"], activation="relu")(inputs)
    digit = keras.layers.Dense(10, activation="softmax", name="digit")(hidden)
    parity = keras.layers.Dense(1, activation="sigmoid", name="parity")(hidden)
    model = keras.Model(inputs, {"digit": digit, "parity": parity})
    model.compile(
        optimizer="adam",
        loss={"digit": "sparse_categorical_crossentropy", "parity": "binary_crossentropy"},
        metrics={"digit": ["accuracy"], "parity": ["accuracy"]},
    )
    return model

def numpy_data(config, ctx):
    return arrays(), arrays()
"""


def _notebook() -> dict[str, Any]:
    """Functions as a notebook cell defines them: in ``__main__``, so Ray ships them by value."""
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(textwrap.dedent(NOTEBOOK), namespace)
    return namespace


NOTEBOOK_SPEC = {
    "name": "notebook",
    "metric": {"name": "val_digit_accuracy", "mode": "max"},
    "budget": {"num_samples": 2, "max_epochs": 2, "max_concurrent": 2},
    "search": {"algorithm": "grid"},
    "scheduler": {"type": "fifo"},
    "space": {"units": {"type": "choice", "values": [16, 32]}},
    "tracking": {"enabled": False},
}


def test_notebook_functions_search_a_multi_output_model(tmp_path: Path) -> None:
    cell = _notebook()

    results = tunekit.run(
        NOTEBOOK_SPEC,
        build_data=cell["build_data"],
        build_model=cell["build_model"],
        storage=tmp_path,
        progress=False,
    )

    assert list(results.trials["status"]) == ["completed", "completed"]
    assert {"val_digit_accuracy", "val_parity_accuracy"} <= set(results.epochs.columns)
    assert results.best is not None and results.best.metric > 0.5
    assert results.spec["trainable"] == "python: __main__.build_data, __main__.build_model"
    model_path = results.model_path()
    assert model_path is not None and model_path.name == FINAL_MODEL


def test_builders_returning_arrays_stop_the_search_at_once_with_one_line(tmp_path: Path) -> None:
    cell = _notebook()

    with pytest.raises(tunekit.SearchAborted) as raised:
        tunekit.run(
            NOTEBOOK_SPEC,
            build_data=cell["numpy_data"],
            build_model=cell["build_model"],
            storage=tmp_path,
            name="arrays",
            progress=False,
        )

    message = str(raised.value)
    assert message.startswith("search stopped: trial ")
    assert message.endswith(
        "failed with an error every trial would hit: build_data must return (train_ds, val_ds), two "
        "tf.data.Datasets batched with ctx.batch_size; its train set is a tuple of 2 (numpy.ndarray, "
        "numpy.ndarray) (wrap arrays: tf.data.Dataset.from_tensor_slices((x, y)).batch(ctx.batch_size))"
    )
    trials = tunekit.load(tmp_path / "arrays").trials
    assert (trials["epochs"] == 0).all()


DAY_TWO = Path(__file__).resolve().parents[1] / "projects" / "day_two"


def _write_tfrecord_as_a_user_would(path: Path, images: np.ndarray, labels: np.ndarray) -> None:
    """Records as tunekit.data documents them (PNG bytes ``image``, int64 ``label``), written with TF alone."""
    import tensorflow as tf

    path.parent.mkdir(parents=True, exist_ok=True)
    with tf.io.TFRecordWriter(str(path)) as writer:
        for image, label in zip(images, labels, strict=True):
            png = tf.io.encode_png(image[..., None]).numpy()
            feature = {
                "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[png])),
                "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),
            }
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())


@pytest.fixture(scope="module")
def day_two_run(tmp_path_factory: pytest.TempPathFactory) -> tunekit.ExperimentResults:
    """Precision searched over a base spec in another folder, reading TFRecords, run from elsewhere.

    The grid is kind (functional, subclassed) x precision (float32, mixed_bfloat16): only
    the subclassed model under mixed_bfloat16 cannot get float32 outputs.
    """
    from sklearn.datasets import load_digits

    project = tmp_path_factory.mktemp("user") / "day_two"
    shutil.copytree(DAY_TWO, project)
    x, y = load_digits(return_X_y=True)
    images = np.clip(x.reshape(-1, 8, 8) * 16, 0, 255).astype(np.uint8)
    _write_tfrecord_as_a_user_would(project / "shared" / "data" / "train.tfrecord", images[:1400], y[:1400])
    _write_tfrecord_as_a_user_would(project / "shared" / "data" / "val.tfrecord", images[1400:], y[1400:])
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(elsewhere)
        return tunekit.run(project / "experiments" / "precision.yaml", name="day-two", progress=False)


def _configs(results: tunekit.ExperimentResults) -> dict[tuple[str, str], Any]:
    return {(row["params.kind"], row["params.precision"]): row for _, row in results.trials.iterrows()}


SUBCLASSED_UNDER_BFLOAT16 = (
    "build_model returned a subclassed model (TwoHeads) whose output is bfloat16 under mixed_bfloat16; tunekit "
    "moves the float32 boundary only in functional and Sequential models: end call() with a float32 layer, "
    "e.g. keras.layers.Activation('softmax', dtype='float32'); only trials under a mixed precision fail"
)


def test_only_the_mixed_trials_of_a_model_that_cannot_convert_fail(day_two_run: tunekit.ExperimentResults) -> None:
    trials = _configs(day_two_run)
    statuses = {config: (row["status"], row["reason"]) for config, row in trials.items()}
    assert statuses == {
        ("functional", "float32"): ("completed", "trained all 2 epochs"),
        ("functional", "mixed_bfloat16"): ("completed", "trained all 2 epochs"),
        ("subclassed", "float32"): ("completed", "trained all 2 epochs"),
        ("subclassed", "mixed_bfloat16"): ("failed", SUBCLASSED_UNDER_BFLOAT16),
    }


def test_a_mixed_precision_model_is_saved_with_float32_outputs_that_reload_to_its_metric(
    day_two_run: tunekit.ExperimentResults,
) -> None:
    import keras

    from tunekit import data

    row = _configs(day_two_run)[("functional", "mixed_bfloat16")]
    final = sorted((day_two_run.experiment_dir / row["trial_id"]).glob("checkpoint_*"))[-1]
    model = keras.models.load_model(final / FINAL_MODEL)
    assert [str(x.dtype) for x in model.outputs] == ["float32", "float32"]
    assert model.get_layer("digit").compute_dtype == "float32"
    assert model.get_layer("digit_mixed_bfloat16").compute_dtype == "bfloat16"
    spec = tunekit.load_spec(day_two_run.experiment_dir / "spec.yaml")
    ctx = _context(day_two_run.experiment_dir, batch_size=64, data=spec.data)
    val = data.from_tfrecord(spec.data["val"], ctx, training=False, image_size=8, channels=1)
    measured = model.evaluate(val.map(lambda x, y: (x, {"digit": y, "parity": y % 2})), verbose=0, return_dict=True)
    assert measured["digit_accuracy"] == pytest.approx(row["final_metric"], abs=1e-6)


def test_tfrecords_of_unknown_length_report_their_throughput(day_two_run: tunekit.ExperimentResults) -> None:
    completed = day_two_run.epochs.dropna(subset=["val_digit_accuracy"])
    assert len(completed) == 6
    assert (completed["samples_per_second"] > 0).all() and (completed["steps_per_second"] > 0).all()
    # Keras learns their length by running them out at the first epoch: no warning of missing data.
    logs = [(day_two_run.experiment_dir / t / "output.log").read_text() for t in day_two_run.trials["trial_id"]]
    assert logs and not any("ran out of data" in log for log in logs), logs


def test_the_experiments_spec_is_the_resolved_one_with_its_chain(day_two_run: tunekit.ExperimentResults) -> None:
    text = (day_two_run.experiment_dir / "spec.yaml").read_text()
    project = Path(day_two_run.spec["trainable"]).parents[1]
    assert text.startswith(
        "# tunekit's resolved spec: extends merged, --set applied, relative paths absolute, defaults filled in\n"
        f"# spec: {project / 'experiments' / 'precision.yaml'}\n"
        f"#   extends: {project / 'shared' / 'base.yaml'}\n"
        "name: day-two\n"
    )
    assert day_two_run.spec["trainable"] == str(project / "shared" / "two_heads.py")
    assert day_two_run.spec["data"]["train"] == str(project / "shared" / "data" / "train.tfrecord")


def _context(workdir: Path, batch_size: int = 32, data: Any = None) -> TrialContext:
    return TrialContext(
        batch_size=batch_size,
        per_replica_batch_size=batch_size,
        replicas=1,
        precision="float32",
        seed=0,
        workdir=str(workdir),
        cpus=1,
        max_epochs=5,
        jit_compile=False,
        data=data or {},
    )
