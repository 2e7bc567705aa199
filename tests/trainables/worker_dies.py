"""Test trainable whose worker process exits as the trial builds its model, before any report.

Ray sees the worker die (no failure result reaches the guard's stopper) and, with
``training.max_failures: 0``, ends the trial with an error: the recorder's ``on_trial_error``.
"""

from __future__ import annotations

import os
from typing import Any

from trainables.digits_mlp import build_data  # noqa: F401 - part of the contract
from tunekit.contract import TrialContext


def build_model(config: dict[str, Any], ctx: TrialContext) -> Any:
    os._exit(3)
