"""Reaches into the processes a new local Ray starts (see ``tunekit.compat``). Checked against Ray 2.60."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def no_dashboard_process() -> Iterator[None]:
    """While it is open, a new local Ray started with ``include_dashboard=False`` starts no
    dashboard process at all.

    Why: with the dashboard off, Ray 2.60 still starts its ``dashboard.py`` with one module,
    ``UsageStatsHead`` (which reports usage statistics), and ``ray.init`` waits for it to publish
    its address before it starts the raylet (``Node.start_head_processes`` calls
    ``start_api_server``, which polls every 0.1 s): a Python process importing Ray and aiohttp,
    0.65 s of CPU, on the path from ``tunekit run`` to the first trial's worker (3.4 s of wall
    under load 12). tunekit's private Ray serves nothing through it (no dashboard, no job or
    state API: Ray leaves those out with the dashboard off too). A dashboard asked for
    (``include_dashboard`` True or None) starts as ever.
    """
    from ray._private.node import Node

    original = Node.start_api_server

    def start_api_server(self: Any, *, include_dashboard: bool | None, raise_on_failure: bool) -> None:
        if include_dashboard is False:
            return
        original(self, include_dashboard=include_dashboard, raise_on_failure=raise_on_failure)

    Node.start_api_server = start_api_server  # type: ignore[method-assign]
    try:
        yield
    finally:
        Node.start_api_server = original  # type: ignore[method-assign]
