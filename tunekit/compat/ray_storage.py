"""Ray Tune's checkpoint upload from a trial, tried again through a storage outage.

Why: ``StorageContext.persist_current_checkpoint`` (``ray.train._internal.storage``, checked
against Ray 2.60) copies a trial's checkpoint to the storage inside ``tune.report`` and raises
on the first network error: the trial fails and its trained epochs are thrown away by a bucket
that was away for a few seconds. Wrapped, a transient error is tried again
(``tunekit.storage_faults.retrying``) while the trial waits, for the search's
``storage.outage_s`` and a margin, so that the driver, which stops the search at the bound
itself (holding its trials for the resume), decides first. The copy is whole or tried again
whole: it writes the same objects under the same checkpoint folder.
"""

from __future__ import annotations

import functools
from typing import Any

# Past the driver's bound: the driver's stop, not the trial's failure, ends an outage that lasts.
TRIAL_MARGIN_S = 60.0


def retry_checkpoint_uploads(outage_s: float) -> None:
    """In this worker process, Ray's checkpoint uploads wait through transient storage errors
    for ``outage_s`` + ``TRIAL_MARGIN_S`` seconds (once per process; a later call sets the bound)."""
    from ray.train._internal.storage import StorageContext

    from tunekit.storage_faults import retrying

    original = getattr(StorageContext.persist_current_checkpoint, "__wrapped__", None)
    original = original or StorageContext.persist_current_checkpoint

    @functools.wraps(original)
    def persist_current_checkpoint(self: Any, checkpoint: Any) -> Any:
        where = f"storage {self.storage_filesystem.type_name}://{self.checkpoint_fs_path}"
        return retrying(
            lambda: original(self, checkpoint),
            where,
            outage_s=outage_s + TRIAL_MARGIN_S,
            say=lambda line: print(f"tunekit: {line}", flush=True),  # into the trial's output.log
        )

    StorageContext.persist_current_checkpoint = persist_current_checkpoint  # type: ignore[method-assign]
