"""Test trainable: the digits MLP, and each trial notes in its folder whether its worker
process had imported TensorFlow before the trial began (tunekit.worker.preload), and when."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from trainables.digits_mlp import build_data as digits_data
from trainables.digits_mlp import build_model  # noqa: F401 - part of the contract
from tunekit.contract import TrialContext

NOTE = "preload.json"


def build_data(config: dict[str, Any], ctx: TrialContext) -> Any:
    preload = sys.modules.get("tunekit.worker.preload")
    note = {
        "pid": os.getpid(),
        "preload": None if preload is None else [preload.STARTED, preload.ENDED],
        "build_data": time.time(),
    }
    Path(ctx.trial_dir, NOTE).write_text(json.dumps(note))
    return digits_data(config, ctx)
