"""The driver never imports TensorFlow or Keras: everything a search's driver loads, run_trial included.

A driver that imports them pays seconds of start-up before Ray asks for a worker, and prints
TensorFlow's start-up lines on the console (it happened through a worker module imported at
the top of tunekit.worker.trial, which the driver loads to hand Ray the trial function).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

DRIVER_MODULES = (
    "tunekit.driver.runner",
    "tunekit.driver.fit",
    "tunekit.driver.restore",
    "tunekit.driver.recorder",
    "tunekit.worker.trial",  # the driver hands Ray its run_trial
    "tunekit.search.searcher",
    "tunekit.search.schedulers",
    "tunekit.tracking.tracker",
    "tunekit.tracking.tensorboard",
    "tunekit.config.code_space",
)


def test_the_driver_s_modules_import_no_tensorflow_or_keras(imported_after: Callable[[str], list[str]]) -> None:
    heavy = imported_after(f"import {', '.join(DRIVER_MODULES)}")
    assert "tensorflow" not in heavy and "keras" not in heavy, heavy


def test_a_search_starts_ray_before_it_imports_ray_tune_optuna_or_pandas(
    imported_after: Callable[[str], list[str]],
) -> None:
    # Everything `tunekit run` imports before ray.init (its session imports Ray itself): Ray Tune,
    # Optuna and pandas come while Ray starts (fit.AFTER_RAY_STARTS), not before it.
    heavy = imported_after("import tunekit.cli, tunekit.driver.runner, tunekit.driver.progress, tunekit.driver.session")
    assert heavy == [], heavy


def test_what_a_search_imports_while_ray_starts_names_modules_that_exist() -> None:
    from tunekit.driver.fit import AFTER_RAY_STARTS

    # The background import suppresses a failure (the later import raises it): a typo would go
    # unseen. Found on disk, not imported: a unit test imports no Ray.
    assert [name for name in AFTER_RAY_STARTS if not _module_file(name)] == []


def _module_file(name: str) -> bool:
    top, *rest = name.split(".")
    spec = importlib.util.find_spec(top)
    if spec is None or spec.origin is None:
        return False
    path = Path(spec.origin).parent.joinpath(*rest)
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()
