"""The failure guard's rules, driven with made-up results (no Ray)."""

from __future__ import annotations

from collections.abc import Callable

from tunekit.driver.guard import REPEATED_FAILURE_LIMIT, FailureRules
from tunekit.layout import FAILURE_KEY, FAILURE_KIND_KEY


def ok(epoch: int = 1) -> dict[str, object]:
    return {"epoch": epoch, "val_accuracy": 0.5}


def failed(reason: str, kind: str = "trial") -> dict[str, object]:
    return {FAILURE_KEY: reason, FAILURE_KIND_KEY: kind}


def test_a_result_without_failure_lets_the_trial_and_search_go_on() -> None:
    guard = FailureRules()
    assert guard("t0", ok()) is False
    assert guard.stop_all() is False
    assert guard.abort_reason is None


def test_a_trial_failure_stops_that_trial_only() -> None:
    guard = FailureRules()
    assert guard("t0", failed("TrialFailure: non-finite loss")) is True
    assert guard.stop_all() is False


def test_a_fatal_failure_stops_the_search_with_its_reason() -> None:
    guard = FailureRules()
    guard("t0", ok())
    assert guard("t3", failed("ImportError: no module named foo", kind="fatal")) is True
    assert guard.stop_all() is True
    assert guard.abort_message({"t3": 2}.get) == (
        "trial 2 (t3) failed with an error every trial would hit: ImportError: no module named foo"
    )


def test_the_same_error_in_the_first_trials_stops_the_search() -> None:
    guard = FailureRules()
    for index in range(REPEATED_FAILURE_LIMIT - 1):
        guard(f"t{index}", failed("ValueError: shapes differ"))
        assert guard.stop_all() is False
    guard("t9", failed("ValueError: shapes differ"))
    assert guard.stop_all() is True
    assert guard.abort_reason == (
        f"{REPEATED_FAILURE_LIMIT} trials failed with the same error before any trial finished an epoch, "
        "so the trainable is broken, not the configs: ValueError: shapes differ"
    )


def test_a_tensorflow_error_stops_the_search_at_its_third_trial() -> None:
    # The reasons three trials of one search gave for a missing TFRecord file (real texts,
    # see tests/unit/test_errors.py): each names another traced function.
    guard = FailureRules()
    reasons = [
        "NotFoundError: Graph execution error: data/train.tfrecord; No such file or directory "
        f"[[{{{{node IteratorGetNext}}}}]] [Op:__inference_multi_step_on_iterator_{number}]"
        for number in (1339, 2686, 2710)
    ]
    assert guard("ee5120d2", failed(reasons[0])) is True
    assert guard("6fccbc26", failed(reasons[1])) is True
    assert guard.stop_all() is False
    assert guard("cc5e6db9", failed(reasons[2])) is True
    assert guard.stop_all() is True
    assert guard.abort_reason is not None and guard.abort_reason.endswith(reasons[2])


def test_same_cause_counts_across_other_errors_in_between() -> None:
    guard = FailureRules()
    for trial_id, reason in [("t0", "OSError: a"), ("t1", "KeyError: 'b'"), ("t2", "OSError: a")]:
        guard(trial_id, failed(reason))
    assert guard.stop_all() is False
    guard("t3", failed("OSError: a"))
    assert guard.stop_all() is True


def test_a_trial_seen_failing_twice_counts_once() -> None:
    guard = FailureRules()
    for trial_id in ("t0", "t0", "t1", "t1"):
        guard(trial_id, failed("OSError: a"))
    assert guard.stop_all() is False


def test_different_errors_do_not_stop_the_search() -> None:
    guard = FailureRules()
    for index in range(REPEATED_FAILURE_LIMIT * 2):
        guard(f"t{index}", failed(f"TrialFailure: error {index % 3}"))
    assert guard.stop_all() is False


def test_one_success_means_repeated_errors_are_the_configs_fault() -> None:
    guard = FailureRules()
    guard("t0", ok())
    for index in range(REPEATED_FAILURE_LIMIT + 1):
        guard(f"t{index + 1}", failed("ResourceExhaustedError: OOM"))
    assert guard.stop_all() is False


def test_the_first_abort_reason_is_kept() -> None:
    guard = FailureRules()
    guard("t0", failed("ImportError: a", kind="fatal"))
    guard("t1", failed("ImportError: b", kind="fatal"))
    assert guard.abort_reason is not None and guard.abort_reason.endswith("ImportError: a")


def test_the_rules_import_no_ray(imported_after: Callable[[str], list[str]]) -> None:
    assert imported_after("import tunekit.driver.guard, tunekit.driver.records") == []


def test_trials_whose_worker_failed_without_a_result_count_as_failed_results_do() -> None:
    # A worker that cannot import the trainable's module never reports: Ray ends the trial
    # with an error, and the recorder hears it. The search went on through 368 such trials.
    from tunekit.driver.records import TrialRecord
    from tunekit.driver.stopper import FailureGuard
    from tunekit.layout import TrialStatus

    guard = FailureGuard()
    reason = "RuntimeError: The actor with name ImplicitFunc failed to import on the worker"
    for number in range(REPEATED_FAILURE_LIMIT):
        assert guard.stop_all() is False
        guard.trial_ended(TrialRecord(f"t{number}", number, {}, status=TrialStatus.FAILED, reason=reason))
    assert guard.stop_all() is True
    assert guard.abort_reason is not None and guard.abort_reason.endswith(f"not the configs: {reason}")
    # A trial that reported an epoch first: the configs' fault, as with results.
    guard = FailureGuard()
    guard("t0", ok())
    for number in range(1, 5):
        guard.trial_ended(TrialRecord(f"t{number}", number, {}, status=TrialStatus.FAILED, reason=reason))
    guard.trial_ended(TrialRecord("t9", 9, {}, status=TrialStatus.PRUNED, reason="pruned by ASHA"))
    assert guard.stop_all() is False


def test_a_resumed_search_decides_afresh_but_stops_at_once_on_the_same_error() -> None:
    saved = FailureRules()
    for index in range(REPEATED_FAILURE_LIMIT):
        saved(f"t{index}", failed("RuntimeError: the data folder is missing"))
    assert saved.stop_all() is True
    guard = FailureRules()  # the resumed run's, as pickled before the first session ran
    guard.resumed(saved)  # the user fixed the trainable, or believes so
    assert guard.stop_all() is False and guard.abort_reason is None
    guard("t5", failed("OSError: another cause"))
    assert guard.stop_all() is False  # another error counts its own trials
    guard("t6", failed("RuntimeError: the data folder is missing"))
    assert guard.stop_all() is True  # not fixed after all: no three more trials spent on it


def test_a_resume_without_the_saved_guard_counts_from_nothing() -> None:
    guard = FailureRules()
    guard.resumed(None)
    for index in range(REPEATED_FAILURE_LIMIT - 1):
        guard(f"t{index}", failed("OSError: a"))
    assert guard.stop_all() is False


def test_a_limit_on_failures_in_a_row_stops_the_search_at_the_trial_that_reaches_it() -> None:
    # KerasTuner's max_consecutive_failed_trials: counted as trials end, reset by any other end.
    guard = FailureRules(consecutive_limit=2)
    guard.count_ending("t0", True, "ValueError: too big")
    guard.count_ending("t1", False, "")  # completed or pruned: the count starts again
    guard.count_ending("t2", True, "ValueError: too big")
    assert guard.stop_all() is False
    guard.count_ending("t3", True, "FailedTrialError: too small")
    assert guard.stop_all() is True
    assert guard.abort_message({"t3": 3}.get) == (
        "trial 3 (t3) made 2 failed trials in a row (training.max_consecutive_failures: 2): FailedTrialError: too small"
    )


def test_a_limit_on_failures_in_a_row_replaces_the_same_error_rule() -> None:
    guard = FailureRules(consecutive_limit=REPEATED_FAILURE_LIMIT + 2)
    for index in range(REPEATED_FAILURE_LIMIT + 1):
        assert guard(f"t{index}", failed("ValueError: shapes differ")) is True  # the trial stops
        guard.count_ending(f"t{index}", True, "ValueError: shapes differ")
    assert guard.stop_all() is False  # 4 the same, under a limit of 5: KerasTuner goes on too
    guard.count_ending("t9", True, "ValueError: shapes differ")
    assert guard.stop_all() is True
    resumed = FailureRules(consecutive_limit=REPEATED_FAILURE_LIMIT + 2)
    resumed.resumed(guard)  # the count goes on in a resumed search
    resumed.count_ending("t10", True, "ValueError: shapes differ")
    assert resumed.stop_all() is True
