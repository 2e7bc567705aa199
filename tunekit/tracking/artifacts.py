"""Artifacts of the experiment's runs: the resolved spec on the parent run, the best trial's model.

The model goes to the best trial's child run, and to the model registry when
``tracking.registered_model`` is set. Called from the writer thread only.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from tunekit.config.spec import ExperimentSpec
from tunekit.environment import redact_uri
from tunekit.layout import FINAL_MODEL, FINAL_WEIGHTS, SPEC_FILE
from tunekit.tracking.client import MlflowError, RunClient
from tunekit.tracking.tags import MODEL_ARTIFACT_DIR
from tunekit.tracking.values import logger


def final_model_path(experiment_dir: Path, trial_id: str) -> Path | None:
    """The trial's final model from its newest checkpoint that holds one, if any.

    That is ``model.keras`` (the whole model) or, when Keras could not serialise the
    model, ``model.weights.h5`` (weights only; rebuild with the trainable's
    ``build_model`` and ``load_weights``). A trial that never reached its end has none.
    """
    for checkpoint in sorted(
        (Path(experiment_dir) / trial_id).glob("checkpoint_*"), key=checkpoint_order, reverse=True
    ):
        for name in (FINAL_MODEL, FINAL_WEIGHTS):
            if (checkpoint / name).is_file():
                return checkpoint / name
    return None


def checkpoint_order(path: Path) -> tuple[int, str]:
    # Ray pads the index (checkpoint_000007); compare numbers anyway, not text.
    suffix = path.name.rpartition("_")[2]
    return (int(suffix) if suffix.isdigit() else -1, path.name)


def log_spec(client: RunClient, parent_id: str, path: Path, raw_uri: str | None) -> None:
    """The resolved spec; user:password in its tracking URI never leaves the machine."""
    text = path.read_text()
    if raw_uri and redact_uri(raw_uri) != raw_uri:
        with tempfile.TemporaryDirectory() as scratch:
            copy = Path(scratch) / SPEC_FILE
            copy.write_text(text.replace(raw_uri, redact_uri(raw_uri)))
            client.log_artifact(parent_id, str(copy))
    else:
        client.log_artifact(parent_id, str(path))


def log_best_model(client: RunClient, spec: ExperimentSpec, experiment_dir: Path, trial_id: str, run_id: str) -> None:
    """The best trial's final model on its child run, and in the registry when asked.

    The model is ``model.keras``, or ``model.weights.h5`` when Keras could not save it
    whole; weights alone are attached but not registered (a registered model must
    load on its own), with one warning.
    """
    model = final_model_path(experiment_dir, trial_id)
    if model is None:
        return
    if f"{MODEL_ARTIFACT_DIR}/{model.name}" not in client.list_artifacts(run_id, MODEL_ARTIFACT_DIR):
        client.log_artifact(run_id, str(model), MODEL_ARTIFACT_DIR)
    name = spec.tracking.registered_model
    if not name:
        return
    if model.name != FINAL_MODEL:
        logger.warning(
            "tunekit: not registering %r: the best trial %s saved weights only (%s, Keras could not "
            "save the model whole); they are attached to its run",
            name,
            trial_id,
            model.name,
        )
        return
    _register(client, name, run_id, f"best trial of tunekit experiment {experiment_dir.name}")


def _register(client: RunClient, name: str, run_id: str, description: str) -> None:
    try:
        client.create_registered_model(name)
    except MlflowError as error:
        if error.code not in ("RESOURCE_ALREADY_EXISTS", "ALREADY_EXISTS"):
            raise
    if client.has_model_version(name, run_id):
        return  # registered by an earlier session of this experiment
    source = f"{client.artifact_uri(run_id)}/{MODEL_ARTIFACT_DIR}"
    client.create_model_version(name, source, run_id, description)
