"""Ray's registry is read once per trainable while a search runs, not at every new trial or use of its class."""

from __future__ import annotations

from typing import Any

import pytest
from ray.tune import TuneError, registry
from ray.tune.experiment import trial as trial_module
from ray.tune.experiment.trial import Trial

from tunekit.compat.ray_tune import one_registry_read_per_trainable


def _trainable(config: dict[str, Any]) -> None:
    pass


def _other_trainable(config: dict[str, Any]) -> None:
    pass


@pytest.fixture
def registry_reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """The names looked up in Ray's registry of trainables, as ("get" or "contains", name) (no
    Ray runtime: it reads its local copy)."""
    reads: list[tuple[str, str]] = []
    for ask in ("get", "contains"):
        original = getattr(registry._global_registry, ask)

        def counted(category: bytes, key: str, ask: str = ask, original: Any = original) -> Any:
            if category == registry.TRAINABLE_CLASS:
                reads.append((ask, key))
            return original(category, key)

        monkeypatch.setattr(registry._global_registry, ask, counted)
    return reads


def test_each_trainable_is_read_once_per_search_whatever_its_trials_ask(registry_reads: list[tuple[str, str]]) -> None:
    registry.register_trainable("tunekit_registry_probe", _trainable)
    registry.register_trainable("tunekit_registry_other", _other_trainable)
    Trial("tunekit_registry_probe", config={}).get_trainable_cls()
    assert registry_reads, "Ray no longer reads its registry for a trial's class: the cache has nothing to save"
    registry_reads.clear()

    with one_registry_read_per_trainable():
        trials = [Trial("tunekit_registry_probe", config={}) for _ in range(20)]
        classes = {trial.get_trainable_cls() for trial in trials for _ in range(3)}
        other = Trial("tunekit_registry_other", config={}).get_trainable_cls()

    # One name check and one class read per name (reading the class checks the name again).
    probe, other_name = "tunekit_registry_probe", "tunekit_registry_other"
    assert sorted(set(registry_reads)) == [
        ("contains", other_name),
        ("contains", probe),
        ("get", other_name),
        ("get", probe),
    ]
    assert len(registry_reads) == 6, registry_reads

    assert len(classes) == 1 and other is not classes.pop()
    # The next search reads its own: a class registered again under the name is the one it gets.
    registry.register_trainable("tunekit_registry_probe", _other_trainable)
    with one_registry_read_per_trainable():
        again = Trial("tunekit_registry_probe", config={}).get_trainable_cls()
    assert again._name == _other_trainable.__name__
    assert Trial.get_trainable_cls.__qualname__ == "Trial.get_trainable_cls"
    assert trial_module.validate_trainable is registry.validate_trainable


def test_an_unknown_trainable_is_refused_inside_the_cache_too() -> None:
    with one_registry_read_per_trainable(), pytest.raises(TuneError, match="Unknown trainable"):
        Trial("tunekit_registry_never_registered", config={})
