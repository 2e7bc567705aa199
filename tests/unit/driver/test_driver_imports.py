"""The driver never imports TensorFlow or Keras: everything a search's driver loads, run_trial included.

A driver that imports them pays seconds of start-up before Ray asks for a worker, and prints
TensorFlow's start-up lines on the console (it happened through a worker module imported at
the top of tunekit.worker.trial, which the driver loads to hand Ray the trial function).
"""

from __future__ import annotations

from collections.abc import Callable

DRIVER_MODULES = (
    "tunekit.driver.runner",
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
