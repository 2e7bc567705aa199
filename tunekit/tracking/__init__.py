"""MLflow tracking: the driver-side tracker and the writer thread behind it.

Modules, in import order (each imports only those above it; of ``results``, ``runs`` imports
``best``, the one owner of the best trial's choice, and ``backfill`` writes the ledger):

- ``tags``: MLflow tag names and other MLflow-side names.
- ``events``: the typed events the tracker queues for the writer (``TrackerEvent``).
- ``client``: the only door to MLflow (``RunClient``, ``MlflowRunClient``, ``search_all_runs``).
- ``values``: names and values as MLflow accepts them; tracking's logger.
- ``batches``: request batching and error sorting (``BatchSender``).
- ``artifacts``: the spec and the best model as artifacts; ``final_model_path``.
- ``record``: ``tracking.json``, where the runs are and whether MLflow holds them all.
- ``runs``: the parent run, the child runs and what each still has to send (``RunBook``).
- ``writer``: the writer thread's loop, with its retries (``MlflowWriter``).
- ``tracker``: the recorder listener that queues events (``MlflowTracker``).
- ``backfill``: ``sync``, an experiment's records sent after the fact through the same writer.
- ``preflight``: ``tracking.required``: the start-up check and the end-of-search verdict; a
  finished search's MLflow record completed on resume (``complete_record``).

MLflow is imported only by ``client``, lazily (in the writer thread during a search).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tunekit.tracking.backfill import SyncResult

__all__ = ["sync"]


def sync(experiment_dir: str | Path, tracking_uri: str | None = None) -> SyncResult:
    """Sends an experiment's records to MLflow afterwards; see ``tunekit.tracking.backfill.sync``."""
    from tunekit.tracking.backfill import sync as _sync

    return _sync(experiment_dir, tracking_uri=tracking_uri)
