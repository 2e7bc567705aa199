"""Ray's registry is read once per trainable while a search runs, not at every use of a trial's class."""

from __future__ import annotations

from typing import Any

import pytest
from ray.tune import registry
from ray.tune.experiment.trial import Trial

from tunekit.compat.ray_tune import one_registry_read_per_trainable


def _trainable(config: dict[str, Any]) -> None:
    pass


def _other_trainable(config: dict[str, Any]) -> None:
    pass


@pytest.fixture
def registry_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names read from Ray's registry of trainables (no Ray runtime: it reads its local copy)."""
    reads: list[str] = []
    original = registry._global_registry.get

    def get(category: bytes, key: str) -> Any:
        if category == registry.TRAINABLE_CLASS:
            reads.append(key)
        return original(category, key)

    monkeypatch.setattr(registry._global_registry, "get", get)
    return reads


def test_each_trainable_is_read_once_per_search_whatever_its_trials_ask(registry_reads: list[str]) -> None:
    registry.register_trainable("tunekit_registry_probe", _trainable)
    registry.register_trainable("tunekit_registry_other", _other_trainable)
    Trial("tunekit_registry_probe", config={}).get_trainable_cls()
    assert registry_reads, "Ray no longer reads its registry for a trial's class: the cache has nothing to save"
    registry_reads.clear()

    with one_registry_read_per_trainable():
        trials = [Trial("tunekit_registry_probe", config={}) for _ in range(20)]
        classes = {trial.get_trainable_cls() for trial in trials for _ in range(3)}
        other = Trial("tunekit_registry_other", config={}).get_trainable_cls()

    assert registry_reads == ["tunekit_registry_probe", "tunekit_registry_other"]
    assert len(classes) == 1 and other is not classes.pop()
    # The next search reads its own: a class registered again under the name is the one it gets.
    registry.register_trainable("tunekit_registry_probe", _other_trainable)
    with one_registry_read_per_trainable():
        again = Trial("tunekit_registry_probe", config={}).get_trainable_cls()
    assert again._name == _other_trainable.__name__
    assert Trial.get_trainable_cls.__qualname__ == "Trial.get_trainable_cls"
