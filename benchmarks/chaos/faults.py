"""The fault kinds the explorer injects: a registry, each kind with its injector.

An injector runs while the history's driver runs, at the planned moment. It says in the
history what it did and what it expected, records a violation when the product's answer is
not the documented one, and leaves either a running driver or a stopped search (the history
then does what a user does: ``tunekit resume``). A kind whose support is not in tunekit yet
is registered with ``waiting_for`` naming it, and is off until then.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.chaos.history import Driver, History, kill_group

STALE_S = "6"  # TUNEKIT_LEASE_STALE_S for a taker from another host: a short stale window
TMPFS_SIZE = "256m"
LOST_LEASE = "this driver lost the experiment's lease"
HELD = "another driver is writing this experiment"


@dataclass(frozen=True)
class FaultKind:
    name: str
    what: str
    inject: Callable[[History], None] | None
    tmpfs: bool = False  # the experiment must live on a tmpfs this explorer mounts (root only)
    bucket: bool = False  # the experiment must live in a bucket behind a proxy (benchmarks.chaos.bucket)
    folder: bool = False  # it reads or changes the experiment's files in place: not with a bucket's
    waiting_for: str = ""  # why it is off: the tunekit support it needs, not on this branch yet


def _signal_and_wait(history: History, number: signal.Signals, expected: set[int]) -> None:
    driver = history.current
    assert driver is not None
    history.say(f"{number.name} to the driver (pid {driver.process.pid})")
    if number == signal.SIGKILL:
        kill_group(driver)
    else:
        driver.process.send_signal(number)
        if not history.ended_within(driver, 120, f"{number.name} did not stop the driver within 120 s"):
            return
    if driver.status() not in expected | {0}:
        history.violate(f"{number.name}: the driver exited {driver.status()}, not one of {sorted(expected)}")


def sigkill(history: History) -> None:
    _signal_and_wait(history, signal.SIGKILL, {-signal.SIGKILL})


def sigterm(history: History) -> None:
    _signal_and_wait(history, signal.SIGTERM, {128 + signal.SIGTERM})


def sigint(history: History) -> None:
    _signal_and_wait(history, signal.SIGINT, {128 + signal.SIGINT})


def pause_short(history: History) -> None:
    driver = history.current
    assert driver is not None
    seconds = history.rng.uniform(1.0, 4.0)
    os.kill(driver.process.pid, signal.SIGSTOP)
    history.say(f"SIGSTOP to the driver for {seconds:.1f} s, then SIGCONT")
    time.sleep(seconds)
    os.kill(driver.process.pid, signal.SIGCONT)


def pause_and_takeover(history: History) -> None:
    """Paused past the stale window while another host resumes; once continued it must exit 3."""
    paused = history.current
    assert paused is not None
    os.kill(paused.process.pid, signal.SIGSTOP)
    # Read once it is stopped, so it cannot change: a driver ending its search has released its lease.
    holds = f'"pid": {paused.process.pid},' in _text(history.experiment / "driver.lease")
    host = taker_host(history)
    history.say(f"SIGSTOP to the driver (holding its lease: {holds}); `tunekit resume` from host {host}")
    taker = history.start(
        ["resume", history.target],
        f"resume as {host}",
        host=host,
        env={"TUNEKIT_LEASE_STALE_S": STALE_S},
    )
    lease, deadline = history.experiment / "driver.lease", time.monotonic() + 120
    while f'"{host}"' not in _text(lease):
        if taker.status() is not None or time.monotonic() > deadline:
            os.kill(paused.process.pid, signal.SIGCONT)
            history.current = paused
            history.violate(f"the driver on {host} did not take the stale lease (exit {taker.status()})")
            return
        time.sleep(0.2)
    os.kill(paused.process.pid, signal.SIGCONT)
    history.say(f"{host} holds the lease; SIGCONT to the paused driver")
    _expect_lost_lease(history, paused, may_complete=not holds)
    history.current = taker


def taker_host(history: History) -> str:
    """A hostname no earlier driver of the history had: a second takeover from chaos-h2 paused the
    taker of the first, itself on chaos-h2, and found the lease already its host's (seed 831076)."""
    taken = sum(d.what.startswith("resume as chaos-h") for d in history.drivers)
    return f"chaos-h{2 + taken}"


def lease_deleted(history: History) -> None:
    driver = history.current
    assert driver is not None
    (history.experiment / "driver.lease").unlink(missing_ok=True)
    history.say("driver.lease deleted under the running driver")
    _expect_lost_lease(history, driver, may_complete=True)


def _expect_lost_lease(history: History, driver: Driver, may_complete: bool) -> None:
    """It must exit 3 saying so; unless it was past its last write (``may_complete``) and completed."""
    if not history.ended_within(
        driver, 90, f"the driver that lost its lease (pid {driver.process.pid}) still ran 90 s later"
    ):
        return
    said = LOST_LEASE in driver.log.read_text(errors="replace")
    if driver.status() == 0 and not said and may_complete:
        history.say("the driver completed the search before it next had to write (no verdict)")
    elif driver.status() != 3 or not said:
        history.violate(f"the driver that lost its lease exited {driver.status()} (said the lost lease: {said}), not 3")


def second_driver(history: History, host: str | None) -> None:
    first = history.current
    assert first is not None
    where = f"from host {host}" if host else "on the same host"
    second = history.run_once(["resume", history.target], f"second driver {where}", host=host)
    text = second.log.read_text(errors="replace").strip()
    if first.status() is not None:
        history.say(f"the first driver ended meanwhile (exit {first.status()}): the second's answer is no verdict")
        history.current = second if second.status() is None else first
        return
    if second.status() != 1 or HELD not in text or len(text.splitlines()) != 1:
        history.violate(f"a second driver {where} while the first lives: exit {second.status()}, said {text[-300:]!r}")


def second_same_host(history: History) -> None:
    second_driver(history, None)


def second_other_host(history: History) -> None:
    second_driver(history, "chaos-h3")


def _skewed_resume(history: History, skew: str) -> None:
    sigkill(history)
    history.resume_prefix = ["faketime", "-f", skew]


def clock_ahead(history: History) -> None:
    _skewed_resume(history, "+5m")


def clock_behind(history: History) -> None:
    _skewed_resume(history, "-5m")


def worker_kill(history: History) -> None:
    """SIGKILL of a Ray worker process running a trial of this driver's local Ray."""
    driver = history.current
    assert driver is not None
    workers = [pid for pid in _descendants(driver.process.pid) if _cmdline(pid).startswith("ray::ImplicitFunc")]
    if not workers:
        history.say("no trial worker runs now: nothing killed")
        history.idle = True
        return
    pid = history.rng.choice(sorted(workers))
    os.kill(pid, signal.SIGKILL)
    history.say(f"SIGKILL to the trial worker pid {pid} ({_cmdline(pid) or 'gone'})")


def store_full(history: History) -> None:
    """The tmpfs shrunk to what it holds now: the next writes find no space."""
    used = shutil.disk_usage(history.storage).used
    size = max(used, 64 * 1024)
    subprocess.run(["mount", "-o", f"remount,size={size}", str(history.storage)], check=True)
    history.say(f"the store shrunk to {size // 1024} KiB (full)")
    _until_it_ends_then(history, ["mount", "-o", f"remount,size={TMPFS_SIZE}", str(history.storage)], "grown again")


def store_read_only(history: History) -> None:
    """A read-only bind mount laid over the tmpfs: every new open for writing fails (EROFS), as
    on a volume turned read-only; files the driver holds open stay writable (a plain remount
    to read-only is refused while they are open). Lifted once the driver ended."""
    where = str(history.storage)
    subprocess.run(["mount", "--bind", where, where], check=True)
    subprocess.run(["mount", "-o", "remount,bind,ro", where], check=True)
    history.say("the store turned read-only (a read-only bind mount over it)")
    _until_it_ends_then(history, ["umount", "-l", where], "writable again")


def _until_it_ends_then(history: History, fix: list[str], fixed: str) -> None:
    """The driver must end on the storage fault (one line, resumable); then the user fixes the store."""
    driver = history.current
    assert driver is not None
    try:
        driver.process.wait(timeout=180)
    except subprocess.TimeoutExpired:
        history.say("the driver still ran 180 s into the storage fault")
    subprocess.run(fix, check=True)
    history.say(f"the store is {fixed} (driver exit {driver.status()})")


def storage_outage(history: History) -> None:
    """The S3 API unreachable (its loopback proxy stopped): for a few seconds, which the search
    waits through, or until the driver ends, past ``storage.outage_s``, in one line, resumable.
    No trial may fail for it (the invariants at the end)."""
    driver, bucket = history.current, history.bucket
    assert driver is not None and bucket is not None
    past = history.rng.random() < 0.5
    seconds = history.rng.uniform(2.0, 6.0)
    bucket.proxy.stop()
    history.say(f"the S3 API unreachable ({'past storage.outage_s' if past else f'for {seconds:.1f} s'})")
    if not past:
        time.sleep(seconds)
        bucket.proxy.start()
        history.say("the S3 API reachable again")
        if driver.status() not in (None, 0):
            history.violate(f"a {seconds:.1f} s outage, within the bound, ended the driver: exit {driver.status()}")
        return
    waited = bucket_outage_wait_s()
    history.ended_within(driver, waited, f"the driver still ran {waited:.0f} s into an outage past storage.outage_s")
    bucket.proxy.start()
    said = [line for line in driver.log.read_text(errors="replace").splitlines() if line.startswith("tunekit: error:")]
    history.say(f"the S3 API reachable again (driver exit {driver.status()})")
    if driver.status() != 0 and (driver.status() != 1 or not said or "unreachable" not in said[-1]):
        history.violate(f"an outage past the bound: exit {driver.status()}, said {said[-1:]}, not the outage's line")


def bucket_outage_wait_s() -> float:
    """How long a driver may take to end in an outage past its bound: the bound, then a retry round."""
    from benchmarks.chaos.bucket import OUTAGE_S

    return OUTAGE_S + 90.0


# -------------------------------------------------------------------- damage while stopped

DAMAGE_OPS = ("cut", "flip", "insert")


def damage(history: History, pick: Callable[[Path, random.Random], Path | None], record: str) -> None:
    """The driver killed; then one record damaged (cut, a byte flipped, a line inserted), a whole
    copy kept for the repair; ``tunekit check`` asked about it before the user resumes."""
    sigkill(history)
    target = pick(history.experiment, history.rng)
    if target is None or not target.is_file() or target.stat().st_size < 2:
        history.say(f"no {record} to damage yet: nothing damaged")
        history.idle = True
        return
    copy = history.root / "copies" / f"{len(history.events)}-{target.name}"
    copy.parent.mkdir(parents=True, exist_ok=True)
    whole = target.read_bytes()
    copy.write_bytes(whole)
    op = history.rng.choice(DAMAGE_OPS)
    broken = damaged_bytes(whole, op, history.rng)
    target.write_bytes(broken)
    history.restore, history.damaged_after, history.damage = (target, copy), len(history.drivers), broken
    history.say(f"{op} in {target.relative_to(history.experiment)} ({len(whole)} bytes) while stopped")
    checked = history.run_once(["check", history.target], f"check after {op}")
    said = checked.log.read_text(errors="replace")
    history.say(f"`tunekit check` exit {checked.status()}; names the file: {target.name in said}")
    # A journal cut can look like a torn last line, which resume repairs; every other damage is knowable.
    if (
        checked.status() == 0
        and not (record == "study.journal" and op == "cut")
        and not noted_as_passed_over(target, said)
    ):
        # What check said of the damaged file's trial folder, if anything: its note on a folder no
        # record reads (a trial closed as lost) tells a miss from damage nothing will read.
        trial = target.relative_to(history.experiment).parts[0]
        about = [line.strip() for line in said.splitlines() if trial in line][:3]
        history.violate(f"`tunekit check` exit 0 on {op} in {target.relative_to(history.experiment)}; said {about}")


def noted_as_passed_over(target: Path, said: str) -> bool:
    """Whether ``tunekit check`` noted ``target`` as a damaged checkpoint payload a newer whole
    checkpoint of its trial stands after, which the fault model makes a note: a worker outliving
    its killed driver can write that newer one after the damaged one was picked as the newest
    (seed 389070), and a restore passes over the damaged one, saying so."""
    return f"{target}: fails its checksum" in said and "a newer checkpoint is whole" in said


def damaged_bytes(whole: bytes, op: str, rng: random.Random) -> bytes:
    """``whole`` cut inside (not at its end), with one byte flipped to non-ASCII, or with a line
    that is no record inserted at a line start."""
    if op == "cut":
        return whole[: rng.randrange(len(whole) // 4, len(whole) - 1)]
    if op == "flip":
        at = rng.randrange(len(whole))
        return whole[:at] + bytes([whole[at] ^ 0x80]) + whole[at + 1 :]
    starts = [0] + [i + 1 for i, byte in enumerate(whole) if byte == 0x0A and i + 1 < len(whole)]
    at = rng.choice(starts)
    return whole[:at] + b"#chaos \x00\xff not a record\n" + whole[at:]


def _named(name: str) -> Callable[[Path, random.Random], Path | None]:
    return lambda experiment, rng: experiment / name


def _json_record(experiment: Path, rng: random.Random) -> Path | None:
    records = [p for p in ("started.json", "tracking.json", "ledger.json") if (experiment / p).is_file()]
    return experiment / rng.choice(records) if records else None


def _checkpoint_payload(experiment: Path, rng: random.Random) -> Path | None:
    """The newest weights of a trial, an unfinished one's when there is one (its resume reads it)."""
    newest = {}
    for payload in sorted(experiment.glob("*/checkpoint_*/weights.npz")):
        newest[payload.parent.parent.name] = payload
    if not newest:
        return None
    running = [
        t
        for t in newest
        if f"{t},running" in _text(experiment / "trials.csv") or t not in _text(experiment / "trials.csv")
    ]
    return newest[rng.choice(sorted(running or newest))]


def _damage_kind(record: str, pick: Callable[[Path, random.Random], Path | None]) -> Callable[[History], None]:
    return lambda history: damage(history, pick, record)


# ------------------------------------------------------------------------------ helpers


def _text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _cmdline(pid: int) -> str:
    return _text(Path(f"/proc/{pid}/cmdline")).replace("\x00", " ").strip()


def _descendants(root: int) -> set[int]:
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        fields = _text(stat).rsplit(")", 1)[-1].split()
        if len(fields) > 1:
            parents[int(stat.parent.name)] = int(fields[1])
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


KINDS: dict[str, FaultKind] = {
    kind.name: kind
    for kind in [
        FaultKind("sigkill", "SIGKILL of the driver and its local Ray", sigkill),
        FaultKind("sigterm", "SIGTERM of the driver", sigterm),
        FaultKind("sigint", "SIGINT of the driver", sigint),
        FaultKind("pause-short", "SIGSTOP of the driver for 1-4 s, then SIGCONT", pause_short),
        FaultKind(
            "pause-takeover",
            "SIGSTOP past the stale window, resume from another host (chaos-h2, chaos-h3, ...), SIGCONT",
            pause_and_takeover,
            folder=True,
        ),
        FaultKind("second-same-host", "`tunekit resume` while the driver runs, same host", second_same_host),
        FaultKind("second-other-host", "`tunekit resume` while the driver runs, from host chaos-h3", second_other_host),
        FaultKind("lease-deleted", "driver.lease deleted under the running driver", lease_deleted, folder=True),
        # In a folder only: under libfaketime 0.9.10 a Python thread's timed wait (Event.wait(0.2))
        # lasts minutes, and a bucket's resume waits so for its storage probe, its mirror and its
        # lease (seed 116739 hung 5 minutes in its probe); FAKETIME_DONT_FAKE_MONOTONIC=1 makes
        # time.sleep fail with EINVAL instead. A folder's resume runs under it as a skewed host would.
        FaultKind("clock-ahead", "SIGKILL, then the resume under `faketime -f +5m`", clock_ahead, folder=True),
        FaultKind("clock-behind", "SIGKILL, then the resume under `faketime -f -5m`", clock_behind, folder=True),
        FaultKind("worker-kill", "SIGKILL of a Ray worker running a trial", worker_kill),
        FaultKind("store-full", "the experiment's tmpfs shrunk to what it holds", store_full, tmpfs=True),
        FaultKind(
            "store-read-only", "the experiment's tmpfs turned read-only (a bind mount)", store_read_only, tmpfs=True
        ),
        FaultKind(
            "damage-journal",
            "SIGKILL, then study.journal damaged",
            _damage_kind("study.journal", _named("study.journal")),
            folder=True,
        ),
        FaultKind(
            "damage-trials",
            "SIGKILL, then trials.csv damaged",
            _damage_kind("trials.csv", _named("trials.csv")),
            folder=True,
        ),
        FaultKind(
            "damage-epochs",
            "SIGKILL, then epochs.csv damaged",
            _damage_kind("epochs.csv", _named("epochs.csv")),
            folder=True,
        ),
        FaultKind(
            "damage-json", "SIGKILL, then a JSON record damaged", _damage_kind("json", _json_record), folder=True
        ),
        FaultKind(
            "damage-checkpoint",
            "SIGKILL, then a checkpoint's weights.npz damaged",
            _damage_kind("checkpoint", _checkpoint_payload),
            folder=True,
        ),
        FaultKind(
            "storage-outage",
            "the S3 API (moto) behind a loopback proxy stopped: 2-6 s, or past storage.outage_s",
            storage_outage,
            bucket=True,
        ),
    ]
}


def enabled(kinds: dict[str, FaultKind] = KINDS) -> dict[str, str]:
    """Each kind that is off, with why: its tunekit support has not landed, mounts need root, or
    a bucket needs moto's server."""
    off = {}
    for kind in kinds.values():
        if kind.inject is None:
            off[kind.name] = f"off: waiting for {kind.waiting_for}"
        elif kind.tmpfs and os.geteuid() != 0:
            off[kind.name] = "off: mounting a tmpfs needs root"
        elif kind.bucket and not Path(sys.executable).with_name("moto_server").is_file():
            off[kind.name] = "off: an S3 API needs moto's server (moto[server])"
    return off
