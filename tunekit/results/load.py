"""Finished experiments as tables: loaded from the experiment directory alone, no Ray needed."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from tunekit.config.spec import ExperimentSpec, MetricMode, parse_spec
from tunekit.errors import NotAnExperimentError, SpecError, TunekitError
from tunekit.layout import (
    EPOCHS_FILE,
    EXPLOITS_FILE,
    PARAM_PREFIX,
    SPEC_FILE,
    STARTED_FILE,
    STARTED_KEY,
    TRIALS_FILE,
    TrialStatus,
    finite,
)
from tunekit.search.plan import pick_best

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class BestTrial:
    trial_id: str
    number: int | None
    config: dict[str, Any]
    metric: float
    epochs: int
    status: str


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
        epochs: one row per trial per reported epoch, with every reported metric.
        best: the best trial (trained to the end if any trial was), or None.
    """

    experiment_dir: Path
    spec: ExperimentSpec
    trials: pd.DataFrame
    epochs: pd.DataFrame
    best: BestTrial | None

    def __post_init__(self) -> None:
        if isinstance(self.spec, Mapping):  # a spec.yaml mapping (MLflow's copy, older callers)
            object.__setattr__(self, "spec", recorded_spec(self.spec))

    @property
    def metric(self) -> str:
        return self.spec.metric.name

    @property
    def mode(self) -> MetricMode:
        return self.spec.metric.mode

    @property
    def started_at(self) -> float | None:
        """When the search's clock started (wall-clock seconds); epochs' ``time`` counts from it.

        None for an experiment written before tunekit recorded it, or not on this machine.
        """
        try:
            value = json.loads((self.experiment_dir / STARTED_FILE).read_text()).get(STARTED_KEY)
        except (OSError, ValueError, AttributeError):
            return None
        return finite(value)

    @property
    def exploits(self) -> pd.DataFrame:
        """PBT's exploit steps (``exploits.csv``), one row each: epoch, trial, source trial and
        epoch, ``old.*`` and ``new.*`` configuration. Empty for other schedulers."""
        import pandas as pd

        return _read_csv(pd, self.experiment_dir / EXPLOITS_FILE)

    @property
    def best_config(self) -> dict[str, Any] | None:
        return None if self.best is None else self.best.config

    @property
    def best_metric(self) -> float | None:
        return None if self.best is None else self.best.metric

    def ranked(self) -> pd.DataFrame:
        """Trials best first: completed before pruned, then by final metric."""
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

    def model_path(self, trial: str | int | None = None) -> Path | None:
        """The final model a trial saved, from its newest checkpoint that holds one.

        That is ``model.keras``, or ``model.weights.h5`` when Keras could not save the
        model whole (rebuild it with the trainable's ``build_model``, then
        ``load_weights``). None when the trial saved neither (it was pruned, stopped or
        failed before its end) or its checkpoints are not on this machine.

        Args:
            trial: a trial id, or an Optuna trial number; the best trial when None.

        Raises:
            TunekitError: no such trial in this experiment.
        """
        from tunekit.tracking.artifacts import final_model_path

        if trial is None:
            return None if self.best is None else final_model_path(self.experiment_dir, self.best.trial_id)
        ids = [] if self.trials.empty else [str(t) for t in self.trials["trial_id"]]
        if isinstance(trial, int) and not isinstance(trial, bool):
            matches = [] if self.trials.empty else list(self.trials.loc[self.trials["number"] == trial, "trial_id"])
            if not matches:
                raise TunekitError(f"no trial number {trial} in {self.experiment_dir}")
            return final_model_path(self.experiment_dir, str(matches[0]))
        if str(trial) not in ids:
            shown = ", ".join(ids[:10]) + (", ..." if len(ids) > 10 else "")
            raise TunekitError(f"no trial {trial!r} in {self.experiment_dir}; trials: {shown or 'none'}")
        return final_model_path(self.experiment_dir, str(trial))

    def to_json(self) -> str:
        best = None if self.best is None else self.best.__dict__
        # Best first, as the table: a script taking the first trial gets the best one.
        trials = json.loads(self.ranked().to_json(orient="records")) if not self.trials.empty else []
        return json.dumps(
            {
                "experiment_dir": str(self.experiment_dir),
                "metric": self.metric,
                "mode": self.mode,
                "best": best,
                "trials": trials,
            },
            indent=2,
        )


def load(experiment_dir: str | Path) -> ExperimentResults:
    """Loads a finished (or interrupted) experiment from its directory.

    Raises:
        NotAnExperimentError: when the directory holds no tunekit experiment (a StorageError).
    """
    import pandas as pd

    directory = Path(experiment_dir).expanduser().resolve()
    spec_path = directory / SPEC_FILE
    if not spec_path.is_file():
        raise NotAnExperimentError(directory, SPEC_FILE)
    trials = _read_csv(pd, directory / TRIALS_FILE)
    epochs = _read_csv(pd, directory / EPOCHS_FILE)
    spec = recorded_spec(yaml.safe_load(spec_path.read_text()), directory, trials)
    return ExperimentResults(directory, spec, trials, epochs, best_trial(trials, spec.metric.mode))


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
    if not path.is_file() or path.stat().st_size == 0:
        return pd.DataFrame()
    return pd.read_csv(path)


def best_trial(trials: pd.DataFrame, mode: MetricMode) -> BestTrial | None:
    if trials.empty:
        return None
    candidates = [(str(row["status"]), finite(row["final_metric"]), row) for _, row in trials.iterrows()]
    row = pick_best(candidates, mode)
    if row is None:
        return None
    config = {
        column[len(PARAM_PREFIX) :]: _plain(row[column])
        for column in trials.columns
        if column.startswith(PARAM_PREFIX) and not _is_missing(row[column])
    }
    number = None if _is_missing(row["number"]) else int(row["number"])
    return BestTrial(
        str(row["trial_id"]), number, config, float(row["final_metric"]), int(row["epochs"]), str(row["status"])
    )


def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _plain(value: Any) -> Any:
    # numpy scalars out of pandas -> plain Python values a config can hold
    return value.item() if hasattr(value, "item") else value


# ------------------------------------------------------------------ from MLflow
