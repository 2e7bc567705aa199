"""The top trials' models, loaded for use: ``ExperimentResults.best_models(n)``.

A trial that trained to its end exported its model (``model.keras``, or ``model.weights.h5``
when Keras could not save it whole, loaded into ``build_model``'s model). A trial without an
export (pruned, stopped) is rebuilt from its last checkpoint: ``build_model`` with the trial's
configuration, then the checkpoint's weights; its ``source`` says so. Loading models imports
TensorFlow and, for a rebuild, the experiment's trainable.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from tunekit.errors import SpecError
from tunekit.layout import CHECKPOINT_STATE, CHECKPOINT_WEIGHTS, FINAL_MODEL, SPEC_FILE

if TYPE_CHECKING:
    import pandas as pd

    from tunekit.config.spec import ExperimentSpec
    from tunekit.contract import Trainable


@dataclass(frozen=True)
class TrialModel:
    """One trial's model.

    Attributes:
        trial_id: the Ray trial id.
        number: the Optuna trial number (``trial-<number>`` in TensorBoard and MLflow).
        status: how the trial ended (completed, pruned, ...).
        metric: its final value of the experiment's metric (trials.csv's ``final_metric``).
        model: the Keras model.
        source: where the model came from: the exported ``model.keras``, the exported weights
            in ``build_model``'s model, or, for a trial without an export, "rebuilt from the
            checkpoint of epoch N (no exported model)".
    """

    trial_id: str
    number: int | None
    status: str
    metric: float | None
    model: Any
    source: str


class RankedExperiment(Protocol):
    """What ``best_models`` reads of an ``ExperimentResults`` (named so, this module does not
    import the results loader that imports it)."""

    @property
    def experiment_dir(self) -> Path: ...

    @property
    def builders(self) -> Trainable | None: ...

    def ranked(self) -> pd.DataFrame: ...

    def model_path(self, trial: str | int | None = None) -> Path | None: ...


def best_models(results: RankedExperiment, n: int = 3) -> list[TrialModel]:
    """The models of the ``n`` best trials (``results.ranked()``'s order), best first.

    Trials with neither an exported model nor a checkpoint (failed before their first
    checkpoint) are skipped; fewer than ``n`` come back when fewer have a model.
    """
    if n < 1:
        raise ValueError(f"n: must be at least 1, got {n}")
    found: list[TrialModel] = []
    spec: ExperimentSpec | None = None
    for row in results.ranked().to_dict("records"):
        if len(found) == n:
            break
        trial_id = str(row["trial_id"])
        number = None if row.get("number") is None else int(row["number"])
        metric = row.get("final_metric")
        path = results.model_path(trial_id)
        if path is not None and path.name == FINAL_MODEL:
            import keras

            model, source = keras.saving.load_model(path), f"exported {FINAL_MODEL}"
        else:
            checkpoint = None if path is not None else last_checkpoint(results.experiment_dir / trial_id)
            if path is None and checkpoint is None:
                continue
            spec = spec or runnable_spec(results.experiment_dir, results.builders)
            model = rebuilt_model(spec, config_of(row), results.experiment_dir / trial_id)
            if checkpoint is not None:
                epoch = load_checkpoint_weights(model, checkpoint, spec.training.executions)
                source = f"rebuilt from the checkpoint of epoch {epoch} (no exported model)"
            elif path is not None:
                model.load_weights(path)
                source = f"exported {path.name}, loaded into build_model's model"
        found.append(TrialModel(trial_id, number, str(row["status"]), metric, model, source))
    return found


def config_of(row: dict[str, Any]) -> dict[str, Any]:
    """A trial's configuration from its trials.csv row (``params.*``; unset conditional ones left out)."""
    import math

    config = {}
    for column, value in row.items():
        if str(column).startswith("params.") and not (isinstance(value, float) and math.isnan(value)):
            config[str(column)[len("params.") :]] = value.item() if hasattr(value, "item") else value
    return config


def runnable_spec(experiment_dir: Path, builders: Trainable | None = None) -> ExperimentSpec:
    """The experiment's spec with its trainable located again (as a resume does), to call its builders;
    ``builders``: those the search was passed from Python, which spec.yaml cannot locate."""
    from tunekit.config.files import read_recorded_spec
    from tunekit.config.spec import parse_spec

    recorded = read_recorded_spec(experiment_dir / SPEC_FILE)
    if builders is None and str(recorded.get("trainable", "")).startswith("python:"):
        raise SpecError(
            "trainable",
            "this experiment's builders were passed from Python, and a model is rebuilt with them: use the results "
            "the search returned (tuner.results, tunekit.run's), or tunekit.resume(DIR, build_data=..., "
            "build_model=...)'s",
            recorded["trainable"],
        )
    return parse_spec(recorded, experiment_dir, builders)


def trial_context(spec: ExperimentSpec, config: dict[str, Any], trial_dir: Path) -> Any:
    """A ``TrialContext`` for calling the trainable's builders outside a search: one replica, float32."""
    from tunekit.contract import TrialContext

    batch = int(config.get("batch_size", spec.training.batch_size))
    return TrialContext(
        batch_size=batch,
        per_replica_batch_size=batch,
        replicas=1,
        precision="float32",
        seed=int(config.get("seed", spec.training.seed)),
        workdir=str(trial_dir),
        cpus=1,
        max_epochs=spec.budget.max_epochs,
        jit_compile=False,
        data=spec.data,
        spec_dir=spec.spec_dir,
        trial_dir=str(trial_dir),
    )


def trial_data(spec: ExperimentSpec, config: dict[str, Any], trial_dir: Path) -> tuple[Any, Any]:
    """The trainable's ``build_data`` for ``config``: (train, validation) as a trial saw them."""
    from tunekit.contract import load_builders

    return tuple(load_builders(spec.trainable).build_data(config, trial_context(spec, config, trial_dir)))


def rebuilt_model(spec: ExperimentSpec, config: dict[str, Any], trial_dir: Path) -> Any:
    """``build_model``'s model for ``config``, compiled as a trial compiles it, its weights created."""
    from tunekit.contract import load_builders
    from tunekit.worker.autocompile import compile_from_config

    ctx = trial_context(spec, config, trial_dir)
    builders = load_builders(spec.trainable)
    model = builders.build_model(config, ctx)
    if not model.compiled:
        compile_from_config(model, config, ctx)
    if not model.weights:
        _, val_ds = builders.build_data(config, ctx)
        model(next(iter(val_ds))[0], training=False)  # a subclassed model creates its weights on its first call
    return model


def last_checkpoint(trial_dir: Path) -> Path | None:
    from tunekit.tracking.artifacts import checkpoint_order

    held = [p for p in trial_dir.glob("checkpoint_*") if (p / CHECKPOINT_WEIGHTS).is_file()]
    return max(held, key=checkpoint_order, default=None)


def load_checkpoint_weights(model: Any, checkpoint: Path, executions: int = 1) -> int:
    """The checkpoint's model weights into ``model`` (not the optimizer's); returns its epoch.
    Under ``training.executions`` the checkpoint holds every execution's in turn: the first's are loaded."""
    import numpy as np

    with np.load(checkpoint / CHECKPOINT_WEIGHTS) as arrays:
        saved = sum(1 for name in arrays.files if name.startswith("w"))
        if saved != len(model.weights) * executions:
            times = f" (times {executions} executions)" if executions > 1 else ""
            raise ValueError(
                f"the checkpoint in {checkpoint} holds {saved} weights but build_model's model has "
                f"{len(model.weights)}{times}: the trainable changed since the search"
            )
        for i, variable in enumerate(model.weights):
            variable.assign(arrays[f"w{i}"])
    return int(json.loads((checkpoint / CHECKPOINT_STATE).read_text()).get("epoch", 0))
