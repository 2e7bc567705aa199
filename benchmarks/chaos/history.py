"""One fault history: its seeded plan, the drivers it starts, and the user's next steps after each fault."""

from __future__ import annotations

import contextlib
import csv
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks import common
from benchmarks.chaos.bucket import BucketStorage

TUNEKIT = [sys.executable, "-m", "tunekit.cli"]
NUM_SAMPLES = 4
# Epochs of half a second or more: a fault has a trial to land in. Four trials, two at a time.
SEARCH = [
    f"trainable={common.REPO / 'tests' / 'trainables' / 'slow_digits.py'}",
    "data.epoch_seconds=0.5",
    f"budget.num_samples={NUM_SAMPLES}",
    "budget.max_epochs=4",
    "scheduler.grace_period=1",
    "scheduler.reduction_factor=2",
    "search.n_startup_trials=2",
]
NAME = "chaos"
MAX_RESUMES = 6  # past this many resumes without completing, the history is a violation
# What a run stopped in start-up says as it removes its folder (tunekit.driver.signals).
NOTHING_KEPT = "nothing started and nothing was kept"
DRIVER_TIMEOUT_S = 600.0  # a driver left to finish that runs longer than this is a violation


@dataclass(frozen=True)
class Moment:
    """When a fault comes: ``delay_s`` after the running driver started (``in_startup``), or
    ``delay_s`` after epochs.csv holds ``epochs`` more epochs than when the fault began waiting."""

    in_startup: bool
    epochs: int
    delay_s: float

    def describe(self) -> str:
        if self.in_startup:
            return f"{self.delay_s:.1f} s into the driver's start-up"
        return f"{self.delay_s:.1f} s after {self.epochs} more epoch(s) recorded"


@dataclass(frozen=True)
class PlannedFault:
    kind: str
    moment: Moment


@dataclass
class Driver:
    process: subprocess.Popen[bytes]
    log: Path
    what: str  # "run", "resume", "resume as chaos-h2", ...
    started: float
    checked: bool = False  # its ending was read (check_exit)

    def status(self) -> int | None:
        return self.process.poll()


@dataclass
class History:
    """A history's state while it runs: its folders, its drivers, what happened and what broke."""

    seed: int
    root: Path
    storage: Path
    rng: random.Random
    drivers: list[Driver] = field(default_factory=list)
    current: Driver | None = None
    events: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    injected: list[str] = field(default_factory=list)
    found_nothing: list[str] = field(default_factory=list)  # kinds whose moment came with nothing to break
    idle: bool = False  # set by an injector that found nothing to break (no worker, no checkpoint yet)
    resume_prefix: list[str] = field(default_factory=list)  # e.g. faketime for the next resume only
    run_args: list[str] = field(default_factory=list)  # the `tunekit run` that started the search
    restore: tuple[Path, Path] | None = None  # a damaged file and its whole copy: the user's repair
    damaged_after: int = 0  # how many drivers had started when the damage was made
    damage: bytes = b""  # the damaged file's bytes as the explorer left them
    # Earlier faults' damage no refusal repaired (restore, damaged_after, damage): a damaged
    # checkpoint nothing read outlives the faults after it (seed 841380: a checkpoint, then the
    # journal; the final check named the checkpoint, which the explorer had forgotten).
    earlier: list[tuple[tuple[Path, Path], int, bytes]] = field(default_factory=list)
    mounted: bool = False
    bucket: BucketStorage | None = None  # the experiment lives there, not in ``storage`` (storage-outage)
    began: float = field(default_factory=time.monotonic)

    @property
    def experiment(self) -> Path:
        """The experiment's folder; for a bucket's, the explorer's copy (``pull``)."""
        return self.root / "pulled" / NAME if self.bucket is not None else self.storage / NAME

    @property
    def where(self) -> str:
        """The storage a search is started in, as the drivers are given it."""
        return self.bucket.uri if self.bucket is not None else str(self.storage)

    @property
    def target(self) -> str:
        """The experiment, as the drivers are given it (``tunekit resume TARGET``)."""
        return f"{self.bucket.uri}/{NAME}" if self.bucket is not None else str(self.experiment)

    def pull(self) -> None:
        """A bucket experiment's copy in ``experiment`` made afresh, for what reads its files."""
        if self.bucket is not None:
            self.bucket.pull(NAME, self.experiment)

    @property
    def mlflow_db(self) -> Path:
        return self.root / "mlflow.db"

    def say(self, text: str) -> None:
        self.events.append(f"[{time.monotonic() - self.began:6.1f}s] {text}")

    def violate(self, text: str) -> None:
        self.say(f"VIOLATION: {text}")
        self.violations.append(text)

    def start(
        self,
        args: list[str],
        what: str,
        prefix: list[str] | None = None,
        host: str | None = None,
        env: dict[str, str] | None = None,
    ) -> Driver:
        """A ``tunekit`` driver in its own session (a SIGKILL of its group takes its local Ray too),
        under ``prefix`` (faketime) and as another ``host`` when given."""
        log = self.root / "drivers" / f"{len(self.drivers):02d}-{what.replace(' ', '-')}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        command = [*(prefix or []), *TUNEKIT, *args]
        if host is not None:
            command = on_another_host(host, command)
        env = {**(self.bucket.env(self.root) if self.bucket is not None else {}), **(env or {})}
        with log.open("wb") as out:
            process = subprocess.Popen(
                command, cwd=self.root, stdout=out, stderr=out, start_new_session=True, env=common.child_env(env)
            )
        driver = Driver(process, log, what, time.monotonic())
        self.drivers.append(driver)
        self.say(f"started `tunekit {' '.join(args[:1])}` ({what}, pid {process.pid})")
        return driver

    def run_once(self, args: list[str], what: str, host: str | None = None, timeout: float = 120.0) -> Driver:
        """A short-lived command (a second driver, a check) run to its end."""
        driver = self.start(args, what, host=host)
        self.ended_within(driver, timeout, f"{what} did not end within {timeout:.0f} s")
        return driver

    def ended_within(self, driver: Driver, seconds: float, violation: str) -> bool:
        """Whether ``driver`` exited within ``seconds``; if not, it is killed and ``violation`` recorded."""
        try:
            driver.process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            kill_group(driver)
            self.violate(violation)
            return False
        return True

    def epochs(self) -> int:
        """Epochs epochs.csv records (0 when it is missing or unreadable now)."""
        if self.bucket is not None:
            data = self.bucket.read(f"{NAME}/epochs.csv") or b""
            return sum(1 for _ in csv.DictReader(data.decode(errors="replace").splitlines()))
        try:
            with (self.experiment / "epochs.csv").open(newline="", errors="replace") as file:
                return sum(1 for _ in csv.DictReader(file))
        except OSError:
            return 0


def plan(
    seed: int,
    kinds: list[str],
    tmpfs_kinds: set[str],
    bucket_kinds: frozenset[str] = frozenset(),
    folder_kinds: frozenset[str] = frozenset(),
) -> list[PlannedFault]:
    """One to three faults of the enabled ``kinds``, each at a seeded moment; at most one needs the
    tmpfs, and none that needs the experiment in a bucket with one that needs it in a folder (the
    tmpfs's kinds, and those that read or change its files in place)."""
    rng = random.Random(seed)
    faults: list[PlannedFault] = []
    in_folder = set(tmpfs_kinds) | folder_kinds
    for _ in range(rng.choice([1, 1, 2, 2, 2, 3])):
        chosen = {f.kind for f in faults}
        choices = [
            k
            for k in kinds
            if not (k in tmpfs_kinds and chosen & (tmpfs_kinds | bucket_kinds))
            and not (k in bucket_kinds and chosen & in_folder)
            and not (k in in_folder and chosen & bucket_kinds)
        ]
        kind = rng.choice(choices)
        if rng.random() < 0.15:
            moment = Moment(True, 0, rng.uniform(2.0, 20.0))
        else:
            moment = Moment(False, rng.randint(1, 5), rng.uniform(0.0, 1.5))
        faults.append(PlannedFault(kind, moment))
    return faults


def kill_group(driver: Driver) -> None:
    """SIGKILL to the driver's whole session: the driver and the local Ray it started."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(driver.process.pid, signal.SIGKILL)
    driver.process.wait()


def wait_for(history: History, moment: Moment) -> bool:
    """Waits for ``moment`` while the search goes on; False when the search completed first."""
    driver = ensure_driving(history)
    if driver is None:
        return False
    if moment.in_startup:
        until = driver.started + moment.delay_s
        while time.monotonic() < until:
            if ensure_driving(history) is None:
                return False
            time.sleep(0.1)
        return ensure_driving(history) is not None
    target, deadline = history.epochs() + moment.epochs, time.monotonic() + DRIVER_TIMEOUT_S
    while history.epochs() < target:
        if ensure_driving(history) is None:
            return False
        if time.monotonic() > deadline:
            history.violate(f"no epoch recorded within {DRIVER_TIMEOUT_S:.0f} s")
            return False
        time.sleep(0.2)
    time.sleep(moment.delay_s)
    return ensure_driving(history) is not None


def ensure_driving(history: History) -> Driver | None:
    """The running driver; after a driver that ended short of completion, the user's next step
    (``tunekit resume``, after the repair a refusal asks for); None once the search completed."""
    while True:
        driver = history.current
        if driver is not None and driver.status() is None:
            return driver
        if driver is not None and driver.status() == 0:
            return None
        if driver is not None:
            check_exit(history, driver)
            repair_if_refused(history, driver)
            if driver.what == "run" and NOTHING_KEPT in driver.log.read_text(errors="replace"):
                # A signal in start-up, before Ray Tune saved anything: the run removed its folder
                # and said so; the user runs it again (seed 799732 resumed a folder that was gone).
                history.current = history.start(history.run_args, "run")
                continue
        resumes = sum(d.what.startswith("resume") for d in history.drivers)
        if resumes >= MAX_RESUMES:
            history.violate(f"the search did not complete after {resumes} resumes")
            return None
        prefix, history.resume_prefix = history.resume_prefix, []
        what = "resume" + (f" under {' '.join(prefix)}" if prefix else "")
        history.current = history.start(["resume", history.target], what, prefix)


def check_exit(history: History, driver: Driver) -> None:
    """What a driver said as it ended: at most one ``tunekit: error:`` line and no traceback."""
    if driver.checked:
        return
    driver.checked = True
    text = driver.log.read_text(errors="replace")
    errors = [line for line in text.splitlines() if line.startswith("tunekit: error:")]
    history.say(
        f"{driver.what} (pid {driver.process.pid}) exited {driver.status()}" + (f": {errors[-1]}" if errors else "")
    )
    if "Traceback" in text:
        history.violate(f"{driver.what} (pid {driver.process.pid}) printed a traceback (see {driver.log.name})")
    if len(errors) > 1:
        history.violate(f"{driver.what} (pid {driver.process.pid}) printed {len(errors)} `tunekit: error:` lines")


def repair_if_refused(history: History, driver: Driver) -> None:
    """A resume refused on a damaged file, naming it: the documented repair, a whole copy restored."""
    if history.restore is None or not driver.what.startswith("resume") or driver.status() != 1:
        return
    damaged, copy = history.restore
    if str(damaged) not in driver.log.read_text(errors="replace"):
        return
    history.restore = None
    damaged.write_bytes(copy.read_bytes())
    history.say(f"the user restores {damaged.name} from its copy (the refusal's repair)")


def repair_damage_nothing_read(history: History) -> None:
    """Damage still there once the search completed, which no resume read: `tunekit check` names it
    with its repair, whose outcome the whole copy stands for. A checkpoint payload (a completed
    trial's: seed 389070, replayed), or any record when no resume ran
    after the damage (the search had completed just before the kill: seed 321644). The final
    `check` reported it, while the explorer's invariants could not read it or read no checkpoints.
    Only the damage itself is repaired: a resume may have written a new file there since (Ray named
    a trial's next checkpoint as the damaged one it passed over: seed 235600, whose repair put the
    old bytes over the new file and its checksum)."""
    current = [] if history.restore is None else [(history.restore, history.damaged_after, history.damage)]
    history.restore = None
    for (damaged, copy), damaged_after, damage in [*history.earlier, *current]:
        resumed = any(d.what.startswith("resume") for d in history.drivers[damaged_after:])
        if damaged.name != "weights.npz" and resumed:
            continue
        if damaged.is_file() and damaged.read_bytes() == damage:
            damaged.write_bytes(copy.read_bytes())
            history.say(f"the user repairs {damaged.name} as `tunekit check` says (a whole copy stands for it)")


def finish(history: History) -> None:
    """Leaves the search to complete, resuming as a user would after each ending short of it."""
    deadline = time.monotonic() + DRIVER_TIMEOUT_S
    while (driver := ensure_driving(history)) is not None:
        if time.monotonic() > deadline:
            kill_group(driver)
            history.violate(f"the search did not complete within {DRIVER_TIMEOUT_S:.0f} s after the last fault")
            return
        time.sleep(0.5)
    if history.current is not None:
        check_exit(history, history.current)


def stop_everything(history: History) -> None:
    """Every driver this history started is ended, and every process left in their sessions
    (a killed driver's Ray agents and idle workers); the tmpfs is unmounted."""
    for driver in history.drivers:
        if driver.status() is None:
            kill_group(driver)
    sessions = {driver.process.pid for driver in history.drivers}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[3]) in sessions:
                os.kill(int(stat.parent.name), signal.SIGKILL)
    if history.bucket is not None:
        history.bucket.stop()
    if history.mounted:
        if history.violations:  # the experiment, kept for the replay's reader: the tmpfs goes with the unmount
            shutil.copytree(history.storage, history.root / "results-kept", dirs_exist_ok=True)
        while subprocess.run(["mountpoint", "-q", str(history.storage)], check=False).returncode == 0:
            subprocess.run(["umount", "-l", str(history.storage)], check=True)  # a read-only layer, then the tmpfs


def on_another_host(hostname: str, command: list[str]) -> list[str]:
    """``command`` run in its own UTS namespace named ``hostname``: another host, on this machine."""
    return ["unshare", "--uts", "sh", "-c", f"hostname {hostname} && exec {shlex.join(command)}"]
