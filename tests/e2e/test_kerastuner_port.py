"""A KerasTuner example ported to ``tunekit.Tuner`` by changing its tuner line, on a real Ray.

The example is KerasTuner's "Getting started" (keras.io/keras_tuner/getting_started):
``build_model(hp)`` with a loop of layers whose count is searched, a boolean dropout and a
log-sampled learning rate, then ``search(x, y, epochs=2, validation_data=...)``,
``get_best_models`` and ``results_summary``. Its MNIST is scikit-learn's digits here (no
downloads), as NumPy arrays. Everything but the tuner line is KerasTuner's code.
"""

from __future__ import annotations

import io
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import keras
import numpy as np
import pytest
import ray
import yaml
from keras import layers
from sklearn.datasets import load_digits

import tunekit
from tunekit.results.check import check_experiment

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def by_value(shared_ray: None) -> Iterator[None]:
    # A script's build_model lives in __main__ and travels by value; this test module's would
    # travel by name, which the workers cannot import.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


# --------------------------------------------------------------------------- KerasTuner's code
def build_model(hp: Any) -> keras.Model:
    model = keras.Sequential()
    model.add(layers.Flatten())
    # Tune the number of layers.
    for i in range(hp.Int("num_layers", 1, 3)):
        model.add(
            layers.Dense(
                # Tune number of units separately.
                units=hp.Int(f"units_{i}", min_value=32, max_value=512, step=32),
                activation=hp.Choice("activation", ["relu", "tanh"]),
            )
        )
    if hp.Boolean("dropout"):
        model.add(layers.Dropout(rate=0.25))
    model.add(layers.Dense(10, activation="softmax"))
    learning_rate = hp.Float("lr", min_value=1e-4, max_value=1e-2, sampling="log")
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=learning_rate),
        loss="categorical_crossentropy",
        metrics=["accuracy"],
    )
    return model


def digits() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype("float32").reshape(-1, 8, 8)
    y = keras.utils.to_categorical(y, 10)
    return x[:1400], y[:1400], x[1400:], y[1400:]


@pytest.fixture(scope="module")
def ported(tmp_path_factory: pytest.TempPathFactory) -> tuple[tunekit.Tuner, float]:
    x_train, y_train, x_val, y_val = digits()
    root = tmp_path_factory.mktemp("kt")
    began = time.monotonic()
    # KerasTuner's line was: tuner = keras_tuner.RandomSearch(
    tuner = tunekit.Tuner(
        hypermodel=build_model,
        objective="val_accuracy",
        max_trials=3,
        overwrite=True,
        directory=root / "my_dir",
        project_name="helloworld",
        progress=False,
        tracking={"uri": f"sqlite:///{root / 'mlflow.db'}"},
    )
    tuner.search(x_train, y_train, epochs=2, validation_data=(x_val, y_val))
    return tuner, time.monotonic() - began


def test_the_search_writes_a_tunekit_experiment_with_the_space_found_in_the_code(
    ported: tuple[tunekit.Tuner, float],
) -> None:
    tuner, _ = ported
    results = tuner.results
    assert results.experiment_dir == (tuner.project_dir) and tuner.project_dir.name == "helloworld"
    assert len(results.trials) == 3 and set(results.trials["status"]) <= {"completed", "pruned"}
    saved = yaml.safe_load((results.experiment_dir / "spec.yaml").read_text())
    assert saved["training"]["keep"] == "best"  # KerasTuner's: a trial is its best epoch, and so is its model
    space = saved["space"]
    assert list(space) == ["num_layers", "units_0", "activation", "dropout", "lr", "units_1", "units_2"]
    assert space["units_2"] == {"type": "int", "low": 32, "high": 512, "step": 32, "when": {"num_layers": [3]}}
    assert space["lr"] == {"type": "loguniform", "low": 1e-4, "high": 1e-2}
    # Made in a module fixture, before the suite's own check starts watching: checked here.
    report = check_experiment(results.experiment_dir)
    assert report.ok, report.describe()
    # A layer that did not exist in a trial has no value in it (define-by-run), not a filled-in one.
    for row in results.trials.to_dict("records"):
        layers_used = int(row["params.num_layers"])
        for i in range(3):
            assert np.isnan(row.get(f"params.units_{i}", np.nan)) == (i >= layers_used), row


def test_best_models_load_and_score_what_their_trial_reported(ported: tuple[tunekit.Tuner, float]) -> None:
    tuner, _ = ported
    _, _, x_val, y_val = digits()
    best_model = tuner.get_best_models(num_models=1)[0]
    best_hp = tuner.get_best_hyperparameters(1)[0]
    assert len([layer for layer in best_model.layers if isinstance(layer, layers.Dense)]) == (
        best_hp.values["num_layers"] + 1
    )
    _, accuracy = best_model.evaluate(x_val, y_val, verbose=0)
    best = tuner.results.best
    assert best is not None and accuracy == pytest.approx(best.metric, abs=1e-6)
    assert best_hp.values == {k: v for k, v in best.config.items()}
    # The hyperparameters rebuild the same architecture through the user's own build_model.
    rebuilt = build_model(tunekit.HyperParameters(best_hp.values))
    rebuilt.build((None, 8, 8))
    assert rebuilt.count_params() == best_model.count_params()


def test_summaries_print_kerastuners_sections(
    ported: tuple[tunekit.Tuner, float], capsys: pytest.CaptureFixture[str]
) -> None:
    tuner, seconds = ported
    tuner.results_summary(2)
    tuner.search_space_summary()
    out = capsys.readouterr().out
    assert "Results summary" in out and 'Objective(name="val_accuracy", direction="max")' in out
    assert out.count("Score: ") == 2
    assert "Default search space size: 7" in out
    assert "units_2 (Int)\n{'default': 32, 'conditions': [{'num_layers': [3]}]" in out
    print(f"the ported search took {seconds:.1f} s")


def test_tunekit_report_reads_the_tuners_experiment(ported: tuple[tunekit.Tuner, float]) -> None:
    from tunekit.cli import main

    tuner, _ = ported
    assert main(["report", str(tuner.project_dir)]) == 0


# --------------------------------------------------------------------------- a spec and code that disagree
def digits_data(config: dict[str, Any], ctx: Any) -> Any:
    import tensorflow as tf

    x_train, y_train, x_val, y_val = digits()
    return (
        tf.data.Dataset.from_tensor_slices((x_train, y_train)).batch(ctx.batch_size),
        tf.data.Dataset.from_tensor_slices((x_val, y_val)).batch(ctx.batch_size),
    )


def mlp_reading_units_2(config: dict[str, Any], ctx: Any) -> keras.Model:
    model = keras.Sequential([keras.Input((8, 8)), layers.Flatten(), layers.Dense(16, activation="relu")])
    if config["layers"] == 2:
        model.add(layers.Dense(config["units_2"], activation="relu"))  # the space calls it units_two
    model.add(layers.Dense(10, activation="softmax"))
    model.compile(optimizer="adam", loss="categorical_crossentropy", metrics=["accuracy"])
    return model


def test_a_key_renamed_in_the_space_only_stops_the_search_with_the_names(tmp_path: Path) -> None:
    spec = {
        "name": "renamed",
        "metric": {"name": "val_accuracy", "mode": "max"},
        "budget": {"num_samples": 4, "max_epochs": 1},
        # The branch that reads the key runs first, as it would for some trial sooner or later.
        "search": {"warm_start": [{"layers": 2, "units_two": 16}]},
        "space": {
            "layers": {"type": "choice", "values": [1, 2]},
            "units_two": {"type": "int", "low": 8, "high": 32, "when": {"layers": 2}},
        },
        "tracking": {"enabled": False},
    }
    with pytest.raises(tunekit.SearchAborted) as raised:
        tunekit.run(
            spec,
            storage=tmp_path,
            name="renamed",
            progress=False,
            build_data=digits_data,
            build_model=mlp_reading_units_2,
        )
    assert (
        "build_model reads 'units_2', which the space lacks; the space has: layers, units_two; "
        "did you mean 'units_two'?" in str(raised.value)
    )
    assert list(tunekit.load(tmp_path / "renamed").trials["status"]) == ["failed"]


# --------------------------------------------------------------------------- against keras_tuner itself
def many_calls(hp: Any) -> list[Any]:
    """Every kind of call, with and without conditions, as KerasTuner's docs show them."""
    got = [
        hp.Int("n_layers", min_value=6, max_value=12),
        hp.Int("stepped", min_value=6, max_value=13, step=3),
        hp.Int("batch", min_value=2, max_value=32, step=2, sampling="log"),
        hp.Float("rate", min_value=0.0, max_value=1.0, step=0.2),
        hp.Float("lr", min_value=1e-4, max_value=1e-2, sampling="log"),
        hp.Choice("act", ["relu", "tanh"]),
        hp.Choice("width", [64, 32, 128], default=128),
        hp.Boolean("flag"),
        hp.Fixed("k", 3),
    ]
    with hp.conditional_scope("act", ["tanh"]):
        got.append(hp.Int("only_tanh", 1, 4))
    got.append(hp.Int("only_relu", 1, 4, parent_name="act", parent_values=["relu"]))
    return got


@pytest.mark.parametrize("values", [{}, {"act": "tanh", "n_layers": 9, "flag": True}])
def test_hp_answers_as_kerastuners_own(values: dict[str, Any]) -> None:
    import keras_tuner

    theirs = keras_tuner.HyperParameters()
    for name, value in values.items():
        theirs.values[name] = value  # how KerasTuner's oracle hands a trial its values
    ours = tunekit.HyperParameters(values)
    assert many_calls(ours) == many_calls(theirs)
    assert ours.values == theirs.values
    for name in ("only_tanh", "only_relu", "act"):
        assert ours.is_active(name) == theirs.is_active(name)


def test_stepped_ranges_have_kerastuners_values() -> None:
    import keras_tuner

    theirs = keras_tuner.HyperParameters()
    many_calls(theirs)
    ours = tunekit.HyperParameters()
    many_calls(ours)
    for name in ("stepped", "batch"):
        assert list(ours.declared[name].values() or ()) == list(theirs._hps[name][0].values), name
    # KerasTuner's docs give 0, 0.2, ..., 1.0 for this range; its code drops 1.0 ((1.0 - 0.0) // 0.2
    # is 4.0 in floating point). tunekit follows the docs.
    assert list(ours.declared["rate"].values() or ()) == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert list(theirs._hps["rate"][0].values) == pytest.approx([0.0, 0.2, 0.4, 0.6, 0.8])


def test_hyperbands_default_trials_are_what_kerastuners_brackets_start() -> None:
    import keras_tuner

    from tunekit.tuner.tuner import kerastuner_trials

    for max_epochs, factor in ((20, 3), (100, 3), (8, 2), (2, 3), (81, 3)):
        oracle = keras_tuner.oracles.HyperbandOracle(objective="val_loss", max_epochs=max_epochs, factor=factor)
        theirs = sum(oracle._get_size(bracket, 0) for bracket in range(oracle._get_num_brackets()))
        assert kerastuner_trials(max_epochs, factor) == theirs, (max_epochs, factor)


def test_kerastuners_hypermodel_with_its_own_fit_trains_through_it() -> None:
    """KerasTuner's "tune model training" example: the HyperModel's fit searches the batch size."""
    import keras_tuner
    import tensorflow as tf

    from tunekit.contract import TrialContext
    from tunekit.tuner.tuner import HyperModelBuilder

    class MyHyperModel(keras_tuner.HyperModel):
        def build(self, hp: Any) -> keras.Model:
            return build_model(hp)

        def fit(self, hp: Any, model: Any, *args: Any, **kwargs: Any) -> Any:
            return model.fit(*args, batch_size=hp.Choice("batch_size", [16, 32]), **kwargs)

    tuner = tunekit.Tuner(MyHyperModel(), objective=keras_tuner.Objective("val_auc", direction="max"))
    assert tuner.objectives == [("val_auc", "max")]
    assert {"batch_size", "units_2"} <= set(tuner.discovery.names)
    # What a trial does with it: build, then tunekit's model.fit call, which the HyperModel's fit makes.
    builder = HyperModelBuilder(tuner._build, {n: n for n in tuner.discovery.names}, tuner._fit)
    config = {"num_layers": 1, "units_0": 32, "activation": "relu", "dropout": False, "lr": 0.01, "batch_size": 16}
    ctx = TrialContext(32, 32, 1, "float32", 0, "", 1, 1, False)
    x_train, y_train, _, _ = digits()
    train = tf.data.Dataset.from_tensor_slices((x_train[:320], y_train[:320])).batch(32)
    model = builder(config, ctx)
    steps: list[int] = []
    counter = keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: steps.append(batch))
    history = model.fit(train, epochs=1, verbose=0, shuffle=False, callbacks=[counter])  # as the trial calls it
    assert len(steps) == 320 // 16 and set(history.history) == {"loss", "accuracy"}


def test_kerastuners_given_hyperparameters_restrict_the_space() -> None:
    """KerasTuner's "tune a subset": one parameter searched, or one pinned, with its own HyperParameters."""
    import keras_tuner

    only_lr = keras_tuner.HyperParameters()
    only_lr.Float("lr", min_value=1e-4, max_value=1e-2, sampling="log")
    tuner = tunekit.Tuner(build_model, objective="val_accuracy", hyperparameters=only_lr, tune_new_entries=False)
    space = tuner.discovery.to_space()
    assert space["lr"] == {"type": "loguniform", "low": 1e-4, "high": 1e-2}
    assert space["num_layers"] == {"type": "fixed", "value": 1} and "units_1" not in space  # never active
    pinned = keras_tuner.HyperParameters()
    pinned.Fixed("lr", value=1e-4)
    space = tunekit.Tuner(build_model, objective="val_accuracy", hyperparameters=pinned).discovery.to_space()
    assert space["lr"] == {"type": "fixed", "value": 1e-4} and space["units_2"]["when"] == {"num_layers": [3]}


# --------------------------------------------------------------------------- a spec without space:
HP_TRAINABLE = """
import keras
import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits


def build_data(config, ctx):
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype("float32")
    train = tf.data.Dataset.from_tensor_slices((x[:1400], y[:1400])).batch(ctx.batch_size)
    return train, tf.data.Dataset.from_tensor_slices((x[1400:], y[1400:])).batch(ctx.batch_size)


def build_model(hp):
    model = keras.Sequential([keras.Input((64,))])
    if hp.Boolean("wide"):
        model.add(keras.layers.Dense(hp.Int("units", 64, 128, step=64), activation="relu"))
    model.add(keras.layers.Dense(10, activation="softmax"))
    rate = hp.Float("lr", 1e-3, 1e-2, sampling="log")
    model.compile(keras.optimizers.Adam(rate), "sparse_categorical_crossentropy", metrics=["accuracy"])
    return model
"""


def test_a_spec_without_space_searches_the_space_its_build_model_hp_declares(tmp_path: Path) -> None:
    """``space:`` left out, ``build_model(hp)``: validate prints the space found (a child process
    builds the model; the CLI imports no TensorFlow), and the search samples ``units`` only
    where ``wide`` is true, recording it only for those trials."""
    import subprocess

    project = tmp_path / "project"
    project.mkdir()
    (project / "model.py").write_text(HP_TRAINABLE)
    spec = project / "spec.yaml"
    spec.write_text(
        "name: code-space\ntrainable: model.py\nmetric: {name: val_accuracy, mode: max}\n"
        "budget: {num_samples: 4, max_epochs: 1, max_concurrent: 1}\nscheduler: {type: fifo}\n"
        "search: {warm_start: [{wide: true, units: 64, lr: 0.005}, {wide: false, lr: 0.005}]}\n"
        "tracking: {enabled: false}\n"
    )
    shown = subprocess.run(
        [sys.executable, "-m", "tunekit.cli", "validate", str(spec), "--print"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    found = yaml.safe_load(shown.stdout[shown.stdout.index("name: code-space") :])["space"]
    assert found == {
        "wide": {"type": "choice", "values": [False, True]},
        "units": {"type": "int", "low": 64, "high": 128, "step": 64, "when": {"wide": [True]}},
        "lr": {"type": "loguniform", "low": 1e-3, "high": 1e-2},
    }

    results = tunekit.run(spec, storage=tmp_path / "results", progress=False)
    trials = results.trials.set_index("number")
    assert set(trials["status"]) == {"completed"}, trials[["status", "reason"]]
    assert trials.loc[0, "params.units"] == 64 and bool(trials.loc[0, "params.wide"])
    for _, row in trials.iterrows():  # units is a value only where wide made it exist
        assert (row["params.units"] == row["params.units"]) == bool(row["params.wide"]), row
    saved = yaml.safe_load((results.experiment_dir / "spec.yaml").read_text())
    assert saved["space"] == found  # a resume reads the space from here, building nothing


def small_mlp(hp: Any) -> keras.Model:
    model = keras.Sequential([keras.Input((8, 8)), layers.Flatten(), layers.Dense(hp.Int("units", 16, 64, step=16))])
    model.add(layers.Dense(10, activation="softmax"))
    model.compile(optimizer="adam", loss="categorical_crossentropy", metrics=["accuracy"])
    return model


def test_a_tuner_run_again_resumes_its_experiment_grown_to_max_trials(tmp_path: Path) -> None:
    """KerasTuner's reload: the same script with a larger ``max_trials`` and ``overwrite=False``
    continues the experiment through ``tunekit.resume``, adding trials and redoing none."""
    x_train, y_train, x_val, y_val = digits()

    def search(max_trials: int, progress: Any = False) -> tunekit.ExperimentResults:
        tuner = tunekit.Tuner(
            small_mlp, objective="val_accuracy", max_trials=max_trials, directory=tmp_path, project_name="grown",
            progress=progress, tracking={"enabled": False}, budget={"max_concurrent": 1},
        )  # fmt: skip
        tuner.search(x_train, y_train, epochs=1, validation_data=(x_val, y_val))
        return tuner.results

    first = search(2)
    again = search(3)
    assert again.experiment_dir == first.experiment_dir
    assert len(again.trials) == 3 and set(again.trials["status"]) == {"completed"}
    assert set(first.trials["trial_id"]) < set(again.trials["trial_id"])
    kept = again.trials.set_index("trial_id").loc[list(first.trials["trial_id"]), "final_metric"]
    assert list(kept) == list(first.trials["final_metric"])  # the first two trained once, not again
    assert len(again.epochs) == 3
    # Run once more unchanged: nothing to do, and the way to grow it is a Tuner's, not the CLI's.
    console = io.StringIO()
    same = search(3, progress=console)
    assert "the search is complete: nothing to resume (more trials grow it: a Tuner's max_trials" in console.getvalue()
    # The results a Tuner returns hold its builders, so a rebuild needs nothing passed again...
    retrained = same.retrain(data="train")
    assert retrained.model is not None and retrained.path.is_relative_to(same.experiment_dir)
    # ...while a load from the folder cannot find them, and says where they are.
    with pytest.raises(tunekit.SpecError, match="use the results the search returned") as refused:
        tunekit.load(same.experiment_dir).retrain(data="train")
    assert refused.value.path == "trainable"
