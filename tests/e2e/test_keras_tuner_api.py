"""KerasTuner scripts run on tunekit with one changed line: ``from tunekit import keras_tuner``.

Each script below is written in KerasTuner's style and takes the ``keras_tuner`` module as its
one argument, so the same code runs with ``tunekit.keras_tuner`` (a tunekit experiment on a
real Ray, checked by the suite's ``tunekit check``) and, where the results must agree in
shape, with keras-tuner itself. Tiny models on scikit-learn's digits, 1-2 epochs, 2-3 trials,
one Ray session for the module.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import keras
import keras_tuner as real_keras_tuner
import numpy as np
import pytest
import ray
import tensorflow as tf
from sklearn.datasets import load_digits

import tunekit
from tunekit import keras_tuner as tunekit_keras_tuner
from tunekit.keras_tuner.declare import declare_branches
from tunekit.keras_tuner.settings import spec_for
from tunekit.results.check import check_experiment

pytestmark = pytest.mark.slow

NOT_TRACKED: dict[str, Any] = {"tracking": {"enabled": False}}


@pytest.fixture(scope="module", autouse=True)
def by_value(shared_ray: None) -> Iterator[None]:
    # A script's classes live in __main__ and travel by value; this module's would travel by name.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def digits() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """float64 inputs and labels, as NumPy gives them: model.fit casts them, so must a trial."""
    x, y = load_digits(return_X_y=True)
    x, y = x / 16.0, y.astype("float64")
    return x[:1400], y[:1400], x[1400:], y[1400:]


def timed(what: str, began: float) -> None:
    print(f"{what}: {time.monotonic() - began:.1f} s")


# --------------------------------------------------------------------------- a HyperModel with its own fit
def hypermodel_with_fit(kt: ModuleType) -> Any:
    class Classifier(kt.HyperModel):  # type: ignore[name-defined]
        def build(self, hp: Any) -> keras.Model:
            model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(hp.Choice("units", [16]))])
            model.add(keras.layers.Activation("relu"))
            model.add(keras.layers.Dense(10, activation="softmax"))
            # No metrics here: the tuner's metrics= override adds them.
            model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
            return model

        def fit(self, hp: Any, model: Any, x: Any, y: Any, validation_data: Any = None, **kwargs: Any) -> Any:
            assert isinstance(x, np.ndarray) and isinstance(y, np.ndarray), (type(x), type(y))
            assert kwargs["batch_size"] == 64 and kwargs["epochs"] == 1, kwargs
            history = model.fit(x, y, validation_data=validation_data, shuffle=hp.Boolean("shuffle"), **kwargs)
            return {"val_score": history.history["val_accuracy"][-1] * 100, "val_loss": history.history["val_loss"][-1]}

    return Classifier()


def search_with_fit(kt: ModuleType, root: Path, **extra: Any) -> Any:
    x_train, y_train, x_val, y_val = digits()
    tuner = kt.GridSearch(
        hypermodel_with_fit(kt),
        objective=kt.Objective("val_score", direction="max"),
        metrics=["accuracy"],
        directory=str(root / "fit"),
        project_name="fit_override",
        overwrite=True,
        **extra,
    )
    board = keras.callbacks.TensorBoard(str(root / "logs"))
    tuner.search(x_train, y_train, validation_data=(x_val, y_val), batch_size=64, epochs=1, callbacks=[board])
    return tuner


@pytest.fixture(scope="module")
def fit_override(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    """The HyperModel script on tunekit, tracked in MLflow as a tunekit search is by default."""
    root = tmp_path_factory.mktemp("fit_override")
    began = time.monotonic()
    tracking = {"tracking": {"uri": f"sqlite:///{root / 'mlflow.db'}"}}
    tuner = search_with_fit(tunekit_keras_tuner, root, progress=False, **tracking)
    timed("fit override on tunekit", began)
    # Made in a module fixture, before the suite's own check starts watching: checked here.
    report = check_experiment(tuner.results.experiment_dir)
    assert report.ok, report.describe()
    return tuner, root


def test_a_hypermodel_fit_gets_search_arguments_and_returns_the_objective(
    fit_override: tuple[Any, Path], capsys: Any
) -> None:
    tuner, root = fit_override
    trials = tuner.results.trials
    assert len(trials) == 2 and set(trials["status"]) == {"completed"}, trials[["status", "reason"]]
    # shuffle, declared in fit, is searched: the grid is units x shuffle.
    assert sorted(trials["params.shuffle"]) == [False, True]
    epochs = tuner.results.epochs
    for row in trials.to_dict("records"):  # the figure is what fit returned, not a Keras log
        last = epochs[(epochs["trial_id"] == row["trial_id"]) & (epochs["epoch"] == 1)].iloc[0]
        assert row["final_metric"] == pytest.approx(last["val_accuracy"] * 100)
    assert "accuracy" in epochs.columns  # the tuner's metrics= recompiled the model
    # The user's TensorBoard: one folder per trial, named as KerasTuner names trials, with HParams.
    logs = root / "logs"
    # A grid's max_trials is None: KerasTuner pads its trial ids to len("None") digits.
    assert sorted(p.name for p in logs.iterdir()) == sorted(f"{n:04d}" for n in trials["number"]), list(logs.iterdir())
    for folder in logs.iterdir():
        assert (folder / "execution0" / "validation").is_dir()
        summaries = b"".join(p.read_bytes() for p in (folder / "execution0").glob("events.out.tfevents.*"))
        assert b"hparams" in summaries and b"shuffle" in summaries, folder
    # KerasTuner's summaries, best first, with the score fit returned.
    tuner.results_summary(1)
    out = capsys.readouterr().out
    assert 'Objective(name="val_score", direction="max")' in out and out.count("Score: ") == 1
    best = tuner.get_best_hyperparameters(1)[0]
    assert set(best.values) == {"units", "shuffle"}
    model = tuner.get_best_models(1)[0]
    assert model.layers[0].units == best.values["units"]


def test_the_same_fit_override_runs_as_with_keras_tuner(
    fit_override: tuple[Any, Path], tmp_path: Path, capsys: Any
) -> None:
    ours, root = fit_override
    began = time.monotonic()
    theirs = search_with_fit(real_keras_tuner, tmp_path)
    timed("fit override on keras_tuner", began)
    assert len(theirs.oracle.trials) == len(ours.results.trials) == len(ours.oracle.trials) == 2
    assert sorted(theirs.oracle.trials) == sorted(ours.oracle.trials) == ["0000", "0001"]
    theirs_logs = sorted(p.name for p in (tmp_path / "logs").iterdir())
    assert theirs_logs == sorted(p.name for p in (root / "logs").iterdir())
    best = ours.oracle.get_best_trials(1)[0]  # KerasTuner's own ranking of the trials tunekit ran
    assert best.score == ours.results.trials["final_metric"].max() and best.status == "COMPLETED"
    assert {t.hyperparameters.values["shuffle"] for t in theirs.oracle.trials.values()} == {False, True}
    capsys.readouterr()
    theirs.search_space_summary()
    ours.search_space_summary()
    theirs_summary, ours_summary = capsys.readouterr().out.split("Search space summary")[1:]
    assert theirs_summary == ours_summary  # the same constructor and fit found the same space
    theirs.results_summary(2)
    ours.results_summary(2)
    theirs_results, ours_results = capsys.readouterr().out.split("Results summary")[1:]

    def shape(text: str) -> list[str]:  # the lines, their numbers and truth values masked
        lines = [line for line in text.splitlines() if not line.startswith("Results in")]
        return [re.sub(r"\b(\d[\d.e+-]*|True|False)\b", "#", line) for line in lines]

    assert shape(theirs_results) == shape(ours_results), ours_results  # trials by id (0000, 0001), best first


# --------------------------------------------------------------------------- a run_trial override
def custom_loop(kt: ModuleType, root: Path, **extra: Any) -> Any:
    x_train, y_train, x_val, y_val = digits()

    def build_model(hp: Any) -> keras.Model:
        units = hp.Int("units", 8, 16, step=8)
        return keras.Sequential(
            [keras.Input((64,)), keras.layers.Dense(units, activation="relu"), keras.layers.Dense(10)]
        )

    class LoopTuner(kt.Tuner):  # type: ignore[name-defined]
        """A training loop of its own: no compile, no fit, each epoch told to the tuner."""

        def run_trial(self, trial: Any, x: Any, y: Any, validation_data: Any, epochs: int) -> float:
            # Declared here only, not in build_model: KerasTuner's oracle searches it from the first trial on.
            batch = trial.hyperparameters.Choice("batch", [100, 200])
            model = self.hypermodel.build(trial.hyperparameters)
            optimizer = keras.optimizers.SGD(0.1)
            loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
            losses = []
            for epoch in range(epochs):
                for start in range(0, len(x), batch):
                    with tf.GradientTape() as tape:
                        loss = loss_fn(y[start : start + batch], model(x[start : start + batch], training=True))
                    gradients = tape.gradient(loss, model.trainable_variables)
                    optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
                losses.append(float(loss_fn(validation_data[1], model(validation_data[0]))))
                self.on_epoch_end(trial, model, epoch, logs={"val_loss": losses[-1]})
            return min(losses)

    # Four configurations, three trials: TPE proposes a repeat, which takes no trial number.
    oracle = kt.oracles.BayesianOptimizationOracle(objective=kt.Objective("val_loss", "min"), max_trials=3, seed=2)
    tuner = LoopTuner(
        oracle=oracle, hypermodel=build_model, directory=str(root), project_name="loop", overwrite=True, **extra
    )
    tuner.search(x_train, y_train, validation_data=(x_val, y_val), epochs=2)
    return tuner


def test_a_run_trial_override_runs_in_the_worker_and_returns_the_objective(tmp_path: Path, capsys: Any) -> None:
    began = time.monotonic()
    tuner = custom_loop(tunekit_keras_tuner, tmp_path, progress=False, **NOT_TRACKED)
    timed("run_trial override on tunekit", began)
    trials, epochs = tuner.results.trials, tuner.results.epochs
    assert len(trials) == 3 and set(trials["status"]) == {"completed"}, trials[["status", "reason"]]
    for row in trials.to_dict("records"):  # each epoch reported once; the figure is what run_trial returned
        own = epochs[epochs["trial_id"] == row["trial_id"]]
        assert list(own["epoch"]) == [1, 2]
        assert row["final_metric"] == pytest.approx(own["val_loss"].min())
    assert set(trials["params.batch"]) <= {100, 200}  # run_trial's own parameter is searched and recorded
    best = tuner.get_best_models(1)[0]
    assert best.layers[0].units == tuner.get_best_hyperparameters(1)[0].values["units"]
    # TPE proposed a repeat (the searcher's state Ray saved lists it), which took no number: the
    # records number the trials 0, 1, 2, as KerasTuner's.
    saved = max(tuner.results.experiment_dir.glob("searcher-state-*.pkl"))
    assert json.loads(saved.read_text())["repeated"], "no repeat was proposed: the numbering is not tested"
    assert sorted(trials["number"]) == [0, 1, 2]
    assert sorted(tuner.oracle.trials) == ["0", "1", "2"]
    capsys.readouterr()
    tuner.results_summary(3)
    ours_results = capsys.readouterr().out
    assert sorted(re.findall(r"Trial (\d+) summary", ours_results)) == ["0", "1", "2"], ours_results
    assert ours_results.count("batch: ") == 3
    theirs = custom_loop(real_keras_tuner, tmp_path / "theirs")
    assert len(theirs.oracle.trials) == 3
    theirs.search_space_summary()
    tuner.search_space_summary()
    theirs_space, ours_space = capsys.readouterr().out.split("Search space summary")[1:]
    assert "batch (Choice)" in ours_space and theirs_space == ours_space


# --------------------------------------------------------------------------- failed and fatal trials
def fragile_search(kt: ModuleType, root: Path, **extra: Any) -> Any:
    x_train, y_train, x_val, y_val = digits()

    def build_model(hp: Any) -> keras.Model:
        units = hp.Choice("units", [16, 4, 8])  # KerasTuner's constructor builds the default, 16
        if units == 4:
            raise kt.errors.FailedTrialError(f"{units} units are too few")
        model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(units, activation="relu")])
        model.add(keras.layers.Dense(10, activation="softmax"))
        model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
        return model

    # Seed 7 orders tunekit's grid 8, 16, 4: the limit of one failure in a row ends the search at its last trial.
    tuner = kt.GridSearch(
        build_model, objective="val_accuracy", max_retries_per_trial=1, max_consecutive_failed_trials=1, seed=7,
        directory=str(root), project_name="fragile", overwrite=True, **extra,
    )  # fmt: skip
    # tf.data datasets reach the trials as datasets (saved once beside the experiment).
    train = tf.data.Dataset.from_tensor_slices((x_train, y_train)).batch(64)
    with pytest.raises(RuntimeError, match=r"Number of consecutive failures exceeded the limit of 1\.") as raised:
        tuner.search(train, validation_data=tf.data.Dataset.from_tensor_slices((x_val, y_val)).batch(64), epochs=1)
    assert "4 units are too few" in str(raised.value)  # as KerasTuner's message ends with the trial's
    return tuner


def test_a_failing_build_fails_its_trial_after_its_retries_and_the_grid_search_goes_on(tmp_path: Path) -> None:
    """max_retries_per_trial retries a trial; the grid goes on after a failure;
    max_consecutive_failed_trials ends the search with KerasTuner's RuntimeError."""
    began = time.monotonic()
    tuner = fragile_search(tunekit_keras_tuner, tmp_path, progress=False, **NOT_TRACKED)
    timed("failed trials in a grid on tunekit", began)
    trials = tuner.results.trials.set_index("params.units")
    assert sorted(trials.index) == [4, 8, 16]  # the whole grid, no max_trials
    assert trials.loc[16, "status"] == trials.loc[8, "status"] == "completed"  # the search went on
    assert trials.loc[4, "status"] == "failed" and "4 units are too few" in trials.loc[4, "reason"]
    log = (tuner.results.experiment_dir / trials.loc[4, "trial_id"] / "output.log").read_text()
    assert "attempt 1 of 2 failed (FailedTrialError: 4 units are too few); retrying" in log


def fatal_search(kt: ModuleType, root: Path, **extra: Any) -> None:
    class Refusing(kt.Tuner):  # type: ignore[name-defined]
        def run_trial(self, trial: Any, *args: Any, **kwargs: Any) -> float:
            raise kt.errors.FatalError("the data are not there")

    oracle = kt.oracles.RandomSearchOracle(objective=kt.Objective("score", "min"), max_trials=2)
    hp = kt.HyperParameters()
    hp.Int("n", 1, 3)
    oracle.hyperparameters = hp
    Refusing(oracle=oracle, directory=str(root), project_name="fatal", overwrite=True, **extra).search()


@pytest.mark.parametrize("kt", [tunekit_keras_tuner, real_keras_tuner], ids=["tunekit", "keras_tuner"])
def test_a_fatal_error_ends_the_search_and_is_raised_from_search(kt: ModuleType, tmp_path: Path) -> None:
    extra = {"progress": False, **NOT_TRACKED} if kt is tunekit_keras_tuner else {}
    with pytest.raises(real_keras_tuner.errors.FatalError) as raised:
        fatal_search(kt, tmp_path, **extra)
    assert str(raised.value) == "the data are not there"  # the script's own message, as KerasTuner raises it


# --------------------------------------------------------------------------- grid, resume, constructor
def test_a_larger_max_trials_without_overwrite_continues_the_search(tmp_path: Path, capsys: Any) -> None:
    """Also: with tune_new_entries=False a parameter hyperparameters= lacks keeps its default, and
    every trial lists it, as KerasTuner's trials do."""
    x_train, y_train, x_val, y_val = digits()

    def build_model(hp: Any) -> keras.Model:
        units, rate = hp.Choice("units", [4, 8, 12]), hp.Choice("dropout", [0.0, 0.5])
        activation = hp.Choice("activation", ["tanh", "relu"])
        model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(units, activation=activation)])
        model.add(keras.layers.Dropout(rate))
        model.add(keras.layers.Dense(10, activation="softmax"))
        model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
        return model

    given = tunekit_keras_tuner.HyperParameters()
    given.Choice("units", [4, 8, 12])

    def random(max_trials: int) -> Any:
        tuner = tunekit_keras_tuner.RandomSearch(
            build_model, objective="val_accuracy", max_trials=max_trials, directory=str(tmp_path),
            project_name="grown", hyperparameters=given, tune_new_entries=False, progress=False, **NOT_TRACKED,
        )  # fmt: skip
        tuner.search(x_train, y_train, validation_data=(x_val, y_val), epochs=1)
        return tuner

    began = time.monotonic()
    first = random(1).results
    tuner = random(2)
    again = tuner.results
    assert len(again.trials) == 2 and set(first.trials["trial_id"]) < set(again.trials["trial_id"])
    timed("a search, then continued, on tunekit", began)
    assert list(again.trials["params.activation"]) == ["tanh", "tanh"]
    tuner.results_summary(2)
    assert capsys.readouterr().out.count("activation: tanh") == 2
    # Listed as KerasTuner lists a trial's values: the searched ones, then the others as the build declared them.
    assert list(tuner.get_best_hyperparameters(1)[0].values) == ["units", "dropout", "activation"]


def test_a_tuner_is_built_as_kerastuners_and_import_tunekit_stays_light(tmp_path: Path) -> None:
    import subprocess

    def build_model(hp: Any) -> keras.Model:
        if hp.Boolean("deep"):
            with hp.conditional_scope("deep", [True]):
                hp.Int("extra", 1, 3)
            raise ValueError("deep models are not supported")  # KerasTuner's constructor builds the default only
        model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10, activation="softmax")])
        model.compile("adam", "sparse_categorical_crossentropy")
        return model

    tuner = tunekit_keras_tuner.RandomSearch(build_model, objective="val_loss", max_trials=2, directory=str(tmp_path))
    assert isinstance(tuner, real_keras_tuner.RandomSearch)
    assert [p.name for p in tuner.oracle.hyperparameters.space] == ["deep"]
    # search() builds each other value of a discrete parameter once: what a branch declares is searched.
    declare_branches(tuner)
    assert [p.name for p in tuner.oracle.hyperparameters.space] == ["deep", "extra"]
    code = "import sys, tunekit; print('keras_tuner' in sys.modules, 'tensorflow' in sys.modules)"
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert shown.stdout.split() == ["False", "False"]
    assert tunekit_keras_tuner.HyperParameters is real_keras_tuner.HyperParameters
    assert tunekit_keras_tuner.errors is real_keras_tuner.errors
    assert tunekit.keras_tuner is tunekit_keras_tuner


def test_each_tuner_keeps_its_algorithm_in_the_spec_it_runs(tmp_path: Path) -> None:
    def build_model(hp: Any) -> keras.Model:
        model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(hp.Int("units", 8, 64, step=8))])
        model.compile("adam", "mse")
        return model

    def spec(tuner: Any, **sections: Any) -> dict[str, Any]:
        return spec_for(tuner.oracle, {}, "p", 3, sections, None)

    kt, made = tunekit_keras_tuner, dict[str, Any](directory=str(tmp_path), objective="val_loss")
    band = spec(kt.Hyperband(build_model, max_epochs=9, factor=3, hyperband_iterations=2, **made))
    theirs = real_keras_tuner.oracles.HyperbandOracle(objective="val_loss", max_epochs=9, factor=3)
    per_iteration = sum(theirs._get_size(b, 0) for b in range(theirs._get_num_brackets()))
    assert band["budget"] == {"max_epochs": 9, "num_samples": 2 * per_iteration}
    assert band["scheduler"] == {"type": "hyperband", "grace_period": 1, "reduction_factor": 3}
    bayes = spec(kt.BayesianOptimization(build_model, max_trials=5, num_initial_points=2, seed=7, **made))
    assert bayes["search"] == {"algorithm": "tpe", "seed": 7, "n_startup_trials": 2}
    assert bayes["scheduler"] == {"type": "fifo"} and bayes["budget"] == {"max_epochs": 3, "num_samples": 5}
    grid = spec(kt.GridSearch(build_model, **made), scheduler={"type": "asha"})
    assert grid["search"]["algorithm"] == "grid" and "num_samples" not in grid["budget"]
    assert grid["scheduler"] == {"type": "asha"}  # tunekit's early stopping: one argument away
    assert grid["space"] == {"units": {"type": "int", "low": 8, "high": 64, "step": 8}}


def test_kerastuners_own_run_trial_result_keeps_the_last_epochs_row_and_names_the_best(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """KerasTuner's run_trial returns [History] (one per execution): the trial's figure is its best
    epoch's, and the last epoch's row keeps that epoch's own values (not the best epoch's)."""
    from tunekit.keras_tuner import trial as trial_module

    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(trial_module, "_report", lambda result, checkpoint: sent.append(result))
    tuner = tunekit_keras_tuner.RandomSearch(
        lambda hp: keras.Sequential([keras.Input((4,)), keras.layers.Dense(hp.Int("u", 1, 3))]),
        objective="val_accuracy", max_trials=1, directory=str(tmp_path),
    )  # fmt: skip
    run = trial_module.TrialRun(str(tmp_path), {"u": 1}, max_epochs=3)
    for epoch, value in enumerate([0.5, 0.8, 0.7]):
        run.epoch_begins(epoch)
        run.epoch_ended(None, epoch, {"val_accuracy": value})
    history = keras.callbacks.History()
    history.history = {"val_accuracy": [0.5, 0.8, 0.7]}
    run.finish([history], tuner)
    assert [(r["epoch"], r["val_accuracy"]) for r in sent] == [(1, 0.5), (2, 0.8), (3, 0.7)]
    assert sent[-1]["tunekit"]["kept_epoch"] == 2 and sent[-1]["tunekit"]["kept_value"] == 0.8
