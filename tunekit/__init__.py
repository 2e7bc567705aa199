"""tunekit: distributed hyperparameter search for Keras on Ray Tune, Optuna, ASHA and MLflow.

Importing tunekit is cheap: Ray, TensorFlow and MLflow are imported only by the
functions that need them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TextIO

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
    from collections.abc import Mapping
    from pathlib import Path
    from types import ModuleType

    import pandas as pd

    from tunekit.results.compare import Comparison

__all__ = [
    "ExperimentResults",
    "ExperimentSpec",
    "HyperParameters",
    "Hyperband",
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
    "Tuner",
    "compare",
    "experiments",
    "load",
    "load_spec",
    "plan_budget",
    "ray_init_options",
    "resume",
    "run",
    "shutdown",
]
__version__ = "0.1.0"


# The driver's own signatures, spelled out so that help() and Jupyter's ``?`` show them without
# importing the driver (tests/unit/test_api.py holds them equal to tunekit.driver.runner's).
def run(
    spec: str | Path | Mapping[str, Any] | ExperimentSpec,
    *,
    overrides: Sequence[str] = (),
    name: str | None = None,
    storage: str | Path | None = None,
    address: str | None = None,
    connect_timeout: float = 30.0,
    progress: TextIO | bool | None = True,
    trainable: ModuleType | None = None,
    build_data: Callable[..., Any] | None = None,
    build_model: Callable[..., Any] | None = None,
    fit_options: Callable[..., Any] | None = None,
    **sections: Any,
) -> ExperimentResults:
    """Runs a search and returns its results.

    Args:
        spec: a spec file path, a parsed mapping, or a loaded ``ExperimentSpec``.
        overrides: ``key.path=value`` strings, as ``tunekit run --set``.
        name: the experiment directory's name (default: the spec's name and a timestamp).
        storage: where experiment directories live (default: the spec's ``storage.path``).
        address: a Ray cluster to join (default: ``RAY_ADDRESS``, else a private local Ray;
            ``auto``: the cluster ``ray start`` recorded on this machine).
        connect_timeout: seconds joining the cluster may take.
        progress: a stream for live progress and the closing lines, True for stdout, False for silence.
        trainable: the trainable as a module object (from a notebook); the spec's ``trainable``
            is then ignored and may be omitted.
        build_data: ``build_data`` as a function, with ``build_model`` (and optionally
            ``fit_options``) instead of a module.
        build_model: ``build_model`` as a function (with ``build_data``).
        fit_options: ``fit_options`` as a function (optional).
        **sections: spec sections deep-merged over the spec, e.g. ``budget={"num_samples": 4}``.

    The errors it raises are ``tunekit.driver.runner.run``'s (``SpecError``, ``SearchAborted``,
    ``NoResultError``, ``ClusterError``, ``ResourceError``, ``StorageError``, ``SearchInterrupted``).
    """
    arguments: dict[str, Any] = {
        "spec": spec,
        "overrides": overrides,
        "name": name,
        "storage": storage,
        "address": address,
        "connect_timeout": connect_timeout,
        "progress": progress,
        **sections,
    }
    return _on_the_runtime_or_here("run", arguments, trainable, build_data, build_model, fit_options)


def resume(
    experiment_dir: str | Path,
    *,
    overrides: Sequence[str] = (),
    address: str | None = None,
    local: bool = False,
    connect_timeout: float = 30.0,
    progress: TextIO | bool | None = True,
    trainable: ModuleType | None = None,
    build_data: Callable[..., Any] | None = None,
    build_model: Callable[..., Any] | None = None,
    fit_options: Callable[..., Any] | None = None,
) -> ExperimentResults:
    """Finishes an interrupted search from its directory, or grows a finished one.

    Args:
        experiment_dir: the experiment's directory.
        overrides: ``key.path=value`` strings, as ``tunekit resume --set``: only ``budget.num_samples``,
            ``budget.max_concurrent`` and ``budget.time_budget_s`` may change.
        address: another cluster to run on (default: the one the search ran on).
        local: run on a private local Ray although the search ran on a cluster.
        connect_timeout, progress, trainable, build_data, build_model, fit_options: as ``run``'s;
            a search whose builders were passed from Python needs them passed again.
    """
    arguments: dict[str, Any] = {
        "experiment_dir": experiment_dir,
        "overrides": overrides,
        "address": address,
        "local": local,
        "connect_timeout": connect_timeout,
        "progress": progress,
    }
    return _on_the_runtime_or_here("resume", arguments, trainable, build_data, build_model, fit_options)


def _on_the_runtime_or_here(
    command: str,
    arguments: dict[str, Any],
    trainable: ModuleType | None,
    build_data: Callable[..., Any] | None,
    build_model: Callable[..., Any] | None,
    fit_options: Callable[..., Any] | None,
) -> ExperimentResults:
    """``run`` or ``resume`` on the warm runtime (``tunekit up``) when it serves the call, which says
    so; else in this process. Builders passed as functions keep the call here."""
    from tunekit.driver import runner
    from tunekit.runtime.client import serve_call, why_python_call_runs_here

    builders = (trainable, build_data, build_model, fit_options)
    if (folder := serve_call(command, arguments, why_python_call_runs_here(arguments, builders))) is not None:
        return load(folder)
    call = runner.run if command == "run" else runner.resume
    return call(
        **arguments, trainable=trainable, build_data=build_data, build_model=build_model, fit_options=fit_options
    )


def experiments(folder: str | Path = "tunekit_results") -> pd.DataFrame:
    """One row per experiment under a results folder: status, trials by outcome, best, start, active time.

    See ``tunekit.results.compare.experiments``; ``tunekit ls FOLDER`` prints the same.
    """
    from tunekit.results.compare import experiments as _experiments

    return _experiments(folder)


def compare(
    *experiments: str | Path | ExperimentResults, tolerance: float = 0.01, price_per_hour: float | None = None
) -> Comparison:
    """Experiments side by side: bests, best configurations, budgets, counts, time to best, and one figure.

    Each experiment is a directory or a ``tunekit.load`` result. The ``Comparison``'s ``table``
    is a DataFrame, one row per experiment; ``figure()`` draws the best so far against active
    time and against epochs spent; in Jupyter it displays as both. ``tunekit report A B`` prints
    the same. See ``tunekit.results.compare.compare``.
    """
    from tunekit.results.compare import compare as _compare

    return _compare(*experiments, tolerance=tolerance, price_per_hour=price_per_hour)


def shutdown() -> None:
    """Stops the Ray that ``tunekit.run`` started and kept for later runs (also done at exit).

    With it go the idle workers it keeps between searches, TensorFlow imported (about 340 MB
    each on the digits search). A Ray you started yourself with ``ray.init`` is never shut
    down by tunekit.
    """
    from tunekit.driver.session import shutdown as _shutdown

    _shutdown()


def __getattr__(name: str) -> Any:
    """``from tunekit import plots``: the plots module (matplotlib), imported on first use."""
    if name == "plots":
        import importlib

        return importlib.import_module("tunekit.plots")
    if name in ("Tuner", "Hyperband", "HyperParameters"):  # KerasTuner's shapes (tunekit.tuner)
        from tunekit.tuner.hp import HyperParameters
        from tunekit.tuner.tuner import Hyperband, Tuner

        return {"Tuner": Tuner, "Hyperband": Hyperband, "HyperParameters": HyperParameters}[name]
    if name == "ray_init_options":  # the driver's own function, imported only when asked for
        from tunekit.driver.session import ray_init_options

        return ray_init_options
    raise AttributeError(f"module 'tunekit' has no attribute {name!r}")
