"""Which of the space's names a trial read: its builders' reads, and the ones tunekit reads for it.

The first report of each attempt carries them (``info.space_read`` in trials.csv, a tag in
MLflow), and the search's end warns of space names no completed trial read
(``tunekit.results.unread``): a key renamed in the code only, or a branch that never runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tunekit.contract import Builders

# Training settings a trial takes from its config when the space names them (tunekit.worker.trial).
TRAINING_KEYS = ("batch_size", "precision", "seed", "jit_compile")
# What tunekit compiles a model with that build_model left uncompiled (tunekit.worker.autocompile).
COMPILE_KEYS = ("optimizer", "learning_rate", "loss")


def space_read(builders: Builders, config: Mapping[str, Any], *, compiled_by_tunekit: bool) -> set[str] | None:
    """The live set of names the trial's builders read, with tunekit's own reads added; None when
    the builders' reads are not checked (a trainable without a space)."""
    if builders.reads is None:
        return None
    builders.reads.update(key for key in TRAINING_KEYS if key in config)
    if compiled_by_tunekit:
        builders.reads.update(key for key in COMPILE_KEYS if key in config)
    return builders.reads
