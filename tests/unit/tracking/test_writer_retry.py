"""The writer's retry loop against a fake client: no MLflow, no server, no Ray, no real waiting.

The writer runs in the test's own thread with every event queued up front (``Stop``
last); its clock is fake and its wait records how long it would have waited, so the
backoff sequence is read off directly and each test takes milliseconds.
"""

from __future__ import annotations

import logging
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tunekit.config.spec import ExperimentSpec, load_spec
from tunekit.layout import TrialStatus
from tunekit.tracking.batches import MAX_METRICS_PER_BATCH
from tunekit.tracking.client import ExperimentRef, MetricPoint, MlflowError, RunRef
from tunekit.tracking.events import (
    STOP,
    EpochEvent,
    Flush,
    ProgressEvent,
    TrackerEvent,
    TrialEndEvent,
    TrialEvent,
)
from tunekit.tracking.record import TrackingRecord
from tunekit.tracking.runs import SEND_LANES
from tunekit.tracking.writer import RETRY_BACKOFF_S, MlflowWriter

REPO = Path(__file__).resolve().parents[3]
LOGGER = "tunekit.tracking.tracker"


@dataclass
class Batch:
    run_id: str
    metrics: list[MetricPoint]
    params: list[tuple[str, str]]
    tags: list[tuple[str, str]]


@dataclass
class FakeClient:
    """An in-memory ``RunClient``; ``log_batch`` fails as each test scripts it.

    Args:
        fail: how many ``log_batch`` calls fail with a transient error (forever when None)...
        fail_from: ...counting from this call on (0: the first).
        reject: ``log_batch`` raises this error code for a batch holding a param of this name.
    """

    fail: int | None = 0
    fail_from: int = 0
    reject: tuple[str, str] | None = None
    calls: int = 0
    sent: list[Batch] = field(default_factory=list)  # accepted batches, in order
    runs: dict[str, dict[str, object]] = field(default_factory=dict)
    terminated: dict[str, str] = field(default_factory=dict)

    def log_batch(
        self,
        run_id: str,
        *,
        metrics: Sequence[MetricPoint] = (),
        params: Sequence[tuple[str, str]] = (),
        tags: Sequence[tuple[str, str]] = (),
    ) -> None:
        call, self.calls = self.calls, self.calls + 1
        if call >= self.fail_from and (self.fail is None or call < self.fail_from + self.fail):
            raise ConnectionError("connection refused")
        if self.reject and any(key == self.reject[0] for key, _ in params):
            raise MlflowError(f"bad value for param {self.reject[0]}", self.reject[1])
        self.sent.append(Batch(run_id, list(metrics), list(params), list(tags)))

    def get_experiment(self, name: str) -> ExperimentRef | None:
        return None

    def create_experiment(self, name: str, tags: Mapping[str, str]) -> str:
        return "1"

    def set_experiment_tag(self, experiment_id: str, key: str, value: str) -> None: ...

    def search_runs(self, experiment_id: str, filter_string: str) -> Iterator[RunRef]:
        return iter(())

    def create_run(self, experiment_id: str, *, start_ms: int, name: str, tags: Mapping[str, str]) -> str:
        run_id = f"run{len(self.runs)}"
        self.runs[run_id] = {"name": name, **tags}
        return run_id

    def set_running(self, run_id: str) -> None: ...

    def metric_history(self, run_id: str, key: str) -> list[tuple[int, float]]:
        return [(m.step, m.value) for m in self.metric_points(run_id) if m.key == key]

    def set_terminated(self, run_id: str, status: str, end_ms: int | None = None) -> None:
        self.terminated[run_id] = status

    def set_tag(self, run_id: str, key: str, value: str) -> None: ...

    def delete_run(self, run_id: str) -> None: ...

    def log_artifact(self, run_id: str, path: str, artifact_path: str | None = None) -> None: ...

    def list_artifacts(self, run_id: str, path: str) -> list[str]:
        return []

    def create_registered_model(self, name: str) -> None: ...

    def has_model_version(self, name: str, run_id: str) -> bool:
        return False

    def artifact_uri(self, run_id: str) -> str:
        return f"fake:/{run_id}"

    def create_model_version(self, name: str, source: str, run_id: str, description: str) -> None: ...

    def metric_points(self, run_id: str) -> list[MetricPoint]:
        return [m for batch in self.sent if batch.run_id == run_id for m in batch.metrics]

    def params(self, run_id: str) -> list[tuple[str, str]]:
        return [p for batch in self.sent if batch.run_id == run_id for p in batch.params]


class Clock:
    """Fake monotonic time; ``wait`` advances it and records each wait (nothing ever arrives)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.waits: list[float | None] = []

    def __call__(self) -> float:
        return self.now

    def wait(self, timeout: float | None) -> TrackerEvent | None:
        if timeout is None:
            raise AssertionError("the writer would block forever")
        self.waits.append(timeout)
        self.now += timeout
        return None


@pytest.fixture(scope="module")
def spec() -> ExperimentSpec:
    return load_spec(REPO / "search_spaces" / "digits_mlp.yaml", ["tracking.uri=sqlite:///unused.db"])


def trial_events(epochs: int = 3, metrics_per_epoch: int = 2) -> list[TrackerEvent]:
    events: list[TrackerEvent] = [TrialEvent("t0", 0, {"learning_rate": 0.01, "units": 64}, 1.0, 1, True)]
    for epoch in range(1, epochs + 1):
        metrics = {"val_accuracy": 0.5 + epoch / 10, **{f"m{i}": float(i) for i in range(metrics_per_epoch - 1)}}
        events.append(EpochEvent("t0", epoch, metrics, 2000 + epoch))
    events.append(TrialEndEvent("t0", TrialStatus.COMPLETED, "", None, epochs, 1, 3.0, 2.5))
    events.append(ProgressEvent(1, 0.8, "t0", {TrialStatus.COMPLETED: 1}, epochs, 2.0, final=True, interrupted=False))
    return events


def run_writer(
    spec: ExperimentSpec, tmp_path: Path, client: FakeClient, events: list[TrackerEvent]
) -> tuple[MlflowWriter, Clock]:
    """Runs the writer to its end in this thread, on ``events`` then ``Stop``."""
    inbox: queue.SimpleQueue[TrackerEvent] = queue.SimpleQueue()
    for event in [*events, STOP]:
        inbox.put(event)
    clock = Clock()
    writer = MlflowWriter(
        spec, tmp_path, inbox, 30.0, 0.0, client_factory=lambda uri: client, clock=clock, wait=clock.wait
    )
    writer.run()
    return writer, clock


def holds_everything(experiment_dir: Path) -> bool | None:
    record = TrackingRecord.read(experiment_dir)
    return None if record is None else record.holds_everything


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno >= logging.WARNING]


def assert_nothing_sent_twice(client: FakeClient) -> None:
    for run_id in client.runs:
        points = [(m.key, m.step) for m in client.metric_points(run_id)]
        assert len(points) == len(set(points)), f"metric points sent twice to {run_id}"
        params = [key for key, _ in client.params(run_id)]
        assert len(params) == len(set(params)), f"params sent twice to {run_id}"


def test_transient_failures_back_off_then_everything_arrives_once(
    spec: ExperimentSpec, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    client = FakeClient(fail=3)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        writer, clock = run_writer(spec, tmp_path, client, trial_events())

    assert clock.waits == [1.0, 2.0, 5.0]  # the first three steps of RETRY_BACKOFF_S
    assert list(RETRY_BACKOFF_S[:3]) == clock.waits
    assert client.calls == 3 + len(client.sent)  # every failed batch was sent again, and only those
    assert_nothing_sent_twice(client)
    parent, trial = "run0", "run1"
    assert client.runs[trial][("tunekit.ray_trial_id")] == "t0"
    assert sorted((m.step, m.key) for m in client.metric_points(trial)) == [
        (step, key) for step in (1, 2, 3) for key in ("m0", "val_accuracy")
    ]
    assert dict(client.params(trial)) == {"learning_rate": "0.01", "units": "64"}
    assert client.terminated == {trial: "FINISHED", parent: "FINISHED"}
    messages = warnings_of(caplog)
    assert len(messages) == 1 and "training goes on" in messages[0], messages
    assert messages[0].startswith("tunekit: warning: logging to MLflow at ")  # as the console's warnings read
    assert any("reachable again" in r.getMessage() for r in caplog.records if r.name == LOGGER)
    assert not writer.disabled
    assert holds_everything(tmp_path) is True  # tracking.json: `tunekit resume` has nothing to send


def test_an_epoch_trained_again_to_another_value_is_sent_after_the_first_and_an_equal_one_is_not(
    spec: ExperimentSpec, tmp_path: Path
) -> None:
    """Chaos seed 689409: a lost worker's retry trained epoch 3 again; MLflow kept the first
    attempt's value as the trial's final one while trials.csv held the last attempt's."""
    first = trial_events(epochs=3, metrics_per_epoch=1)[:-2]  # the trial's start and 3 epochs
    retry: list[TrackerEvent] = [
        Flush(threading.Event()),  # the first attempt's epochs reached MLflow
        TrialEvent("t0", 0, {"learning_rate": 0.01, "units": 64}, 1.0, 2, True),  # Ray restarts it
        EpochEvent("t0", 2, {"val_accuracy": 0.7}, 3002),  # from its epoch-1 checkpoint: the same value
        EpochEvent("t0", 3, {"val_accuracy": 0.85}, 3003),  # another value
        TrialEndEvent("t0", TrialStatus.COMPLETED, "", None, 3, 2, 3.0, 2.5),
    ]
    client = FakeClient()
    run_writer(spec, tmp_path, client, [*first, *retry])
    points = [(m.step, m.value, m.timestamp_ms) for m in client.metric_points("run1") if m.key == "val_accuracy"]
    assert [p[:2] for p in points] == [(1, 0.6), (2, 0.7), (3, 0.8), (3, 0.85)]
    latest = max(points, key=lambda p: (p[0], p[2]))
    assert latest[1] == 0.85  # MLflow's latest value, as the tables hold it


def test_a_failure_after_some_chunks_were_taken_resends_only_the_rest(spec: ExperimentSpec, tmp_path: Path) -> None:
    # 3 epochs of 500 metrics: the trial's params and points go in two requests, the
    # first as full as MLflow allows (1,000 entries); the second fails once.
    client = FakeClient(fail=1, fail_from=2)  # the run, its first chunk, then the failure
    run_writer(spec, tmp_path, client, trial_events(epochs=3, metrics_per_epoch=500))

    points = client.metric_points("run1")
    assert len(points) == 1500
    batches = [b for b in client.sent if b.run_id == "run1" and b.metrics]
    assert len(batches) == 2 and batches[0].params  # its tags went with the run's creation
    first = batches[0]
    assert len(first.metrics) + len(first.params) + len(first.tags) == MAX_METRICS_PER_BATCH
    assert client.calls == len(client.sent) + 1
    assert_nothing_sent_twice(client)


def test_a_permanent_error_warns_once_and_drops_that_batch(
    spec: ExperimentSpec, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    client = FakeClient(reject=("units", "INVALID_PARAMETER_VALUE"))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        _, clock = run_writer(spec, tmp_path, client, trial_events())

    assert clock.waits == []  # not retried
    assert client.params("run1") == []  # the rejected params are dropped, not sent again
    # Refused twice: the run's params went with its points, then alone; the points went alone.
    assert client.calls == len(client.sent) + 2
    assert len(client.metric_points("run1")) == 6  # the rest of the trial still arrives
    assert client.terminated["run1"] == "FINISHED"
    messages = warnings_of(caplog)
    assert len(messages) == 1 and "MLflow rejected values for run run1" in messages[0], messages


def test_refused_credentials_disable_tracking_with_one_warning(
    spec: ExperimentSpec, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    client = FakeClient(reject=("units", "PERMISSION_DENIED"))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        writer, clock = run_writer(spec, tmp_path, client, trial_events())

    assert writer.disabled and clock.waits == []
    messages = warnings_of(caplog)
    assert len(messages) == 1 and "refused tunekit's credentials" in messages[0], messages


def test_a_server_that_never_comes_back_is_given_up_at_the_flush_timeout(
    spec: ExperimentSpec, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    client = FakeClient(fail=None)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        _, clock = run_writer(spec, tmp_path, client, trial_events())

    # 1 + 2 + 5 + 10 s of retries; the next (30 s) would end after the 30 s flush timeout.
    assert clock.waits == [1.0, 2.0, 5.0, 10.0]
    assert client.sent == []
    assert len(warnings_of(caplog)) == 1
    assert holds_everything(tmp_path) is False  # `tunekit resume` of the finished search sends the rest


def test_a_writer_stopped_before_the_search_s_end_leaves_the_record_incomplete(
    spec: ExperimentSpec, tmp_path: Path
) -> None:
    # Everything sent, but the parent never ended (no final progress): MLflow lacks the search's end.
    client = FakeClient()
    run_writer(spec, tmp_path, client, trial_events()[:-1])

    assert client.terminated == {"run1": "FINISHED"}
    assert holds_everything(tmp_path) is False


def test_a_flush_is_answered_once_what_came_before_it_was_sent(spec: ExperimentSpec, tmp_path: Path) -> None:
    # A flush ends a burst; the failed sync is retried at once when Stop arrives (no backoff at the end).
    done = threading.Event()
    client = FakeClient(fail=1)
    _, clock = run_writer(spec, tmp_path, client, [*trial_events(), Flush(done)])

    assert done.is_set() and clock.waits == []
    assert len(client.metric_points("run1")) == 6
    assert_nothing_sent_twice(client)


def test_the_tracker_and_its_writer_import_no_mlflow() -> None:
    # MLflow (seconds to import) is loaded by the writer thread through tracking.client only.
    code = "import sys, tunekit.tracking.tracker; print(sorted(m for m in sys.modules if m.startswith('mlflow')))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("best", "interrupted", "status"),
    [(0.8, False, "FINISHED"), (None, False, "FAILED"), (None, True, "KILLED"), (0.8, True, "KILLED")],
)
def test_the_parent_run_ends_as_the_search_did(
    spec: ExperimentSpec, tmp_path: Path, best: float | None, interrupted: bool, status: str
) -> None:
    client = FakeClient()
    events = trial_events()[:-1]
    counts: dict[str, int] = {TrialStatus.COMPLETED: 1} if best is not None else {TrialStatus.FAILED: 1}
    events.append(ProgressEvent(1, best, None, counts, 3, 2.0, final=True, interrupted=interrupted))

    run_writer(spec, tmp_path, client, events)

    parent = next(run_id for run_id, tags in client.runs.items() if tags.get("tunekit.role") == "experiment")
    assert client.terminated[parent] == status


def test_a_trial_s_values_go_in_one_request_and_a_sync_visits_only_trials_with_news(
    spec: ExperimentSpec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer's throughput with thousands of short trials (benchmarks/scale.py): one
    log_batch per trial for its params and points, and no sync looks at finished trials."""
    from tunekit.tracking import runs

    looked = [0]  # trials whose pending values a sync looked at
    empty = runs.Pending.empty

    def counting(self: runs.Pending) -> bool:
        looked[0] += 1
        return empty(self)

    monkeypatch.setattr(runs.Pending, "empty", counting)
    events: list[TrackerEvent] = []
    for number in range(40):
        trial_id = f"t{number}"
        events.append(TrialEvent(trial_id, number, {"learning_rate": 0.01, "units": 64}, 1.0, 1, True))
        events += [EpochEvent(trial_id, epoch, {"val_accuracy": 0.5}, 2000 + epoch) for epoch in (1, 2)]
        events.append(TrialEndEvent(trial_id, TrialStatus.COMPLETED, "", None, 2, 1, 3.0, 2.5))
        events.append(Flush(threading.Event()))  # a sync after every trial
    client = FakeClient()
    run_writer(spec, tmp_path, client, events)

    assert looked[0] <= 40 * 2  # the trial and the parent per sync, not every trial so far (820)
    for number in range(40):
        run_id = f"run{number + 1}"  # run0 is the parent
        assert len([b for b in client.sent if b.run_id == run_id]) == 1
        assert len(client.metric_points(run_id)) == 2 and client.terminated[run_id] == "FINISHED"


@dataclass
class SharedClient(FakeClient):
    """A ``FakeClient`` the writer's lanes may call at once: its first ``meet`` trial runs are
    created only once another lane creates one too (a barrier that breaks after 5 s)."""

    meet: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    barrier: threading.Barrier = field(default_factory=lambda: threading.Barrier(2, timeout=5))

    def create_run(self, experiment_id: str, *, start_ms: int, name: str, tags: Mapping[str, str]) -> str:
        with self.lock:
            run_id = super().create_run(experiment_id, start_ms=start_ms, name=name, tags=tags)
            waits = tags.get("tunekit.role") == "trial" and len(self.runs) <= 1 + self.meet
        if waits:
            self.barrier.wait()
        return run_id

    def log_batch(self, run_id: str, **values: Sequence[object]) -> None:
        with self.lock:
            super().log_batch(run_id, **values)  # type: ignore[arg-type]


def short_trials(count: int) -> list[TrackerEvent]:
    """``count`` two-epoch trials that all end before the writer's first sync, then the search's end."""
    events: list[TrackerEvent] = []
    for number in range(count):
        trial_id = f"t{number}"
        events.append(TrialEvent(trial_id, number, {"learning_rate": 0.01, "units": 64}, 1.0, 1, True))
        events += [EpochEvent(trial_id, epoch, {"val_accuracy": 0.5}, 2000 + epoch) for epoch in (1, 2)]
        events.append(TrialEndEvent(trial_id, TrialStatus.COMPLETED, "", None, 2, 1, 3.0, 2.5))
    counts: dict[str, int] = {TrialStatus.COMPLETED: count}
    return [*events, ProgressEvent(count, 0.5, "t0", counts, 2 * count, 2.0, final=True, interrupted=False)]


def test_trials_runs_are_sent_over_several_connections_at_once(spec: ExperimentSpec, tmp_path: Path) -> None:
    client = SharedClient(meet=4)  # a writer that sent one run at a time would break the barrier
    run_writer(spec, tmp_path, client, short_trials(20))

    assert not client.barrier.broken
    trials = [run_id for run_id, tags in client.runs.items() if tags.get("tunekit.role") == "trial"]
    assert len(trials) == 20 and all(client.terminated[run_id] == "FINISHED" for run_id in trials)
    assert all(len(client.metric_points(run_id)) == 2 for run_id in trials)
    assert holds_everything(tmp_path) is True


def test_a_server_that_goes_away_mid_sync_costs_a_request_per_lane_and_loses_nothing(
    spec: ExperimentSpec, tmp_path: Path
) -> None:
    client = SharedClient(fail=4, fail_from=5)  # five trials' batches go through, then four fail
    _, clock = run_writer(spec, tmp_path, client, short_trials(20))

    # Each failed sync stops its lanes at their first failure: at most one failure per lane,
    # so the four failures took at least two syncs (lanes that went on would fail all at once).
    assert len(clock.waits) >= 4 // SEND_LANES
    trials = [run_id for run_id, tags in client.runs.items() if tags.get("tunekit.role") == "trial"]
    assert len(trials) == 20 and all(client.terminated[run_id] == "FINISHED" for run_id in trials)
    assert all(len(client.metric_points(run_id)) == 2 for run_id in trials)
    assert_nothing_sent_twice(client)
    assert holds_everything(tmp_path) is True


def test_a_long_error_in_a_warning_is_cut_after_a_whole_word() -> None:
    from tunekit.tracking.values import BRIEF_CHARS, brief

    url = "/api/2.0/mlflow/runs/log-batch"
    error = ConnectionError(
        f"HTTPConnectionPool(host='127.0.0.1', port=5999): Max retries exceeded with url: {url} " * 9
    )
    text = brief(error)
    assert text.startswith("ConnectionError: HTTPConnectionPool") and text.endswith(" ...")
    assert len(text) <= BRIEF_CHARS + 4 and str(error).startswith(text[len("ConnectionError: ") : -4] + " ")
    assert brief(ConnectionError("refused")) == "ConnectionError: refused"
