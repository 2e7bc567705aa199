"""Runs MLflow holds twice for one search: another parent run of the same search, and a trial's
second child run under its parent.

A search has one parent run, found again by every resume (``runs.RunBook.open_parent``). A
driver that did not find it made a second one: before tunekit named a bucket experiment by its
URI, a resume from another machine's cache did, logging its trials again under the new parent
and leaving the old parent's trials RUNNING. ``tunekit check`` reports such runs;
``tunekit sync`` retires them with MLflow's delete, which moves a run to MLflow's trash (``mlflow
gc`` purges it; the UI and ``MlflowClient.restore_run`` bring it back), keeping the parent
``tracking.json`` names and, per trial, the child run the sync logged to.
"""

from __future__ import annotations

from collections.abc import Mapping

from tunekit.tracking.client import RunClient
from tunekit.tracking.tags import PARENT_RUN_TAG, TAG_EXPERIMENT_DIR, TAG_ROLE, TAG_TRIAL_ID


def same_search(tags: Mapping[str, str], start_ms: int, parent_tags: Mapping[str, str], parent_start_ms: int) -> bool:
    """Whether a parent run is of the same search as the parent: the same start (the search's
    clock, to the millisecond) and the same experiment folder name, wherever that folder was
    (a machine's cache of a bucket, the bucket's URI, a local folder)."""
    return abs(start_ms - parent_start_ms) <= 1 and _folder_name(tags) == _folder_name(parent_tags)


def _folder_name(tags: Mapping[str, str]) -> str:
    return str(tags.get(TAG_EXPERIMENT_DIR, "")).partition("?")[0].rstrip("/").rsplit("/", 1)[-1]


def retire_duplicates(client: RunClient, experiment_id: str, parent_id: str, kept: Mapping[str, str]) -> int:
    """Deletes (to MLflow's trash) every other parent run of the search ``parent_id`` is the
    parent of, with their child runs, and each child run of ``parent_id`` for a trial whose
    run is another one (``kept``: trial id -> the run kept). Returns how many runs it deleted."""
    parents = list(client.search_runs(experiment_id, f"tags.`{TAG_ROLE}` = 'experiment'"))
    parent = next((run for run in parents if run.run_id == parent_id), None)
    if parent is None:
        return 0
    doomed = []
    for twin in parents:
        if twin.run_id != parent_id and same_search(twin.tags, twin.start_ms, parent.tags, parent.start_ms):
            doomed += [child.run_id for child in client.search_runs(experiment_id, _children_of(twin.run_id))]
            doomed.append(twin.run_id)
    for child in client.search_runs(experiment_id, _children_of(parent_id)):
        trial_id = child.tags.get(TAG_TRIAL_ID, "")
        if trial_id in kept and kept[trial_id] != child.run_id:
            doomed.append(child.run_id)
    for run_id in doomed:
        client.delete_run(run_id)
    return len(doomed)


def _children_of(run_id: str) -> str:
    return f"tags.`{PARENT_RUN_TAG}` = '{run_id}'"
