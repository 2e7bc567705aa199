"""In Jupyter, Ray Tune's reporter would wipe the cell's output (``clear_output(wait=True)``) as a search starts."""

from __future__ import annotations

import pytest


def test_no_jupyter_reporter_clears_the_cell_while_a_search_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    import IPython.display
    import ray.tune.progress_reporter as progress_reporter
    import ray.tune.tune as tune_module
    import ray.tune.utils.log as tune_log

    from tunekit.driver.session import driver_env

    cleared: list[bool] = []
    monkeypatch.setattr(IPython.display, "clear_output", lambda wait=False: cleared.append(wait))
    monkeypatch.setattr(progress_reporter, "IS_NOTEBOOK", True)  # as in a Jupyter kernel
    monkeypatch.setattr(tune_log, "verbosity", tune_log.Verbosity.V0_MINIMAL)  # tune.run(verbose=0) sets it
    assert isinstance(tune_module._detect_reporter(), progress_reporter.JupyterNotebookReporter)
    assert cleared == [True]  # what Ray does at once in a notebook, whatever the verbosity
    cleared.clear()
    with driver_env():
        reporter = tune_module._detect_reporter()
    assert isinstance(reporter, progress_reporter.CLIReporter) and cleared == []
    assert isinstance(tune_module._detect_reporter(), progress_reporter.JupyterNotebookReporter)  # put back
