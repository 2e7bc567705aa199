"""Reaches into the processes a new local Ray starts (see ``tunekit.compat``). Checked against Ray 2.60."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def lean_local_node() -> Iterator[None]:
    """While it is open, a new local Ray started with ``include_dashboard=False`` starts none of
    the three Python daemons tunekit's private Ray has no use for: the dashboard, the autoscaler's
    monitor and the log monitor.

    Why: each imports Ray and more as it starts (0.4 to 0.65 s of CPU each) in the seconds in
    which the raylet's agents and then the first trials' workers start, on the path from
    ``tunekit run`` to the first epoch on 2 cores; and with the dashboard off Ray 2.60 still
    starts ``dashboard.py`` with one module, ``UsageStatsHead`` (which reports usage statistics),
    and waits for it to publish its address before it starts the raylet (``Node.start_api_server``
    polls every 0.1 s: 3.4 s of wall under load 12). tunekit's private Ray serves no dashboard,
    job or state API (Ray leaves those out with the dashboard off too), has no autoscaler to run
    (one fixed node) and sends no worker output to the driver (``log_to_driver=False``, which is
    all the log monitor's lines are for). A dashboard asked for (``include_dashboard`` True or
    None) makes this change nothing.
    """
    from ray._private.node import Node

    original = {name: getattr(Node, name) for name in ("start_api_server", "start_monitor", "start_log_monitor")}

    def start_api_server(self: Any, *, include_dashboard: bool | None, raise_on_failure: bool) -> None:
        if include_dashboard is not False:
            original["start_api_server"](self, include_dashboard=include_dashboard, raise_on_failure=raise_on_failure)

    def start_monitor(self: Any) -> None:
        if self._ray_params.include_dashboard is not False:
            original["start_monitor"](self)

    def start_log_monitor(self: Any) -> None:
        if self._ray_params.include_dashboard is not False:
            original["start_log_monitor"](self)

    Node.start_api_server = start_api_server  # type: ignore[method-assign]
    Node.start_monitor = start_monitor  # type: ignore[method-assign]
    Node.start_log_monitor = start_log_monitor  # type: ignore[method-assign]
    try:
        yield
    finally:
        for name, method in original.items():
            setattr(Node, name, method)
