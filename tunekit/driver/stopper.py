"""The failure guard as Ray sees it: a ``Stopper`` applying ``tunekit.driver.guard``'s rules."""

from __future__ import annotations

from ray.tune.stopper import Stopper

from tunekit.driver.guard import FailureRules
from tunekit.driver.listener import Listener
from tunekit.driver.recorder import TrialRecord
from tunekit.layout import TrialStatus


class FailureGuard(FailureRules, Stopper, Listener):
    """Stops the whole search on a fatal trial error, or on one error repeated before any trial succeeded.

    As Ray's stopper it reads every result; as a recorder listener (the protocol's other
    hooks do nothing) it hears of trials whose worker failed without a result (the
    recorder's ``on_trial_error``). Without that, a worker that cannot import the
    trainable's module failed every trial of the search, one after the other (368 trials in
    34 minutes, in a benchmark run from the wrong folder).
    """

    def trial_ended(self, record: TrialRecord) -> None:
        failed = record.status == TrialStatus.FAILED
        if failed and record.reason:
            self.worker_failed(record.trial_id, record.reason)
        if failed or record.status in (TrialStatus.COMPLETED, TrialStatus.PRUNED):
            self.count_ending(record.trial_id, failed, record.reason or "")
