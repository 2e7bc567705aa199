"""The checks of the leases this process holds, which every driver-side write makes first.

``tunekit.storage.lease`` registers a check per lease it holds; ``tunekit.storage.store`` (tables, JSON records),
the study journal's appends, the bucket's pushes and MLflow's batches call ``check_fences``
before they write, so a driver that lost its lease (a paused process another driver replaced)
writes not one byte more. Its own module, with no imports, so that every writer can reach it.
"""

from __future__ import annotations

from collections.abc import Callable

_FENCES: dict[int, Callable[[], None]] = {}


def add_fence(key: int, check: Callable[[], None]) -> None:
    _FENCES[key] = check


def remove_fence(key: int) -> None:
    _FENCES.pop(key, None)


def check_fences() -> None:
    """Raises ``LeaseLostError`` when this process lost a lease it holds (see ``DriverLease.ensure_held``)."""
    for check in tuple(_FENCES.values()):
        check()
