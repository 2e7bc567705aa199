"""The shipped notebooks: saved clean, and executed end to end with nbclient on a real small search."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "notebooks"
QUICKSTART = NOTEBOOKS / "quickstart.ipynb"
EXPLORE = NOTEBOOKS / "explore_results.ipynb"
CELL_TIMEOUT_S = 600


def execute(path: Path, env: dict[str, str], where: Path = NOTEBOOKS) -> Any:
    """Runs every cell in a fresh kernel started in ``where``, as Jupyter would; raises on any error."""
    from nbclient import NotebookClient

    notebook = nbformat.read(path, as_version=4)
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        # A private local Ray, not one some other process started on this machine.
        patch.setenv("RAY_ADDRESS", "local")
        NotebookClient(
            notebook, timeout=CELL_TIMEOUT_S, kernel_name="python3", resources={"metadata": {"path": str(where)}}
        ).execute()
    return notebook


def images(notebook: Any) -> int:
    return sum(
        "image/png" in output.get("data", {})
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
    )


def html(notebook: Any) -> str:
    return "\n".join(
        output.get("data", {}).get("text/html", "") for cell in notebook.cells for output in cell.get("outputs", [])
    )


def tunekit_name(experiment: Path) -> str:
    import yaml

    return str(yaml.safe_load((experiment / "spec.yaml").read_text())["name"])


def text(notebook: Any) -> str:
    parts = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            parts.append(output.get("text", "") or output.get("data", {}).get("text/plain", ""))
    return "\n".join(parts)


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path, str]:
    storage = tmp_path_factory.mktemp("notebook-results")
    uri = f"sqlite:///{storage / 'mlflow.db'}"
    notebook = execute(
        QUICKSTART,
        {
            "TUNEKIT_NB_TRIALS": "4",
            "TUNEKIT_NB_EPOCHS": "3",
            "TUNEKIT_NB_STORAGE": str(storage),
            "TUNEKIT_NB_TUNER_DIR": str(storage.parent / "notebook-tuner"),
            "MLFLOW_TRACKING_URI": uri,
        },
    )
    return notebook, storage, uri


@pytest.mark.parametrize("path", [QUICKSTART, EXPLORE], ids=lambda p: p.name)
def test_notebooks_are_saved_without_outputs(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, cell.source[:60]
    assert notebook.metadata.kernelspec.name == "python3"


@pytest.mark.slow
def test_quickstart_runs_a_search_and_plots_it(quickstart: tuple[Any, Path, str]) -> None:
    notebook, storage, _ = quickstart
    experiments = [p.parent for p in storage.glob("*/trials.csv")]
    assert len(experiments) == 1
    assert images(notebook) == 2  # learning curves, best so far
    output = text(notebook)
    assert "rung" in output and "experiment directory:" in output and "best val_accuracy:" in output
    assert "Traceback" not in output
    # The Tuner path: KerasTuner's summary of its best trial, and its experiment beside.
    assert "Results summary" in output and "Score: " in output, output[-3000:]
    tuner_trials = storage.parent / "notebook-tuner" / "quickstart-tuner" / "trials.csv"
    assert len(tuner_trials.read_text().splitlines()) == 1 + 2  # header, max(2, 4 // 2) trials


@pytest.mark.slow
def test_explore_results_ranks_plots_and_finds_the_runs_in_mlflow(
    quickstart: tuple[Any, Path, str], tmp_path: Path
) -> None:
    _, storage, uri = quickstart
    experiment = next(p.parent for p in storage.glob("*/trials.csv"))
    # A copy outside the repository, given its storage by a path relative to where it starts:
    # it finds the latest experiment there.
    copy = tmp_path / "mine" / EXPLORE.name
    copy.parent.mkdir()
    copy.write_bytes(EXPLORE.read_bytes())
    relative = os.path.relpath(storage, copy.parent)
    # A newer search whose trials all failed (no epoch in its table): the notebook passes it by.
    failed = storage / "all-failed"
    failed.mkdir()
    for table in ("trials.csv", "epochs.csv"):
        (failed / table).write_text((experiment / table).read_text().splitlines()[0] + "\n")
    # Last week's search, for the comparison cell: the same experiment under another name, older.
    earlier = storage / "last-week"
    shutil.copytree(experiment, earlier, ignore=shutil.ignore_patterns("report.html"))
    for path in earlier.rglob("*"):
        os.utime(path, (path.stat().st_atime - 7 * 86400, path.stat().st_mtime - 7 * 86400))
    try:
        notebook = execute(copy, {"TUNEKIT_NB_STORAGE": relative, "MLFLOW_TRACKING_URI": uri}, where=copy.parent)
        the_same_from_the_command_line(storage, earlier, experiment, tmp_path)
    finally:
        shutil.rmtree(failed)
        shutil.rmtree(earlier)
    assert images(notebook) == 4  # curves, best so far, parallel coordinates, importance
    shown = html(notebook)
    assert f"<b>{tunekit_name(experiment)}</b>" in shown and "top trials" in shown  # the results' own view
    # Both experiments listed, and compared side by side with their figure inline.
    assert "last-week" in shown and experiment.name in shown and "time to best" in shown
    assert shown.count('alt="best so far"') == 1
    output = text(notebook)
    assert "4 child runs; the same trials as the directory: True" in output
    assert re.search(r"PosixPath\('.*/checkpoint_\d+/model\.keras'\)", output), output[:3000]
    assert "trained under: {" in output  # the best's configuration, as a PBT search changed it
    assert (experiment / "report.html").is_file()
    # 4 trials are too few for parameter importance: the one warning expected, and no other.
    few = re.compile(
        r".*FewTrialsWarning: parameter importance needs at least 5 trials at one epoch: \d trained to the end, "
        r"at most \d reached an ASHA rung\n.*\n"
    )
    assert len(few.findall(output)) == 1, output[-3000:]
    assert "Traceback" not in output and "Warning" not in few.sub("", output)


def the_same_from_the_command_line(storage: Path, earlier: Path, experiment: Path, tmp_path: Path) -> None:
    """`tunekit ls` and `tunekit report A B --html` agree with experiments() and compare() on bests and counts."""
    import contextlib
    import io
    import json

    import tunekit
    from tunekit.cli import main

    listing = tunekit.experiments(storage)
    comparison = tunekit.compare(earlier, experiment)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["ls", str(storage), "--format", "json"]) == 0
    rows = {row["experiment"]: row for row in json.loads(out.getvalue())}
    assert set(rows) == set(listing["experiment"]) == {earlier.name, experiment.name}
    out = io.StringIO()
    page = tmp_path / "compare.html"
    with contextlib.redirect_stdout(out):
        assert main(["report", str(earlier), str(experiment), "--format", "json"]) == 0
        assert main(["report", str(earlier), str(experiment), "--html", str(page)]) == 0
    record = json.loads(out.getvalue()[: out.getvalue().index("\n}\n") + 2])
    for row in record["experiments"]:
        name = row["experiment"]
        assert (
            row["best"]
            == rows[name]["best"]
            == comparison.table.loc[name, "best"]
            == tunekit.load(storage / name).best_metric
        )
        assert row["completed"] == rows[name]["completed"] == comparison.table.loc[name, "completed"]
        assert row["trials"] == rows[name]["trials"] == len(tunekit.load(storage / name).trials)
    assert "time to best" in page.read_text() and "data:image/png;base64," in page.read_text()


@pytest.mark.slow
def test_jupyterlab_from_the_notebooks_extra_serves_the_notebooks(tmp_path: Path) -> None:
    """What the README's `pip install -e ".[notebooks]" && jupyter lab notebooks/` gives (`.ci/bootstrap --test`
    installs the extra, so the suite always runs this)."""
    import subprocess
    import sys
    import time

    import requests

    from tunekit.testing.servers import free_port, stop_group

    port, token = free_port(), "tunekit-test"
    command = [
        str(Path(sys.executable).with_name("jupyter")),
        "lab",
        "notebooks/",
        "--no-browser",
        "--ip=127.0.0.1",
        f"--port={port}",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.runtime_dir={tmp_path}",
        *(["--allow-root"] if os.geteuid() == 0 else []),
    ]
    log = (tmp_path / "jupyter.log").open("wb")
    server = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        base, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 120
        while True:
            assert server.poll() is None, (tmp_path / "jupyter.log").read_text()[-2000:]
            try:
                lab = requests.get(f"{base}/lab", params={"token": token}, timeout=5)
                break
            except requests.ConnectionError:
                assert time.monotonic() < deadline, "jupyter lab did not answer in 120 s"
                time.sleep(0.5)
        assert lab.status_code == 200 and "<title>JupyterLab</title>" in lab.text
        contents = requests.get(f"{base}/api/contents", params={"token": token}, timeout=10).json()
        assert {item["name"] for item in contents["content"]} >= {QUICKSTART.name, EXPLORE.name}
        specs = requests.get(f"{base}/api/kernelspecs", params={"token": token}, timeout=10).json()
        assert "python3" in specs["kernelspecs"]
    finally:
        stop_group(server)
        log.close()
