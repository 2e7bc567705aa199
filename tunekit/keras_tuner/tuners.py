"""keras-tuner's tuners with tunekit's ``search``: the same objects, their trials on Ray.

Each class is keras-tuner's own with ``OnTunekit`` first in its bases: the constructor (its
oracle, the space its build finds, ``optimizer``/``loss``/``metrics`` overrides,
``executions_per_trial``, ``overwrite``), ``run_trial`` (a subclass's override included),
``HyperModel.fit`` and ``search_space_summary`` are KerasTuner's. ``search`` runs a tunekit
experiment in ``directory/project_name``: the oracle's algorithm proposes each configuration
(``settings``), and a Ray worker runs the tuner's ``run_trial`` on it (``trial``), reporting
every epoch (``on_epoch_end``) so that a scheduler can stop it, and the return value as the
objective. Results come back from the experiment's records (``tunekit report``, ``check`` and
``resume`` apply), so ``get_best_*`` and ``results_summary`` read those.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import keras_tuner

from tunekit.driver.guard import CONSECUTIVE_RULE
from tunekit.errors import NoResultError, SearchAborted, TunekitError
from tunekit.keras_tuner.data import saved
from tunekit.keras_tuner.declare import declare
from tunekit.keras_tuner.settings import SECTIONS, names_of, spec_for
from tunekit.keras_tuner.trial import FATAL_MARK, TrialRun, TunerTrial
from tunekit.tuner.discover import spec_name
from tunekit.tuner.tuner import run_or_resume

if TYPE_CHECKING:
    from tunekit.results.load import ExperimentResults


class OnTunekit:
    """What a keras-tuner tuner does differently on tunekit: ``search`` and reading its results.

    Keywords beside KerasTuner's: ``progress`` (where the search's progress goes), ``address``
    (a Ray cluster to join), and spec sections (``budget``, ``search``, ``scheduler``,
    ``resources``, ``training``, ``tracking``, ...) merged over the ones the oracle makes.
    """

    oracle: Any
    hypermodel: Any
    directory: str
    project_name: str

    def __init__(
        self, *args: Any, progress: TextIO | bool | None = True, address: str | None = None, **kwargs: Any
    ) -> None:
        self.sections = {name: kwargs.pop(name) for name in list(kwargs) if name in SECTIONS}
        super().__init__(*args, **kwargs)
        self.progress = progress
        self.address = address
        self._results: ExperimentResults | None = None
        self._trial_run: TrialRun | None = None  # set in a worker, while it runs a trial
        # Parameters kept at their default (tune_new_entries=False), which trials record too.
        self.fixed: dict[str, Any] = {}

    # ----------------------------------------------------------------- search
    @property
    def experiment_dir(self) -> Path:
        """The tunekit experiment: ``directory/project_name``, as KerasTuner's project folder."""
        return Path(self.directory).expanduser().resolve() / self.project_name

    def search(self, *fit_args: Any, **fit_kwargs: Any) -> None:
        """Runs the search on Ray; its arguments reach each trial's ``run_trial`` as given.

        Raises:
            keras_tuner.errors.FatalError: a trial raised one (the search ended there).
            RuntimeError: ``max_consecutive_failed_trials`` trials in a row failed, as KerasTuner raises.
        """
        directory = self.experiment_dir
        self.fixed = declare(self, fit_args, fit_kwargs)
        epochs = fit_kwargs.get("epochs")
        spec = spec_for(self.oracle, self.fixed, self.project_name, epochs, self.sections, str(directory.parent))
        data_dir = directory.parent / ".tunekit-data" / self.project_name
        args, kwargs = saved(fit_args, dict(fit_kwargs), data_dir)
        trial = TunerTrial(self, self.names, args, kwargs)
        self._results = None
        if directory.is_dir() and not any(directory.iterdir()):
            directory.rmdir()  # made empty by KerasTuner's constructor (its oracle's folder)
        try:
            self._results = run_or_resume(
                spec,
                directory,
                lambda: self._grown(spec),
                address=self.address,
                progress=self.progress,
                build_data=_no_data,
                build_model=trial,
            )
        except SearchAborted as aborted:
            if FATAL_MARK in str(aborted):  # the trial's own message, as KerasTuner raises it; tunekit's is the cause
                message = str(aborted).split(FATAL_MARK, 1)[1].removeprefix("FatalError: ")
                raise keras_tuner.errors.FatalError(message) from aborted
            if CONSECUTIVE_RULE in str(aborted):  # KerasTuner's oracle raises a RuntimeError with these words
                limit = f"the limit of {self.oracle.max_consecutive_failed_trials}"
                raise RuntimeError(f"Number of consecutive failures exceeded {limit}.\n{aborted}") from aborted
            raise
        except NoResultError:
            pass  # every trial failed: KerasTuner's search returns, its results_summary shows why
        self._trials_to_oracle()

    def _trials_to_oracle(self) -> None:
        """The experiment's trials on the oracle as KerasTuner's (``oracle.trials``, ``end_order``,
        ``get_best_trials``): named by number as KerasTuner names them, with their score; a pruned
        or stopped trial is KerasTuner's STOPPED, a failed one FAILED with its reason."""
        rows = sorted(self.results.trials.to_dict("records"), key=lambda row: int(row["number"]))
        values = dict(self._best(len(rows), scored_only=False))
        statuses = {"completed": "COMPLETED", "failed": "FAILED"}
        self.oracle.trials.clear()
        self.oracle.end_order = []
        for row in rows:
            failed = row["status"] == "failed"
            trial = keras_tuner.engine.trial.Trial(
                values[str(row["trial_id"])],
                trial_id=_trial_id(self.oracle, int(row["number"])),
                status=statuses.get(str(row["status"]), "STOPPED"),
                message=str(row.get("reason")) if failed else None,
            )
            trial.score = float(row["final_metric"]) if _finite(row.get("final_metric")) else None
            self.oracle.trials[trial.trial_id] = trial
            self.oracle.end_order.append(trial.trial_id)

    @property
    def names(self) -> dict[str, str]:
        """Spec name → KerasTuner name of each parameter a trial records: searched, then fixed."""
        return {**names_of(self.oracle), **{spec_name(name): name for name in self.fixed}}

    def _grown(self, spec: dict[str, Any]) -> list[str]:
        from tunekit.results.load import load

        wanted = spec["budget"].get("num_samples")
        done = len(load(self.experiment_dir).trials)
        return [f"budget.num_samples={wanted}"] if wanted is not None and wanted > done else []

    @property
    def results(self) -> ExperimentResults:
        """The search's ``ExperimentResults`` (``tunekit.load`` of the experiment folder)."""
        if self._results is None:
            from tunekit.results.load import load

            self._results = load(self.experiment_dir)
        return self._results

    # ----------------------------------------------------------------- in a trial's worker
    def on_epoch_begin(self, trial: Any, model: Any, epoch: int, logs: dict[str, Any] | None = None) -> None:
        """The previous epoch's report goes to the search now, then KerasTuner's hook."""
        if self._trial_run is not None:
            self._trial_run.epoch_begins(epoch)
        super().on_epoch_begin(trial, model, epoch, logs=logs)  # type: ignore[misc]

    def on_epoch_end(self, trial: Any, model: Any, epoch: int, logs: dict[str, Any] | None = None) -> None:
        """Each epoch, to the search (sent as the next begins; a scheduler may stop it), then KerasTuner's hook."""
        if self._trial_run is not None:
            self._trial_run.epoch_ended(model, epoch, logs or {})
        super().on_epoch_end(trial, model, epoch, logs=logs)  # type: ignore[misc]

    def get_trial_dir(self, trial_id: str) -> str:
        """In a worker, the tunekit trial's own folder (KerasTuner's checkpoint goes there)."""
        if self._trial_run is not None:
            return self._trial_run.trial_dir
        return str(self.experiment_dir / f"trial_{trial_id}")

    # ----------------------------------------------------------------- results
    def get_best_hyperparameters(self, num_trials: int = 1) -> list[Any]:
        """The best trials' ``HyperParameters``, best first."""
        return [hp for _, hp in self._best(num_trials)]

    def get_best_models(self, num_models: int = 1) -> list[Any]:
        """The best trials' models at their best epoch, best first (trials that saved none are passed over)."""
        import keras

        models = []
        for trial_id, hp in self._best(len(self.results.trials)):
            path = self.results.model_path(trial_id)
            if path is None:
                continue
            if path.suffix == ".keras":
                models.append(keras.saving.load_model(path))
            else:
                model = self._try_build(hp)  # type: ignore[attr-defined]
                model.load_weights(path)
                models.append(model)
            if len(models) == num_models:
                break
        return models

    def results_summary(self, num_trials: int = 10) -> None:
        """Prints the best trials as KerasTuner does: completed ones by score, then, when fewer
        completed than ``num_trials``, the others (tunekit's status and reason in place of
        KerasTuner's message)."""
        results = self.results
        lines = [
            "Results summary",
            f"Results in {results.experiment_dir}",
            f"Showing {num_trials} best trials",
            str(self.oracle.objective),
        ]
        rows = {str(row["trial_id"]): row for row in results.trials.to_dict("records")}
        for trial_id, hp in self._best(num_trials, scored_only=False):
            row = rows[trial_id]
            lines += ["", f"Trial {_trial_id(self.oracle, int(row['number']))} summary", "Hyperparameters:"]
            lines += [f"{name}: {value}" for name, value in hp.values.items()] or ["default configuration"]
            if _finite(row.get("final_metric")):
                lines.append(f"Score: {row['final_metric']}")
            if row["status"] != "completed":
                reason = row.get("reason")
                lines.append(
                    f"Status: {row['status']}" + (f" ({reason})" if isinstance(reason, str) and reason else "")
                )
        print("\n".join(lines))

    def _best(self, count: int, *, scored_only: bool = True) -> list[tuple[str, Any]]:
        """(trial id, HyperParameters) of the best trials, completed ones first, best first; those
        without a score (failed) last, unless ``scored_only``."""
        names = self.names
        sign = -1.0 if self.oracle.objective.direction == "max" else 1.0
        rows = self.results.trials.to_dict("records")
        scored = [row for row in rows if _finite(row.get("final_metric"))]
        scored.sort(key=lambda row: (row.get("status") != "completed", sign * float(row["final_metric"])))
        if not scored_only:
            scored += sorted((row for row in rows if not _finite(row.get("final_metric"))), key=lambda r: r["number"])
        found = []
        for row in scored:
            hp = self.oracle.get_space()
            for key, name in names.items():  # in the order a trial declares them, as KerasTuner lists them
                value = row.get(f"params.{key}")
                if value is not None and value == value:  # NaN: not active in this trial
                    hp.values[name] = _native(value)
            found.append((str(row["trial_id"]), hp))
            if len(found) == count:
                break
        return found


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def _native(value: Any) -> Any:
    """A value read back from trials.csv as Python's (an int stored as a float beside empty cells)."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _trial_id(oracle: Any, number: int) -> str:
    """KerasTuner's name for trial ``number``: zero-padded to the length of ``str(max_trials)``
    (four digits when it is None, as KerasTuner's Grid and Hyperband pad them)."""
    return f"{number:0{len(str(oracle.max_trials))}d}"


def _no_data(config: Any, ctx: Any) -> None:
    """build_data of a KerasTuner search: its data reach ``run_trial`` as ``search`` got them."""
    raise TunekitError("a KerasTuner search's trials take search()'s arguments, not build_data")


# The tuners, keras-tuner's own classes with OnTunekit's search. Their arguments are keras-tuner's.
class Tuner(OnTunekit, keras_tuner.Tuner):
    """``keras_tuner.Tuner`` (a base for ``run_trial`` subclasses, with an ``oracle=``) on tunekit."""


class RandomSearch(OnTunekit, keras_tuner.RandomSearch):
    """``keras_tuner.RandomSearch`` on tunekit: ``search.algorithm: random``."""


class GridSearch(OnTunekit, keras_tuner.GridSearch):
    """``keras_tuner.GridSearch`` on tunekit: ``search.algorithm: grid``, every point once."""


class BayesianOptimization(OnTunekit, keras_tuner.BayesianOptimization):
    """``keras_tuner.BayesianOptimization`` on tunekit: Optuna's TPE in place of the Gaussian process."""


class Hyperband(OnTunekit, keras_tuner.Hyperband):
    """``keras_tuner.Hyperband`` on tunekit: random samples under tunekit's ``hyperband`` scheduler."""
