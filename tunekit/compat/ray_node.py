"""Reaches into the processes a new local Ray starts (see ``tunekit.compat``). Checked against Ray 2.60."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

# A new local Ray's raylet starts idle Python workers as it starts, before ``ray.init`` returns
# (as many as ``lean_local_node`` says), and keeps idle workers a minute, not a second: it ends
# those beyond the CPUs left free, and a search's placement groups take the CPUs before its
# actors ask for the workers (those Ray's ``PrestartWorkers`` request starts keep themselves).
# With it the raylet also starts workers ahead for a lease by its backlog, which Ray Tune's
# actors, created through the GCS, never have.
PRESTART_AT_RAYLET_START = {"enable_worker_prestart": True, "idle_worker_killing_time_threshold_ms": 60_000}


@contextlib.contextmanager
def lean_local_node(prestart: int = 0) -> Iterator[None]:
    """While it is open, a new local Ray started with ``include_dashboard=False`` starts none of
    the three Python daemons tunekit's private Ray has no use for: the dashboard, the autoscaler's
    monitor and the log monitor; and its raylet, told to start idle workers as it starts (Ray's
    ``enable_worker_prestart``: ``PRESTART_AT_RAYLET_START``), starts ``prestart``, not one per
    CPU (``services.start_raylet`` gives it ``--num_prestart_python_workers`` = the CPUs).

    Why: each imports Ray and more as it starts (0.4 to 0.65 s of CPU each) in the seconds in
    which the raylet's agents and then the first trials' workers start, on the path from
    ``tunekit run`` to the first epoch on 2 cores; and with the dashboard off Ray 2.60 still
    starts ``dashboard.py`` with one module, ``UsageStatsHead`` (which reports usage statistics),
    and waits for it to publish its address before it starts the raylet (``Node.start_api_server``
    polls every 0.1 s: 3.4 s of wall under load 12). tunekit's private Ray serves no dashboard,
    job or state API (Ray leaves those out with the dashboard off too), has no autoscaler to run
    (one fixed node) and sends no worker output to the driver (``log_to_driver=False``, which is
    all the log monitor's lines are for). A dashboard asked for (``include_dashboard`` True or
    None) makes this change nothing. The raylet's own workers start while ``ray.init`` goes on (the
    raylet's agents, the driver's connection): the first trial's TensorFlow import began 0.3 s
    before it returned, against 3.9 s after it for workers asked for once it had (medians of 6,
    load 9-14; the performance page).
    """
    from ray._private import services
    from ray._private.node import Node
    from ray._private.ray_constants import PROCESS_TYPE_RAYLET

    original = {name: getattr(Node, name) for name in ("start_api_server", "start_monitor", "start_log_monitor")}
    start_ray_process = services.start_ray_process

    def start_process(command: list[str], process_type: str, *args: Any, **kwargs: Any) -> Any:
        if process_type == PROCESS_TYPE_RAYLET:
            flag = "--num_prestart_python_workers="
            command = [f"{flag}{prestart}" if part.startswith(flag) else part for part in command]
        return start_ray_process(command, process_type, *args, **kwargs)

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
    services.start_ray_process = start_process
    try:
        yield
    finally:
        for name, method in original.items():
            setattr(Node, name, method)
        services.start_ray_process = start_ray_process
