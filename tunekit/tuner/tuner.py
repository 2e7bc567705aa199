"""``tunekit.Tuner``: KerasTuner's ``Tuner`` over tunekit's search, for a one-line switch.

A KerasTuner script keeps its ``build_model(hp)`` (or ``HyperModel``), its ``search(x, y,
validation_data=...)`` and its ``get_best_models()``; only the tuner line changes. The
search itself is ``tunekit.run``'s: the space found from the code (``tunekit.tuner.hp``) becomes
the spec's ``space``, the data becomes ``build_data``, the other ``fit`` arguments
``fit_options``, so the experiment directory, the study and the MLflow runs are those of
``tunekit run``, and ``tunekit report``, ``check`` and ``resume`` apply.

NumPy data reaches the workers through Ray's object store, a ``tf.data.Dataset`` through
the storage folder (``tunekit.tuner.data``).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import shutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from tunekit.errors import SpecError, TunekitError
from tunekit.layout import SPEC_FILE
from tunekit.storage.buckets import shown
from tunekit.tuner.data import data_builder, fit_arguments
from tunekit.tuner.discover import Discovery, discover, spec_name
from tunekit.tuner.hp import Declared, HyperParameters
from tunekit.tuner.hp_given import restricted
from tunekit.tuner.hypermodel import HyperModel, build_function, fit_function, route_fit, with_dry_fit

if TYPE_CHECKING:
    from tunekit.results.load import ExperimentResults

DEFAULT_PROJECT = "untitled_project"  # KerasTuner's
DEFAULT_OBJECTIVE = "val_loss"  # KerasTuner's
# Metric names whose direction KerasTuner infers as "min"; any other known Keras metric is "max".
_MINIMISED = ("loss", "error", "mse", "mae", "mape", "msle", "crossentropy", "hinge", "poisson", "kl_divergence")
_MAXIMISED = ("accuracy", "acc", "auc", "precision", "recall", "f1", "iou", "r2", "score")
# model.fit arguments the search passes on to every trial (fit_options), beside the data and epochs.
_PASSED_ON = ("callbacks", "class_weight", "steps_per_epoch", "validation_steps", "validation_freq")
# model.fit arguments that make no difference to a search here (tunekit reports every epoch itself).
_IGNORED = ("verbose", "shuffle", "use_multiprocessing", "workers", "max_queue_size")


class Tuner:
    """A KerasTuner-shaped tuner: ``build_model(hp)`` in, the best models out.

    Args:
        hypermodel: a function ``build_model(hp)`` returning a compiled Keras model, or an
            object with ``build(hp)`` (a ``keras_tuner.HyperModel``). Its own ``fit(hp, model,
            *args, **kwargs)`` is called in place of ``model.fit`` and must call
            ``model.fit(*args, **kwargs)`` (tunekit's callbacks report every epoch); the
            ``hp`` calls in it are searched too (a ``batch_size`` it passes rebatches the data).
        objective: a metric name (its direction inferred as KerasTuner does), a ``(name,
            "min"|"max")`` pair, a ``keras_tuner.Objective``, or a list of them: several
            objectives make a multi-objective search (a Pareto front, not KerasTuner's sum).
        max_trials: trials to run (``budget.num_samples``).
        max_epochs: epochs per trial when ``search`` gets no ``epochs`` (``budget.max_epochs``;
            ASHA's ``max_t``).
        executions_per_trial: fits of each configuration with different seeds
            (``training.executions``), trained in lockstep; each epoch reports their mean, which
            ASHA decides on, and ``<metric>_std`` their spread.
        seed: the sampler's and Keras's seed (``search.seed``, ``training.seed``).
        directory: where the experiment folder goes (``storage.path``; default: tunekit's).
        project_name: the experiment's folder and name.
        overwrite: remove an experiment of the same name first; without it, ``search``
            continues it, grown to ``max_trials``, as KerasTuner reloads a project.
        progress: where progress goes (True: stdout, False: nowhere).
        address: a Ray cluster to join (as ``tunekit.run``).
        hyperparameters: a ``HyperParameters`` (tunekit's or keras_tuner's) whose parameters
            replace the code's of the same name and are searched even if the code never
            declares them (``tunekit.tuner.hp_given``).
        tune_new_entries: False: parameters ``hyperparameters`` lacks keep their default.
        allow_new_entries: False: the code may declare no parameter ``hyperparameters`` lacks.
        **sections: spec sections deep-merged over the ones built here (``budget``,
            ``search``, ``scheduler``, ``resources``, ``training``, ``tracking``, ...). KerasTuner's
            ``factor`` (Hyperband's) becomes ``scheduler.reduction_factor`` and
            ``num_initial_points`` ``search.n_startup_trials``; ``KERASTUNER_IGNORED`` ones are
            taken and have no effect.

    Raises:
        SpecError: a bad objective, a section the spec lacks, or a bad ``hp`` range.
        TunekitError: an option not supported yet.
    """

    def __init__(
        self,
        hypermodel: Any,
        objective: Any = DEFAULT_OBJECTIVE,
        max_trials: int = 10,
        max_epochs: int | None = None,
        executions_per_trial: int = 1,
        seed: int | None = None,
        directory: str | Path | None = None,
        project_name: str | None = None,
        overwrite: bool = False,
        progress: TextIO | bool | None = True,
        address: str | None = None,
        hyperparameters: Any = None,
        tune_new_entries: bool = True,
        allow_new_entries: bool = True,
        **sections: Any,
    ) -> None:
        if executions_per_trial != 1 and fit_function(hypermodel) is not None:
            raise TunekitError(
                f"executions_per_trial={executions_per_trial}: a HyperModel with its own fit trains one model "
                "per trial (tunekit trains several in lockstep through model.fit); use 1"
            )
        self._build = build_function(hypermodel)
        self._fit = fit_function(hypermodel)
        # tuner.hypermodel.build(best_hps), as KerasTuner's tutorials rebuild the best model.
        self.hypermodel = hypermodel if hasattr(hypermodel, "build") else HyperModel(hypermodel)
        self.objectives = objectives(objective)
        self.max_trials = max_trials
        self.max_epochs = max_epochs
        self.executions_per_trial = executions_per_trial
        self.seed = seed
        self.directory = directory
        self.project_name = project_name or DEFAULT_PROJECT
        self.overwrite = overwrite
        self.progress = progress
        self.address = address
        self.sections = _kerastuner_arguments(sections)
        # As KerasTuner builds the model once when the tuner is made: the space, found now.
        failures: list[str] = []
        found = discover(with_dry_fit(self._build, self._fit, failures))
        found.notes += failures
        self.discovery: Discovery = restricted(
            found, hyperparameters, tune_new_entries=tune_new_entries, allow_new_entries=allow_new_entries
        )
        _drop_keras_graphs()
        self._results: ExperimentResults | None = None

    # ----------------------------------------------------------------- paths
    @property
    def project_dir(self) -> Path:
        """The experiment's folder: ``directory/project_name``."""
        from tunekit.config.spec import load_spec

        storage = self.directory
        if storage is None:
            storage = load_spec(self._spec({"epochs": 1, "batch_size": 32}), trainable=_placeholder()).storage.path
        return Path(storage).expanduser().resolve() / self.project_name

    @property
    def results(self) -> ExperimentResults:
        """The search's ``ExperimentResults`` (``tunekit.load`` of the project folder)."""
        if self._results is None:
            from tunekit.results.load import load

            self._results = load(self.project_dir)
        return self._results

    # ----------------------------------------------------------------- search
    def search(self, *fit_args: Any, **fit_kwargs: Any) -> ExperimentResults:
        """Runs the search; takes ``model.fit``'s arguments, as KerasTuner's ``search`` does.

        ``x, y`` as NumPy arrays (or lists and dicts of them), or ``x`` as a batched
        ``tf.data.Dataset``; ``validation_data`` or ``validation_split`` (one is needed:
        every trial is scored on validation data); ``batch_size`` (``training.batch_size``);
        ``epochs``; ``callbacks``, ``class_weight``, ``sample_weight``, ``steps_per_epoch``.

        Returns:
            the experiment's results (also ``self.results``).
        """
        fit = fit_arguments(fit_args, fit_kwargs)
        data = data_builder(fit, self._data_dir())
        options = {k: fit.pop(k) for k in _PASSED_ON if fit.get(k) is not None}
        for key in _IGNORED:
            fit.pop(key, None)
        epochs, batch_size = fit.pop("epochs", None), fit.pop("batch_size", None)
        if fit:
            raise TunekitError(f"search: {', '.join(sorted(fit))} is not supported; it takes {_SUPPORTED}")
        names = {spec_name(n): n for n in self.discovery.names}
        builder = HyperModelBuilder(self._build, names, self._fit)
        fit_options = FitOptions(options) if options else None
        spec = self._spec({"epochs": epochs, "batch_size": batch_size})
        directory = self.project_dir
        if directory.exists() and self.overwrite:
            _remove_experiment(directory)
        self._results = None
        self._results = run_or_resume(
            spec,
            directory,
            lambda: self._grown(directory),
            address=self.address,
            progress=self.progress,
            build_data=data,
            build_model=builder,
            fit_options=fit_options,
        )
        return self._results

    def _grown(self, directory: Path) -> list[str]:
        from tunekit.config.spec import load_spec

        recorded = load_spec(directory / SPEC_FILE, trainable=_placeholder()).budget.num_samples
        return [f"budget.num_samples={self.max_trials}"] if self.max_trials > recorded else []

    def _data_dir(self) -> Path:
        return self.project_dir.parent / ".tunekit-data" / self.project_name

    def _spec(self, fit: Mapping[str, Any]) -> dict[str, Any]:
        """The spec ``search`` runs: this tuner's settings, then ``sections`` merged over them."""
        epochs = fit.get("epochs") or self.max_epochs or 1  # model.fit's default is one epoch
        metric: Any = [{"name": n, "mode": m} for n, m in self.objectives]
        spec: dict[str, Any] = {
            "name": self.project_name,
            "metric": metric[0] if len(metric) == 1 else metric,
            "budget": {"num_samples": self.max_trials, "max_epochs": int(epochs)},
            "search": {"seed": self.seed or 0},
            "training": {
                "batch_size": int(fit.get("batch_size") or 32),
                "seed": self.seed or 0,
                "executions": self.executions_per_trial,
            },
            "space": self.discovery.to_space(),
        }
        if self.directory is not None:
            spec["storage"] = {"path": str(self.directory)}
        merged = _merged(spec, self.sections)
        if "keep" not in (self.sections.get("training") or {}):
            # KerasTuner scores a trial by its best epoch and gives back that epoch's model;
            # several objectives or PBT have no single best epoch (training.keep).
            single = len(self.objectives) == 1 and (merged.get("scheduler") or {}).get("type") != "pbt"
            merged["training"]["keep"] = "best" if single else "last"
        return merged

    # ----------------------------------------------------------------- results
    def get_best_hyperparameters(self, num_trials: int = 1) -> list[HyperParameters]:
        """The best trials' hyperparameters, best first: objects with ``.values``, as KerasTuner's."""
        return [hp for _, hp in self._best(num_trials)]

    def get_best_models(self, num_models: int = 1) -> list[Any]:
        """The best trials' trained models, best first.

        Each is the model its trial saved at its end (``model.keras``, or ``build_model``'s
        model with the saved weights when Keras could not save it whole): its best epoch's,
        as KerasTuner's, since a Tuner's trials keep their best epoch (``training.keep: best``;
        ``training={"keep": "last"}`` keeps the last). Trials that
        saved none (pruned or stopped early) are passed over, so fewer models may come back.
        """
        import keras

        models = []
        results = self.results
        for trial_id, hp in self._best(len(results.trials)):
            path = results.model_path(trial_id)
            if path is None:
                continue
            if path.suffix == ".keras":
                models.append(keras.saving.load_model(path))
            else:
                model = self._build(HyperParameters(hp.values))
                model.load_weights(path)
                models.append(model)
            if len(models) == num_models:
                break
        return models

    def results_summary(self, num_trials: int = 10) -> None:
        """Prints the best trials as KerasTuner does: each one's hyperparameters and score."""
        results = self.results
        name, mode = self.objectives[0]
        lines = [
            "Results summary",
            f"Results in {shown(results.experiment_dir)}",
            f"Showing {num_trials} best trials",
            f'Objective(name="{name}", direction="{mode}")',
        ]
        ranked = results.ranked()
        for row, (_, hp) in zip(ranked.head(num_trials).itertuples(), self._best(num_trials), strict=False):
            lines += ["", f"Trial {row.trial_id} summary ({row.status})", "Hyperparameters:"]
            lines += [f"{k}: {v}" for k, v in hp.values.items()]
            lines.append(f"Score: {row.final_metric}")
        print("\n".join(lines))

    def search_space_summary(self) -> None:
        """Prints the space found in ``build_model``, as KerasTuner's summary does."""
        lines = ["Search space summary", f"Default search space size: {len(self.discovery.params)}"]
        for name, declared in self.discovery.params.items():
            conditions = tuple(self.discovery.when.get(name, {}).items())
            shown = dataclasses.replace(declared, conditions=conditions)
            lines += [f"{name} ({declared.kind})", shown.describe()]
        lines += [f"note: {note}" for note in self.discovery.notes]
        print("\n".join(lines))

    def _best(self, count: int) -> list[tuple[str, HyperParameters]]:
        """(trial id, hyperparameters) of the best trials that reported the objective, best first."""
        results = self.results
        ranked = results.ranked()
        names = {spec_name(n): n for n in self.discovery.names}
        found = []
        for row in ranked.to_dict("records"):
            score = row.get("final_metric")
            if score is None or (isinstance(score, float) and math.isnan(score)):
                continue
            values = {}
            for column, value in row.items():
                if not str(column).startswith("params."):
                    continue
                key = str(column).removeprefix("params.")
                if value is None or (isinstance(value, float) and math.isnan(value)):
                    continue  # inactive in this trial
                name = names.get(key, key)
                declared = self.discovery.params.get(name)
                values[name] = value if declared is None else _as_declared(declared, value)
            hp = HyperParameters(values)
            hp.values = dict(values)
            found.append((str(row["trial_id"]), hp))
            if len(found) == count:
                break
        return found


class Hyperband(Tuner):
    """``keras_tuner.Hyperband``'s line over tunekit: ``scheduler.type: hyperband``.

    ``factor`` becomes ``scheduler.reduction_factor``, and the first rung is at epoch 1, where
    KerasTuner's most aggressive bracket starts. ``max_trials``, which KerasTuner's Hyperband
    does not take, is by default the trials ``hyperband_iterations`` iterations of KerasTuner's
    brackets start (``kerastuner_trials``). The brackets are tunekit's default (3, fewer when
    the rungs are fewer; KerasTuner runs ``floor(log_factor(max_epochs)) + 1``) unless
    ``scheduler={"brackets": n}``. Every other argument is ``Tuner``'s.
    """

    def __init__(
        self,
        hypermodel: Any,
        objective: Any = DEFAULT_OBJECTIVE,
        max_epochs: int = 100,
        factor: float = 3,
        hyperband_iterations: int = 1,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("max_trials", hyperband_iterations * kerastuner_trials(max_epochs, factor))
        ours = {"type": "hyperband", "grace_period": 1, "reduction_factor": factor}
        kwargs["scheduler"] = _merged(ours, kwargs.get("scheduler") or {})
        super().__init__(hypermodel, objective, max_epochs=max_epochs, **kwargs)


def kerastuner_trials(max_epochs: int, factor: float) -> int:
    """The trials one iteration of KerasTuner's Hyperband starts: its bracket b's first round holds
    ``ceil(ceil(1 + log_factor(max_epochs)) / (b + 1) * factor**b)`` (keras_tuner's ``HyperbandOracle``)."""
    brackets, epochs = 0, float(max_epochs)
    while epochs >= 1:
        epochs /= factor
        brackets += 1
    end = math.ceil(1 + math.log(max_epochs, factor))
    return sum(math.ceil(end / (b + 1) * factor**b) for b in range(brackets))


_SUPPORTED = (
    "x, y, validation_data, validation_split, batch_size, epochs, sample_weight, "
    + ", ".join(_PASSED_ON)
    + " (and ignores "
    + ", ".join(_IGNORED)
    + ")"
)


# KerasTuner's tuner arguments with a tunekit counterpart (spec section, key), and those that
# have none here (Hyperband's iterations, the Gaussian process's settings, retries: tunekit's
# failure guard decides). Spec sections given as keywords win over the mapped ones.
KERASTUNER_MAPPED = {"factor": ("scheduler", "reduction_factor"), "num_initial_points": ("search", "n_startup_trials")}
KERASTUNER_IGNORED = (
    "hyperband_iterations",
    "alpha",
    "beta",
    "max_retries_per_trial",
    "max_consecutive_failed_trials",
    "distribution_strategy",
    "logger",
    "tuner_id",
)


def _kerastuner_arguments(keywords: Mapping[str, Any]) -> dict[str, Any]:
    """The spec sections among the ``Tuner``'s further keywords, KerasTuner's own mapped or dropped."""
    sections: dict[str, Any] = {}
    for name, value in keywords.items():
        if name in KERASTUNER_MAPPED:
            section, key = KERASTUNER_MAPPED[name]
            sections.setdefault(section, {})[key] = value
    for name, value in keywords.items():
        if name not in KERASTUNER_MAPPED and name not in KERASTUNER_IGNORED:
            sections[name] = _merged(sections[name], value) if isinstance(sections.get(name), dict) else value
    return sections


# --------------------------------------------------------------------------- objectives


def objectives(objective: Any) -> list[tuple[str, str]]:
    """``[(name, "min"|"max"), ...]`` from KerasTuner's forms of an objective."""
    items = objective if isinstance(objective, list) else [objective]
    if not items:
        raise SpecError("objective", "must name at least one metric", objective)
    return [
        _objective(item, f"objective[{i}]" if isinstance(objective, list) else "objective")
        for i, item in enumerate(items)
    ]


def _objective(item: Any, path: str) -> tuple[str, str]:
    if isinstance(item, tuple) and len(item) == 2:
        name, direction = item
    elif hasattr(item, "name") and hasattr(item, "direction"):  # keras_tuner.Objective
        name, direction = item.name, item.direction
    elif isinstance(item, str):
        name, direction = item, infer_direction(item, path)
    else:
        raise SpecError(path, "must be a metric name, a (name, direction) pair or a keras_tuner.Objective", item)
    if direction not in ("min", "max"):
        raise SpecError(f"{path}.direction", "must be 'min' or 'max'", direction)
    return str(name), str(direction)


def infer_direction(name: str, path: str = "objective") -> str:
    """KerasTuner's inference: losses and errors are minimised, accuracies and scores maximised."""
    bare = name.removeprefix("val_").lower()
    if any(bare == m or bare.endswith(m) for m in _MINIMISED):
        return "min"
    if any(bare == m or bare.endswith(m) or bare.startswith(m) for m in _MAXIMISED):
        return "max"
    raise SpecError(
        path,
        f"cannot infer whether to minimise or maximise it; write ({name!r}, 'max') or ({name!r}, 'min')",
        name,
    )


# --------------------------------------------------------------------------- what travels to the trials


@dataclass(frozen=True)
class HyperModelBuilder:
    """``build_model(config, ctx)`` for tunekit: the user's ``build_model(hp)`` with the trial's values.

    Attributes:
        build: the user's ``build_model(hp)`` (or a HyperModel's ``build``).
        names: spec name → ``hp`` name, for every parameter of the space.
    """

    build: Callable[[HyperParameters], Any]
    names: Mapping[str, str]
    fit: Callable[..., Any] | None = None  # a HyperModel's own fit(hp, model, *args, **kwargs)

    def __repr__(self) -> str:  # spec.yaml's trainable line
        owner = getattr(self.build, "__self__", None)
        name = getattr(self.build, "__qualname__", type(self.build).__name__)
        return f"HyperModelBuilder({getattr(owner or self.build, '__module__', '?')}.{name})"

    def __call__(self, config: Mapping[str, Any], ctx: Any) -> Any:
        values = {self.names.get(key, key): value for key, value in config.items()}
        hp = HyperParameters(values, known=list(self.names.values()))
        model = self.build(hp)
        if hp.unknown:  # into the trial's output.log
            print(
                f"tunekit: build_model declares {', '.join(hp.unknown)}, which the space found before the search "
                "lacks (a branch its exploration did not reach): the default is used"
            )
        if self.fit is not None:
            route_fit(model, self.fit, hp)
        return model


@dataclass(frozen=True)
class FitOptions:
    """``fit_options(config, ctx)``: ``search``'s further ``model.fit`` arguments, a fresh copy per trial."""

    options: Mapping[str, Any]

    def __repr__(self) -> str:
        return f"FitOptions({', '.join(self.options)})"

    def __call__(self, config: Mapping[str, Any], ctx: Any) -> dict[str, Any]:
        options = dict(self.options)
        if "callbacks" in options:
            options["callbacks"] = [copy.deepcopy(c) for c in options["callbacks"]]
        return options


# --------------------------------------------------------------------------- helpers


def _drop_keras_graphs() -> None:
    """The exploring builds' layers, freed (only where the user's code imported Keras)."""
    keras = sys.modules.get("keras")
    if keras is not None and hasattr(keras, "backend"):
        keras.backend.clear_session()


def _placeholder() -> Any:
    from tunekit.contract import Builders

    def nothing(config: Any, ctx: Any) -> None:
        return None

    return Builders(nothing, nothing)


def _merged(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _merged(merged[key], value)
        else:
            merged[key] = value
    return merged


def run_or_resume(
    spec: Mapping[str, Any],
    directory: Path,
    grown: Callable[[], list[str]],
    *,
    address: str | None,
    progress: TextIO | bool | None,
    **builders: Any,
) -> ExperimentResults:
    """A code-side tuner's search (this one's and ``tunekit.keras_tuner``'s): the experiment in
    ``directory`` resumed, grown by ``grown()``'s overrides, when it has a spec (a tuner made
    again, as KerasTuner reloads its project), else ``spec`` run there anew."""
    from tunekit.driver.runner import resume, run

    if (directory / SPEC_FILE).is_file():
        return resume(directory, overrides=grown(), progress=progress, **builders)
    return run(spec, name=directory.name, storage=directory.parent, address=address, progress=progress, **builders)


def _remove_experiment(directory: Path) -> None:
    if not (directory / SPEC_FILE).is_file() and any(directory.iterdir()):
        raise TunekitError(f"overwrite=True: {directory} holds no tunekit experiment; not removed")
    shutil.rmtree(directory)


def _as_declared(declared: Declared, value: Any) -> Any:
    """A value read back from trials.csv (an int as a float beside empty cells, a bool as text) as declared."""
    if hasattr(value, "item"):
        value = value.item()
    if declared.kind == "Int":
        return int(value)
    if declared.kind == "Float":
        return float(value)
    if declared.kind == "Boolean":
        return value in (True, "True", "true", 1)
    for option in declared.values() or ():
        if option == value or str(option) == str(value):
            return option
    return value
