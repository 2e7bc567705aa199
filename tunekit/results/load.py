"""Finished experiments as tables: loaded from the experiment directory alone, no Ray needed."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunekit.config.files import read_recorded_spec
from tunekit.config.objectives import headline_metric, selection_of
from tunekit.config.spec import ExperimentSpec, MetricMode, parse_spec
from tunekit.errors import DamagedFileError, DamagedRecordWarning, NotAnExperimentError, SpecError, TunekitError
from tunekit.layout import (
    EPOCHS_FILE,
    EXPLOITS_FILE,
    FINAL_PREFIX,
    ID_COLUMNS,
    SPANS_FILE,
    SPEC_FILE,
    TRIALS_FILE,
    TrialStatus,
    finite,
    number_or_none,
    study_file,
)
from tunekit.results.best import BestTrial, best_trial
from tunekit.results.pareto import pareto_of
from tunekit.storage.buckets import model_of, readable, shown
from tunekit.storage.clock import SearchClock
from tunekit.storage.store import check_table, table_rows

if TYPE_CHECKING:
    import pandas as pd

    from tunekit.contract import Trainable
    from tunekit.results.importance import Importance
    from tunekit.results.models import TrialModel
    from tunekit.results.retrain import Retrained


@dataclass(frozen=True)
class ExperimentResults:
    """What a search left behind.

    Attributes:
        experiment_dir: where Ray's files, the spec, the study and the tables live.
        spec: the experiment's spec, parsed from ``spec.yaml`` without locating the
            trainable (``spec.trainable`` is a ``RecordedTrainable``; ``spec.raw`` is the
            file's mapping). A mapping passed here is parsed the same way.
        trials: one row per trial (id, status, reason, epochs, final and best metric,
            rung, wall time, samples/s, node, ``params.*``).
        epochs: one row per trial per reported epoch, with every reported metric; ``time``
            is active seconds since the search started (stops between sessions excluded).
        best: the best trial of this experiment (trained to the end if any trial was),
            with the configuration its model was trained under (after PBT's exploits), or None.
            Every other figure (counts, times, the best including a warm start's history,
            the ledger) is in ``tunekit.results.summarize(results)``.
        builders: the builders passed from Python to the ``run``, ``resume`` or ``Tuner``
            that returned these results (None from ``tunekit.load``, and for a trainable
            spec.yaml names): ``best_models`` and ``retrain`` call them.
    """

    experiment_dir: Path
    spec: ExperimentSpec
    trials: pd.DataFrame
    epochs: pd.DataFrame
    best: BestTrial | None
    builders: Trainable | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.spec, Mapping):  # a spec.yaml mapping (MLflow's copy, older callers)
            object.__setattr__(self, "spec", recorded_spec(self.spec))

    @property
    def metric(self) -> str:
        """The metric of every "final" and "best" figure: with several objectives, the one
        ``select`` picks the best trial by (``tunekit.config.objectives.headline_metric``)."""
        return headline_metric(self.spec).name

    @property
    def mode(self) -> MetricMode:
        return headline_metric(self.spec).mode

    @property
    def started_at(self) -> float | None:
        """When the search's first session started (wall-clock seconds).

        None for an experiment written before tunekit recorded it, or not on this machine.
        """
        clock = SearchClock.read(self.experiment_dir)
        return None if clock is None else clock.started_at

    @property
    def spans(self) -> pd.DataFrame:
        """Each stretch a trial ran (``spans.csv``): ``start`` and ``end`` in active seconds."""
        import pandas as pd

        return _read_csv(pd, self.experiment_dir / SPANS_FILE)

    @property
    def exploits(self) -> pd.DataFrame:
        """PBT's exploit steps (``exploits.csv``), one row each: epoch, trial, source trial and
        epoch, ``old.*`` and ``new.*`` configuration. Empty for other schedulers."""
        import pandas as pd

        return _read_csv(pd, self.experiment_dir / EXPLOITS_FILE)

    @property
    def best_config(self) -> dict[str, Any] | None:
        """The configuration the best trial's model was trained under (after PBT's exploit steps)."""
        return None if self.best is None else self.best.config

    @property
    def best_metric(self) -> float | None:
        return None if self.best is None else self.best.metric

    def pareto_front(self) -> pd.DataFrame:
        """The Pareto front: the non-dominated feasible trials that trained to the end, best
        first by the first objective, as rows of ``trials`` (``final.<objective>`` columns).

        Empty for a single-objective experiment. Every trial's rank is in ``ranked()``'s
        ``pareto_rank`` column and in ``tunekit.results.summarize(results).pareto``.
        """
        front = pareto_of(self.trials, self.spec)
        if front is None or not front.front:
            return self.trials.iloc[0:0]
        order = [t.trial_id for t in front.front]
        table = self.trials.set_index(self.trials["trial_id"].astype(str), drop=False)
        return table.loc[order].reset_index(drop=True)

    def ranked(self) -> pd.DataFrame:
        """Trials best first: completed before pruned, then by final metric.

        With several objectives: by Pareto rank first (``pareto_rank``: 1 is the front; a
        trial left unranked says why, e.g. ``infeasible`` or ``pruned``), the ``select``
        rule's pick first of all, then by the rule's metric.
        """
        front = pareto_of(self.trials, self.spec)
        if front is not None and not self.trials.empty:
            ids = self.trials["trial_id"].astype(str)
            ranks = ids.map(front.rank_text)
            numeric = ids.map(lambda t: front.ranks.get(t, len(self.trials) + 1))
            chosen = ids == (self.best.trial_id if self.best is not None else None)
            rule = selection_of(self.spec)
            by = f"{FINAL_PREFIX}{rule.metric}" if f"{FINAL_PREFIX}{rule.metric}" in self.trials else "final_metric"
            table = self.trials.assign(pareto_rank=ranks, _front=numeric, _chosen=~chosen)
            return table.sort_values(
                ["_chosen", "_front", by], ascending=[True, True, rule.mode == "min"], na_position="last", kind="stable"
            ).drop(columns=["_front", "_chosen"])
        order = {
            TrialStatus.COMPLETED: 0,
            TrialStatus.PRUNED: 1,
            TrialStatus.STOPPED: 2,
            TrialStatus.RUNNING: 3,
            TrialStatus.FAILED: 4,
        }
        table = self.trials.assign(_order=self.trials["status"].map(order))
        ascending = self.mode == "min"
        return table.sort_values(["_order", "final_metric"], ascending=[True, ascending], na_position="last").drop(
            columns="_order"
        )

    def importance(self, *, evaluator: Any = None, min_trials: int = 5) -> Importance:
        """Parameter importance from every trial, pruned ones included, at the deepest epoch enough reached.

        A mapping ``{parameter: share}``, most important first, saying the epoch and ASHA rung it
        used (``epoch``, ``rung``, ``note``); empty, with the reason in ``note``, when fewer than
        ``min_trials`` trials reached any one epoch. See ``tunekit.results.importance``.
        """
        import warnings

        from tunekit.results.importance import FewTrialsWarning, importance

        found = importance(self, evaluator=evaluator, min_trials=min_trials, warn=False)
        if found.few_trials:
            warnings.warn(f"parameter importance {found.note}", FewTrialsWarning, stacklevel=2)
        return found

    def __repr__(self) -> str:
        from tunekit.results.display import results_text

        return results_text(self)

    def _repr_html_(self) -> str:
        from tunekit.results.display import results_html

        return results_html(self)

    def model_path(self, trial: str | int | None = None) -> Path | None:
        """The final model a trial saved, from its newest checkpoint that holds one.

        For an experiment in a bucket, the file is fetched into this machine's read cache
        (``$TUNEKIT_CACHE``, default ``~/.cache/tunekit``) the first time it is asked for.

        That is ``model.keras``, or ``model.weights.h5`` when Keras could not save the
        model whole (rebuild it with the trainable's ``build_model``, then
        ``load_weights``). None when the trial saved neither (it was pruned, stopped or
        failed before its end) or its checkpoints are not on this machine.

        Args:
            trial: a trial id, or an Optuna trial number; the best trial when None.

        Raises:
            TunekitError: no such trial in this experiment.
        """
        if trial is None:
            return None if self.best is None else model_of(self.experiment_dir, self.best.trial_id)
        ids = [] if self.trials.empty else [str(t) for t in self.trials["trial_id"]]
        if isinstance(trial, int) and not isinstance(trial, bool):
            matches = [] if self.trials.empty else list(self.trials.loc[self.trials["number"] == trial, "trial_id"])
            if not matches:
                raise TunekitError(f"no trial number {trial} in {shown(self.experiment_dir)}")
            return model_of(self.experiment_dir, str(matches[0]))
        if str(trial) not in ids:
            listed = ", ".join(ids[:10]) + (", ..." if len(ids) > 10 else "")
            raise TunekitError(f"no trial {trial!r} in {shown(self.experiment_dir)}; trials: {listed or 'none'}")
        return model_of(self.experiment_dir, str(trial))

    def best_models(self, n: int = 3) -> list[TrialModel]:
        """The Keras models of the ``n`` best trials (``ranked()``'s order), loaded, best first.

        Each is a ``TrialModel`` (trial id and number, status, final metric, ``model``, and
        ``source``: the exported model, or, for a trial without one (pruned, stopped), "rebuilt
        from the checkpoint of epoch N": ``build_model`` with its configuration and the
        checkpoint's weights). Imports TensorFlow, and the trainable for a rebuild.
        """
        from tunekit.results.models import best_models

        return best_models(self, n)

    def retrain(
        self,
        trial: int | str | None = None,
        *,
        data: Any = "train+validation",
        epochs: int | None = None,
        track: bool = True,
    ) -> Retrained:
        """Trains the best configuration (or ``trial``'s) again, in this process, and exports it.

        By default on the trainable's train plus validation data, for as many epochs as the trial
        trained; ``data="train"`` trains the trial again exactly (seed, precision, compile), and
        a ``(train_ds, val_ds)`` pair trains on your own data. The model and ``retrain.json`` go
        to ``retrain/<n>-trial-<number>/`` in the experiment; a tracked search gets an MLflow run,
        a child of its parent run tagged ``tunekit.role=retrain``. See
        ``tunekit.results.retrain.retrain``. Imports TensorFlow and the trainable.
        """
        from tunekit.results.retrain import retrain

        return retrain(self, trial, data=data, epochs=epochs, track=track)


def load(experiment_dir: str | Path) -> ExperimentResults:
    """Loads a finished (or interrupted) experiment from its directory.

    Raises:
        NotAnExperimentError: when the directory holds no tunekit experiment (a StorageError).
        DamagedFileError: a table is cut short (a StorageError): nothing partial is returned.
    """
    import pandas as pd

    directory = readable(experiment_dir)  # a bucket's: its records pulled into this machine's read cache
    spec_path = directory / SPEC_FILE
    if not spec_path.is_file():
        raise NotAnExperimentError(shown(directory), SPEC_FILE)
    check_required_tables(directory)
    if warning := missing_study(directory):
        warnings.warn(warning, DamagedRecordWarning, stacklevel=2)
    trials = _read_csv(pd, directory / TRIALS_FILE)
    epochs = _read_csv(pd, directory / EPOCHS_FILE)
    spec = recorded_spec(read_recorded_spec(spec_path), directory, trials)
    exploits = _read_csv(pd, directory / EXPLOITS_FILE)
    return ExperimentResults(
        directory, spec, trials, epochs, best_trial(trials, exploits, headline_metric(spec).mode, spec)
    )


def check_required_tables(directory: Path) -> None:
    """trials.csv and epochs.csv are written together (the recorder's every table write): a
    trials.csv that counts epochs without an epochs.csv, or an epochs.csv without a trials.csv,
    is a file lost, never a search with no epochs or no trials.

    Raises:
        DamagedFileError: naming the missing table and what says it should be there.
    """
    trials, epochs = directory / TRIALS_FILE, directory / EPOCHS_FILE
    if epochs.is_file() and not trials.is_file():
        missing, problem = trials, f"missing, while {EPOCHS_FILE} is there (the two are written together)"
    elif not epochs.is_file() and (trained := sum(number_or_none(r.get("epochs")) or 0 for r in table_rows(trials))):
        missing, problem = epochs, f"missing, while {TRIALS_FILE} counts {trained:.0f} epochs its trials reported"
    else:
        return
    raise DamagedFileError(
        missing, problem, f"restore it from a copy; `tunekit check {shown(directory)}` says what else is whole"
    )


def missing_study(directory: Path) -> str | None:
    """The line a reader says when the study is missing though the search ran, or None.

    Results are still read (the tables hold them); what the study alone held (the sampler's
    history for a resume) is not. Said of a search Ray ran (its saved state is there), not of
    tables made by hand or by a test.
    """
    if not (directory / TRIALS_FILE).is_file() or study_file(directory).is_file():
        return None
    if not any(directory.glob("experiment_state-*.json")):
        return None
    return (
        f"{study_file(directory)}: missing, while {TRIALS_FILE} holds the search's trials: these results are "
        f"read from the tables alone; `tunekit check --repair {shown(directory)}` rebuilds the study from them"
    )


def recorded_spec(raw: Any, spec_dir: Path | None = None, trials: pd.DataFrame | None = None) -> ExperimentSpec:
    """An experiment's recorded spec, parsed without looking for its trainable.

    The trainable may have moved, or been passed from Python (``python: ...``); loading
    results needs neither. A record without its budget (a hand-made or very old
    ``spec.yaml``) takes it from the trials table: as many trials and epochs as ran.
    """
    if not isinstance(raw, Mapping):
        raise SpecError(SPEC_FILE, "must be a mapping at the top level", raw)
    record = dict(raw)
    if not isinstance(record.get("budget"), Mapping):
        ran, most = 1, None
        if trials is not None and not trials.empty:
            ran = len(trials)
            most = finite(trials["epochs"].max()) if "epochs" in trials.columns else None
        record["budget"] = {"num_samples": ran, "max_epochs": max(1, int(most or 1))}
    return parse_spec(record, spec_dir, locate_trainable=False)


def _read_csv(pd: Any, path: Path) -> pd.DataFrame:
    """A table as a frame (empty when missing); ``DamagedFileError`` when it is cut short."""
    check_table(path)
    if not path.is_file():
        return pd.DataFrame()
    return pd.read_csv(path, dtype={column: str for column in ID_COLUMNS})


# ------------------------------------------------------------------ from MLflow
