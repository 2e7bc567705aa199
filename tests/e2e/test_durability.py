"""Durable experiments on a real Ray runtime: kills, a second driver, torn and cut files, a full disk.

The chaos search is shared: one search killed and resumed over and over (SIGKILL, SIGTERM,
SIGINT, seeded), tracked to a real MLflow server, is then the experiment every damage test
copies and breaks. Each test states what was lost: nothing.
"""

from __future__ import annotations

import errno
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import optuna
import pytest

import tunekit
from tunekit.errors import DamagedFileError, NoSpaceError
from tunekit.results.check import check_experiment
from tunekit.search.attrs import LOST_ATTR
from tunekit.search.plan import study_storage
from tunekit.testing.runs import cli_sets
from tunekit.testing.servers import MlflowServer

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
DEFAULT_SPEC = REPO / "search_spaces" / "digits_mlp.yaml"
TUNEKIT = [sys.executable, "-m", "tunekit.cli"]
SAMPLES = 10
SEARCH = [
    f"budget.num_samples={SAMPLES}",
    "budget.max_epochs=6",
    "scheduler.grace_period=1",
    "scheduler.reduction_factor=2",
    "search.n_startup_trials=4",
]
# Epochs of 0.6 s: each session of the chaos search ends a trial or two before its stop.
CHAOS_SEARCH = [
    f"trainable={REPO / 'tests' / 'trainables' / 'slow_digits.py'}",
    "data.epoch_seconds=0.6",
    *SEARCH,
]
# The chaos: each stop's signal and how long after its driver's start it comes (seconds).
CHAOS_SEED = 40
STOPS = 3
DAMAGED = pytest.mark.inconsistent_on_purpose("a copy of the chaos search, damaged on purpose")


def _driver(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    # Its own session: a SIGKILL takes the driver and the local Ray it started, as on a lost machine.
    with log.open("ab") as out:
        return subprocess.Popen([*TUNEKIT, *args], cwd=log.parent, stdout=out, stderr=out, start_new_session=True)


def _ended(experiment: Path) -> int:
    try:
        from tunekit.storage.store import table_rows

        return sum(row["status"] != "running" for row in table_rows(experiment / "trials.csv"))
    except (OSError, DamagedFileError):
        return 0


def _stop(driver: subprocess.Popen[bytes], number: int) -> int:
    if number == signal.SIGKILL:
        os.killpg(driver.pid, signal.SIGKILL)
    else:
        driver.send_signal(number)
    try:
        return driver.wait(timeout=90)
    except subprocess.TimeoutExpired:  # a graceful stop that hangs is a failure, after cleaning up
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
        raise AssertionError(f"{signal.Signals(number).name} did not stop the driver within 90 s") from None


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    server = MlflowServer(tmp_path_factory.mktemp("mlflow")).start()
    yield server
    server.stop()


@dataclass
class Chaos:
    experiment: Path
    stops: list[tuple[str, int, int]]  # each stop's signal, the trials ended before it, the driver's exit status
    status: int  # the last resume's exit status
    log: Path  # every driver's output
    second: dict[str, subprocess.CompletedProcess[str]] = field(default_factory=dict)
    second_took: float = 0.0
    paused_status: int | None = None  # the driver paused past the stale window, once continued


@pytest.fixture(scope="module")
def chaos(tmp_path_factory: pytest.TempPathFactory, mlflow_server: MlflowServer) -> Chaos:
    """A search stopped ``STOPS`` times by seeded random signals at random moments (start-up
    included) and resumed each time; then resumed to its end. What each stop saw, for the test."""
    root = tmp_path_factory.mktemp("chaos")
    experiment, log = root / "results" / "chaos", root / "drivers.log"
    rng = random.Random(CHAOS_SEED)
    sets = cli_sets([*CHAOS_SEARCH, f"tracking.uri={mlflow_server.uri}"])
    driver = _driver(["run", str(DEFAULT_SPEC), "--storage", str(root / "results"), "--name", "chaos", *sets], log)
    stops: list[tuple[str, int, int]] = []
    session_log = 0
    second: tuple[dict[str, subprocess.CompletedProcess[str]], float] = ({}, 0.0)
    for stop in range(STOPS):
        number = rng.choice([signal.SIGKILL, signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
        if stop == 1:
            # In start-up: Ray is starting, nothing trained in this session yet.
            time.sleep(rng.uniform(1.0, 5.0))
        else:
            ended, deadline = _ended(experiment), time.monotonic() + 180
            while _ended(experiment) < ended + 1 and driver.poll() is None:  # at least one trial ends per session
                assert time.monotonic() < deadline, f"stop {stop}: no trial ended within 180 s"
                time.sleep(0.2)
            time.sleep(rng.uniform(0.0, 1.0))
        if stop == 2 and driver.poll() is None:
            second = _second_driver_while_one_runs(experiment)
        if driver.poll() is not None:
            break  # the search ended before this stop: nothing more to break
        ended = _ended(experiment)
        status = _stop(driver, number)
        stops.append((signal.Signals(number).name, ended, status))
        if status == 0:
            break  # it finished as the signal came: nothing more to break
        session_log = log.stat().st_size  # before the new driver's first line
        driver = _driver(["resume", str(experiment)], log)
    paused_status = None
    if driver.poll() is None:
        driver, paused_status = _paused_and_taken_over_from_another_host(driver, experiment, log, session_log)
    status = driver.wait(timeout=600)
    return Chaos(experiment, stops, status, log, *second, paused_status=paused_status)


def _paused_and_taken_over_from_another_host(
    driver: subprocess.Popen[bytes], experiment: Path, log: Path, session_log: int
) -> tuple[subprocess.Popen[bytes], int]:
    """The driver paused (SIGSTOP) past the lease's stale window, its search resumed from another
    host (its own UTS namespace), then the paused one continued (SIGCONT). Returns the new
    driver, and the old one's exit status."""
    # Paused as soon as this session's trials start (its log from ``session_log`` says so): trials
    # are then left to run whatever the load. (Paused at its first new epoch, that epoch could end
    # the last trial, and the other host's resume rightly found nothing to resume: exit 0.)
    deadline = time.monotonic() + 180
    while "first trial started" not in log.read_bytes()[session_log:].decode(errors="replace"):
        assert driver.poll() is None, "the search ended before the pause"
        assert time.monotonic() < deadline, "no trial started within 180 s before the pause"
        time.sleep(0.2)
    os.kill(driver.pid, signal.SIGSTOP)
    resume = " ".join([*TUNEKIT, "resume", str(experiment)])
    with log.open("ab") as out:
        taker = subprocess.Popen(
            ["unshare", "--uts", "sh", "-c", f"hostname chaos-h2 && exec {resume}"],
            cwd=log.parent,
            stdout=out,
            stderr=out,
            start_new_session=True,
            env={**os.environ, "TUNEKIT_LEASE_STALE_S": "6"},
        )
    deadline = time.monotonic() + 60
    while '"chaos-h2"' not in _text_or_empty(experiment / "driver.lease"):
        assert taker.poll() is None and time.monotonic() < deadline, "the other host did not take the lease"
        time.sleep(0.2)
    os.kill(driver.pid, signal.SIGCONT)
    return taker, driver.wait(timeout=60)


def _text_or_empty(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _second_driver_while_one_runs(experiment: Path) -> tuple[dict[str, subprocess.CompletedProcess[str]], float]:
    """A colleague's `tunekit resume` and `tunekit sync` while the search runs, and a reader."""
    began = time.monotonic()
    resume = subprocess.run([*TUNEKIT, "resume", str(experiment)], capture_output=True, text=True, timeout=60)
    took = time.monotonic() - began
    sync = subprocess.run([*TUNEKIT, "sync", str(experiment)], capture_output=True, text=True, timeout=60)
    status = subprocess.run([*TUNEKIT, "status", str(experiment)], capture_output=True, text=True, timeout=60)
    return {"resume": resume, "sync": sync, "status": status}, took


def test_a_search_stopped_and_resumed_three_times_finishes_with_nothing_lost(chaos: Chaos) -> None:
    experiment = chaos.experiment
    log = chaos.log.read_text(errors="replace")
    assert chaos.status == 0, log[-3000:]
    stops = chaos.stops
    assert len(stops) == STOPS, (stops, log[-3000:])
    for name, _, status in stops:
        assert status in {-signal.SIGKILL, 128 + signal.SIGINT, 128 + signal.SIGTERM}, (name, status, log[-3000:])
    assert "Traceback" not in log
    results = tunekit.load(experiment)
    trials = results.trials
    # Every trial exactly once, each decided by ASHA or its budget, never by a stop.
    assert len(trials) == SAMPLES
    assert set(trials["status"]) <= {"completed", "pruned"}, trials[["status", "reason"]]
    assert not trials["reason"].str.contains("rung None").any()
    params = [tuple(row) for row in trials.filter(like="params.").itertuples(index=False)]
    assert len(set(params)) == SAMPLES, "a configuration ran twice"
    study = optuna.load_study(study_name="digits-mlp", storage=study_storage(experiment))
    # A trial the study proposed just before a SIGKILL, which Ray never ran, is closed as lost.
    ran = [t for t in study.trials if LOST_ATTR not in t.user_attrs]
    assert len(ran) == SAMPLES
    assert not [t for t in study.trials if t.state == optuna.trial.TrialState.RUNNING]
    # trials.csv, epochs.csv, the study, the checkpoints and MLflow's runs agree.
    report = check_experiment(experiment)
    assert report.ok, report.describe()
    assert "mlflow" in " ".join(report.checked).lower(), report.checked
    assert not (experiment / "driver.lease").exists()


def test_a_paused_driver_another_host_took_over_from_exits_with_one_line_and_loses_nothing(chaos: Chaos) -> None:
    # What loses nothing is the first test's: every trial exactly once, the study, MLflow, check.
    assert chaos.paused_status == 3, chaos.log.read_text(errors="replace")[-3000:]
    log = chaos.log.read_text(errors="replace")
    lost = [line for line in log.splitlines() if "this driver lost the experiment's lease" in line]
    assert len(lost) == 1, log[-3000:]
    assert lost[0].startswith(f"tunekit: error: {chaos.experiment}: this driver lost the experiment's lease: ")
    assert "`tunekit resume` (pid " in lost[0] and " on chaos-h2) holds it since " in lost[0]
    assert "tunekit: took over the lease of a driver that is gone: `tunekit resume` (pid " in log


def test_a_second_driver_is_refused_in_seconds_and_a_reader_needs_no_lease(chaos: Chaos) -> None:
    second = chaos.second
    assert second, "the search ended before the second driver could try"
    resume, sync, status = second["resume"], second["sync"], second["status"]
    experiment = chaos.experiment
    prefix = f"tunekit: error: {experiment}: another driver is writing this experiment: `tunekit "
    for refused in (resume, sync):
        assert refused.returncode == 1, refused.stderr
        assert refused.stderr.startswith(prefix), refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        assert refused.stdout == ""
    assert chaos.second_took < 15  # refused in seconds (most of it is the interpreter's start)
    assert status.returncode == 0, status.stderr


@pytest.fixture
def copy_of_chaos(chaos: Chaos, tmp_path: Path) -> Path:
    copy = tmp_path / "results" / "copy"
    shutil.copytree(chaos.experiment, copy)
    tracking = copy / "tracking.json"  # the copy's MLflow runs are the original's: compared, not sent again
    assert tracking.is_file()
    return copy


@DAMAGED
def test_a_table_cut_mid_line_is_refused_by_every_reader_naming_it(copy_of_chaos: Path) -> None:
    trials = copy_of_chaos / "trials.csv"
    text = trials.read_bytes()
    trials.write_bytes(text[: text.index(b"\n", len(text) // 2) + 10])  # cut in the middle of a row
    line = (
        f"tunekit: error: {trials}: cut short (its last line has no end); `tunekit check {copy_of_chaos}` for details"
    )
    for command in (["report", str(copy_of_chaos)], ["status", str(copy_of_chaos)]):
        done = subprocess.run([*TUNEKIT, *command], capture_output=True, text=True, timeout=120)
        assert (done.returncode, done.stderr.strip(), done.stdout) == (1, line, ""), command
    with pytest.raises(DamagedFileError):
        tunekit.load(copy_of_chaos)
    checked = subprocess.run([*TUNEKIT, "check", str(copy_of_chaos)], capture_output=True, text=True, timeout=120)
    assert checked.returncode == 1 and "trials.csv" in checked.stdout + checked.stderr


@DAMAGED
def test_a_missing_study_refuses_the_resume_before_ray_starts_and_writes_nothing(copy_of_chaos: Path) -> None:
    (copy_of_chaos / "study.journal").unlink()
    before = sorted(p.name for p in copy_of_chaos.iterdir())
    began = time.monotonic()
    done = subprocess.run(
        [*TUNEKIT, "resume", str(copy_of_chaos), "--set", f"budget.num_samples={SAMPLES + 2}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert time.monotonic() - began < 20  # no Ray, no training first
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"tunekit: error: {copy_of_chaos / 'study.journal'}: missing, while the search has run (its trials and "
        f"configurations are recorded there); `tunekit check --repair {copy_of_chaos}` rebuilds the study from what "
        "of it is whole, trials.csv and epochs.csv; then `tunekit resume` continues"
    )
    assert sorted(p.name for p in copy_of_chaos.iterdir()) == before  # no empty journal left behind


@DAMAGED
@pytest.mark.parametrize("damage", ["cut", "inserted", "changed"])
def test_journal_damage_anywhere_is_refused_by_resume_found_by_check_and_repaired(
    copy_of_chaos: Path, damage: str
) -> None:
    journal = copy_of_chaos / "study.journal"
    data = journal.read_bytes()
    rng = random.Random(f"journal:{damage}")
    at = rng.randrange(len(data) // 5, 4 * len(data) // 5)
    line = data.count(b"\n", 0, at) + 1
    if damage == "cut":
        journal.write_bytes(data[:at])
    elif damage == "inserted":
        start = data.rfind(b"\n", 0, at) + 1
        journal.write_bytes(data[:start] + rng.choice([b"{}\n", b"\x00\x00\n", b'{"op_code": 4}\n']) + data[start:])
    else:
        journal.write_bytes(data[:at] + bytes([data[at] ^ rng.randrange(1, 256)]) + data[at + 1 :])
    before = sorted(p.name for p in copy_of_chaos.iterdir())
    done = subprocess.run([*TUNEKIT, "resume", str(copy_of_chaos)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    # "line N" or, for a change the seal's CRC found, "lines N-M" (its block): the parse took "s".
    named = int(re.search(r": lines? (\d+)", done.stderr).group(1))  # type: ignore[union-attr]
    assert named <= line, done.stderr  # the line damaged, or the first of its sealed block
    assert f"`tunekit check --repair {copy_of_chaos}`" in done.stderr
    assert sorted(p.name for p in copy_of_chaos.iterdir()) == before  # refused before it wrote anything
    checked = subprocess.run([*TUNEKIT, "check", str(copy_of_chaos)], capture_output=True, text=True, timeout=120)
    assert checked.returncode == 1 and "study.journal: every line whole" in checked.stdout, checked.stdout
    repaired = subprocess.run(
        [*TUNEKIT, "check", "--repair", str(copy_of_chaos)], capture_output=True, text=True, timeout=120
    )
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert re.match(r"repaired: study\.journal: rebuilt \(lines? \d+", repaired.stdout), repaired.stdout
    study = optuna.load_study(study_name="digits-mlp", storage=study_storage(copy_of_chaos))
    assert len([t for t in study.trials if LOST_ATTR not in t.user_attrs]) == SAMPLES


@DAMAGED
def test_a_changed_byte_in_any_checkpoint_payload_is_named_by_check(copy_of_chaos: Path) -> None:
    rng = random.Random(51)
    payloads = sorted(copy_of_chaos.glob("*/checkpoint_*/weights.npz")) + sorted(copy_of_chaos.glob("*/*/model.keras"))
    assert payloads and all((p.parent / "checksums.json").is_file() for p in payloads)
    damaged = rng.sample(payloads, 3)
    for path in damaged:
        data = bytearray(path.read_bytes())
        data[rng.randrange(len(data))] ^= rng.randrange(1, 256)
        path.write_bytes(bytes(data))
    described = check_experiment(copy_of_chaos).describe()
    for path in damaged:  # a disagreement for a trial's newest checkpoint, a note for one a newer replaced
        assert f"{path}: fails its checksum" in described or f"{path}: 'its recorded checksum'" in described, described


@DAMAGED
def test_a_truncated_model_of_the_best_trial_fails_check_naming_the_file(copy_of_chaos: Path) -> None:
    model = tunekit.load(copy_of_chaos).model_path()  # the best trial's
    assert model is not None and model.is_file()
    model.write_bytes(model.read_bytes()[: model.stat().st_size // 2])
    report = check_experiment(copy_of_chaos)
    assert not report.ok
    assert str(model) in report.describe()


# ----------------------------------------------------------------- in this process's Ray


def test_a_torn_journal_is_cut_back_once_and_the_grown_search_runs_on(shared_ray: None, tmp_path: Path) -> None:
    experiment = tmp_path / "torn"
    tunekit.run(
        DEFAULT_SPEC,
        overrides=[*SEARCH[1:], "budget.num_samples=3", "tracking.enabled=false"],
        storage=tmp_path,
        name="torn",
        progress=False,
    )
    journal = experiment / "study.journal"
    whole = journal.read_bytes()
    # Cut in the middle (a seeded offset): not a torn tail, whatever it looks like at the end.
    cut = random.Random(9533).randrange(len(whole) // 4, 3 * len(whole) // 4)
    journal.write_bytes(whole[:cut])
    with pytest.raises(DamagedFileError) as refused:
        tunekit.resume(experiment, overrides=["budget.num_samples=5"], progress=False)
    line = whole.count(b"\n", 0, cut) + 1
    assert str(refused.value).startswith(f"{journal}: line {line} is missing: "), refused.value
    assert journal.read_bytes() == whole[:cut]  # never cut back
    from tunekit.cli import main

    assert main(["check", "--repair", str(experiment)]) == 0  # rebuilt from the prefix and the tables
    whole = journal.read_bytes()
    journal.write_bytes(whole + b'{"op_code": 6, "worker_id": "x", "trial_id": 2, "sta')  # a write cut by a full disk
    said = tmp_path / "console.txt"
    with said.open("w") as console:
        tunekit.resume(experiment, overrides=["budget.num_samples=5"], progress=console)
    lines = [line for line in said.read_text().splitlines() if "torn last line" in line]
    assert lines == [
        "tunekit: study.journal: cut back a torn last line (52 bytes, a write cut short by a kill or a full disk) "
        "before appending; the study lost that one write, which the resume redoes"
    ]
    assert journal.read_bytes().startswith(whole)  # nothing before the torn line was touched
    study = optuna.load_study(study_name="digits-mlp", storage=study_storage(experiment))
    assert len(study.trials) == 5
    assert len(tunekit.load(experiment).trials) == 5


def test_a_crash_by_exception_holds_running_trials_and_the_resume_finishes_them(
    shared_ray: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk under a table write, injected through the store's seam, mid-search."""
    from tunekit.driver import recorder, records

    real = records.write_text

    def full_once_two_trials_ended(path: Path, text: str) -> None:
        ended = text.count(",completed,") + text.count(",pruned,")
        if path.name == "trials.csv" and ended >= 2 and ",running," in text:
            raise OSError(errno.ENOSPC, "No space left on device", str(path) + ".partial")
        real(path, text)

    monkeypatch.setattr(records, "write_text", full_once_two_trials_ended)
    # Tables are written at most every 2 s; a quick search could pass the moment without a write.
    monkeypatch.setattr(recorder, "_LIVE_WRITE_EVERY_S", 0.0)
    experiment = tmp_path / "crash"
    overrides = [*SEARCH[1:], "budget.num_samples=6", "tracking.enabled=false"]
    with pytest.raises(NoSpaceError) as full:
        tunekit.run(DEFAULT_SPEC, overrides=overrides, storage=tmp_path, name="crash", progress=False)
    assert str(full.value).startswith(
        f"no space left on the storage {tmp_path} (writing {experiment / 'trials.csv'}.partial): "
    )
    assert str(full.value).endswith(f"`tunekit resume {experiment}` continues the search (nothing it recorded is lost)")
    monkeypatch.setattr(records, "write_text", real)
    crashed = tunekit.load(experiment).trials
    # No verdict from the crash: only ASHA and the budget decided, and the rest is the resume's.
    decided = crashed[crashed["status"].isin(["completed", "pruned"])]
    assert not decided["reason"].str.contains("rung None").any()
    assert set(crashed["status"]) <= {"completed", "pruned", "stopped", "running"}
    study = optuna.load_study(study_name="digits-mlp", storage=study_storage(experiment))
    held = {t.user_attrs.get("ray_trial_id") for t in study.trials if t.state == optuna.trial.TrialState.RUNNING}
    assert held and held == set(crashed.loc[~crashed["status"].isin(["completed", "pruned"]), "trial_id"])
    tunekit.resume(experiment, progress=False)
    trials = tunekit.load(experiment).trials
    assert len(trials) == 6 and set(trials["status"]) <= {"completed", "pruned"}
    for row in decided.itertuples():  # decisions taken before the crash stand
        after = trials[trials["trial_id"] == row.trial_id].iloc[0]
        assert (after["status"], after["epochs"]) == (row.status, row.epochs)


# ---------------------------------------------------------------------- a real full disk


def _mount_tmpfs(where: Path, size: str) -> bool:
    where.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)]).returncode == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root (CI runs as root)")
def test_a_full_disk_ends_the_search_in_one_line_and_the_resume_finishes_it(tmp_path: Path) -> None:
    storage = tmp_path / "small"
    assert _mount_tmpfs(storage, "3m"), "mount -t tmpfs failed"
    try:
        done = subprocess.run(
            [
                *TUNEKIT,
                "run",
                str(DEFAULT_SPEC),
                "--storage",
                str(storage),
                "--name",
                "full",
                *cli_sets([*SEARCH, "tracking.enabled=false"]),
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
        )
        experiment = storage / "full"
        errors = [line for line in done.stderr.splitlines() if line.startswith("tunekit: error:")]
        assert done.returncode == 1, done.stderr[-3000:]
        assert "Traceback" not in done.stderr
        assert len(errors) == 1 and errors[0].startswith(f"tunekit: error: no space left on the storage {storage}"), (
            errors
        )
        assert errors[0].endswith(f"`tunekit resume {experiment}` continues the search (nothing it recorded is lost)")
        subprocess.run(["mount", "-o", "remount,size=256m", str(storage)], check=True)
        resumed = subprocess.run(
            [*TUNEKIT, "resume", str(experiment)], cwd=tmp_path, capture_output=True, text=True, timeout=600
        )
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        trials = tunekit.load(experiment).trials
        assert len(trials) == SAMPLES and set(trials["status"]) <= {"completed", "pruned"}
        report = check_experiment(experiment)
        assert report.ok, report.describe()
    finally:
        subprocess.run(["umount", "-l", str(storage)])


# ------------------------------------------------------------------ read-only storage


def _made_up_experiment(where: Path) -> Path:
    """An unfinished 12-trial search's files (10 trials recorded), written without Ray."""
    import importlib.util

    source = Path(__file__).parents[1] / "unit" / "results" / "made_up_experiments.py"
    module_spec = importlib.util.spec_from_file_location("made_up_experiments", source)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    experiment = Path(module.asha_experiment(where, finished=False))
    spec = experiment / "spec.yaml"
    spec.write_text(spec.read_text().replace("num_samples: 10", "num_samples: 12"))
    return experiment


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root (CI runs as root)")
def test_read_only_storage_is_one_line_with_the_fix_in_every_command(tmp_path: Path) -> None:
    storage = tmp_path / "ro"
    assert _mount_tmpfs(storage, "16m"), "mount -t tmpfs failed"
    try:
        experiment = _made_up_experiment(storage / "exp")
        subprocess.run(["mount", "-o", "remount,ro", str(storage)], check=True)
        fix = "read-only; fix: make it writable (remount it read-write), then run the command again"
        commands = {
            "run": ["run", str(DEFAULT_SPEC), "--storage", str(storage), "--name", "new"],
            "resume": ["resume", str(experiment)],
            "check": ["check", str(experiment)],
            "report": ["report", str(experiment)],
            "status": ["status", str(experiment)],
        }
        for name, args in commands.items():
            began = time.monotonic()
            done = subprocess.run([*TUNEKIT, *args], cwd=tmp_path, capture_output=True, text=True, timeout=120)
            assert time.monotonic() - began < 30, name  # before Ray: nothing starts
            assert "Traceback" not in done.stderr, (name, done.stderr)
            if name in ("check", "report", "status"):  # readers read it as ever (check: this made-up
                assert done.stderr == "", (name, done.stderr)  # experiment's disagreements, on stdout)
                assert done.stdout.strip(), name
                continue
            lines = done.stderr.strip().splitlines()  # the writers refuse in one line
            assert done.returncode == 1, (name, done.stdout)
            assert len(lines) == 1 and lines[0].startswith(f"tunekit: error: storage {storage}"), (name, lines)
            assert lines[0].endswith(fix), (name, lines)
    finally:
        subprocess.run(["umount", "-l", str(storage)])
