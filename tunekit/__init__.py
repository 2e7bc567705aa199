"""tunekit: distributed hyperparameter search for Keras on Ray Tune, Optuna, ASHA and MLflow.

Importing tunekit is cheap: Ray, TensorFlow and MLflow are imported only by the
functions that need them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tunekit.config.spec import ExperimentSpec, load_spec
from tunekit.contract import TrialContext
from tunekit.errors import (
    NoResultError,
    NotAnExperimentError,
    ResourceError,
    SearchAborted,
    SearchInterrupted,
    SpecError,
    StorageError,
    TunekitError,
)
from tunekit.results.load import ExperimentResults, load
from tunekit.search.plan import Plan, plan_budget

if TYPE_CHECKING:
    from pathlib import Path

__all__ = [
    "ExperimentResults",
    "ExperimentSpec",
    "NoResultError",
    "NotAnExperimentError",
    "Plan",
    "ResourceError",
    "SearchAborted",
    "SearchInterrupted",
    "SpecError",
    "StorageError",
    "TrialContext",
    "TunekitError",
    "load",
    "load_spec",
    "plan_budget",
    "ray_init_options",
    "resume",
    "run",
    "shutdown",
]
__version__ = "0.1.0"


def run(spec: Any, **kwargs: Any) -> ExperimentResults:
    """Runs a search; see ``tunekit.driver.runner.run`` for the arguments."""
    from tunekit.driver.runner import run as _run

    return _run(spec, **kwargs)


def resume(experiment_dir: str | Path, **kwargs: Any) -> ExperimentResults:
    """Finishes an interrupted search; see ``tunekit.driver.runner.resume``."""
    from tunekit.driver.runner import resume as _resume

    return _resume(experiment_dir, **kwargs)


def shutdown() -> None:
    """Stops the Ray that ``tunekit.run`` started and kept for later runs (also done at exit).

    A Ray you started yourself with ``ray.init`` is never shut down by tunekit.
    """
    from tunekit.driver.session import shutdown as _shutdown

    _shutdown()


def __getattr__(name: str) -> Any:
    """``from tunekit import plots``: the plots module (matplotlib), imported on first use."""
    if name == "plots":
        from tunekit.results import plots

        return plots
    if name == "ray_init_options":  # the driver's own function, imported only when asked for
        from tunekit.driver.session import ray_init_options

        return ray_init_options
    raise AttributeError(f"module 'tunekit' has no attribute {name!r}")
