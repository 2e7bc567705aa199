"""What MLflow accepts: metric and param names, value lengths, run statuses; and tracking's logger."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

from tunekit.config.spec import ExperimentSpec
from tunekit.layout import TRIAL_NAME_PREFIX, WARM_START_FILE, TrialStatus
from tunekit.tracking.client import MlflowError
from tunekit.tracking.tags import TAG_BUDGET_PREFIX

# One logger for all of tracking (tracker, writer, its helpers): users and tests filter on it.
logger = logging.getLogger("tunekit.tracking.tracker")

MAX_PARAM_LENGTH = 6000
MAX_TAG_LENGTH = 8000
_MAX_OUTCOME_REASON = 300  # the outcome tag holds a reason's first line, cut here; the reason tag holds it all
_INVALID_NAME_CHARS = re.compile(r"[^A-Za-z0-9_\-. :/]")
# A trial the model ended itself (EarlyStopping) is "completed": a normal end, FINISHED.
# "stopped" is the search stopping around it (time budget, Ctrl-C): KILLED.
_RUN_STATUS = {
    TrialStatus.COMPLETED: "FINISHED",
    TrialStatus.PRUNED: "FINISHED",
    TrialStatus.STOPPED: "KILLED",
    TrialStatus.FAILED: "FAILED",
    TrialStatus.RUNNING: "KILLED",
}


def run_status(status: TrialStatus) -> str:
    """The MLflow run status of a trial that ended with ``status``."""
    return _RUN_STATUS.get(status, "FINISHED")


def outcome(status: TrialStatus, rung: int | None, epochs: int, reason: str = "") -> str:
    """The status in words, for the runs table: "completed: stopped by the model at epoch 7"."""
    if status == TrialStatus.PRUNED:
        return f"pruned at rung {rung} (epoch {epochs})" if rung is not None else f"pruned at epoch {epochs}"
    lines = reason.strip().splitlines()
    first = lines[0][:_MAX_OUTCOME_REASON] if lines else ""
    if not first:
        return f"{status} after {epochs} epochs"
    if status == TrialStatus.FAILED:  # the reason is an error message: say when it struck
        return f"failed after {epochs} epochs: {first}"
    return f"{status}: {first}"


def run_name(trial: int | str, status: TrialStatus, epochs: int) -> str:
    """A trial's run name, its outcome readable in the runs table: ``trial-5 · pruned@2``.

    MLflow shows a pruned run as "Finished", like a completed one; the name is the one
    column its runs table always shows. ``@n``: after n epochs.
    """
    if status in (TrialStatus.RUNNING, TrialStatus.COMPLETED):
        return f"{TRIAL_NAME_PREFIX}{trial} · {status}"
    return f"{TRIAL_NAME_PREFIX}{trial} · {status}@{epochs}"


def metric_key(name: str) -> str:
    return _INVALID_NAME_CHARS.sub("_", name)[:250]


def param_key(name: object) -> str:
    return _INVALID_NAME_CHARS.sub("_", str(name))[:250]


def param_value(value: object) -> str:
    return str(value)[:MAX_PARAM_LENGTH]


def tag_value(value: object) -> str:
    if isinstance(value, list | tuple):
        return ";".join(str(v) for v in value)  # as trials.csv writes lists
    return str(value)[:MAX_TAG_LENGTH]


BRIEF_CHARS = 300  # a warning's error text: urllib3's retry errors repeat the whole URL and cause


def brief(error: BaseException) -> str:
    """The error's type and first line, for a one-line warning (MLflow's own type for an ``MlflowError``)."""
    if isinstance(error, MlflowError) and error.__cause__ is not None:
        error = error.__cause__
    text = str(error).strip().splitlines()
    first = text[0] if text else ""
    line = f"{type(error).__name__}: {first}" if first else type(error).__name__
    return line if len(line) <= BRIEF_CHARS else line[:BRIEF_CHARS].rsplit(" ", 1)[0] + " ..."


def spec_params(spec: ExperimentSpec) -> dict[str, str]:
    """The parent run's params: the settings that define the search (not the space, tracking or storage)."""
    raw = spec.raw
    params: dict[str, str] = {"name": spec.name, "trainable": str(raw["trainable"])}
    if spec.multi_objective:  # one param for the list: "val_accuracy (max), model_params (min)"
        params["metric"] = ", ".join(f"{o.name} ({o.mode})" for o in spec.objectives)
        params.update({key: param_value(raw[key]) for key in ("constraints", "select") if key in raw})
    for section in ("metric", "search", "scheduler", "budget", "resources", "training"):
        if section == "metric" and spec.multi_objective:
            continue
        for key, value in raw[section].items():
            if value is None:  # a setting left unset (budget.time_budget_s): no "None" param
                continue
            if section == "search" and key == "warm_start":
                params["search.warm_start"] = str(len(value))
                continue
            params[f"{section}.{key}"] = param_value(value)
    # The space is in the spec.yaml artifact: as params it would add a column per parameter
    # beside the trials' own (same names) in the runs table.
    return params


def budget_tags(spec: ExperimentSpec) -> dict[str, str]:
    """The budget the search runs with now, as parent-run tags (a grown search changes it).

    An unset setting is tagged "none", not left out: a resume that drops a time budget must
    overwrite the tag the first run set."""
    budget = spec.raw["budget"]
    return {f"{TAG_BUDGET_PREFIX}{key}": "none" if value is None else str(value) for key, value in budget.items()}


def warm_start_params(experiment_dir: Path) -> dict[str, str]:
    """What ``search.warm_start_from`` added to the study (``WARM_START_FILE``), as parent-run params."""
    path = experiment_dir / WARM_START_FILE
    if not path.is_file():
        return {}
    record = json.loads(path.read_text())
    skipped = record.get("skipped", {})
    reasons = "; ".join(f"{count} {reason}" for reason, count in skipped.items())
    return {
        "warm_start.used": str(record.get("used", 0)),
        "warm_start.skipped": str(sum(skipped.values())),
        **({"warm_start.skipped_reasons": param_value(reasons)} if reasons else {}),
    }
