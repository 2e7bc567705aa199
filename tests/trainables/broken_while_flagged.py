"""Test trainable: the digits MLP, whose ``build_data`` fails while a file named BROKEN sits in
the experiment's storage folder: a trainable broken, then fixed, between a search and its resume."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tensorflow as tf

from trainables.digits_mlp import build_data as build_digits_data
from trainables.digits_mlp import build_model  # noqa: F401 - part of the contract
from tunekit.contract import TrialContext

FLAG = "BROKEN"


def build_data(config: dict[str, Any], ctx: TrialContext) -> tuple[tf.data.Dataset, tf.data.Dataset]:
    if (Path(ctx.trial_dir).parents[1] / FLAG).exists():  # storage / experiment / trial
        raise RuntimeError("the data folder is missing")
    return build_digits_data(config, ctx)
