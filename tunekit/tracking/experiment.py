"""The MLflow experiment a search's runs go into: found or created, and tagged for model training
(MLflow 3's UI then opens it on its runs, not on GenAI traces); the address of its runs table in
the UI; and the environment tags every run of the search carries.

``tunekit.tracking.runs`` keeps the runs themselves: the parent, a child per trial, and what
each still has to send.
"""

from __future__ import annotations

import functools
from urllib.parse import urlsplit

from tunekit.environment import installed_versions, redact_uri
from tunekit.tracking.batches import Disabled
from tunekit.tracking.client import MlflowError, RunClient
from tunekit.tracking.tags import EXPERIMENT_KIND, EXPERIMENT_KIND_TAG, UI_WORKFLOW_QUERY
from tunekit.tracking.values import brief, logger


def open_experiment(client: RunClient, name: str) -> str:
    """The id of the MLflow experiment ``name``, created if absent (another search may create it
    meanwhile), and tagged for model training unless its kind was chosen already.

    Raises:
        Disabled: the experiment is deleted (tracking stops; the search goes on).
    """
    experiment = client.get_experiment(name)
    if experiment is None:
        try:
            return client.create_experiment(name, {EXPERIMENT_KIND_TAG: EXPERIMENT_KIND})
        except MlflowError as error:  # created meanwhile by another search
            if error.code != "RESOURCE_ALREADY_EXISTS":
                raise
            experiment = client.get_experiment(name)
            if experiment is None:
                raise
    if experiment.deleted:
        raise Disabled(f"MLflow experiment {name!r} is deleted; restore it or set tracking.experiment")
    if not experiment.tags.get(EXPERIMENT_KIND_TAG):  # a kind someone chose stays
        try:
            client.set_experiment_tag(experiment.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
        except MlflowError as error:  # only how the UI shows it: not worth the search's tracking
            logger.info("tunekit: could not tag MLflow experiment %r as model training: %s", name, brief(error))
    return experiment.experiment_id


def ui_url(tracking_uri: str, experiment_id: str) -> str | None:
    """The MLflow UI page of the experiment's runs table, when the tracking URI is a server."""
    if urlsplit(tracking_uri).scheme not in ("http", "https"):
        return None
    return f"{redact_uri(tracking_uri).rstrip('/')}/#/experiments/{experiment_id}/runs?{UI_WORKFLOW_QUERY}"


@functools.cache
def _environment() -> tuple[tuple[str, str], ...]:
    # The packages and how their versions are read live in tunekit.environment (metadata
    # only: the driver never imports TensorFlow to learn its version).
    return tuple((f"tunekit.env.{name}", version) for name, version in installed_versions().items())


def environment_tags() -> dict[str, str]:
    """Python and package versions, from package metadata (TensorFlow is never imported)."""
    return dict(_environment())
