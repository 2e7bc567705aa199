"""The warm runtime as a user meets it: `tunekit up`, two searches back to back from a project in
another folder through the thin client, `tunekit status` and doctor's line, `tunekit down`.

One runtime (one Ray session) for the whole test. The first search runs 4 trials 2 at a time,
so two trials run in processes a trial ran in before (Ray Tune reuses actors), which left state
behind on purpose (tests/trainables/warm_probe.py); the second runs right after it ends.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil

from tunekit.layout import TRIALS_FILE
from tunekit.runtime.protocol import LOCK_FILE, PRELOADED_DIR, RUNTIME_DIR_ENV, RUNTIME_ENV

REPO = Path(__file__).resolve().parents[2]

SPEC = """\
name: warm
trainable: probes.warm_probe
metric: {name: val_accuracy, mode: max}
budget: {num_samples: 4, max_epochs: 1, max_concurrent: 2}
search: {algorithm: random, seed: 0}
scheduler: {type: fifo}
resources: {cpu: 1, gpu: 0}
training: {seed: 7}
space:
  units: {type: choice, values: [16, 32]}
  learning_rate: {type: loguniform, low: 1.0e-3, high: 1.0e-2}
"""

NOTEBOOK = """\
import tunekit
results = tunekit.run("warm.yaml", overrides=["budget.num_samples=1"])
print(f"{len(results.trials)} trial(s)")
try:
    tunekit.run("warm.yaml", overrides=["budget.num_samples=0"])
except tunekit.SpecError as error:
    print(f"SpecError: {error}")
"""


def _project(root: Path) -> Path:
    """A user's project: a spec, its trainable in a package, and a data file read by a relative path."""
    project = root / "project"
    (project / "probes").mkdir(parents=True)
    (project / "probes" / "__init__.py").write_text("")
    shutil.copy(REPO / "tests" / "trainables" / "warm_probe.py", project / "probes" / "warm_probe.py")
    (project / "data").mkdir()
    (project / "data" / "scale.txt").write_text("16.0\n")
    (project / "warm.yaml").write_text(SPEC)
    return project


def _tunekit(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tunekit.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def _notes(experiment: Path) -> list[dict[str, object]]:
    return [json.loads(path.read_text()) for path in sorted(experiment.glob("*/warm.json"))]


def _experiment(output: str) -> Path:
    line = next(line for line in output.splitlines() if line.startswith("experiment: "))
    return Path(line.removeprefix("experiment: "))


def test_two_searches_on_the_warm_runtime_take_its_preloaded_workers_and_leave_nothing_behind(
    tmp_path: Path,
) -> None:
    runtime = tmp_path / "rt"
    project = _project(tmp_path)
    pythonpath = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, RUNTIME_DIR_ENV: str(runtime), "PYTHONPATH": pythonpath}
    env.pop("RAY_ADDRESS", None)
    env.pop(RUNTIME_ENV, None)  # the suite's own "off" (tests/conftest.py)
    # Two `tunekit up` at once: one starts the runtime, the other waits for it and attaches.
    command = [sys.executable, "-m", "tunekit.cli", "up", "--workers", "3", "--idle-timeout", "5"]
    ups = [subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    said = sorted(up.communicate(timeout=240)[0] for up in ups)
    daemon: psutil.Process | None = None
    try:
        assert [up.returncode for up in ups] == [0, 0], said
        daemon = psutil.Process(int((runtime / LOCK_FILE).read_text()))
        # The attached one's last line; before it, that it waits, when it found the runtime starting.
        assert (
            said[0].splitlines()[-1]
            == f"tunekit: a warm runtime is up already (pid {daemon.pid}); tunekit down stops it"
        )
        assert said[1].startswith("tunekit: warm runtime up in "), said
        assert f"(pid {daemon.pid}): a local Ray and 3 workers with TensorFlow imported" in said[1], said

        status = _tunekit(["status"], tmp_path, env)
        assert f"warm runtime up (pid {daemon.pid}" in status.stdout
        assert "3 of 3 workers ready" in status.stdout

        from tunekit.doctor.checks import check_warm_runtime

        os.environ[RUNTIME_DIR_ENV] = str(runtime)
        try:
            line = check_warm_runtime().lines()[0]
        finally:
            del os.environ[RUNTIME_DIR_ENV]
        assert line.startswith("ok") and f"warm runtime: up (pid {daemon.pid}" in line

        searches = []
        for overrides in ([], ["--set", "budget.num_samples=2", "--set", "budget.max_concurrent=1"]):
            began = time.time()
            search = _tunekit(["run", "warm.yaml", *overrides], project, env)
            assert search.returncode == 0, search.stdout + search.stderr
            assert f"on the warm runtime (tunekit up, pid {daemon.pid})" in search.stdout
            searches.append((began, _experiment(search.stdout)))

        preloaded = {int(p.stem): json.loads(p.read_text()) for p in (runtime / PRELOADED_DIR).glob("*.json")}
        for began, experiment in searches:
            notes = _notes(experiment)
            with (experiment / TRIALS_FILE).open() as table:
                assert len(notes) == len(list(csv.DictReader(table)))
            for note in notes:
                # A pool worker's: TensorFlow imported before the command started, not on its way.
                assert note["pid"] in preloaded and preloaded[note["pid"]]["ended"] < began, (note, preloaded)
                assert note["cwd"] == str(project)
        first, second = _notes(searches[0][1]), _notes(searches[1][1])
        assert len({note["pid"] for note in first}) < len(first)  # some trials ran in a reused process
        # A search's processes end with it: nothing of one search's trials reaches the next's.
        assert not {note["pid"] for note in first} & {note["pid"] for note in second}
        for note in [*first, *second]:
            # Each trial began clean although the one before it in its process left state behind.
            assert note["python_random"] == note["expected_python_random"]
            assert note["numpy_random"] == note["expected_numpy_random"]
            assert note["policy"] == "float32"
            assert note["uid"] == 1
            assert note["devices"] == first[0]["devices"] and note["threads"] == first[0]["threads"]

        # From Python (a notebook): the same search on the runtime; a spec error raised here, as itself.
        called = subprocess.run(
            [sys.executable, "-c", NOTEBOOK], cwd=project, env=env, capture_output=True, text=True, timeout=120
        )
        assert called.returncode == 0, called.stdout + called.stderr
        assert f"on the warm runtime (tunekit up, pid {daemon.pid})" in called.stdout
        assert called.stdout.splitlines()[-2:] == [
            "1 trial(s)",
            "SpecError: budget.num_samples: must be an integer >= 1, got 0",
        ]

        everything = [daemon, *daemon.children(recursive=True)]
        down = _tunekit(["down"], tmp_path, env)
        assert down.returncode == 0 and f"warm runtime stopped (pid {daemon.pid})" in down.stdout
        _, alive = psutil.wait_procs(everything, timeout=10)
        assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
        assert _tunekit(["status"], tmp_path, env).stdout.startswith("no warm runtime is running")
    finally:
        if daemon is not None and daemon.is_running():  # a failed assertion above: no runtime outlives the test
            _tunekit(["down"], tmp_path, env)
            with contextlib.suppress(psutil.Error):
                for process in [daemon, *daemon.children(recursive=True)]:
                    process.kill()
