"""tunekit.Tuner's pieces that need neither Ray nor TensorFlow: objectives, the spec it runs,
the data split, what travels to the trials, and the refusals."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tunekit.config.spec import load_spec
from tunekit.errors import FatalTrialError, SpecError, TunekitError
from tunekit.tuner.data import ArrayData, data_builder
from tunekit.tuner.hp import HyperParameters
from tunekit.tuner.tuner import FitOptions, Hyperband, HyperModelBuilder, Tuner, _placeholder, objectives


def build_model(hp: HyperParameters) -> dict[str, Any]:
    layers = [hp.Int(f"units_{i}", 8, 64, step=8) for i in range(hp.Int("num_layers", 1, 2))]
    return {"layers": layers, "lr": hp.Float("lr", 1e-4, 1e-2, sampling="log")}


class Objective:  # keras_tuner.Objective's shape
    def __init__(self, name: str, direction: str) -> None:
        self.name, self.direction = name, direction


def test_objectives_take_kerastuners_forms() -> None:
    assert objectives("val_accuracy") == [("val_accuracy", "max")]
    assert objectives("val_loss") == [("val_loss", "min")]
    assert objectives("val_mean_absolute_error") == [("val_mean_absolute_error", "min")]
    assert objectives(("val_f", "max")) == [("val_f", "max")]
    assert objectives(Objective("val_auc", "max")) == [("val_auc", "max")]
    assert objectives(["val_accuracy", ("model_params", "min")]) == [("val_accuracy", "max"), ("model_params", "min")]


def test_an_objective_whose_direction_cannot_be_inferred_says_how_to_write_it() -> None:
    with pytest.raises(SpecError) as caught:
        objectives("val_custom")
    assert str(caught.value) == (
        "objective: cannot infer whether to minimise or maximise it; write ('val_custom', 'max') or "
        "('val_custom', 'min'), got 'val_custom'"
    )


def test_the_tuner_runs_a_valid_spec_with_the_space_found_and_sections_over_it(tmp_path: Path) -> None:
    tuner = Tuner(
        build_model,
        objective="val_accuracy",
        max_trials=7,
        seed=3,
        directory=tmp_path,
        project_name="p1",
        budget={"max_concurrent": 2},
        scheduler={"type": "fifo"},
    )
    spec = load_spec(tuner._spec({"epochs": 4, "batch_size": 64}), trainable=_placeholder())
    assert (spec.name, spec.budget.num_samples, spec.budget.max_epochs, spec.budget.max_concurrent) == ("p1", 7, 4, 2)
    assert (spec.search.seed, spec.training.seed, spec.training.batch_size, spec.scheduler.type) == (3, 3, 64, "fifo")
    assert spec.space.names == ("num_layers", "units_0", "lr", "units_1")
    assert spec.space.params[-1].when == {"num_layers": (2,)}
    assert tuner.project_dir == tmp_path.resolve() / "p1"


def test_a_section_the_spec_lacks_is_a_spec_error() -> None:
    tuner = Tuner(build_model, objective="val_accuracy", budgett={"num_samples": 2})
    with pytest.raises(SpecError, match="budgett"):
        load_spec(tuner._spec({}), trainable=_placeholder())


def test_executions_per_trial_become_training_executions_but_not_with_a_hypermodels_own_fit() -> None:
    tuner = Tuner(build_model, objective="val_accuracy", executions_per_trial=3)
    assert load_spec(tuner._spec({}), trainable=_placeholder()).training.executions == 3
    with pytest.raises(TunekitError, match=r"^executions_per_trial=2: a HyperModel with its own fit trains one model"):
        Tuner(BatchSizeInFit(), executions_per_trial=2)


class HyperModel:  # keras_tuner.HyperModel's shape: its fit only calls model.fit
    def build(self, hp: HyperParameters) -> Any:
        return FakeModel(hp.Int("units", 1, 4))

    def fit(self, hp: HyperParameters, model: Any, *args: Any, **kwargs: Any) -> Any:
        return model.fit(*args, **kwargs)


class BatchSizeInFit(HyperModel):
    """KerasTuner's "tune model training" example: fit searches the batch size."""

    def fit(self, hp: HyperParameters, model: Any, *args: Any, **kwargs: Any) -> Any:
        return model.fit(*args, batch_size=hp.Choice("batch_size", [16, 32]), shuffle=hp.Boolean("shuffle"), **kwargs)


class OwnLoop(HyperModel):
    def fit(self, hp: HyperParameters, model: Any, *args: Any, **kwargs: Any) -> Any:
        return 0.5  # trains in a loop of its own and returns a score


class FakeModel:
    def __init__(self, units: int) -> None:
        self.units = units
        self.fitted: list[Any] = []

    def fit(self, x: Any = None, epochs: int = 1, shuffle: bool = True, callbacks: Any = None) -> str:
        self.fitted.append((x, epochs, shuffle, callbacks))
        return "history"


def test_a_hypermodels_build_is_used_and_its_fit_only_when_it_has_its_own() -> None:
    plain = Tuner(HyperModel(), objective="val_accuracy")
    assert plain.discovery.names == ("units",) and plain._fit is None
    tuner = Tuner(BatchSizeInFit(), objective="val_accuracy")
    # fit's hp calls are found too, with a model that does not train
    assert tuner.discovery.names == ("units", "batch_size", "shuffle")


def test_the_trials_model_fit_goes_through_the_hypermodels_fit_with_the_trials_hp() -> None:
    tuner = Tuner(BatchSizeInFit(), objective="val_accuracy")
    builder = HyperModelBuilder(tuner._build, {n: n for n in tuner.discovery.names}, tuner._fit)
    model = builder({"units": 3, "batch_size": 32, "shuffle": True}, None)
    assert model.fit("data", epochs=2, callbacks=["reporter"]) == "history"
    assert model.fitted == [("data", 2, True, ["reporter"])]  # batch_size rebatches datasets (none here)
    assert model.fit("again", epochs=1, callbacks=[]) == "history"  # routed again on the next call
    assert len(model.fitted) == 2


def test_a_hypermodel_fit_that_never_calls_model_fit_is_fatal_saying_why() -> None:
    tuner = Tuner(OwnLoop(), objective="val_accuracy")
    model = HyperModelBuilder(tuner._build, {"units": "units"}, tuner._fit)({"units": 2}, None)
    with pytest.raises(FatalTrialError, match=r"^OwnLoop\.fit returned without calling model\.fit: tunekit reports"):
        model.fit("data")


def test_validation_split_takes_the_last_share_as_keras_does() -> None:
    x, y = np.arange(10.0).reshape(10, 1), np.arange(10)
    data = data_builder({"x": x, "y": y, "validation_split": 0.2}, Path("unused"))
    assert isinstance(data, ArrayData)
    (_, train_y), (val_x, val_y) = data.arrays()
    assert train_y.tolist() == list(range(8)) and val_y.tolist() == [8, 9] and val_x.shape == (2, 1)


def test_search_without_validation_data_says_what_to_pass() -> None:
    with pytest.raises(TunekitError) as caught:
        data_builder({"x": np.zeros((4, 1)), "y": np.zeros(4)}, Path("unused"))
    assert str(caught.value) == (
        "search: tunekit scores every trial on validation data: pass validation_data=(x_val, y_val) "
        "or validation_split=0.2"
    )


def test_search_refuses_a_fit_argument_it_does_not_know(tmp_path: Path) -> None:
    tuner = Tuner(build_model, objective="val_accuracy", directory=tmp_path)
    with pytest.raises(TunekitError, match=r"^search: workerz is not supported; it takes x, y, validation_data"):
        tuner.search(np.zeros((4, 1)), np.zeros(4), validation_split=0.5, workerz=3)
    assert not (tmp_path / "untitled_project").exists()


def test_arrays_travel_by_value_without_ray() -> None:
    data = ArrayData((np.ones((3, 2)), np.zeros(3)), (np.ones((1, 2)), np.zeros(1)))
    copy = pickle.loads(pickle.dumps(data))
    assert copy.arrays()[0][0].tolist() == [[1.0, 1.0]] * 3
    assert repr(data) == "ArrayData(3 training, 1 validation examples)"


def test_each_trial_builds_with_its_values_and_a_missed_name_gets_its_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    builder = HyperModelBuilder(build_model, {"num_layers": "num_layers", "units_0": "units_0", "lr": "lr"})
    built = builder({"num_layers": 2, "units_0": 16, "lr": 0.001}, None)
    assert built == {"layers": [16, 8], "lr": 0.001}
    assert "build_model declares units_1, which the space found before the search lacks" in capsys.readouterr().out
    assert repr(builder) == f"HyperModelBuilder({__name__}.build_model)"


def test_fit_options_hand_each_trial_its_own_callbacks() -> None:
    callback = {"patience": 1}
    options = FitOptions({"callbacks": [callback], "class_weight": {0: 1.0}})
    first, second = options({}, None), options({}, None)
    assert first == {"callbacks": [callback], "class_weight": {0: 1.0}}
    assert first["callbacks"][0] is not second["callbacks"][0] is not callback


@pytest.mark.parametrize(
    ("fit", "message"),
    [
        ({"x": np.zeros((4, 1))}, "search: y is required when x is arrays"),
        (
            {"x": np.zeros((4, 1)), "y": np.zeros(4), "validation_data": object()},
            "search: with x as arrays, validation_data must be (x_val, y_val) or (x_val, y_val, sample_weight); "
            "got object",
        ),
        ({"y": np.zeros(4)}, "search: x (the training data) is required"),
    ],
)
def test_search_data_that_cannot_be_trained_on_is_refused_saying_why(fit: dict[str, Any], message: str) -> None:
    with pytest.raises(TunekitError) as caught:
        data_builder(dict(fit), Path("unused"))
    assert str(caught.value).startswith(message)


def test_several_objectives_make_a_valid_multi_objective_spec() -> None:
    tuner = Tuner(build_model, objective=["val_accuracy", ("model_params", "min")])
    spec = load_spec(tuner._spec({"epochs": 2}), trainable=_placeholder())
    assert [(o.name, o.mode) for o in spec.objectives] == [("val_accuracy", "max"), ("model_params", "min")]


def test_a_function_becomes_tuner_hypermodel_whose_build_rebuilds_from_best_hps() -> None:
    tuner = Tuner(build_model, objective="val_accuracy")
    hp = HyperParameters({"num_layers": 2, "units_0": 16, "units_1": 24, "lr": 0.001})
    assert tuner.hypermodel.build(hp) == {"layers": [16, 24], "lr": 0.001}  # TensorFlow's tutorial's way
    assert tuner._fit is None  # its fit only calls model.fit


def test_kerastuners_tuner_arguments_map_onto_the_spec_or_are_taken_without_effect() -> None:
    tuner = Tuner(
        build_model,
        objective="val_accuracy",
        factor=2,  # Hyperband's
        num_initial_points=4,  # BayesianOptimization's
        hyperband_iterations=2,
        max_retries_per_trial=1,
        scheduler={"grace_period": 2},
    )
    spec = load_spec(tuner._spec({"epochs": 6}), trainable=_placeholder())
    assert (spec.scheduler.reduction_factor, spec.scheduler.grace_period, spec.search.n_startup_trials) == (2, 2, 4)


def test_hyperband_takes_kerastuners_arguments_onto_scheduler_type_hyperband() -> None:
    tuner = Hyperband(build_model, objective="val_accuracy", max_epochs=20, factor=3, hyperband_iterations=2)
    spec = load_spec(tuner._spec({}), trainable=_placeholder())
    scheduler = spec.scheduler
    assert (scheduler.type, scheduler.grace_period, scheduler.reduction_factor, scheduler.brackets) == (
        "hyperband",
        1,
        3,
        3,
    )
    # KerasTuner's brackets at 20 epochs and factor 3 start 4 + 6 + 12 trials an iteration.
    assert (spec.budget.num_samples, spec.budget.max_epochs) == (2 * 22, 20)
    given = Hyperband(build_model, objective="val_accuracy", max_epochs=20, max_trials=5, scheduler={"brackets": 4})
    spec = load_spec(given._spec({}), trainable=_placeholder())
    assert (spec.budget.num_samples, spec.scheduler.brackets) == (5, 4)
