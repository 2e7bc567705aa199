"""Finished experiments: loaded from their directory (``load``) or from MLflow (``load_from_mlflow``),
summarised once (``summarize``: every derived figure the reports show), checked against themselves
(``tunekit.results.check``), plotted (``tunekit.results.plots``) and reported (``tunekit.results.report``).

Light: pandas and matplotlib are imported by the functions that need them.
"""

from tunekit.results.best import BestTrial
from tunekit.results.load import ExperimentResults, load
from tunekit.results.mlflow import load_from_mlflow
from tunekit.results.summary import Summary, summarize

__all__ = ["BestTrial", "ExperimentResults", "Summary", "load", "load_from_mlflow", "summarize"]
