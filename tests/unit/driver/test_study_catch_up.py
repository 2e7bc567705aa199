"""A study behind the tables (a bucket's journal uploaded before them), caught up before a resume.

Generated, not chosen: seeded histories of a search (trials asked, epochs reported, endings
told, interleaved), each cut at seeded kill points. The study is the journal as it was at the
kill point, the tables as the driver wrote them later: the bucket's state after a SIGKILL
between two uploads. After the catch-up the study agrees with the tables, and every trial the
tables hold as ended is a late ending (Ray's state, saved earlier, has it running), which the
resume ends in Ray's state: it is never trained again. Real Optuna journal, the real searcher.
"""

from __future__ import annotations

import csv
import random
import shutil
from pathlib import Path
from typing import Any

import optuna
import pytest

from tunekit.config.spec import ExperimentSpec
from tunekit.driver.late_endings import late_endings
from tunekit.driver.study_catch_up import catch_up_study
from tunekit.layout import EPOCH_COLUMNS, EPOCH_KEY, EPOCHS_FILE, RAY_TRIAL_ATTR, TRIAL_COLUMNS, TRIALS_FILE, study_file
from tunekit.search.plan import study_storage
from tunekit.search.searcher import OptunaStudySearcher

from .test_late_endings import save_ray_state
from .test_trial_endings import spec as unit_spec

MAX_EPOCHS = 4
HISTORIES = 6
KILLS_PER_HISTORY = 5
STUDY_STATE = {"completed": "COMPLETE", "pruned": "PRUNED", "failed": "FAIL", "running": "RUNNING"}
# lr's distribution: continuous, or six values, where TPE proposes configurations that ran again
# (each taking no trial number: the numbers trials.csv holds are the study's next ones).
SPACES = {
    "continuous": None,
    "discrete": {"type": "choice", "values": [0.1, 0.2, 0.4, 0.8, 1.6, 3.2]},
}


def _history(rng: random.Random) -> tuple[list[tuple[str, str, Any]], dict[str, str]]:
    """A search's events in the order the driver met them, and each trial's fate."""
    fates: dict[str, str] = {}
    plans: dict[str, list[tuple[str, str, Any]]] = {}
    for number in range(rng.randint(3, 6)):
        trial_id = f"t{number}"
        fate = rng.choice(["completed", "pruned", "failed", "running"])
        epochs = MAX_EPOCHS if fate == "completed" else rng.randint(1, MAX_EPOCHS - 1)
        fates[trial_id] = fate
        plan: list[tuple[str, str, Any]] = [("ask", trial_id, None)]
        plan += [("epoch", trial_id, {EPOCH_KEY: e, "acc": round(rng.random(), 4)}) for e in range(1, epochs + 1)]
        if fate != "running":
            plan.append(("end", trial_id, fate))
        plans[trial_id] = plan
    events = []
    while any(plans.values()):  # interleaved as concurrent trials are, each trial's own order kept
        trial_id = rng.choice([t for t, plan in plans.items() if plan])
        events.append(plans[trial_id].pop(0))
    return events, fates


def _run(
    events: list[tuple[str, str, Any]], experiment: Path, spec: ExperimentSpec
) -> tuple[list[int], dict[str, dict[int, float]], dict[str, int], int]:
    """Plays the events through the searcher into the experiment's journal; returns the journal's
    size after each event (index 0: the study made, no trial yet), the epochs reported, each
    trial's study number and how many proposals repeated a configuration."""
    searcher = OptunaStudySearcher(spec, experiment)
    searcher.study  # noqa: B018 - the study is made first, as a search makes it
    journal = study_file(experiment)
    sizes = [journal.stat().st_size]
    reported: dict[str, dict[int, float]] = {}
    last: dict[str, dict[str, Any]] = {}
    for kind, trial_id, detail in events:
        if kind == "ask":
            assert searcher.suggest(trial_id) is not None
        elif kind == "epoch":
            searcher.on_trial_result(trial_id, detail)
            reported.setdefault(trial_id, {})[detail[EPOCH_KEY]] = detail["acc"]
            last[trial_id] = detail
        else:
            searcher.on_trial_complete(trial_id, dict(last[trial_id]), error=detail == "failed")
        sizes.append(journal.stat().st_size)
    numbers = {trial_id: searcher.trial_number(trial_id) for kind, trial_id, _ in events if kind == "ask"}
    known = {trial_id: number for trial_id, number in numbers.items() if number is not None}
    return sizes, reported, known, len(searcher.repeated)


def _write_tables(
    experiment: Path,
    fates: dict[str, str],
    reported: dict[str, dict[int, float]],
    numbers: dict[str, int],
    params: dict[str, dict[str, Any]],
) -> None:
    """trials.csv and epochs.csv as the driver wrote them after the last event."""
    with (experiment / TRIALS_FILE).open("w", newline="") as out:
        trials = csv.DictWriter(out, [*TRIAL_COLUMNS, "params.lr"], restval="")
        trials.writeheader()
        for trial_id, fate in fates.items():
            epochs, number = reported.get(trial_id, {}), numbers[trial_id]
            final = epochs[max(epochs)] if epochs and fate == "completed" else ""
            kept = max(epochs) if epochs and fate == "completed" else ""
            row = {"trial_id": trial_id, "number": number, "status": fate, "epochs": len(epochs), "attempts": 1}
            trials.writerow({**row, "final_metric": final, "kept_epoch": kept, "params.lr": params[trial_id]["lr"]})
    with (experiment / EPOCHS_FILE).open("w", newline="") as out:
        rows = csv.DictWriter(out, [*EPOCH_COLUMNS, "acc"], restval="")
        rows.writeheader()
        for trial_id, epochs in reported.items():
            for epoch, acc in sorted(epochs.items()):
                rows.writerow({"trial_id": trial_id, "epoch": epoch, "attempt": 1, "time": epoch, "acc": acc})


@pytest.mark.parametrize("space", SPACES)
@pytest.mark.parametrize("seed", range(HISTORIES))
def test_a_study_cut_at_any_moment_catches_up_and_no_ended_trial_trains_again(
    tmp_path: Path, seed: int, space: str
) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rng = random.Random(seed)
    events, fates = _history(rng)
    whole = tmp_path / "whole"
    whole.mkdir()
    spec = unit_spec(SPACES[space], max_epochs=MAX_EPOCHS)
    sizes, reported, numbers, repeated = _run(events, whole, spec)
    assert (repeated > 0) == (space == "discrete")  # every discrete history had repeats to number past
    assert sorted(numbers.values()) == list(range(len(numbers)))
    whole_study = optuna.load_study(study_name="unit", storage=study_storage(whole))
    params = {t.user_attrs[RAY_TRIAL_ATTR]: t.params for t in whole_study.trials}
    _write_tables(whole, fates, reported, numbers, params)
    for kill in sorted(rng.sample(range(1, len(sizes)), min(KILLS_PER_HISTORY, len(sizes) - 1))):
        experiment = tmp_path / f"killed-{kill}"
        shutil.copytree(whole, experiment)
        with study_file(experiment).open("r+b") as journal:  # the journal as uploaded at the kill point
            journal.truncate(sizes[kill])
        asked = {trial_id for kind, trial_id, _ in events[:kill] if kind == "ask"}
        save_ray_state(experiment, dict.fromkeys(asked, "RUNNING"), {})  # Ray saved before the kill point
        study = optuna.load_study(study_name=spec.name, storage=study_storage(experiment))
        ended, added = catch_up_study(study, spec, experiment)

        study = optuna.load_study(study_name=spec.name, storage=study_storage(experiment))
        by_ray_id = {t.user_attrs[RAY_TRIAL_ATTR]: t for t in study.trials}
        # Asked after the kill point: every one trials.csv holds follows the study's last trial, in
        # order; the ended ones are added as the searcher told them, the running ones asked again.
        joined = set(fates)
        assert set(by_ray_id) == joined, kill
        for trial_id in joined:
            trial, where = by_ray_id[trial_id], f"history {seed}, kill point {kill}, {trial_id}"
            assert trial.number == numbers[trial_id] and trial.params == params[trial_id], where
            assert trial.state.name == STUDY_STATE[fates[trial_id]], where
            assert trial.intermediate_values == reported.get(trial_id, {}), where
            if fates[trial_id] == "completed":
                assert trial.value == whole_study.trials[numbers[trial_id]].value, where
        assert catch_up_study(study, spec, experiment) == (0, 0)  # once caught up, nothing more to take
        lagging = [e for e in events[kill:] if e[1] in asked]
        asked_again = {t for t in joined - asked if fates[t] == "running"}  # their epochs come as a RUNNING trial's
        assert added == sum(kind == "epoch" for kind, _, _ in lagging) + sum(
            len(reported.get(t, {})) for t in asked_again
        )
        assert ended == sum(kind == "end" for kind, _, _ in lagging) + len(joined - asked - asked_again)
        saved = {t: {"status": "RUNNING", "config": {"lr": 0.4}} for t in asked}
        endings = late_endings(study, saved, experiment, spec.space, spec.metric.name)
        assert set(endings) == {t for t in joined if fates[t] != "running"}  # ended in Ray's state by the resume
