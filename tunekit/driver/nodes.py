"""Nodes leaving the Ray cluster said on the console, and joining it in the log, as Ray learns of them.

A lost node's trials are retried by Ray from their last checkpoints, and the console says
so per trial ("attempt 2 starts from its last checkpoint ...; attempt 1 ran on node ...").
What it did not say is that a node left, which is the cause a cluster's operator acts on:
Ray's own account ("The node ... has missed too many heartbeats") goes to driver.log
(``tunekit.compat.ray_tune.send_ray_cluster_messages``). ``NodeWatch`` reads Ray's node
table every few seconds from the driver's loop and names each node that left, with the
trials that were running on it when it was last seen alive, as a warning; a node that
joined goes to the log only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from tunekit.driver.listener import Listener
from tunekit.results.status import NODE_ID_SHOWN

if TYPE_CHECKING:
    from tunekit.driver.records import TrialRecord

logger = logging.getLogger("tunekit")

# How often Ray's node table is read. Ray itself takes 15-30 s to declare a node dead (its
# health checks), so reading more often would not say it sooner.
WATCH_EVERY_S = 5.0


class _Clock(Protocol):
    def now(self) -> float: ...


class Watched(Protocol):
    """What the watch reads of the recorder: its trials, the search's clock, its warnings."""

    @property
    def trials(self) -> dict[str, TrialRecord]: ...

    @property
    def clock(self) -> _Clock: ...

    def warn(self, message: str) -> None: ...


@dataclass(frozen=True)
class Node:
    node_id: str
    address: str
    cpus: float
    gpus: float


def alive_nodes() -> dict[str, Node]:
    """Ray's nodes that are alive now, by node id (the driver is connected to Ray)."""
    import ray

    return {str(node["NodeID"]): _node(node) for node in ray.nodes() if node.get("Alive") and node.get("NodeID")}


def _node(entry: dict[str, Any]) -> Node:
    resources = entry.get("Resources") or {}
    return Node(
        str(entry["NodeID"]),
        str(entry.get("NodeManagerAddress") or "?"),
        float(resources.get("CPU", 0)),
        float(resources.get("GPU", 0)),
    )


class NodeWatch(Listener):
    """A recorder listener that says when a node leaves the cluster, as the recorder's
    warnings (the console shows them above its status line; the log keeps them), and logs
    a node that joined.

    Args:
        read_nodes: the nodes alive now (default: Ray's node table).
        clock: monotonic seconds, for the reading period.
    """

    def __init__(
        self,
        *,
        read_nodes: Callable[[], dict[str, Node]] = alive_nodes,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read_nodes = read_nodes
        self._clock = clock
        self._nodes: dict[str, Node] | None = None
        self._seen_at = 0.0  # the last reading, on the search's clock (the trials' spans' clock)
        self._read_at = -WATCH_EVERY_S
        self._session_began = 0.0  # on the search's clock: spans of earlier sessions are not this loss's

    def experiment_started(self, recorder: Watched) -> None:
        self._session_began = recorder.clock.now()
        self._look(recorder)

    def tick(self, recorder: Watched) -> None:
        if self._clock() - self._read_at >= WATCH_EVERY_S:
            self._look(recorder)

    def experiment_ended(self, recorder: Watched) -> None:
        self._look(recorder)

    def _look(self, recorder: Watched) -> None:
        self._read_at = self._clock()
        try:
            nodes = self._read_nodes()
        except Exception:  # Ray's table unreadable for a moment: the next reading says it
            return
        now = recorder.clock.now()
        if self._nodes is not None:
            for node_id in self._nodes.keys() - nodes.keys():
                hit = _trials_on(recorder, node_id, self._seen_at, self._session_began)
                recorder.warn(_left(self._nodes[node_id], hit))
            for node_id in nodes.keys() - self._nodes.keys():  # good news: the log's, not a warning
                logger.info("tunekit: %s", _joined(nodes[node_id]))
        self._nodes, self._seen_at = nodes, now


def _trials_on(recorder: Watched, node_id: str, seen_at: float, session_began: float) -> list[str]:
    """The trials (numbers, else ids) the node's loss hit: a span on ``node_id`` still open
    at ``seen_at`` (the last reading that found the node alive), or one of this session whose
    attempt the trial has since left (Ray retried it). Ray declares a node dead 15-30 s after
    it stopped answering, while a worker on it is known dead at once: the trial's span ended,
    and it may already run again elsewhere, before the last reading that still listed the node."""
    hit = []
    for record in sorted(recorder.trials.values(), key=lambda r: (r.number is None, r.number or 0, r.trial_id)):
        for (start, end), worker in zip(record.spans, record.span_workers, strict=False):
            if worker.get("node_id") != node_id:
                continue
            retried = (start or 0.0) >= session_began and worker.get("attempt", record.attempts) != record.attempts
            if end is None or end >= seen_at or retried:
                hit.append(str(record.number) if record.number is not None else record.trial_id)
                break
    return hit


def _left(node: Node, trials: list[str]) -> str:
    where = f"node {node.node_id[:NODE_ID_SHOWN]} ({node.address}) left the cluster"
    if not trials:
        return f"{where}; no trial of this search was running there"
    if len(trials) == 1:
        retried = f"trial {trials[0]} was running there: Ray retries it from its last checkpoint"
    else:
        retried = f"trials {', '.join(trials)} were running there: Ray retries each from its last checkpoint"
    return f"{where}; {retried}, up to training.max_failures times"


def _joined(node: Node) -> str:
    gpus = f", GPU {node.gpus:g}" if node.gpus else ""
    return f"node {node.node_id[:NODE_ID_SHOWN]} ({node.address}) joined the cluster (CPU {node.cpus:g}{gpus})"
