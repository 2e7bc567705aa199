"""Population-based training that records every exploit step and survives a resume.

Ray's ``PopulationBasedTraining`` does the work: at every ``perturbation_interval`` epochs
a trial in the bottom ``quantile_fraction`` of the population is paused, takes the
checkpoint of a trial in the top fraction and a perturbed copy of its configuration
(each mutated value times 0.8 or 1.2, or resampled with ``resample_probability``), and
restarts from there. The trainable (``tunekit.worker``) restores the weights and
optimizer state and applies the new configuration (see ``tunekit.worker.checkpoints``).

``RecordingPBT`` adds what tunekit needs around it:

* every exploit step as an ``ExploitStep`` (epoch, trial, source, old and new values),
  which the recorder writes to ``exploits.csv`` and the tracker to MLflow;
* the source checkpoint copied into the exploiting trial's own folder, so the source's
  checkpoint rotation cannot delete it while the trial waits for a free slot;
* mutated values kept inside the space's bounds (Ray's perturbation would leave them);
* which trials it paused, so a restart after a pause is not counted as a retry;
* ``replay``: Ray does not save scheduler state, so a resumed search refills each
  trial's last score and perturbation time from the recorded epochs.

tunekit's Optuna searcher proposes the initial population (Ray's PBT refuses searchers;
see ``tunekit.compat.ray_tune.pbt_add_trial_beside_searcher`` for why that refusal is lifted).
"""

from __future__ import annotations

import csv
import io
import logging
import shutil
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ray import tune
from ray.tune.experiment import Trial
from ray.tune.schedulers import PopulationBasedTraining, TrialScheduler

from tunekit.compat.ray_tune import (
    checkpoint_epoch,
    checkpoint_path,
    pbt_add_trial_beside_searcher,
    pbt_next_sync,
    pbt_set_next_sync,
    pbt_trial_state,
    set_trial_restore_checkpoint,
)
from tunekit.config.space import FloatRange
from tunekit.config.spec import ExperimentSpec
from tunekit.layout import (
    EPOCH_KEY,
    EXPLOIT_COLUMNS,
    EXPLOITED_CHECKPOINT_PREFIX,
    NEW_PREFIX,
    OLD_PREFIX,
    stopped_by_model,
)
from tunekit.storage.clock import SearchClock
from tunekit.storage.store import write_text

logger = logging.getLogger("tunekit")


@dataclass
class ExploitStep:
    """One exploit: ``trial_id`` at ``epoch`` took ``source_trial_id``'s checkpoint of
    ``source_epoch`` and went on with ``new`` instead of ``old``.

    Both are whole configurations: Ray's PBT gives the trial the source's configuration
    with the mutated parameters perturbed, so a parameter that never mutates (``units``)
    can change too, to the source's value.
    """

    trial_id: str
    epoch: int
    source_trial_id: str
    source_epoch: int
    old: dict[str, Any]
    new: dict[str, Any]
    wall_time: float = field(default_factory=time.time)

    def for_study(self, number_of: Callable[[str], int | None]) -> dict[str, Any]:
        """The step as the Optuna study keeps it: trials by their numbers."""
        return {
            "epoch": self.epoch,
            "source": number_of(self.source_trial_id),
            "source_epoch": self.source_epoch,
            "old": dict(self.old),
            "new": dict(self.new),
            "time": self.wall_time,
        }

    def describe(self, number_of: Callable[[str], int | None]) -> str:
        """One line: ``epoch 4: copied trial 2 (epoch 4); learning_rate 0.001 -> 0.0012, ...``."""
        source = number_of(self.source_trial_id)
        who = f"trial {source}" if source is not None else self.source_trial_id
        changed = {name: value for name, value in self.new.items() if self.old.get(name) != value}
        changes = ", ".join(f"{name} {_short(self.old.get(name))} -> {_short(v)}" for name, v in changed.items())
        return f"epoch {self.epoch}: copied {who} (epoch {self.source_epoch}); {changes or 'same configuration'}"


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


class _KeepInSpace:
    """PBT's ``custom_explore_fn``: puts perturbed values back inside their range (and step).

    A value times 1.2 can leave its range (a dropout of 0.45 becomes 0.54 of a [0, 0.5]
    space); the trial then trains with something the spec never allowed.
    """

    def __init__(self, ranges: Mapping[str, FloatRange]) -> None:
        self.ranges = dict(ranges)

    def __call__(self, config: dict[str, Any]) -> dict[str, Any]:
        for name, bounds in self.ranges.items():
            value = min(max(float(config[name]), bounds.low), bounds.high)
            if bounds.step:
                value = bounds.low + round((value - bounds.low) / bounds.step) * bounds.step
            config[name] = value
        return config


def mutations(spec: ExperimentSpec) -> dict[str, Any]:
    """Ray's ``hyperparam_mutations``: each mutable parameter's distribution, for resampling."""
    ranges = _ranges(spec)
    domains: dict[str, Any] = {}
    for name, bounds in ranges.items():
        if bounds.log:
            domains[name] = tune.loguniform(bounds.low, bounds.high)
        elif bounds.step:
            domains[name] = tune.quniform(bounds.low, bounds.high, bounds.step)
        else:
            domains[name] = tune.uniform(bounds.low, bounds.high)
    return domains


def _ranges(spec: ExperimentSpec) -> dict[str, FloatRange]:
    params = {p.name: p.distribution for p in spec.space.params}
    ranges = {name: params[name] for name in spec.scheduler.mutate}
    return {name: bounds for name, bounds in ranges.items() if isinstance(bounds, FloatRange)}


class RecordingPBT(PopulationBasedTraining):
    """Ray's asynchronous PBT over ``EPOCH_KEY``, recording its exploit steps (``exploits``)."""

    def __init__(self, spec: ExperimentSpec, experiment_dir: Path) -> None:
        settings = spec.scheduler
        super().__init__(
            time_attr=EPOCH_KEY,
            metric=spec.metric.name,
            mode=spec.metric.mode,
            perturbation_interval=settings.perturbation_interval,
            hyperparam_mutations=mutations(spec),
            quantile_fraction=settings.quantile_fraction,
            resample_probability=settings.resample_probability,
            custom_explore_fn=_KeepInSpace(_ranges(spec)),
            # tunekit records the steps itself (exploits.csv); Ray's pbt_*.txt would repeat them.
            log_config=False,
            # Synchronous: the population is ranked at the same epoch. Asynchronous PBT ranks a
            # trial against whatever the others last reported, and with more trials than slots
            # (Ray takes turns) those are older, weaker epochs: nobody ever ranks last.
            synch=True,
        )
        self.max_epochs = spec.budget.max_epochs
        self.experiment_dir = Path(experiment_dir)
        self._sign = 1.0 if spec.metric.mode == "max" else -1.0  # how PBT signs its scores
        self._metric_name = spec.metric.name
        self.params = spec.space.names  # the columns of exploits.csv
        self.exploits: list[ExploitStep] = []
        self.paused: set[str] = set()  # trial ids paused by PBT and not yet restarted
        self._not_started: set[str] = set()  # restored by a resume and not started since
        self._replayed: dict[str, Mapping[int, float]] = {}  # trial id -> {epoch: metric} recorded before a resume

    def on_trial_add(self, tune_controller: Any, trial: Trial) -> None:
        pbt_add_trial_beside_searcher(self, tune_controller, trial)
        by_epoch = self._replayed.pop(trial.trial_id, None)
        if by_epoch is not None:
            self._not_started.add(trial.trial_id)
        state = pbt_trial_state(self, trial)
        if not by_epoch or state is None:
            return
        step = self._take_last_step_again(trial)
        if step is not None:
            met = step.epoch
        else:
            # Ray restarts the trial from the checkpoint its saved state names, which can be older
            # than the last epoch recorded: its state is the one of that checkpoint's epoch.
            met = self._meeting_at_or_before(min(max(by_epoch), checkpoint_epoch(trial, EPOCH_KEY)))
        scored = max((epoch for epoch in by_epoch if epoch <= met), default=None)
        state.last_perturbation_time = state.last_train_time = met
        if scored is not None:
            state.last_score = self._sign * by_epoch[scored]
            # What an exploit of this trial reads as its source's epoch (Ray keeps the result
            # of the trial's last meeting).
            state.last_result = {EPOCH_KEY: met, self._metric_name: by_epoch[scored]}
        if trial.status == Trial.PENDING and met >= pbt_next_sync(self):
            # The driver died while this trial waited for the others at the next meeting: it
            # waits there again. Ray starts every PENDING trial whatever the scheduler would
            # choose (TuneController._maybe_add_actors), so as PENDING it would train past the
            # meeting and be ranked there with a later epoch than the others'. PAUSED, it runs
            # when PBT chooses it (choose_trial_to_run), after the meeting.
            trial.set_status(Trial.PAUSED)

    def _take_last_step_again(self, trial: Trial) -> ExploitStep | None:
        """A restored trial's last exploit step, taken again when Ray's saved state is from before it.

        The step is recorded (``exploits.csv``, the study, MLflow) as it is taken, and Ray's
        state at its next save: a driver killed between the two leaves a trial that Ray
        restarts from its own checkpoint under its old configuration, while every record says
        it copied the source. The step's copy of the source checkpoint is in the trial's
        folder, so the trial restarts from it with the step's configuration, as it would have.
        Ray's state is from before the step when the trial's checkpoint is neither that copy
        nor of a later epoch (trained on after the step).
        """
        steps = [step for step in self.exploits if step.trial_id == trial.trial_id]
        copies = sorted((self.experiment_dir / trial.trial_id).glob(f"{EXPLOITED_CHECKPOINT_PREFIX}*"))
        if not steps or not copies:
            return None
        step, copy = steps[-1], copies[-1]
        if checkpoint_path(trial) == copy or checkpoint_epoch(trial, EPOCH_KEY) > step.epoch:
            return None
        trial.set_config(dict(step.new))
        set_trial_restore_checkpoint(trial, tune.Checkpoint.from_directory(str(copy)))
        logger.info(
            "tunekit: PBT: trial %s restarts from its exploit at epoch %d (the driver stopped before it took effect)",
            trial.trial_id,
            step.epoch,
        )
        return step

    def _meeting_at_or_before(self, epoch: int) -> int:
        interval = int(self._perturbation_interval)
        return (epoch // interval) * interval

    def on_trial_result(self, tune_controller: Any, trial: Trial, result: dict[str, Any]) -> str:
        if int(result.get(EPOCH_KEY, 0)) >= self.max_epochs or stopped_by_model(result):
            # The trial's last epoch (by the budget, or its model's EarlyStopping): a copy now
            # would replace its finished model with the source's, trained no further, and a
            # pause would restart a model that stopped itself. It ends as it is.
            return str(TrialScheduler.CONTINUE)
        decision = super().on_trial_result(tune_controller, trial, result)
        if decision == TrialScheduler.PAUSE or trial.status == Trial.PAUSED:
            self.paused.add(trial.trial_id)
        return str(decision)

    def restarted_after_pause(self, trial_id: str) -> bool:
        """Whether this start of the trial follows PBT's own pause (not a retry or a resume).

        A trial's first start after a resume is the resume's, though PBT paused it at a meeting
        or copied another into it before it ran again."""
        if trial_id in self._not_started:
            self._not_started.discard(trial_id)
            self.paused.discard(trial_id)
            return False
        if trial_id in self.paused:
            self.paused.discard(trial_id)
            return True
        return False

    # Ray 2.60's private exploit hook: the one place that knows trial, source and configs.
    def _exploit(self, tune_controller: Any, trial: Trial, trial_to_clone: Trial) -> None:
        source_state = pbt_trial_state(self, trial_to_clone)
        checkpoint = getattr(source_state, "last_checkpoint", None)
        source_dir = Path(checkpoint.path) if checkpoint is not None else None
        if source_dir is None or not source_dir.is_dir():
            logger.info("tunekit: PBT skipped an exploit: %s has no checkpoint on disk", trial_to_clone.trial_id)
            return
        old = dict(trial.config)
        source_epoch = int((source_state.last_result or {}).get(EPOCH_KEY, 0))
        # The meeting's epoch, which PBT has just set as every ranked trial's perturbation time:
        # a trial waiting there since a resume has reported nothing in this session.
        meeting = int(pbt_trial_state(self, trial).last_perturbation_time)
        super()._exploit(tune_controller, trial, trial_to_clone)
        copy_dir = self.experiment_dir / trial.trial_id / f"{EXPLOITED_CHECKPOINT_PREFIX}{len(self.exploits):06d}"
        shutil.copytree(source_dir, copy_dir, dirs_exist_ok=True)
        set_trial_restore_checkpoint(trial, tune.Checkpoint.from_directory(str(copy_dir)))
        self.paused.add(trial.trial_id)
        step = ExploitStep(
            trial.trial_id,
            meeting,
            trial_to_clone.trial_id,
            source_epoch,
            old,
            dict(trial.config),
        )
        self.exploits.append(step)

    def replay(
        self,
        values: Mapping[str, Mapping[int, float]],
        exploits: Sequence[ExploitStep],
        ongoing: Collection[str],
        all_started: bool,
    ) -> None:
        """Refills PBT's state after a resume (each trial's, as Ray adds it: ``on_trial_add``):
        its last score at its last meeting, and the steps taken so far.

        The population meets next where it was heading before: one interval after the
        earliest last meeting of the trials that go on (``ongoing``; one that never reported,
        or never started when not ``all_started``, is at 0), or after the last meeting a step
        was recorded at, which was held even where the tables lag it.
        """
        self.exploits = list(exploits)
        self._replayed = {trial_id: by_epoch for trial_id, by_epoch in values.items() if by_epoch}
        reached = [self._meeting_at_or_before(max(values.get(trial_id) or {0: 0.0})) for trial_id in ongoing]
        reached += [] if all_started else [0]
        held = max((step.epoch for step in exploits), default=0)
        if reached:
            pbt_set_next_sync(self, max(min(reached), held) + int(self._perturbation_interval))


def write_exploits_csv(
    path: Path,
    steps: Sequence[ExploitStep],
    numbers: Mapping[str, int | None],
    params: Sequence[str],
    clock: SearchClock,
) -> None:
    """``exploits.csv``: one row per step, trials also by their Optuna numbers, time on the search's active clock."""
    columns = [*EXPLOIT_COLUMNS, *(OLD_PREFIX + n for n in params), *(NEW_PREFIX + n for n in params)]
    handle = io.StringIO()
    writer = csv.DictWriter(handle, fieldnames=columns)
    writer.writeheader()
    for step in steps:
        row: dict[str, Any] = {
            "trial_id": step.trial_id,
            "number": numbers.get(step.trial_id),
            "epoch": step.epoch,
            "source_trial_id": step.source_trial_id,
            "source_number": numbers.get(step.source_trial_id),
            "source_epoch": step.source_epoch,
            "time": round(clock.active_at(step.wall_time), 3),
        }
        row.update({OLD_PREFIX + n: step.old.get(n) for n in params})
        row.update({NEW_PREFIX + n: step.new.get(n) for n in params})
        writer.writerow(row)
    write_text(path, handle.getvalue())
