"""Trials a killed driver ended after Ray's last save: the resume keeps the dead driver's ending.

A CI run showed what happened before: Ray trained such a trial again, ASHA's rungs had
moved on, so it ended otherwise; the study kept the first ending ([1] intermediate value,
PRUNED) while trials.csv and MLflow took the second (4 epochs). Real Optuna study in
SQLite, the recorder and ASHA as Ray drives them, Ray's state file as Ray 2.60 writes it.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import pickle
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import optuna
import yaml
from ray.tune.schedulers import FIFOScheduler

from tunekit.compat.ray_saved_state import end_saved_trials, finished_trials, saved_stop_decisions, saved_trials
from tunekit.config.spec import parse_spec
from tunekit.driver.late_endings import late_endings
from tunekit.driver.recorder import Recorder
from tunekit.layout import EPOCH_KEY, INFO_KEY, RAY_TRIAL_ATTR, STARTED_FILE, TrialStatus
from tunekit.results.findings import TIME_SLACK_S
from tunekit.search.attrs import PBT_STEPS_ATTR
from tunekit.search.pbt import ExploitStep, RecordingPBT
from tunekit.search.plan import rung_of, study_storage
from tunekit.search.schedulers import RecordingASHA
from tunekit.search.searcher import OptunaStudySearcher

from .test_recorder_state import Numbers
from .test_trial_endings import spec

REPO = Path(__file__).resolve().parents[3]
STATE_FILE = "experiment_state-2026-11-26_12-00-00.json"


def asha() -> RecordingASHA:
    return RecordingASHA(time_attr=EPOCH_KEY, metric="acc", mode="max", max_t=9, grace_period=1, reduction_factor=3)


def report(rec: Recorder, trial_id: str, epoch: int, acc: float) -> None:
    trial: Any = SimpleNamespace(trial_id=trial_id, config={"lr": 0.1})
    result = {EPOCH_KEY: epoch, "acc": acc, "loss": 1.0 - acc, INFO_KEY: {"metrics": ["acc", "loss"]}}
    rec.on_trial_result(0, [], trial, result)


def start(rec: Recorder, trial: Any) -> None:
    rec.on_trial_start(0, [], trial)
    time.sleep(0.002)  # its first epoch takes a while: spans.csv keeps milliseconds


def save_ray_state(directory: Path, statuses: dict[str, str], stops: dict[str, str]) -> None:
    trial_data = [
        [json.dumps({"trial_id": t, "status": s, "config": {"lr": 0.4}}), json.dumps({"last_result": {}})]
        for t, s in statuses.items()
    ]
    state = {"runner_data": {"_cached_trial_decisions": stops, "_queued_trial_decisions": {}}, "trial_data": trial_data}
    (directory / STATE_FILE).write_text(json.dumps(state))


def test_a_trial_ended_after_ray_s_last_save_keeps_the_dead_driver_s_ending(tmp_path: Path) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name="unit", storage=study_storage(tmp_path), direction="maximize")
    asked = {}
    for trial_id in ("t1", "t2", "t3", "t4", "t6"):
        asked[trial_id] = study.ask({"lr": optuna.distributions.FloatDistribution(0.0, 1.0)})
        asked[trial_id].set_user_attr(RAY_TRIAL_ATTR, trial_id)
    first = Recorder(spec(), tmp_path, searcher=Numbers(), scheduler=asha())
    first.clock.begin()  # the session Ray's setup starts
    for trial_id in ("t1", "t2", "t3"):
        trial: Any = SimpleNamespace(trial_id=trial_id, config={"lr": 0.1})
        start(first, trial)
        report(first, trial_id, 1, 0.2)
        asked[trial_id].report(0.2, 1)
    # Ray saves: t1-t3 running, t4 waiting for a slot, a STOP for t1 waiting on its checkpoint.
    saved = pickle.loads(pickle.dumps(first.get_state()))
    save_ray_state(tmp_path, {"t1": "RUNNING", "t2": "RUNNING", "t3": "RUNNING", "t4": "PENDING"}, {"t1": "STOP"})
    # Then, before the next save: t1 reports epoch 2 and ASHA prunes it, t4 starts, trains
    # two epochs and ends by its model's EarlyStopping; the tables are written. t2 trains
    # to the end and completes, and the driver dies before the tables hear of it. t3 runs on.
    report(first, "t1", 2, 0.3)
    asked["t1"].report(0.3, 2)
    study.tell(asked["t1"], state=optuna.trial.TrialState.PRUNED)
    late: Any = SimpleNamespace(trial_id="t4", config={"lr": 0.4})
    start(first, late)
    for epoch in (1, 2):
        report(first, "t4", epoch, 0.7)
        asked["t4"].report(0.7, epoch)
    study.tell(asked["t4"], 0.7)
    # t6 starts after the save too and reports its first epoch; its second and third reach
    # only the study, which prunes it.
    slow: Any = SimpleNamespace(trial_id="t6", config={"lr": 0.6})
    time.sleep(0.1)  # its span begins later than the files' rounding and the check's slack allow
    start(first, slow)
    report(first, "t6", 1, 0.4)
    first.write_tables()
    for epoch in (1, 2, 3):
        asked["t6"].report(0.4, epoch)
    study.tell(asked["t6"], state=optuna.trial.TrialState.PRUNED)
    # The clock file is moved at most once a second, so it can lag the tables: here it
    # says the session ended as it began, before t6's span in spans.csv (a CI failure:
    # t6's study-only epochs were stamped there, outside its span).
    clock = json.loads((tmp_path / STARTED_FILE).read_text())
    clock["sessions"][-1][1] = clock["sessions"][-1][0]
    (tmp_path / STARTED_FILE).write_text(json.dumps(clock))
    for epoch in range(2, 10):
        asked["t2"].report(0.5 + epoch / 100, epoch)
    study.tell(asked["t2"], 0.59)
    # And t5, asked after the save, failed at once: neither Ray's state nor the tables know it.
    unsaved = study.ask({"lr": optuna.distributions.FloatDistribution(0.0, 1.0)})
    unsaved.set_user_attr(RAY_TRIAL_ATTR, "t5")
    study.tell(unsaved, state=optuna.trial.TrialState.FAIL)

    endings = late_endings(study, saved_trials(tmp_path), tmp_path, spec().space, "acc")
    assert set(endings) == {"t1", "t2", "t4", "t5", "t6"}
    assert [endings[t].unsaved for t in ("t1", "t2", "t4", "t5", "t6")] == [False, False, False, True, True]
    end_saved_trials(tmp_path, {"t1", "t2", "t4"})
    assert statuses(tmp_path) == {"t1": "TERMINATED", "t2": "TERMINATED", "t3": "RUNNING", "t4": "TERMINATED"}
    assert finished_trials(saved_trials(tmp_path)) == {"t1", "t2", "t4"}
    assert saved_stop_decisions(tmp_path) == set()  # t1's STOP was carried out: nothing waits
    # A resume killed here, before Ray saved again (explorer seed 122316): Ray's state holds t1, t2
    # and t4 ended, its copy of the recorder (the callbacks' save) running. The next resume ends
    # them in the recorder all the same, where the search stopped t2 "after 1 epoch" at its end.
    (tmp_path / "callback-states-2026-11-26_12-00-00.pkl").write_bytes(pickle.dumps({0: saved}))
    again = late_endings(study, saved_trials(tmp_path), tmp_path, spec().space, "acc")
    assert {t: (e.state, e.unsaved) for t, e in again.items()} == {t: (e.state, e.unsaved) for t, e in endings.items()}

    resumed = Recorder(spec(), tmp_path, searcher=Numbers(), scheduler=asha())
    resumed.adopt_late_endings(endings)
    resumed.set_state(saved)
    t1, t2, t3, t4, t5 = (resumed.trials[t] for t in ("t1", "t2", "t3", "t4", "t5"))
    assert (t1.status, t1.epochs, t1.final_metric, t1.reason) == (
        TrialStatus.PRUNED,
        2,
        0.3,
        "pruned by ASHA at rung 0 (epoch 2)",
    )
    rows = {(row.trial_id, row.epoch): row.metrics for row in resumed.epochs}
    assert rows["t1", 2] == {"acc": 0.3, "loss": 0.7}  # the row the dead driver wrote, every metric
    assert (t2.status, t2.epochs, t2.final_metric, t2.rung) == (TrialStatus.COMPLETED, 9, 0.59, rung_of(9, spec()))
    assert [rows["t2", e] for e in (2, 9)] == [{"acc": 0.52}, {"acc": 0.59}]  # only the study knew them
    assert (t4.number, t4.params, t4.status, t4.reason) == (
        3,  # the study's number
        {"lr": 0.4},
        TrialStatus.COMPLETED,
        "stopped by the model at epoch 2",
    )
    assert len(t4.spans) == 1 and t4.spans[0][1] is not None  # its span, from spans.csv, closed
    assert t3.status == TrialStatus.RUNNING and t3.epochs == 1
    assert (t5.number, t5.params["lr"], t5.status, t5.epochs) == (5, unsaved.params["lr"], TrialStatus.FAILED, 0)
    t6 = resumed.trials["t6"]
    assert (t6.number, t6.status, t6.epochs) == (4, TrialStatus.PRUNED, 3)
    # The resumed ASHA counts t1 and t6 as pruned and every trial's epochs in its rungs.
    assert isinstance(resumed.scheduler, RecordingASHA) and resumed.scheduler.stopped == {"t1", "t6"}
    assert resumed.counts()[TrialStatus.PRUNED] == 2 and resumed.counts()[TrialStatus.COMPLETED] == 2
    spans = {r.trial_id: r.spans for r in resumed.trials.values()}
    for row in resumed.epochs:  # every report inside one of its trial's spans, as tunekit check asks it
        inside = (
            (s or 0.0) - TIME_SLACK_S <= row.at <= (row.at if e is None else e + TIME_SLACK_S)
            for s, e in spans[row.trial_id]
        )
        assert any(inside), (row, spans[row.trial_id])
    resumed.write_tables()
    epochs_csv = (tmp_path / "epochs.csv").read_text().splitlines()
    assert len(epochs_csv) == 1 + 3 + 1 + 2 + 8 + 3  # header, t1-t3's first, t1's second, t4's two, t2's, t6's


def statuses(directory: Path) -> dict[str, str]:
    return {trial_id: trial["status"] for trial_id, trial in saved_trials(directory).items()}


def test_nothing_is_adopted_when_ray_saved_every_ending(tmp_path: Path) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name="unit", storage=study_storage(tmp_path), direction="maximize")
    trial = study.ask({"lr": optuna.distributions.FloatDistribution(0.0, 1.0)})
    trial.set_user_attr(RAY_TRIAL_ATTR, "t1")
    study.tell(trial, 0.5)
    save_ray_state(tmp_path, {"t1": "TERMINATED"}, {})
    assert late_endings(study, saved_trials(tmp_path), tmp_path, spec().space, "acc") == {}


def test_several_objectives_ended_after_ray_s_save_without_written_rows_keep_the_study_s_values(
    tmp_path: Path,
) -> None:
    """Optuna keeps no intermediate values for several objectives: the searcher keeps each
    epoch's tracked metrics on the study trial, and the resume rebuilds the rows the tables
    lacked from them (before, only the last epoch's: trials.csv then counted an epoch that
    epochs.csv lacked, and `tunekit check` failed after the resume)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    objectives = parse_spec(
        {
            "name": "unit",
            "trainable": "not.looked.for",
            "metric": [{"name": "acc", "mode": "max"}, {"name": "params", "mode": "min"}],
            "constraints": ["params <= 1000"],
            "budget": {"num_samples": 4, "max_epochs": 3},
            "search": {"algorithm": "random", "seed": 0},
            "scheduler": {"type": "fifo"},
            "space": {"lr": {"type": "uniform", "low": 0.0, "high": 1.0}},
        },
        None,
        locate_trainable=False,
    )
    searcher = OptunaStudySearcher(objectives, tmp_path)
    config = searcher.suggest("m1")
    assert config is not None
    first = Recorder(objectives, tmp_path, searcher=searcher, scheduler=FIFOScheduler())
    first.clock.begin()
    trial: Any = SimpleNamespace(trial_id="m1", config=config)
    start(first, trial)
    metrics = {"acc": 0.5, "params": 800.0, "loss": 0.5}
    first.on_trial_result(0, [], trial, {EPOCH_KEY: 1, **metrics, INFO_KEY: {"metrics": sorted(metrics)}})
    first.write_tables()
    # Ray saved epoch 1 after the clock file was last touched (it is touched every 5 s).
    first.epochs[0] = dataclasses.replace(first.epochs[0], at=99.0)
    saved = pickle.loads(pickle.dumps(first.get_state()))
    save_ray_state(tmp_path, {"m1": "RUNNING"}, {})
    # Epochs 2 and 3 reach the study, and the driver dies before the tables hear of them.
    searcher.on_trial_result("m1", {EPOCH_KEY: 2, "acc": 0.7, "params": 800.0})
    searcher.on_trial_complete("m1", {EPOCH_KEY: 3, "acc": 0.9, "params": 800.0, "loss": 0.1})
    told = searcher.study.trials[0]
    assert (told.state.name, told.values) == ("COMPLETE", [0.9, 800.0])

    endings = late_endings(searcher.study, saved_trials(tmp_path), tmp_path, objectives.space, objectives.metric.name)
    assert endings["m1"].steps == {2: {"acc": 0.7, "params": 800.0}, 3: {"acc": 0.9, "params": 800.0}}
    resumed = Recorder(objectives, tmp_path, searcher=searcher, scheduler=FIFOScheduler())
    resumed.adopt_late_endings(endings)
    resumed.set_state(saved)
    record = resumed.trials["m1"]
    assert (record.status, record.epochs, record.stopped_by_model) == (TrialStatus.COMPLETED, 3, None)
    assert (record.finals, record.feasible) == ({"acc": 0.9, "params": 800.0}, True)
    rebuilt = [(2, {"acc": 0.7, "params": 800.0}), (3, {"acc": 0.9, "params": 800.0})]
    assert [(row.epoch, row.metrics) for row in resumed.epochs] == [(1, metrics), *rebuilt]  # every epoch trained
    assert [row.at for row in resumed.epochs[1:]] == [99.0, 99.0]  # not before the epoch that came first


def test_pbt_steps_after_ray_s_save_stand_for_running_and_ended_trials_alike(tmp_path: Path) -> None:
    """A killed PBT search whose steps came after Ray's last save: the study, the console and
    MLflow had them, so they stand, for a trial that ended after the save and for one Ray
    restores as the save left it (the scheduler takes its step again: test_pbt). Before, a
    running trial's step was undone, and a meeting whose trials had all arrived was not held
    again: the population lost that step (a user's kill -9 showed it)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    raw = yaml.safe_load((REPO / "search_spaces" / "digits_mlp_pbt.yaml").read_text())
    budget = {"num_samples": 2, "max_epochs": 4, "max_concurrent": 2}
    population = parse_spec({**raw, "budget": budget}, None, locate_trainable=False)
    searcher = OptunaStudySearcher(population, tmp_path)
    configs = {trial_id: searcher.suggest(trial_id) for trial_id in ("p1", "p2")}
    first = Recorder(population, tmp_path, searcher=searcher, scheduler=RecordingPBT(population, tmp_path))
    first.clock.begin()
    trials: dict[str, Any] = {t: SimpleNamespace(trial_id=t, config=c) for t, c in configs.items()}
    for epoch in (1, 2):
        for trial_id, trial in trials.items():
            if epoch == 1:
                start(first, trial)
            result = {EPOCH_KEY: epoch, "val_accuracy": 0.5 + epoch / 10, INFO_KEY: {"metrics": ["val_accuracy"]}}
            first.on_trial_result(0, [], trial, result)
            searcher.on_trial_result(trial_id, result)
    saved = pickle.loads(pickle.dumps(first.get_state()))
    save_ray_state(tmp_path, {"p1": "RUNNING", "p2": "RUNNING"}, {})
    # After the save, each copies the other at epoch 2; p2 then trains to the end and ends.
    assert isinstance(first.scheduler, RecordingPBT)
    for trial_id, source in (("p1", "p2"), ("p2", "p1")):
        old, new = dict(configs[trial_id] or {}), {**(configs[trial_id] or {}), "learning_rate": 0.005}
        first.scheduler.exploits.append(ExploitStep(trial_id, 2, source, 2, old, new))
    first.on_step_end(0, [])  # the study hears of both steps, exploits.csv gets both rows
    for epoch in (3, 4):
        searcher.on_trial_result("p2", {EPOCH_KEY: epoch, "val_accuracy": 0.9})
    searcher.on_trial_complete("p2", {EPOCH_KEY: 4, "val_accuracy": 0.9})

    endings = late_endings(searcher.study, saved_trials(tmp_path), tmp_path, population.space, "val_accuracy")
    assert set(endings) == {"p2"}
    restored: Any = pickle.loads(pickle.dumps(searcher))  # as Ray unpickles it from tuner.pkl
    resumed = Recorder(population, tmp_path, searcher=restored, scheduler=RecordingPBT(population, tmp_path))
    resumed.adopt_late_endings(endings)
    resumed.set_state(saved)
    assert [(s.trial_id, s.epoch, s.source_trial_id, s.new["learning_rate"]) for s in resumed.exploits] == [
        ("p1", 2, "p2", 0.005),
        ("p2", 2, "p1", 0.005),
    ]
    kept = {t.user_attrs[RAY_TRIAL_ATTR]: t.user_attrs.get(PBT_STEPS_ATTR, []) for t in restored.study.trials}
    assert [(s["epoch"], s["source"]) for s in kept["p1"]] == [(2, 1)]
    assert [(s["epoch"], s["source"]) for s in kept["p2"]] == [(2, 0)]
    resumed.write_tables()
    with (tmp_path / "exploits.csv").open() as handle:
        assert [(row["trial_id"], row["epoch"]) for row in csv.DictReader(handle)] == [("p1", "2"), ("p2", "2")]
