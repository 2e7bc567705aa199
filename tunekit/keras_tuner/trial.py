"""One KerasTuner trial in a tunekit worker: the tuner's own ``run_trial`` on the trial's values.

``TunerTrial`` is the search's ``build_model``: a builder that runs the whole trial (the worker
calls ``run_whole_trial`` in place of its own data, build and fit steps). It gives the tuner a
``keras_tuner`` ``Trial`` whose ``hyperparameters`` hold the values tunekit's searcher chose
(the oracle's space, so a build sees KerasTuner's defaults and conditions), and calls
``run_trial(trial, *search_args, **search_kwargs)``: KerasTuner's loop, or a subclass's. Every
epoch goes to the search as it ends (``TrialRun.epoch_ended``, from the tuner's
``on_epoch_end``); the return value becomes the objective by KerasTuner's rules
(``tuner_utils``) in the trial's last report, with the model at its best epoch.

Failures follow KerasTuner: an error is retried up to the oracle's ``max_retries_per_trial``,
then fails the trial; a ``keras_tuner.errors.FatalError`` ends the search (``FATAL_MARK`` lets
``search`` raise it again).
"""

from __future__ import annotations

import copy
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tunekit.errors import FatalTrialError, describe_error
from tunekit.layout import (
    CHECKPOINTED,
    EPOCH_KEY,
    EXPORT_NOTE,
    INFO_KEY,
    KEPT_EPOCH,
    KEPT_VALUE,
    STOPPED_BY_MODEL,
)

FATAL_MARK = "keras_tuner.errors.FatalError: "


class TunerTrial:
    """``build_model`` of a KerasTuner search: runs the tuner's ``run_trial`` in the worker.

    Attributes:
        tuner: the script's tuner. It travels to the workers pickled apart and is loaded in the
            trial, after tunekit set up the worker's devices: a Keras object it holds (the
            ``optimizer=`` of KerasTuner's compile overrides) starts TensorFlow as it is loaded,
            and TensorFlow's threads can no longer be set after that. Its ``distribution_strategy``
            is made again in the worker, of the same class.
        names: spec name → KerasTuner name of each parameter.
        args, kwargs: what ``search`` was given.
    """

    runs_whole_trial = True

    def __init__(self, tuner: Any, names: Mapping[str, str], args: tuple[Any, ...], kwargs: Mapping[str, Any]):
        from ray import cloudpickle

        # A tf.distribute strategy cannot be pickled: each trial makes its own of the same class,
        # over the devices Ray gave the trial's worker.
        strategy = getattr(tuner, "distribution_strategy", None)
        self._strategy = None if strategy is None else type(strategy)
        tuner.distribution_strategy = None
        try:
            self._pickled_tuner = cloudpickle.dumps(tuner)
        finally:
            tuner.distribution_strategy = strategy
        self._tuner: Any = tuner
        self._shown = f"{type(tuner).__module__}.{type(tuner).__qualname__}"
        self.names = dict(names)
        self.args = args
        self.kwargs = dict(kwargs)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_tuner": None}

    @property
    def tuner(self) -> Any:
        if self._tuner is None:
            from ray import cloudpickle

            self._tuner = cloudpickle.loads(self._pickled_tuner)
            if self._strategy is not None:
                self._tuner.distribution_strategy = self._strategy()
        return self._tuner

    def __repr__(self) -> str:  # spec.yaml's trainable line
        return f"TunerTrial({self._shown})"

    def __call__(self, config: Mapping[str, Any], ctx: Any) -> Any:
        raise FatalTrialError("a KerasTuner search's trial runs whole (run_whole_trial), not build_model alone")

    def run_whole_trial(self, config: Mapping[str, Any], ctx: Any) -> None:
        import keras_tuner

        tuner = self.tuner
        hp = self.hyperparameters(config, ctx.max_epochs)
        trial = keras_tuner.engine.trial.Trial(hp, trial_id=trial_id(tuner.oracle, ctx))
        run = TrialRun(ctx.trial_dir or tempfile.mkdtemp(prefix="tunekit-kt-"), dict(config), ctx.max_epochs)
        tuner._trial_run = run
        try:
            results = self._run_with_retries(tuner, trial)
        finally:
            tuner._trial_run = None
        run.finish(results, tuner)

    def hyperparameters(self, config: Mapping[str, Any], max_epochs: int) -> Any:
        """The oracle's space holding the trial's values; active parameters it lacks at their defaults.

        Under Hyperband, KerasTuner's ``tuner/epochs`` too: every trial may train to ``max_epochs``
        (``Hyperband.run_trial`` passes it to fit), and tunekit's scheduler stops it at a rung.
        """
        hp = self.tuner.oracle.get_space()
        hp.values = {self.names[key]: value for key, value in config.items() if key in self.names}
        hp.ensure_active_values()
        if type(self.tuner.oracle).__name__ == "HyperbandOracle":
            hp.values.update({"tuner/epochs": max_epochs, "tuner/initial_epoch": 0})
        return hp

    def _run_with_retries(self, tuner: Any, trial: Any) -> Any:
        import keras_tuner

        from tunekit.keras_tuner.data import loaded

        args, kwargs = loaded(self.args, self.kwargs)
        attempts = 1 + int(getattr(tuner.oracle, "max_retries_per_trial", 0) or 0)
        for attempt in range(1, attempts + 1):
            try:
                return tuner.run_trial(trial, *args, **copy.copy(kwargs))
            except keras_tuner.errors.FatalError as error:
                raise FatalTrialError(FATAL_MARK + describe_error(error)) from error
            except Exception as error:
                if attempt == attempts:
                    raise
                print(f"tunekit: attempt {attempt} of {attempts} failed ({describe_error(error)}); retrying")
        raise AssertionError("unreachable")  # the loop returns or raises


def trial_id(oracle: Any, ctx: Any) -> str:
    """KerasTuner's id for the trial: its number, zero-padded to the digits of ``max_trials``."""
    number = ctx.trial_number or 0
    return f"{number:0{len(str(oracle.max_trials))}d}"  # as KerasTuner's Oracle.create_trial pads it


class TrialRun:
    """What a running trial reported so far, and its last report."""

    def __init__(self, trial_dir: str, config: dict[str, Any], max_epochs: int) -> None:
        self.trial_dir = trial_dir
        self.config = config
        self.max_epochs = max_epochs  # the budget's: a trial ending before it was ended by its own code
        self.epoch = 0  # the last epoch reported (a second execution's epochs repeat the first's)
        self.model: Any = None
        self.logs: dict[str, float] = {}  # the last epoch's metrics
        self.pending = False  # the last epoch's report is not sent yet

    def epoch_ended(self, model: Any, epoch: int, logs: Mapping[str, Any]) -> None:
        """Keeps the epoch's report until the next epoch begins (or ends, in a loop that calls only
        ``on_epoch_end``): the last one goes out with the trial's figure (``finish``), so each
        epoch is reported once."""
        self.model = model
        if epoch + 1 <= self.epoch:  # a second execution's epochs repeat the first's
            return
        self._send_pending()
        self.epoch = epoch + 1
        self.logs = _floats(logs)
        self.pending = True

    def epoch_begins(self, epoch: int) -> None:
        """The previous epoch's report goes out as the next one begins."""
        if epoch + 1 > self.epoch:
            self._send_pending()

    def _send_pending(self) -> None:
        """Sends the kept report (the scheduler may stop the trial: Ray raises ``SystemExit``)."""
        if self.pending:
            self.pending = False
            _report({EPOCH_KEY: self.epoch, **self.logs, INFO_KEY: {"metrics": sorted(self.logs)}}, None)

    def finish(self, results: Any, tuner: Any) -> None:
        """The last report: ``run_trial``'s return value as KerasTuner reads it, and the model.

        A ``History`` scores the trial by its best epoch, whose row holds that value: the last
        epoch is reported as it was, naming the best as the kept one. Any other return value (a
        float, a dict, several executions' mean) is the last epoch's figure, in that epoch's row.
        """
        from tunekit.compat.keras_tuner import tuner_utils

        objective = tuner.oracle.objective
        tuner_utils.validate_trial_results(results, objective, "Tuner.run_trial()")
        returned = _floats(tuner_utils.convert_to_metrics_dict(results, objective))
        epoch = max(self.epoch, 1)
        if self.epoch and _one_history(results):
            metrics, kept = self.logs, min(epoch, int(tuner_utils.get_best_step(results, objective)) + 1)
        else:
            metrics, kept = {**self.logs, **returned}, epoch
        bookkeeping: dict[str, Any] = {"metrics": sorted(metrics), KEPT_EPOCH: kept}
        if self.epoch and epoch < self.max_epochs:  # its fit's epochs, EarlyStopping: a normal end
            bookkeeping[STOPPED_BY_MODEL] = epoch
        value = returned.get(objective.name)
        if value is not None:
            bookkeeping[KEPT_VALUE] = value
        checkpoint = None
        if self.model is not None:  # a run_trial of its own may train no model through fit
            checkpoint, note = self._export(tuner, kept, value, objective)
            bookkeeping[CHECKPOINTED] = True
            if note:
                bookkeeping[EXPORT_NOTE] = note
        _report({EPOCH_KEY: epoch, **metrics, INFO_KEY: bookkeeping}, checkpoint)

    def _export(self, tuner: Any, kept: int, value: float | None, objective: Any) -> tuple[Path, str]:
        """The model at its best epoch (KerasTuner's ``SaveBestEpoch`` weights, where they were saved)."""
        from tunekit.worker.checkpoints import export_model, save_checkpoint
        from tunekit.worker.keep import KeptEpoch

        best = Path(tuner._get_checkpoint_fname("unused"))  # in this trial's folder (get_trial_dir)
        if best.is_file():
            self.model.load_weights(best)
        directory = Path(tempfile.mkdtemp(prefix="tunekit-ckpt-"))
        save_checkpoint(directory, self.model, max(self.epoch, 1), self.config)
        if value is not None:
            KeptEpoch(objective.name, objective.direction, kept, value, self.model.get_weights()).save(directory)
        return directory, export_model(directory, self.model)


def _one_history(results: Any) -> bool:
    """One fit's ``History`` (KerasTuner's own ``run_trial`` returns a list, one per execution)."""
    import keras

    if isinstance(results, list) and len(results) == 1:
        results = results[0]
    return isinstance(results, keras.callbacks.History)


def _floats(metrics: Mapping[str, Any]) -> dict[str, float]:
    found = {}
    for name, value in metrics.items():
        try:
            found[str(name)] = float(value)
        except (TypeError, ValueError):
            continue  # not a number: KerasTuner's oracle would not rank by it either
    return found


def _report(result: dict[str, Any], checkpoint_dir: Path | None) -> None:
    from ray import tune

    checkpoint = None if checkpoint_dir is None else tune.Checkpoint.from_directory(checkpoint_dir)
    try:
        tune.report(result, checkpoint=checkpoint)
    finally:
        if checkpoint_dir is not None:
            shutil.rmtree(checkpoint_dir, ignore_errors=True)
