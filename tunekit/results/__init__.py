"""Finished experiments: loaded from their directory (``load``) or from MLflow (``load_from_mlflow``),
plotted (``tunekit.results.plots``) and reported (``tunekit.results.report``).

Light: pandas and matplotlib are imported by the functions that need them.
"""

from tunekit.results.load import BestTrial, ExperimentResults, load
from tunekit.results.mlflow import load_from_mlflow

__all__ = ["BestTrial", "ExperimentResults", "load", "load_from_mlflow"]
