"""The failure guard as Ray sees it: a ``Stopper`` applying ``tunekit.driver.guard``'s rules."""

from __future__ import annotations

from ray.tune.stopper import Stopper

from tunekit.driver.guard import FailureRules


class FailureGuard(FailureRules, Stopper):
    """Stops the whole search on a fatal trial error, or on one error repeated before any trial succeeded."""
