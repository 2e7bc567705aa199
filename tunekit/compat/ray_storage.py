"""Ray Tune's uploads from a trial, tried again through a storage outage.

Why: ``StorageContext.persist_current_checkpoint`` (``ray.train._internal.storage``, checked
against Ray 2.60) copies a trial's checkpoint to the storage inside ``tune.report``, and
``StorageContext.persist_artifacts`` uploads its working folder (a bucket trial's
``output.log`` and ``error.txt``) beside it and when an attempt ends; each raises on the first
network error (the artifacts' at the next call, from the background sync that failed): the
trial fails and its trained epochs are thrown away by a bucket that was away for a few seconds.
Wrapped, a transient error is tried again (``tunekit.storage.faults.retrying``) while the trial
waits, for the search's ``storage.outage_s`` and a margin, so that the driver, which stops the
search at the bound itself (holding its trials for the resume), decides first. Each copy is
whole or tried again whole: it writes the same objects under the same folder.

The artifacts' upload is also tried again when a local file vanished under it: Ray's background
sync lists the trial's folder, then opens each file, and a file the trial replaced in between (the
heartbeat's write-then-rename, a user's callback) failed the trial with ``FileNotFoundError:
Failed to open local file`` (a bucket search's trial in CI). The next sync lists the folder anew.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

# Past the driver's bound: the driver's stop, not the trial's failure, ends an outage that lasts.
TRIAL_MARGIN_S = 60.0
# Files replaced while a sync reads them: a folder that changes this often is not settling.
VANISHED_FILE_TRIES = 5


def retry_uploads(outage_s: float) -> None:
    """In this worker process, Ray's checkpoint and artifact uploads wait through transient
    storage errors for ``outage_s`` + ``TRIAL_MARGIN_S`` seconds (once per process; a later call
    sets the bound)."""
    from ray.train._internal.storage import StorageContext

    for name in ("persist_current_checkpoint", "persist_artifacts"):
        original = inspect.unwrap(getattr(StorageContext, name))
        if name == "persist_artifacts":
            original = _past_vanished_files(original)
        setattr(StorageContext, name, _retried(original, outage_s))


def vanished_under_upload(error: BaseException) -> bool:
    """pyarrow's error for a local file listed for an upload and gone when it was opened."""
    return isinstance(error, FileNotFoundError) and "Failed to open local file" in str(error)


def _past_vanished_files(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def synced(self: Any, *args: Any, **kwargs: Any) -> Any:
        for _ in range(VANISHED_FILE_TRIES - 1):
            try:
                return original(self, *args, **kwargs)
            except FileNotFoundError as error:
                if not vanished_under_upload(error):
                    raise
        return original(self, *args, **kwargs)

    return synced


def _retried(original: Callable[..., Any], outage_s: float) -> Callable[..., Any]:
    from tunekit.storage.faults import retrying

    @functools.wraps(original)
    def retried(self: Any, *args: Any, **kwargs: Any) -> Any:
        where = f"storage {self.storage_filesystem.type_name}://{self.trial_fs_path}"
        return retrying(
            lambda: original(self, *args, **kwargs),
            where,
            outage_s=outage_s + TRIAL_MARGIN_S,
            say=lambda line: print(f"tunekit: {line}", flush=True),  # into the trial's output.log
        )

    return retried
