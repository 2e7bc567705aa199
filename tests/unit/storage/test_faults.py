"""Storage errors in two kinds (transient, permanent), the bounded wait through the transient
ones, and the bucket mirror's outage: said once as it starts, once as it ends, given up past
its bound. No sleeping: the clock and the sleep are injected."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from tunekit.errors import NoSpaceError, StorageError, StorageUnreachableError
from tunekit.storage.buckets import Bucket
from tunekit.storage.faults import Outage, is_permanent, is_transient, permanent_problem, retrying, storage_line
from tunekit.storage.mirror import BucketMirror

TRANSIENT = [
    OSError("When reading information for key 'x' in bucket 'exps': AWS Error NETWORK_CONNECTION during HeadObject"),
    OSError("AWS Error SLOW_DOWN during PutObject operation: Please reduce your request rate."),
    OSError("AWS Error SERVICE_UNAVAILABLE during PutObject operation"),
    OSError("AWS Error UNKNOWN (HTTP status 503) during CompleteMultipartUpload operation"),
    OSError("curlCode: 28, Timeout was reached"),
    ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"),
    ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"),
    TimeoutError("timed out"),
    OSError(errno.ETIMEDOUT, "Connection timed out"),
]
PERMANENT = [
    OSError(errno.EROFS, "Read-only file system", "/exp/trials.csv"),
    PermissionError(errno.EACCES, "Permission denied", "/exp/driver.lease"),
    OSError(errno.ENOSPC, "No space left on device", "/exp/study.journal"),
    NoSpaceError("no space left on the device of /exp/trials.csv", path="/exp/trials.csv"),
    OSError("Bucket 'nope' not found: AWS Error NO_SUCH_BUCKET during HeadBucket operation"),
    OSError("AWS Error ACCESS_DENIED during PutObject operation: Access Denied"),
    OSError("AWS Error INVALID_ACCESS_KEY_ID during PutObject operation"),
]


@pytest.mark.parametrize("error", TRANSIENT, ids=lambda e: str(e)[:40])
def test_network_errors_timeouts_5xx_and_throttling_are_transient(error: BaseException) -> None:
    assert is_transient(error) and not is_permanent(error)
    assert permanent_problem(error) is None


@pytest.mark.parametrize("error", PERMANENT, ids=lambda e: str(e)[:40])
def test_read_only_permission_no_space_no_bucket_and_credentials_are_permanent(error: BaseException) -> None:
    assert is_permanent(error) and not is_transient(error)
    line = permanent_problem(error)
    assert line is not None and "; fix: " in line and "\n" not in line


def test_a_cause_decides_for_its_wrapper_and_other_errors_are_neither() -> None:
    try:
        try:
            raise ConnectionResetError(errno.ECONNRESET, "reset")
        except OSError as cause:
            raise RuntimeError("the upload failed") from cause
    except RuntimeError as wrapped:
        assert is_transient(wrapped)
    for other in (ValueError("bad"), FileNotFoundError(errno.ENOENT, "gone"), KeyError("x")):
        assert not is_transient(other) and not is_permanent(other)


def test_the_one_lines_name_the_file_and_the_fix() -> None:
    assert permanent_problem(OSError(errno.EROFS, "Read-only file system", "/exp/trials.csv")) == (
        "storage /exp/trials.csv: read-only; fix: make it writable (remount it read-write), then run the command again"
    )
    assert permanent_problem(OSError(errno.ENOSPC, "No space left"), "/exp") == (
        "storage /exp: no space left on its device; fix: free some space, then run the command again"
    )


class FakeTime:
    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    monotonic = clock  # standing in for the time module in tunekit.storage.mirror

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_a_transient_failure_is_tried_again_with_backoff_and_said_once_each_way() -> None:
    time, said = FakeTime(), list[str]()
    failures = iter([OSError("AWS Error NETWORK_CONNECTION")] * 5)

    def call() -> str:
        if (error := next(failures, None)) is not None:
            raise error
        return "done"

    answer = retrying(call, "storage s3://exps/team", outage_s=60, say=said.append, clock=time.clock, sleep=time.sleep)
    assert answer == "done"
    assert time.slept == [0.5, 1.0, 2.0, 4.0, 5.0]  # doubling, at most LONGEST_WAIT_S
    assert said == [
        "storage s3://exps/team is unreachable (AWS Error NETWORK_CONNECTION); trying again for up to 60 s",
        "storage s3://exps/team is reachable again after 12 s",
    ]


def test_past_the_bound_the_wait_ends_with_storage_unreachable_naming_it() -> None:
    time = FakeTime()
    calls = []

    def call() -> None:
        calls.append(time.now)
        raise ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")

    with pytest.raises(StorageUnreachableError) as raised:
        retrying(call, "storage s3://exps/team", outage_s=30, clock=time.clock, sleep=time.sleep)
    assert calls[-1] - calls[0] == pytest.approx(30.0)  # the bound, not a count of tries
    assert str(raised.value).startswith("storage s3://exps/team: unreachable for 30 s, past storage.outage_s (30 s)")
    assert isinstance(raised.value, StorageError)


def test_a_permanent_or_unknown_error_is_raised_at_once() -> None:
    time = FakeTime()
    for error in (OSError(errno.EROFS, "Read-only file system"), ValueError("bug")):

        def call(error: Exception = error) -> None:
            raise error

        with pytest.raises(type(error)):
            retrying(call, "storage /exp", clock=time.clock, sleep=time.sleep)
    assert time.slept == []


def test_an_outage_is_measured_from_its_first_failure() -> None:
    time = FakeTime()
    outage = Outage("storage s3://b/x", 10, clock=time.clock)
    outage.failed(OSError("timed out"))
    time.now += 9
    outage.failed(OSError("timed out"))
    assert outage.left_s() == pytest.approx(1)
    outage.reached()  # back: the next outage has the whole bound again
    time.now += 100
    outage.failed(OSError("timed out"))
    assert outage.left_s() == 10


class FlakyBucket(Bucket):
    """A bucket whose uploads fail while ``away`` (a transient error, as pyarrow raises it)."""

    away = False
    sent: list[str]

    def push(self, cache: Path, relatives: list[str]) -> None:
        if self.away:
            raise OSError("AWS Error NETWORK_CONNECTION during PutObject operation: Connection refused")
        self.sent.extend(relatives)

    def exists(self) -> bool:
        if self.away:
            raise OSError("AWS Error NETWORK_CONNECTION during HeadObject operation")
        return True


def test_the_mirror_says_an_outage_once_waits_through_it_and_gives_up_past_its_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tunekit.storage.mirror

    time, said, stopped = FakeTime(), list[str](), list[StorageUnreachableError]()
    monkeypatch.setattr(tunekit.storage.mirror, "time", time)  # the mirror's monotonic clock
    bucket = FlakyBucket("s3://exps/team/x")
    bucket.sent = []
    mirror = BucketMirror(bucket, tmp_path, outage_s=30, say=said.append, on_outage=stopped.append)
    mirror.outage = Outage(mirror.outage.what, 30, said.append, time.clock)
    (tmp_path / "trials.csv").write_text("a\n")
    bucket.away = True
    for _ in range(5):  # rounds 2 s apart: failed, not raised, said once
        mirror.push_changed()
        time.now += 2
    assert said == [
        "storage s3://exps/team/x is unreachable (AWS Error NETWORK_CONNECTION during PutObject operation: "
        "Connection refused); trying again for up to 30 s"
    ]
    bucket.away = False
    mirror.push_changed()
    assert bucket.sent == ["trials.csv"] and said[-1] == "storage s3://exps/team/x is reachable again after 10 s"
    bucket.away = True
    time.now += 10
    mirror.push_changed()  # nothing changed for 10 s: a probe finds the bucket away all the same
    time.now += 31
    mirror.push_changed()
    assert len(stopped) == 1 and mirror.gave_up is stopped[0]
    mirror.push_changed()  # given up: no more tries, no second stop
    assert len(stopped) == 1


def test_the_mirror_raises_a_permanent_error_at_close_in_one_line(tmp_path: Path) -> None:
    class ReadOnlyBucket(FlakyBucket):
        def push(self, cache: Path, relatives: list[str]) -> None:
            raise OSError("AWS Error ACCESS_DENIED during PutObject operation: Access Denied")

    (tmp_path / "trials.csv").write_text("a\n")
    mirror = BucketMirror(ReadOnlyBucket("s3://exps/team/x"), tmp_path)
    mirror.push_changed()
    with pytest.raises(StorageError, match=r"^storage s3://exps/team/x: access denied .*; fix: check the credentials"):
        mirror.close()


def test_the_commands_line_for_a_bare_os_error_prefers_the_outage_that_stopped_the_search() -> None:
    """A store call on the way out (the lease's release) failing in an outage must not hide it."""
    stopped = StorageUnreachableError("storage s3://b/x: unreachable for 31 s, past storage.outage_s (30 s)")
    try:
        try:
            raise stopped
        except StorageUnreachableError:
            raise OSError("AWS Error NETWORK_CONNECTION during HeadObject operation")  # noqa: B904 - as a finally's
    except OSError as late:
        assert storage_line(late) == str(stopped)
    assert storage_line(OSError("AWS Error NETWORK_CONNECTION")) == (
        "storage unreachable (AWS Error NETWORK_CONNECTION); fix: check its endpoint and the network, "
        "then run the command again"
    )
    assert storage_line(ValueError("x")) is None


def test_an_idle_mirror_still_reaches_the_bucket_so_an_outage_with_nothing_to_send_is_noticed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tunekit.storage.mirror

    time, said = FakeTime(), list[str]()
    monkeypatch.setattr(tunekit.storage.mirror, "time", time)  # the mirror's monotonic clock
    bucket = FlakyBucket("s3://exps/team/x")
    bucket.sent = []
    mirror = BucketMirror(bucket, tmp_path, outage_s=30, say=said.append)
    mirror.outage = Outage(mirror.outage.what, 30, said.append, time.clock)
    bucket.away = True
    mirror.push_changed()  # nothing to send, reached just now: nothing asked
    assert said == []
    time.now += 10
    mirror.push_changed()  # idle for PROBE_EVERY_S: a probe finds it away
    assert len(said) == 1 and "is unreachable" in said[0]


def test_a_push_the_lease_fence_refuses_in_an_outage_ends_it_without_killing_the_mirror(tmp_path: Path) -> None:
    """tunekit.storage.lease makes writes wait for its confirmation for storage.outage_s, then refuses them."""

    class FencedBucket(FlakyBucket):
        def push(self, cache: Path, relatives: list[str]) -> None:
            raise StorageError("s3://exps/team/x: the storage has not confirmed this driver's lease for 30 s")

    stopped = list[StorageUnreachableError]()
    (tmp_path / "trials.csv").write_text("a\n")
    mirror = BucketMirror(FencedBucket("s3://exps/team/x"), tmp_path, outage_s=30, on_outage=stopped.append)
    mirror.push_changed()
    assert stopped == [mirror.gave_up] and "past storage.outage_s (30 s)" in str(mirror.gave_up)


def test_the_mirror_uploads_the_study_before_the_tables_and_its_seal_after_both(tmp_path: Path) -> None:
    # A driver killed between two uploads leaves the bucket's study ahead of its tables, never
    # behind (a resume would train an ended trial again), and the seal never ahead of the journal.
    bucket = FlakyBucket("s3://exps/team/x")
    bucket.sent = []
    for name in ("epochs.csv", "study.seal.json", "trials.csv", "study.journal", "spans.csv"):
        (tmp_path / name).write_text("a\n")
    BucketMirror(bucket, tmp_path).push_changed()
    assert bucket.sent[0] == "study.journal" and bucket.sent[-1] == "study.seal.json"
    assert sorted(bucket.sent[1:-1]) == ["epochs.csv", "spans.csv", "trials.csv"]


def test_a_push_reads_every_file_before_sending_any_so_the_tables_never_run_ahead_of_the_journal(
    tmp_path: Path,
) -> None:
    """Chaos seed 724138: the driver appended to the journal and epochs.csv while the mirror sent
    the journal; epochs.csv, read after, held epochs the bucket's journal lacked, an outage then
    began, and the resume left the study short of those epochs (`tunekit check`: `epochs
    reported: [1, 2, 3, 4] vs [3, 4]`)."""
    from pyarrow import fs

    cache, remote = tmp_path / "cache", tmp_path / "bucket"
    cache.mkdir()
    remote.mkdir()
    (cache / "study.journal").write_text("epoch 1\n")
    (cache / "epochs.csv").write_text("epoch 1\n")

    class WritingMeanwhile:
        """The bucket's file system; while an object is sent, the driver records an epoch."""

        def open_output_stream(self, path: str) -> object:
            for name in ("study.journal", "epochs.csv"):  # the journal first, as the recorder writes
                with (cache / name).open("a") as file:
                    file.write("epoch 2\n")
            return fs.LocalFileSystem().open_output_stream(path)

    class LocalBucket(Bucket):
        def filesystem(self) -> tuple[object, str]:
            return WritingMeanwhile(), str(remote)

    LocalBucket("s3://exps/team/x").push(cache, ["study.journal", "epochs.csv"])
    journal, epochs = (remote / "study.journal").read_text(), (remote / "epochs.csv").read_text()
    assert set(epochs.splitlines()) <= set(journal.splitlines()), (journal, epochs)
