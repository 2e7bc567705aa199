"""PBT without a Ray run: the spec's rules, and RecordingPBT driven with made-up results.

The scheduler gets real Ray ``Trial`` objects and a small stand-in for Ray's controller
(the calls PBT makes on it: list the trials, pause one); checkpoints are real folders.
A real search: tests/e2e/test_pbt.py.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from ray import tune
from ray.tune.experiment import Trial
from ray.tune.schedulers import TrialScheduler

from tunekit.compat.ray_tune import checkpoint_path, pbt_trial_state, set_trial_restore_checkpoint
from tunekit.config.spec import ExperimentSpec, load_spec
from tunekit.errors import SpecError
from tunekit.layout import EPOCH_KEY, EXPLOITED_CHECKPOINT_PREFIX, INFO_KEY, STOPPED_BY_MODEL
from tunekit.search.pbt import ExploitStep, RecordingPBT, mutations, write_exploits_csv
from tunekit.search.schedulers import build_scheduler, checkpoints_to_keep
from tunekit.storage.clock import SearchClock

REPO = Path(__file__).resolve().parents[3]
METRIC = "val_accuracy"


def raw_spec(**scheduler: Any) -> dict[str, Any]:
    return {
        "name": "pbt",
        "trainable": "trainables.digits_mlp",
        "metric": {"name": METRIC, "mode": "max"},
        "budget": {"num_samples": 4, "max_epochs": 6, "max_concurrent": 4},
        "scheduler": {"type": "pbt", "perturbation_interval": 2, **scheduler},
        "space": {
            "learning_rate": {"type": "loguniform", "low": 1e-4, "high": 1e-2},
            "dropout": {"type": "uniform", "low": 0.0, "high": 0.5, "step": 0.1},
            "units": {"type": "choice", "values": [32, 64]},
            "layers": {"type": "int", "low": 1, "high": 3},
            "optimizer": {"type": "choice", "values": ["adam", "sgd"]},
            "momentum": {"type": "uniform", "low": 0.5, "high": 0.9, "when": {"optimizer": "sgd"}},
        },
    }


def spec_with(**scheduler: Any) -> ExperimentSpec:
    return load_spec(raw_spec(**scheduler))


def error_of(raw: dict[str, Any]) -> str:
    with pytest.raises(SpecError) as raised:
        load_spec(raw)
    return str(raised.value)


# ------------------------------------------------------------------------ the spec


def test_by_default_every_unconditional_float_mutates() -> None:
    spec = spec_with()
    assert spec.scheduler.mutate == ("learning_rate", "dropout")
    assert (spec.scheduler.quantile_fraction, spec.scheduler.resample_probability) == (0.25, 0.25)
    assert spec.raw["scheduler"] == {
        "type": "pbt",
        "perturbation_interval": 2,
        "quantile_fraction": 0.25,
        "resample_probability": 0.25,
        "mutate": ["learning_rate", "dropout"],
    }


def test_other_schedulers_record_only_their_own_keys() -> None:
    raw = raw_spec()
    raw["scheduler"] = {"type": "asha", "grace_period": 2}
    assert load_spec(raw).raw["scheduler"] == {"type": "asha", "grace_period": 2, "reduction_factor": 3.0}


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            ["learning_rate", "units"],
            "scheduler.mutate[1]: must be a uniform or loguniform parameter; units is choice, which may change "
            "the model's shape, so PBT cannot carry weights across it, got 'units'",
        ),
        (
            ["layers"],
            "scheduler.mutate[0]: must be a uniform or loguniform parameter; layers is int, which may change "
            "the model's shape, so PBT cannot carry weights across it, got 'layers'",
        ),
        (
            ["momentum"],
            "scheduler.mutate[0]: must not be conditional; momentum has when: {'optimizer': ('sgd',)}, got 'momentum'",
        ),
        (
            ["lr"],
            "scheduler.mutate[0]: is not a parameter of the space; it has learning_rate, dropout, units, layers, "
            "optimizer, momentum, got 'lr'",
        ),
        (["dropout", "dropout"], "scheduler.mutate[1]: is listed twice, got 'dropout'"),
        ([], "scheduler.mutate: must not be empty, got a list of 0"),
        ("dropout", "scheduler.mutate: must be a list, got 'dropout'"),
    ],
)
def test_a_parameter_that_cannot_mutate_is_refused_with_path_rule_and_value(mutate: Any, message: str) -> None:
    assert error_of(raw_spec(mutate=mutate)) == message


def test_a_space_without_a_float_has_nothing_to_mutate() -> None:
    raw = raw_spec()
    raw["space"] = {"units": {"type": "choice", "values": [32, 64]}}
    assert error_of(raw) == (
        "scheduler.mutate: PBT needs a parameter to mutate, and the space has no unconditional uniform or "
        "loguniform one (it has units)"
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"search": {"algorithm": "grid"}}, None),
        ({"budget": {"num_samples": 1, "max_concurrent": 1}}, None),
        ({"budget": {"max_concurrent": 2}}, None),
        ({"scheduler": {"grace_period": 2}}, "scheduler.grace_period: is an ASHA setting; PBT uses "),
        ({"scheduler": {"perturbation_interval": 6}}, "scheduler.perturbation_interval: must be < budget.max_epochs"),
        ({"scheduler": {"quantile_fraction": 0}}, "scheduler.quantile_fraction: must be 0 < x <= 0.5, got 0.0"),
        ({"scheduler": {"quantile_fraction": 0.6}}, "scheduler.quantile_fraction: must be 0 < x <= 0.5, got 0.6"),
        ({"scheduler": {"resample_probability": 1.5}}, "scheduler.resample_probability: must be 0 <= x <= 1"),
    ],
)
def test_pbt_rules_of_the_whole_spec(change: dict[str, Any], message: str | None) -> None:
    raw = raw_spec()
    for section, values in change.items():
        raw.setdefault(section, {}).update(values)
    if section == "search":  # a grid: every parameter on one (2 x 6 points), run once each
        raw["space"] = {"units": raw["space"]["units"], "dropout": raw["space"]["dropout"]}
        raw["budget"].update(num_samples=12, max_concurrent=12)
    expected = {
        "search": "search.algorithm: must be tpe or random with scheduler.type pbt: PBT moves the configurations "
        "grid search pins, got 'grid'",
        "budget": "budget.num_samples: must be >= 2 with scheduler.type pbt (the population), got 1"
        if raw["budget"]["num_samples"] == 1
        else "budget.max_concurrent: must equal budget.num_samples (4) with scheduler.type pbt: the whole "
        "population lives at once, and Ray takes turns training it on the CPUs and GPUs there are, got 2",
    }
    assert error_of(raw).startswith(message or expected[section])


def test_pbt_keys_under_asha_are_refused() -> None:
    raw = raw_spec()
    raw["scheduler"] = {"type": "asha", "mutate": ["dropout"]}
    assert error_of(raw) == "scheduler.mutate: is a PBT setting; set scheduler.type: pbt to use it, got a list of 1"


def test_the_shipped_pbt_specs_validate() -> None:
    digits = load_spec(REPO / "search_spaces" / "digits_mlp_pbt.yaml")
    assert (digits.scheduler.type, digits.scheduler.mutate) == ("pbt", ("learning_rate", "dropout"))
    cifar = load_spec(REPO / "search_spaces" / "cifar_resnet_pbt.yaml")
    assert cifar.scheduler.type == "pbt"
    assert set(cifar.scheduler.mutate) == {"learning_rate", "weight_decay", "label_smoothing"}


# ------------------------------------------------------------------- the scheduler


class Controller:
    """What PBT calls on Ray's tune controller, for trials this test drives by hand."""

    search_alg = object()  # a searcher is set, as in tunekit's searches

    def __init__(self, trials: list[Trial]) -> None:
        self.trials = trials
        self.paused: list[str] = []

    def get_trials(self) -> list[Trial]:
        return self.trials

    def get_live_trials(self) -> list[Trial]:
        return [t for t in self.trials if not t.is_finished()]

    def _schedule_trial_save(self, trial: Trial, result: dict[str, Any]) -> Any:
        return trial.checkpoint  # a function trainable's save is its last reported checkpoint

    def pause_trial(self, trial: Trial, should_checkpoint: bool = True) -> None:
        self.paused.append(trial.trial_id)
        trial.set_status(Trial.PAUSED)


def population(tmp_path: Path, spec: ExperimentSpec) -> tuple[RecordingPBT, Controller, list[Trial]]:
    configs = [{"learning_rate": 1e-3 * (i + 1), "dropout": 0.1 * i, "units": 32 * (i + 1)} for i in range(4)]
    trials = [Trial("__fake", config=c, trial_id=f"t{i}", stub=True) for i, c in enumerate(configs)]
    scheduler = build_scheduler(spec, tmp_path)
    assert isinstance(scheduler, RecordingPBT)
    controller = Controller(trials)
    for trial in trials:
        scheduler.on_trial_add(controller, trial)  # not refused although a searcher is set
        trial.set_status(Trial.RUNNING)
    return scheduler, controller, trials


def report_epoch(
    scheduler: RecordingPBT, controller: Controller, trials: list[Trial], epoch: int, tmp_path: Path
) -> list[str]:
    """Every trial reports ``epoch`` with a checkpoint; trial i scores 0.5 + 0.1 i. Returns the decisions."""
    decisions = []
    for i, trial in enumerate(trials):
        folder = tmp_path / trial.trial_id / f"checkpoint_{epoch:06d}"
        folder.mkdir(parents=True)
        (folder / "state.json").write_text(json.dumps({"epoch": epoch, "config": trial.config}))
        set_trial_restore_checkpoint(trial, tune.Checkpoint.from_directory(str(folder)))
        result = {EPOCH_KEY: epoch, METRIC: 0.5 + 0.1 * i}
        pbt_trial_state(scheduler, trial).last_result = result
        decision = scheduler.on_trial_result(controller, trial, result)
        if decision == TrialScheduler.PAUSE:
            trial.set_status(Trial.PAUSED)
        decisions.append(decision)
    return decisions


def test_an_exploit_is_recorded_and_restarts_from_a_copy_of_the_source_checkpoint(tmp_path: Path) -> None:
    scheduler, controller, trials = population(tmp_path, spec_with(resample_probability=0.0))
    report_epoch(scheduler, controller, trials, 1, tmp_path)
    assert scheduler.exploits == []  # epoch 1 is before the first perturbation (interval 2)
    report_epoch(scheduler, controller, trials, 2, tmp_path)

    [step] = scheduler.exploits
    assert (step.trial_id, step.epoch, step.source_trial_id, step.source_epoch) == ("t0", 2, "t3", 2)
    assert step.old == {"learning_rate": 1e-3, "dropout": 0.0, "units": 32}
    assert step.new["units"] == 128  # the source's configuration, not mutated
    assert step.new["learning_rate"] in (pytest.approx(4e-3 * 0.8), pytest.approx(4e-3 * 1.2))
    assert step.new["dropout"] in (pytest.approx(0.2), pytest.approx(0.4))  # 0.3 x 0.8 or 1.2, on its 0.1 step
    copy_dir = tmp_path / "t0" / f"{EXPLOITED_CHECKPOINT_PREFIX}000000"
    assert json.loads((copy_dir / "state.json").read_text())["config"]["units"] == 128
    assert trials[0].checkpoint is not None and Path(trials[0].checkpoint.path) == copy_dir
    assert trials[0].config == step.new
    # The restart that follows PBT's pause is not a retry; a second start would be.
    assert scheduler.restarted_after_pause("t0") and not scheduler.restarted_after_pause("t0")


def test_the_last_epoch_is_never_exploited(tmp_path: Path) -> None:
    scheduler, controller, trials = population(tmp_path, spec_with(perturbation_interval=1))
    for epoch in (1, 2, 3, 4, 5):
        report_epoch(scheduler, controller, trials, epoch, tmp_path)
    assert len(scheduler.exploits) == 5  # the weakest copies the strongest at every epoch
    assert report_epoch(scheduler, controller, trials, 6, tmp_path) == [TrialScheduler.CONTINUE] * 4
    assert len(scheduler.exploits) == 5


def test_a_model_that_stops_itself_ends_its_trial_even_at_a_meeting(tmp_path: Path) -> None:
    scheduler, controller, trials = population(tmp_path, spec_with(resample_probability=0.0))
    report_epoch(scheduler, controller, trials, 1, tmp_path)
    # At the meeting at epoch 2, t0 (the weakest) reports its last epoch: its EarlyStopping fired.
    result = {EPOCH_KEY: 2, METRIC: 0.4, f"{INFO_KEY}/{STOPPED_BY_MODEL}": 2}
    assert scheduler.on_trial_result(controller, trials[0], result) == TrialScheduler.CONTINUE
    trials[0].set_status(Trial.TERMINATED)  # Ray ends it: its trainable returned
    report_epoch(scheduler, controller, trials[1:], 2, tmp_path)
    assert [(step.trial_id, step.source_trial_id) for step in scheduler.exploits] == [("t1", "t3")]


def test_an_exploit_of_a_checkpoint_gone_from_disk_is_skipped(tmp_path: Path) -> None:
    scheduler, controller, trials = population(tmp_path, spec_with())
    source = pbt_trial_state(scheduler, trials[3])
    source.last_checkpoint = tune.Checkpoint.from_directory(str(tmp_path / "rotated_away"))
    config = copy.deepcopy(trials[0].config)
    scheduler._exploit(controller, trials[0], trials[3])  # PBT's hook, as its exploit step calls it
    assert scheduler.exploits == [] and controller.paused == [] and trials[0].config == config


def restored_from_checkpoint(trial: Trial, folder: Path, epoch: int) -> None:
    """The trial as Ray restores it: its last checkpoint (a real folder) was of ``epoch``."""
    from ray.train._internal.session import _TrainingResult

    folder.mkdir(parents=True)
    (folder / "state.json").write_text(json.dumps({"epoch": epoch, "config": trial.config}))
    checkpoint = tune.Checkpoint.from_directory(str(folder))
    manager = trial.run_metadata.checkpoint_manager
    assert manager is not None
    manager.register_checkpoint(_TrainingResult(checkpoint, {EPOCH_KEY: epoch}))


def test_replay_restores_scores_perturbation_times_and_the_next_meeting(tmp_path: Path) -> None:
    spec = spec_with()
    config = {"learning_rate": 1e-3, "dropout": 0.1}
    trials = [Trial("__fake", config=dict(config), trial_id=f"t{i}", stub=True) for i in range(4)]
    scheduler = build_scheduler(spec, tmp_path)
    assert isinstance(scheduler, RecordingPBT)
    steps = [ExploitStep("t1", 2, "t0", 2, {"learning_rate": 1e-3}, {"learning_rate": 8e-4})]
    recorded = {
        "t0": {1: 0.5, 2: 0.6, 3: 0.7},
        "t1": {1: 0.4, 2: 0.45, 3: 0.5, 4: 0.55},
        "t2": {1: 0.3, 2: 0.35, 3: 0.4, 4: 0.45},  # recorded to 4, but Ray saved its checkpoint of 3
        "t3": {1: 0.2},  # recorded to 1, and no checkpoint Ray knew of
    }
    for trial, epoch in zip(trials, (3, 4, 3), strict=False):
        restored_from_checkpoint(trial, tmp_path / trial.trial_id / f"checkpoint_{epoch:06d}", epoch)
    scheduler.replay(recorded, steps, list(recorded), all_started=True)
    controller = Controller(trials)
    for trial in trials:
        scheduler.on_trial_add(controller, trial)
    states = [pbt_trial_state(scheduler, t) for t in trials]
    assert [(s.last_score, s.last_perturbation_time, s.last_train_time) for s in states] == [
        (0.6, 2, 2),
        (0.55, 4, 4),
        (0.35, 2, 2),  # its checkpoint's state: it trains epochs 3 and 4 again
        (None, 0, 0),  # from scratch
    ]
    # t3's next meeting would be at 2, but a step at 2 is recorded: that meeting was held.
    assert scheduler._next_perturbation_sync == 4
    assert states[1].last_result == {EPOCH_KEY: 4, METRIC: 0.55}
    assert [t.status for t in trials] == [Trial.PENDING, Trial.PAUSED, Trial.PENDING, Trial.PENDING]
    assert scheduler.exploits == steps
    scheduler.replay(recorded, [], list(recorded), all_started=True)
    assert scheduler._next_perturbation_sync == 2  # without it, t3's next meeting is the population's


def test_a_step_ray_s_saved_state_missed_is_taken_again_on_resume(tmp_path: Path) -> None:
    # The driver died after recording t1's step at the meeting at epoch 2 and before Ray saved
    # its state again: Ray restores t1 from its own epoch-2 checkpoint under its old configuration.
    scheduler = build_scheduler(spec_with(), tmp_path)
    assert isinstance(scheduler, RecordingPBT)
    old, new = {"learning_rate": 1e-3, "dropout": 0.1}, {"learning_rate": 2e-3, "dropout": 0.2}
    trials = [Trial("__fake", config=dict(old), trial_id=f"t{i}", stub=True) for i in range(3)]
    for trial in trials:
        restored_from_checkpoint(trial, tmp_path / trial.trial_id / "checkpoint_000001", 2)
    copies = []
    for number, trial in enumerate(trials):
        copies.append(tmp_path / trial.trial_id / f"{EXPLOITED_CHECKPOINT_PREFIX}{number:06d}")
        copies[-1].mkdir()
    set_trial_restore_checkpoint(trials[1], tune.Checkpoint.from_directory(str(copies[1])))  # t1: Ray saved it
    restored_from_checkpoint(trials[2], tmp_path / "t2" / "checkpoint_000002", 3)  # t2: trained on after it
    steps = [ExploitStep(t.trial_id, 2, "t9", 2, dict(old), dict(new)) for t in trials]
    scheduler.replay({t.trial_id: {1: 0.5, 2: 0.6} for t in trials}, steps, [t.trial_id for t in trials], True)
    controller = Controller(trials)
    for trial in trials:
        scheduler.on_trial_add(controller, trial)
    restarts = [checkpoint_path(trial) for trial in trials]
    assert trials[0].config == new and restarts[0] == copies[0]
    assert pbt_trial_state(scheduler, trials[0]).last_perturbation_time == 2
    assert trials[1].config == old and restarts[1] == copies[1]  # as Ray saved it
    assert trials[2].config == old and restarts[2] == tmp_path / "t2" / "checkpoint_000002"


def test_the_next_meeting_counts_trials_that_go_on_without_a_reported_epoch(tmp_path: Path) -> None:
    # Killed with t0 and t1 waiting at the meeting at epoch 2, t2 started and not yet reported,
    # and t3 done (its model stopped it at epoch 1): the population meets at 2, not at 4.
    scheduler = build_scheduler(spec_with(), tmp_path)
    assert isinstance(scheduler, RecordingPBT)
    recorded = {"t0": {1: 0.5, 2: 0.6}, "t1": {1: 0.4, 2: 0.5}, "t3": {1: 0.1}}
    scheduler.replay(recorded, [], ["t0", "t1", "t2"], all_started=True)
    assert scheduler._next_perturbation_sync == 2
    scheduler.replay(recorded, [], ["t0", "t1"], all_started=True)
    assert scheduler._next_perturbation_sync == 4  # t3 ended: it does not hold the others back
    scheduler.replay(recorded, [], ["t0", "t1"], all_started=False)  # a trial Ray had not started yet
    assert scheduler._next_perturbation_sync == 2


def chosen_by(scheduler: RecordingPBT, controller: Controller) -> str | None:
    """The id of the trial PBT would start next."""
    trial = scheduler.choose_trial_to_run(controller)  # type: ignore[arg-type]
    return None if trial is None else trial.trial_id


def test_a_population_resumed_mid_meeting_meets_where_it_stopped(tmp_path: Path) -> None:
    # The driver died while t0 and t2 waited at epoch 4 and t1 and t3 were at 2 (interval 2).
    scheduler = build_scheduler(spec_with(resample_probability=0.0), tmp_path)
    assert isinstance(scheduler, RecordingPBT)
    config = {"learning_rate": 1e-3, "dropout": 0.1, "units": 32}
    trials = [Trial("__fake", config=dict(config), trial_id=f"t{i}", stub=True) for i in range(4)]
    reached = {"t0": 4, "t1": 2, "t2": 4, "t3": 2}
    scores = {"t0": 0.9, "t1": 0.3, "t2": 0.2, "t3": 0.5}
    for trial in trials:  # Ray restores each from its last checkpoint, as PENDING
        epoch = reached[trial.trial_id]
        restored_from_checkpoint(trial, tmp_path / trial.trial_id / f"checkpoint_{epoch:06d}", epoch)
    scheduler.replay({t: {e: scores[t] for e in range(1, reached[t] + 1)} for t in reached}, [], list(reached), True)
    controller = Controller(trials)
    for trial in trials:
        scheduler.on_trial_add(controller, trial)
    # The two waiting at the meeting wait again; Ray starts only the other two.
    assert [t.status for t in trials] == [Trial.PAUSED, Trial.PENDING, Trial.PAUSED, Trial.PENDING]
    assert chosen_by(scheduler, controller) in ("t1", "t3")  # never a waiting one
    for trial in (trials[1], trials[3]):
        trial.set_status(Trial.RUNNING)
        assert not scheduler.restarted_after_pause(trial.trial_id)  # the resume's start: an attempt
        assert scheduler.on_trial_result(controller, trial, {EPOCH_KEY: 3, METRIC: scores[trial.trial_id]}) == (
            TrialScheduler.CONTINUE
        )
    for trial in (trials[1], trials[3]):
        pbt_trial_state(scheduler, trial).last_checkpoint = trial.checkpoint
        assert scheduler.on_trial_result(controller, trial, {EPOCH_KEY: 4, METRIC: scores[trial.trial_id]}) == (
            TrialScheduler.PAUSE
        )
        trial.set_status(Trial.PAUSED)
    # Ranked once, at epoch 4, all four at epoch 4: the weakest copied the strongest's epoch-4 checkpoint.
    [step] = scheduler.exploits
    assert (step.trial_id, step.epoch, step.source_trial_id, step.source_epoch) == ("t2", 4, "t0", 4)
    restart = trials[2].checkpoint
    assert restart is not None and json.loads((Path(restart.path) / "state.json").read_text())["epoch"] == 4
    assert chosen_by(scheduler, controller) is not None  # on to the meeting at epoch 6
    # t2 waited at the meeting and copied t0 there: its first start since the resume is an
    # attempt (the resume's), its next start after a PBT pause is not.
    assert not scheduler.restarted_after_pause("t2")
    scheduler.paused.add("t2")
    assert scheduler.restarted_after_pause("t2")


def test_mutations_resample_within_the_space_and_checkpoints_outlive_an_interval() -> None:
    spec = spec_with(perturbation_interval=3)
    domains = mutations(spec)
    assert set(domains) == {"learning_rate", "dropout"}
    assert all(1e-4 <= domains["learning_rate"].sample() <= 1e-2 for _ in range(20))
    assert checkpoints_to_keep(spec) == 5
    raw = raw_spec()
    raw["scheduler"] = {"type": "asha"}
    assert checkpoints_to_keep(load_spec(raw)) == 2


def test_the_exploit_table_has_every_parameter_before_and_after(tmp_path: Path) -> None:
    step = ExploitStep("t1", 2, "t0", 2, {"learning_rate": 1e-3, "units": 32}, {"learning_rate": 8e-4, "units": 64})
    path = tmp_path / "exploits.csv"
    # Stopped for 10 s between two sessions: the step's time is 8 + 2 active seconds, not 20.
    now = step.wall_time
    clock = SearchClock(now - 20, [[now - 20, now - 12], [now - 2, now + 5]])
    write_exploits_csv(path, [step], {"t0": 0, "t1": 1}, ["learning_rate", "units"], clock)
    assert path.read_text().splitlines() == [
        "trial_id,number,epoch,source_trial_id,source_number,source_epoch,time,"
        "old.learning_rate,old.units,new.learning_rate,new.units",
        "t1,1,2,t0,0,2,10.0,0.001,32,0.0008,64",
    ]
    assert (
        step.describe({"t0": 0}.get)
        == "epoch 2: copied trial 0 (epoch 2); learning_rate 0.001 -> 0.0008, units 32 -> 64"
    )
    unchanged = ExploitStep("t1", 4, "t0", 4, {"learning_rate": 1e-3}, {"learning_rate": 1e-3})
    assert unchanged.describe({"t0": 0}.get) == "epoch 4: copied trial 0 (epoch 4); same configuration"
