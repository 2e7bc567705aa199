"""Ray's trial names are ``trial-<number>``, and the worker reads the number back from them."""

from __future__ import annotations

from types import SimpleNamespace

from tunekit.layout import number_in_trial_name, trial_name
from tunekit.search import trial_names
from tunekit.search.trial_names import name_trials_by, ray_trial_name


def test_a_trial_is_named_by_the_number_its_searcher_gave_it_and_the_name_gives_it_back() -> None:
    numbers = {"3f2a9c01": 7}
    name_trials_by(numbers.get)
    try:
        assert ray_trial_name(SimpleNamespace(trial_id="3f2a9c01")) == "trial-7"
        assert number_in_trial_name(ray_trial_name(SimpleNamespace(trial_id="3f2a9c01"))) == 7
        # Not numbered (yet): its Ray id, which names no number.
        assert ray_trial_name(SimpleNamespace(trial_id="0badc0de")) == "trial-0badc0de"
        assert number_in_trial_name("trial-0badc0de") is None
        # A later search in the same process numbers the trials it creates.
        name_trials_by({"0badc0de": 0}.get)
        assert ray_trial_name(SimpleNamespace(trial_id="0badc0de")) == "trial-0"
    finally:
        trial_names._numbering.clear()
    assert ray_trial_name(SimpleNamespace(trial_id="3f2a9c01")) == "trial-3f2a9c01"  # no search: no numbers


def test_only_trial_names_give_numbers() -> None:
    assert trial_name(12, "abc") == "trial-12" and trial_name(None, "abc") == "trial-abc"
    assert [number_in_trial_name(n) for n in ("trial-12", "run_trial_12", "trial-", "trial-1e3", "12")] == [
        12,
        None,
        None,
        None,
        None,
    ]
