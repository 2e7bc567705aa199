"""Parameter importance of a finished experiment: Optuna's fANOVA over its completed trials."""

from __future__ import annotations

import math

from tunekit.layout import study_file
from tunekit.results.load import ExperimentResults
from tunekit.search.plan import study_storage


class FewTrialsWarning(UserWarning):
    """Parameter importance was asked of a study with too few completed trials to estimate it."""


# fANOVA fits a random forest to (config, value) pairs: from fewer completed trials than
# this, its ranking is noise (from 2 it always split importance between whatever differed).
MIN_TRIALS_FOR_IMPORTANCE = 5


def param_importances(results: ExperimentResults) -> tuple[dict[str, float] | None, str]:
    """(importances, note), or (None, why there are none)."""
    if not study_file(results.experiment_dir).is_file():
        return None, f"no Optuna study in {results.experiment_dir} (loaded from MLflow?)"
    import warnings

    with warnings.catch_warnings():
        # optuna's importance module imports tqdm.auto, which warns in Jupyter without ipywidgets
        warnings.filterwarnings("ignore", message="IProgress not found")
        import optuna
        import optuna.importance
        import tqdm.auto  # noqa: F401

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.load_study(study_name=results.spec.name, storage=study_storage(results.experiment_dir))
    except Exception as error:  # a missing or foreign study: say so instead of failing the report
        return None, f"cannot open the Optuna study: {error}"
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if len(complete) < MIN_TRIALS_FOR_IMPORTANCE:
        note = (
            f"needs at least {MIN_TRIALS_FOR_IMPORTANCE} completed trials, this study has "
            f"{len(complete)} (pruned trials do not count)"
        )
        warnings.warn(f"parameter importance {note}", FewTrialsWarning, stacklevel=3)
        return None, note
    try:
        importances = optuna.importance.get_param_importances(
            study, evaluator=optuna.importance.FanovaImportanceEvaluator(seed=0)
        )
    except (ValueError, RuntimeError) as error:
        return None, f"Optuna could not estimate importance: {error}"
    if not importances or not all(math.isfinite(v) for v in importances.values()):
        return None, "Optuna could not estimate importance (the completed trials do not differ)"
    return {str(k): float(v) for k, v in importances.items()}, f"from {len(complete)} completed trials"
