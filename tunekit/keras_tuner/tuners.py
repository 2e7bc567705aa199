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

import contextlib
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import keras_tuner

from tunekit.errors import SearchAborted, TunekitError
from tunekit.keras_tuner.data import saved
from tunekit.keras_tuner.settings import SECTIONS, names_of, spec_for
from tunekit.keras_tuner.trial import FATAL_MARK, TrialRun, TunerTrial
from tunekit.layout import SPEC_FILE
from tunekit.tuner.hypermodel import DryModel, fit_function
from tunekit.tuner.tuner import _drop_keras_graphs

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

    # ----------------------------------------------------------------- search
    @property
    def experiment_dir(self) -> Path:
        """The tunekit experiment: ``directory/project_name``, as KerasTuner's project folder."""
        return Path(self.directory).expanduser().resolve() / self.project_name

    def search(self, *fit_args: Any, **fit_kwargs: Any) -> None:
        """Runs the search on Ray; its arguments reach each trial's ``run_trial`` as given.

        Raises:
            keras_tuner.errors.FatalError: a trial raised one (the search ended there).
        """
        from tunekit.driver.runner import resume, run

        directory = self.experiment_dir
        self._declare_fit_parameters(fit_args, fit_kwargs)
        epochs = fit_kwargs.get("epochs")
        spec = spec_for(self.oracle, self.project_name, epochs, self.sections, str(directory.parent))
        data_dir = directory.parent / ".tunekit-data" / self.project_name
        args, kwargs = saved(fit_args, dict(fit_kwargs), data_dir)
        trial = TunerTrial(self, names_of(self.oracle), args, kwargs)
        self._results = None
        if directory.is_dir() and not any(directory.iterdir()):
            directory.rmdir()  # made empty by KerasTuner's constructor (its oracle's folder)
        try:
            if (directory / SPEC_FILE).is_file():  # KerasTuner's reload: the search goes on
                self._results = resume(
                    directory,
                    overrides=self._grown(spec),
                    progress=self.progress,
                    build_data=_no_data,
                    build_model=trial,
                )
            else:
                self._results = run(
                    spec,
                    name=self.project_name,
                    storage=directory.parent,
                    address=self.address,
                    progress=self.progress,
                    build_data=_no_data,
                    build_model=trial,
                )
        except SearchAborted as aborted:
            if FATAL_MARK in str(aborted):
                raise keras_tuner.errors.FatalError(str(aborted).replace(FATAL_MARK, "")) from aborted
            raise

    def _declare_fit_parameters(self, fit_args: tuple[Any, ...], fit_kwargs: dict[str, Any]) -> None:
        """A HyperModel's own ``fit`` run once on a model that does not train, with ``search``'s
        arguments, so the ``hp`` calls in it (``shuffle``, ``batch_size``) are searched from the
        first trial (KerasTuner finds them in its first trial; tunekit proposes whole
        configurations, so the space must hold them before). One build, in ``search`` only."""
        fit = fit_function(self.hypermodel)
        if fit is None:
            return
        hp = self.oracle.get_space()
        # It fails once it reads the history it did not get: the hp calls before that are found.
        with contextlib.suppress(Exception):
            fit(hp, DryModel(self.hypermodel.build(hp)), *fit_args, **fit_kwargs)
        self.oracle.update_space(hp)
        _drop_keras_graphs()

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
        """Prints the best trials as KerasTuner does, each with its tunekit status."""
        results = self.results
        lines = [
            "Results summary",
            f"Results in {results.experiment_dir}",
            f"Showing {num_trials} best trials",
            str(self.oracle.objective),
        ]
        rows = {str(row["trial_id"]): row for row in results.trials.to_dict("records")}
        for trial_id, hp in self._best(num_trials):
            row = rows[trial_id]
            lines += ["", f"Trial {_trial_id(self.oracle, int(row['number']))} summary ({row['status']})"]
            lines.append("Hyperparameters:")
            lines += [f"{name}: {value}" for name, value in hp.values.items()]
            lines.append(f"Score: {row['final_metric']}")
        print("\n".join(lines))

    def _best(self, count: int) -> list[tuple[str, Any]]:
        """(trial id, HyperParameters) of the best trials that scored, completed ones first, best first."""
        names = names_of(self.oracle)
        sign = -1.0 if self.oracle.objective.direction == "max" else 1.0
        scored = [row for row in self.results.trials.to_dict("records") if _finite(row.get("final_metric"))]
        scored.sort(key=lambda row: (row.get("status") != "completed", sign * float(row["final_metric"])))
        found = []
        for row in scored:
            hp = self.oracle.get_space()
            for column, value in row.items():
                key = str(column).removeprefix("params.")
                if key == column or key not in names or value is None or value != value:
                    continue
                hp.values[names[key]] = _native(value)
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
    """KerasTuner's name for trial ``number``: zero-padded to the digits of ``max_trials``."""
    return f"{number:0{len(str(oracle.max_trials or 0))}d}"


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
