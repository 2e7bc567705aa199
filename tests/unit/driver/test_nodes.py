"""A node that leaves the cluster is said on the console with the trials that ran on it."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from tunekit.driver.nodes import WATCH_EVERY_S, Node, NodeWatch
from tunekit.driver.records import TrialRecord

HEAD = Node("a" * 56, "10.0.0.1", 4, 0)
LOST = Node("b" * 56, "10.0.0.2", 8, 2)
LATE = Node("c" * 56, "10.0.0.3", 8, 1)


@dataclass
class Clock:
    t: float = 0.0

    def now(self) -> float:
        return self.t


@dataclass
class FakeRecorder:
    """What a listener reads of the recorder: its trials, the search's clock, its warnings."""

    trials: dict[str, TrialRecord] = field(default_factory=dict)
    clock: Clock = field(default_factory=Clock)
    warnings: list[str] = field(default_factory=list)

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    def run(self, number: int, node: Node, start: float, end: float | None = None) -> TrialRecord:
        record = self.trials.setdefault(f"t{number}", TrialRecord(f"t{number}", number, {}))
        record.begin_span(start)
        record.note_worker(node.node_id, 100 + number)
        if end is not None:
            record.close_span(end)
        return record


def watch(tables: list[dict[str, Node]], recorder: FakeRecorder) -> tuple[NodeWatch, Clock]:
    """A watch reading ``tables`` in turn, one per reading, on a monotonic clock the test moves."""
    readings = iter(tables)
    monotonic = Clock()
    return NodeWatch(read_nodes=lambda: next(readings), clock=monotonic.now), monotonic


def by_id(*nodes: Node) -> dict[str, Node]:
    return {node.node_id: node for node in nodes}


def test_a_lost_node_is_named_with_the_trials_running_there_when_it_was_last_seen_alive(
    caplog: pytest.LogCaptureFixture,
) -> None:
    recorder = FakeRecorder()
    recorder.run(0, HEAD, start=0.0)
    recorder.run(1, LOST, start=0.0)
    recorder.run(2, LOST, start=0.0, end=3.0)  # ended on the node before the last reading: not hit
    # Its worker died with the node before Ray declared the node dead (15-30 s later): the
    # span ended before the last reading that listed the node, and Ray retried it elsewhere.
    retried = recorder.run(4, LOST, start=0.0, end=4.0)
    retried.attempts = 2
    recorder.run(4, HEAD, start=4.5)
    nodes, monotonic = watch([by_id(HEAD, LOST), by_id(HEAD, LOST), by_id(HEAD), by_id(HEAD, LATE)], recorder)
    nodes.experiment_started(recorder)
    monotonic.t, recorder.clock.t = WATCH_EVERY_S, 5.0
    nodes.tick(recorder)  # both alive: nothing to say
    monotonic.t += 1
    nodes.tick(recorder)  # too soon to read again
    assert recorder.warnings == []
    # Trial 1's worker died with the node, and Ray already restarted it on the head.
    recorder.run(1, HEAD, start=7.0)
    recorder.run(3, LOST, start=6.0, end=7.0)  # started there after the last reading, cut short
    monotonic.t, recorder.clock.t = 2 * WATCH_EVERY_S, 10.0
    nodes.tick(recorder)
    assert recorder.warnings == [
        "node bbbbbbbb (10.0.0.2) left the cluster; trials 1, 3, 4 were running there: "
        "Ray retries each from its last checkpoint, up to training.max_failures times"
    ]
    # A node that joins is good news: the log says it, the console does not.
    with caplog.at_level(logging.INFO, logger="tunekit"):
        monotonic.t = 3 * WATCH_EVERY_S
        nodes.tick(recorder)
    assert len(recorder.warnings) == 1
    assert "tunekit: node cccccccc (10.0.0.3) joined the cluster (CPU 8, GPU 1)" in caplog.text


def test_a_node_lost_with_nothing_on_it_says_so_and_an_unreadable_table_says_nothing() -> None:
    recorder = FakeRecorder()
    recorder.run(0, HEAD, start=0.0)

    def tables() -> dict[str, Node]:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    answers: Iterator[dict[str, Node] | Exception] = iter([by_id(HEAD, LOST), ConnectionError("GCS busy"), by_id(HEAD)])
    nodes = NodeWatch(read_nodes=tables, clock=lambda: 0.0)
    nodes.experiment_started(recorder)
    nodes.experiment_ended(recorder)  # the reading failed: no verdict
    assert recorder.warnings == []
    nodes.experiment_ended(recorder)
    assert recorder.warnings == ["node bbbbbbbb (10.0.0.2) left the cluster; no trial of this search was running there"]
