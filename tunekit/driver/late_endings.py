"""Trials a killed driver ended after Ray last saved its experiment state.

Ray saves its state (trial statuses, the searcher's and the recorder's) about once a
second; the study hears of a trial's ending at once, and the tables on disk and MLflow
soon after. A driver killed in between leaves a trial that the study holds as ended and
Ray's state as running. Ray would train it again from its last checkpoint, and the second
run may end otherwise (ASHA's rungs have moved on since): the study would keep the first
ending while the tables and MLflow took the second. Instead, the dead driver's decision
stands. The resume marks the trial ended in Ray's state (``compat.end_saved_trials``),
and the recorder takes its ending from the study and its epochs from ``epochs.csv``
where the dead driver wrote them, else from the study's intermediate values.

The same path takes the trials a stopper of the whole search (its time budget, the failure
guard) stopped: Ray saved them ended and its copy of the recorder running
(``_stopped_for_good``), so a resume takes their ending from the tables.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunekit.config.space import REPEAT_SEED_KEY, SearchSpace
from tunekit.driver.records import EpochRow, TrialRecord
from tunekit.layout import (
    EPOCH_COLUMNS,
    EPOCHS_FILE,
    RAY_TRIAL_ATTR,
    SPANS_FILE,
    TRIALS_FILE,
    TrialStatus,
    stopped_for_good,
)
from tunekit.search.attrs import DUPLICATE_ATTR, FINAL_RESULT_ATTR, HISTORY_ATTR, LOST_ATTR, epoch_results
from tunekit.storage.store import table_rows

if TYPE_CHECKING:
    import optuna

# The study's states of an ended trial, as tunekit.search.searcher tells them.
STUDY_ENDINGS = ("COMPLETE", "PRUNED", "FAIL")
# A LateEnding's state when the tables, not the study, say how the trial ended (stopped).
TABLES_STOPPED = "STOPPED"


@dataclass(frozen=True)
class LateEnding:
    """How the study ended a trial that Ray's saved state holds as unfinished.

    Attributes:
        trial_id: Ray's trial id.
        state: the study's state: COMPLETE, PRUNED or FAIL; or ``TABLES_STOPPED``, a trial
            the search's time budget stopped, as ``trials.csv`` says (the study holds it
            PRUNED or FAIL, as told when Ray stopped it).
        steps: the epochs' metrics the study holds, {epoch: {name: value}}: its intermediate
            values of the spec's metric; with several objectives (Optuna keeps no
            intermediate values) the last epoch's tracked metrics, as the searcher kept them.
        ended_at: when the study was told (a wall-clock timestamp), None if unknown.
        number: the study's trial number.
        unsaved: Ray's state has no such trial: it was asked after the save. Ray will never
            run or list it; the searcher counts it toward the budget.
        config: the trial's configuration (as Ray saved it, else drawn from the study's
            params): a trial that started after the save has no record yet.
        rows: the trial's rows in the ``epochs.csv`` the dead driver last wrote.
        spans: its rows in that ``spans.csv``: (start, end, {"attempt", "node_id", "pid"}).
        written: its row in that ``trials.csv`` (cells as text), or {}.
    """

    trial_id: str
    state: str
    steps: dict[int, dict[str, float]]
    ended_at: float | None
    number: int
    unsaved: bool
    config: dict[str, Any] = field(default_factory=dict)
    rows: tuple[EpochRow, ...] = ()
    spans: tuple[tuple[float, float | None, dict[str, Any]], ...] = ()
    written: dict[str, str] = field(default_factory=dict)


def late_endings(
    study: optuna.Study, saved: dict[str, dict[str, Any]], experiment_dir: Path, space: SearchSpace, metric: str
) -> dict[str, LateEnding]:
    """The trials the study ended while Ray's saved state (``compat.saved_trials``) has them
    unfinished, or has none of them: asked after the save, when Ray saves seldom (a search
    of thousands of short trials saves every 30 s at most), they ended before the kill.
    ``metric`` names the study's intermediate values (the spec's metric).
    """
    from optuna.trial import FixedTrial, TrialState

    if not saved:
        return {}
    states = tuple(TrialState[name] for name in STUDY_ENDINGS)
    tables = table_rows(experiment_dir / TRIALS_FILE)
    stopped = _stopped_for_good(tables, saved)
    recorded = _ended_in_saved_recorder(experiment_dir)
    ended = {}
    for trial in study.get_trials(deepcopy=False, states=states):
        attrs = trial.user_attrs
        trial_id = attrs.get(RAY_TRIAL_ATTR)
        if trial_id is None or {HISTORY_ATTR, DUPLICATE_ATTR, LOST_ATTR} & set(attrs):
            continue
        in_ray = saved.get(str(trial_id), {}).get("status") in ("TERMINATED", "ERROR")
        in_recorder = recorded is None or str(trial_id) in recorded or str(trial_id) in stopped
        if not (in_ray and in_recorder):
            ended[str(trial_id)] = trial
    if not ended and not stopped:
        return {}
    ids = set(ended) | set(stopped)  # each table is read once, for both kinds of ending
    rows = _by_trial(table_rows(experiment_dir / EPOCHS_FILE), ids)
    spans = _by_trial(table_rows(experiment_dir / SPANS_FILE), ids)
    written = _by_trial(tables, set(ended))
    endings = {}
    for trial_id, trial in ended.items():
        if trial_id in saved:
            config = dict(saved[trial_id].get("config") or {})
        else:  # the configuration the searcher gave Ray, drawn again from the study's params
            config = space.sample(FixedTrial(trial.params))  # type: ignore[arg-type]
            if REPEAT_SEED_KEY in trial.user_attrs:
                config[REPEAT_SEED_KEY] = trial.user_attrs[REPEAT_SEED_KEY]
        endings[trial_id] = LateEnding(
            trial_id,
            trial.state.name,
            _study_steps(trial, metric),
            trial.datetime_complete.timestamp() if trial.datetime_complete is not None else None,
            trial.number,
            trial_id not in saved,
            config,
            tuple(map(_epoch_row, rows.get(trial_id, []))),
            tuple(map(_span, spans.get(trial_id, []))),
            written.get(trial_id, [{}])[-1],
        )
    for trial_id, cells in stopped.items():
        endings[trial_id] = LateEnding(
            trial_id,
            TABLES_STOPPED,
            {},
            float(cells["ended_at"]) if cells.get("ended_at") else None,
            _integer(cells.get("number")) or 0,
            False,
            dict(saved[trial_id].get("config") or {}),
            tuple(map(_epoch_row, rows.get(trial_id, []))),
            tuple(map(_span, spans.get(trial_id, []))),
            cells,
        )
    return endings


def _ended_in_saved_recorder(experiment_dir: Path) -> set[str] | None:
    """The trials Ray's saved copy of the recorder holds as ended; None when Ray saved no copy.

    Ray saves it with its own state, so the two agree but for one case: an earlier resume ended
    trials in Ray's state (``compat.end_saved_trials``) and was killed before Ray saved again. The
    recorder, restored from its older copy, kept such a trial running (or had none, when it had
    waited for a slot), and the search stopped it as it ended ("trial 1 stopped after 3 epochs")
    though the study held it completed after 4 (explorer seed 122316).
    """
    from tunekit.compat.ray_saved_state import saved_callback_states
    from tunekit.driver.saved_records import records_of

    states = [
        state for state in saved_callback_states(experiment_dir) if isinstance(state, Mapping) and "records" in state
    ]
    if not states:
        return None
    return {
        trial_id
        for state in states
        for trial_id, record in records_of(state["records"])[0].items()
        if TrialStatus(record.status).is_finished()
    }


def _stopped_for_good(tables: list[dict[str, str]], saved: dict[str, dict[str, Any]]) -> dict[str, dict[str, str]]:
    """``trials.csv``'s rows of the trials a stopper of the whole search (its time budget, the
    failure guard) stopped that Ray's saved state holds as ended (they end as ``TABLES_STOPPED``).

    Why: Ray stops the running trials when a stopper says so without telling the callbacks,
    saves its state for the last time, and only then ends the experiment, where the recorder
    settles them and writes its tables. Ray's saved copy of the recorder still has them
    running: resumed, they were counted as running (3 running of 2 slots), never ran, and
    ended again, announced once more at each resume.
    """
    return {
        cells["trial_id"]: cells
        for cells in tables
        if stopped_for_good(cells.get("status"), cells.get("reason"))
        and saved.get(cells.get("trial_id", ""), {}).get("status") == "TERMINATED"
    }


def interrupted_runs(experiment_dir: Path, known: set[str], session_end: float) -> dict[str, TrialRecord]:
    """Runs the killed driver's ``trials.csv`` still calls running, of trials the restored
    records do not know: Ray's saved state has them waiting (they started after its save),
    so the resume starts them afresh, as a new attempt. Their run in the dead session held
    a slot all the same: each comes back with its attempts and its spans from ``spans.csv``,
    the open one closed at ``session_end`` (the dead session's end, in active seconds).
    """
    running = {
        cells["trial_id"]: cells
        for cells in table_rows(experiment_dir / TRIALS_FILE)
        if cells.get("status") == "running" and cells.get("trial_id") and cells["trial_id"] not in known
    }
    if not running:
        return {}
    spans = _by_trial(table_rows(experiment_dir / SPANS_FILE), set(running))
    runs = {}
    for trial_id, cells in running.items():
        record = TrialRecord(trial_id, _integer(cells.get("number")), {}, attempts=_integer(cells.get("attempts")) or 1)
        record.started_at = float(cells.get("started_at") or record.started_at)
        for start, end, worker in map(_span, spans.get(trial_id, [])):
            record.spans.append([start, end])
            record.span_workers.append(worker)
        record.close_span(session_end)
        runs[trial_id] = record
    return runs


def _study_steps(trial: optuna.trial.FrozenTrial, metric: str) -> dict[int, dict[str, float]]:
    """{epoch: metrics} from the study: its intermediate values (several objectives: each
    epoch's tracked metrics), and the final result it kept."""
    steps = {int(step): {metric: float(value)} for step, value in trial.intermediate_values.items()}
    steps.update((epoch, metrics) for epoch, metrics in epoch_results(trial.user_attrs).items() if metrics)
    final = trial.user_attrs.get(FINAL_RESULT_ATTR)
    if isinstance(final, dict) and final.get("metrics"):
        steps[int(final["epoch"])] = {str(k): float(v) for k, v in final["metrics"].items()}
    return steps


def _epoch_row(cells: dict[str, str]) -> EpochRow:
    """An epochs.csv row as the recorder held it (tunekit.driver.records.EpochsTable writes them)."""
    metrics = {name: float(text) for name, text in cells.items() if name not in EPOCH_COLUMNS and text}
    return EpochRow(
        cells["trial_id"],
        int(cells["epoch"]),
        metrics,
        int(cells.get("attempt") or 1),
        _integer(cells.get("resumed_from_epoch")),
        float(cells.get("time") or 0.0),
    )


def _span(cells: dict[str, str]) -> tuple[float, float | None, dict[str, Any]]:
    """A spans.csv row (tunekit.driver.records.SpansTable): its stretch and who ran it."""
    end = cells.get("end")
    worker = {
        "attempt": _integer(cells.get("attempt")),
        "node_id": cells.get("node_id") or "",
        "pid": _integer(cells.get("pid")),
    }
    return float(cells.get("start") or 0.0), float(end) if end else None, worker


def _integer(text: str | None) -> int | None:
    return int(float(text)) if text else None


def _by_trial(rows: list[dict[str, str]], trial_ids: set[str]) -> dict[str, list[dict[str, str]]]:
    found: dict[str, list[dict[str, str]]] = {}
    for cells in rows:
        if cells.get("trial_id") in trial_ids:
            found.setdefault(cells["trial_id"], []).append(cells)
    return found
