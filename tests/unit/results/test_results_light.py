"""Loading an experiment directory: the recorded spec, old directories, the start time, no heavy imports.

pandas is what the tables are; these tests need it but no Ray, TensorFlow or MLflow.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tunekit.contract import RecordedTrainable
from tunekit.errors import NotAnExperimentError, StorageError, TunekitError
from tunekit.layout import EPOCHS_FILE, SPEC_FILE, STARTED_FILE, STARTED_KEY, TRIALS_FILE

SPEC = """\
name: digits
trainable: {trainable}
metric: {{name: val_accuracy, mode: max}}
budget: {{num_samples: 2, max_epochs: 3, max_concurrent: 1, time_budget_s: null}}
search: {{algorithm: tpe, seed: 0, n_startup_trials: 10, warm_start: []}}
scheduler: {{type: asha, grace_period: 1, reduction_factor: 3}}
resources: {{cpu: 1, gpu: 0, gpu_memory: growth}}
training: {{batch_size: 32, precision: auto, jit_compile: false, scale_lr: false, seed: 0, max_failures: 2}}
space:
  lr: {{type: loguniform, low: 0.0001, high: 0.1}}
  units: {{type: choice, values: [32, 64]}}
data: {{}}
storage: {{path: tunekit_results}}
tracking: {{enabled: false, uri: null, experiment: null, registered_model: null}}
"""
TRIALS = (
    "trial_id,number,status,reason,epochs,final_metric,best_metric,params.lr,params.units\n"
    "a,0,completed,trained all 3 epochs,3,0.9,0.9,0.01,32\n"
    "b,1,pruned,pruned by ASHA at rung 0 (epoch 1),1,0.95,0.95,0.001,64\n"
)
EPOCHS = "trial_id,epoch,val_accuracy\n" + "".join(f"a,{e},0.9\n" for e in (1, 2, 3)) + "b,1,0.95\n"


def experiment(root: Path, trainable: str) -> Path:
    """A directory as tunekit wrote it before started.json existed."""
    root.mkdir(parents=True, exist_ok=True)
    (root / SPEC_FILE).write_text(SPEC.format(trainable=trainable))
    (root / TRIALS_FILE).write_text(TRIALS)
    (root / EPOCHS_FILE).write_text(EPOCHS)  # written with trials.csv: one without the other is damage
    return root


@pytest.mark.parametrize(
    "trainable",
    [
        '"python: __main__.build_data, __main__.build_model"',  # builders passed from a notebook
        "trainables.moved_away",  # a module that is no longer anywhere
        "/nowhere/train.py",  # a file that was deleted
        "{module: gone.mod, path: /nowhere}",  # a module in a folder that moved
    ],
)
def test_an_old_experiment_loads_whatever_became_of_its_trainable(tmp_path: Path, trainable: str) -> None:
    import tunekit

    results = tunekit.load(experiment(tmp_path / "exp", trainable))
    assert isinstance(results.spec.trainable, RecordedTrainable)
    assert (results.metric, results.mode) == ("val_accuracy", "max")
    assert results.spec.scheduler.type == "asha" and results.spec.space.names == ("lr", "units")
    assert results.best is not None and results.best.trial_id == "a"  # completed beats pruned
    assert results.started_at is None  # written before tunekit recorded it


def test_the_recorded_trainable_is_written_back_as_it_was(tmp_path: Path) -> None:
    import tunekit

    results = tunekit.load(experiment(tmp_path / "exp", "{module: gone.mod, path: /nowhere}"))
    assert results.spec["trainable"] == {"module": "gone.mod", "path": "/nowhere"}
    assert "module: gone.mod" in results.spec.to_yaml()


def test_a_spec_without_a_budget_takes_it_from_the_trials(tmp_path: Path) -> None:
    import tunekit

    (tmp_path / SPEC_FILE).write_text("name: x\nmetric: {name: score, mode: min}\n")
    (tmp_path / TRIALS_FILE).write_text("trial_id,number,status,final_metric,epochs\nt1,0,completed,0.5,2\n")
    (tmp_path / EPOCHS_FILE).write_text("trial_id,epoch,score\nt1,1,0.6\nt1,2,0.5\n")
    results = tunekit.load(tmp_path)
    assert (results.spec.budget.num_samples, results.spec.budget.max_epochs) == (1, 2)
    assert results.mode == "min"


def test_the_search_start_is_read_back(tmp_path: Path) -> None:
    import tunekit

    directory = experiment(tmp_path / "exp", "trainables.moved_away")
    (directory / STARTED_FILE).write_text(json.dumps({STARTED_KEY: 1700000000.5}))
    assert tunekit.load(directory).started_at == 1700000000.5


def test_a_directory_without_a_spec_is_not_an_experiment(tmp_path: Path) -> None:
    import tunekit

    with pytest.raises(NotAnExperimentError) as caught:
        tunekit.load(tmp_path)
    assert str(caught.value) == f"{tmp_path.resolve()}: not a tunekit experiment (no spec.yaml)"
    assert isinstance(caught.value, StorageError) and isinstance(caught.value, TunekitError)


def test_loading_imports_no_ray_tensorflow_or_mlflow(
    tmp_path: Path, imported_after: Callable[[str], list[str]]
) -> None:
    directory = experiment(tmp_path / "exp", "trainables.moved_away")
    heavy = imported_after(f"import tunekit; r = tunekit.load({str(directory)!r}); r.ranked(); r.best")
    assert heavy == ["pandas"]


def test_a_best_config_keeps_integer_values_whole_where_a_column_has_gaps() -> None:
    # A grid grown to a second pass: the first pass's trials have no seed, so pandas reads the
    # column as floats, and the best config said seed=1.0 (units too, had it a gap).
    import pandas as pd

    from tunekit.config.spec import load_spec
    from tunekit.results.best import best_trial, config_text

    spec = load_spec(Path(__file__).resolve().parents[3] / "search_spaces" / "digits_mlp.yaml")
    trials = pd.DataFrame(
        {
            "trial_id": ["a", "b"],
            "number": [0, 1],
            "status": ["completed", "completed"],
            "final_metric": [0.9, 0.95],
            "epochs": [3, 3],
            "params.units": [64.0, 128.0],
            "params.learning_rate": [0.001, 0.002],
            "params.seed": [float("nan"), 1.0],
        }
    )
    best = best_trial(trials, pd.DataFrame(), "max", spec)
    assert best is not None and best.config == {"units": 128, "learning_rate": 0.002, "seed": 1}
    assert config_text(best.config) == "learning_rate=0.002, seed=1, units=128"


def test_what_the_best_ran_on_reads_the_trial_s_info_columns() -> None:
    import pandas as pd

    from tunekit.results.best import ran_on

    row = pd.Series(
        {
            "info.precision": "mixed_float16",
            "info.replicas": 2.0,
            "info.device_names": "/device:GPU:0;/device:GPU:1",
            "info.batch_size": 256.0,
            "info.scaled_learning_rate": 0.002,
        }
    )
    assert ran_on(row) == (
        "mixed_float16, 2 replicas on /device:GPU:0, /device:GPU:1, global batch 256, "
        "learning rate 0.002 (scaled by training.scale_lr)"
    )
    one_cpu = {"info.precision": "float32", "info.replicas": 1, "info.device_names": "/device:CPU:0"}
    assert ran_on(pd.Series({**one_cpu, "info.scaled_learning_rate": float("nan")})) == ""  # the default's: nothing
    assert ran_on(pd.Series({**one_cpu, "info.device_names": "/device:GPU:0"})) == "float32, 1 replica on /device:GPU:0"
    assert ran_on(pd.Series({"final_metric": 0.9})) == ""  # an experiment without info columns
