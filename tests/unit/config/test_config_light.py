"""The spec layer: Literal vocabularies, the spec's merge rules, and no heavy imports."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, get_args

import pytest

from tunekit.config import spec as spec_module
from tunekit.config.sections import ALGORITHMS, GPU_MEMORY_MODES, SCHEDULERS
from tunekit.config.spec import METRIC_MODES, PRECISIONS, merge_sections, parse_spec
from tunekit.contract import RecordedTrainable
from tunekit.errors import SpecError

RAW: dict[str, Any] = {
    "name": "unit",
    "trainable": "python: __main__.build_data, __main__.build_model",
    "metric": {"name": "acc", "mode": "max"},
    "budget": {"num_samples": 2, "max_epochs": 2},
    "space": {"lr": {"type": "uniform", "low": 0.0, "high": 1.0}},
}


def test_allowed_values_come_from_the_literal_types() -> None:
    assert METRIC_MODES == get_args(spec_module.MetricMode) == ("max", "min")
    assert ALGORITHMS == ("tpe", "random", "grid", "nsga2")
    assert SCHEDULERS == ("asha", "hyperband", "fifo", "pbt")
    assert PRECISIONS == ("auto", "float32", "mixed_float16", "mixed_bfloat16")
    assert GPU_MEMORY_MODES == ("growth", "cap")


def test_an_unknown_word_lists_the_literals_values() -> None:
    with pytest.raises(SpecError, match=r"^search\.algorithm: must be one of tpe, random, grid, nsga2, got 'bayes'$"):
        parse_spec({**RAW, "search": {"algorithm": "bayes"}}, None, locate_trainable=False)


def test_a_recorded_spec_keeps_its_trainable_as_written() -> None:
    parsed = parse_spec(RAW, None, locate_trainable=False)
    assert parsed.trainable == RecordedTrainable(RAW["trainable"])
    assert parsed.raw["trainable"] == RAW["trainable"]
    assert parsed["name"] == "unit" and parsed.get("missing", 1) == 1


def test_a_spec_to_run_refuses_builders_passed_from_python() -> None:
    with pytest.raises(SpecError, match="builders were passed from Python"):
        parse_spec(RAW, None)


def test_merge_sections_replaces_a_distribution_whole() -> None:
    raw = {"space": {"lr": {"type": "loguniform", "low": 1e-4, "high": 1e-1}}, "budget": {"num_samples": 3}}
    merge_sections(raw, {"space": {"lr": {"type": "fixed", "value": 0.01}}, "budget": {"max_epochs": 2}})
    assert raw == {"space": {"lr": {"type": "fixed", "value": 0.01}}, "budget": {"num_samples": 3, "max_epochs": 2}}


def test_the_spec_layer_imports_nothing_heavy(imported_after: Callable[[str], list[str]]) -> None:
    code = "import tunekit.config.spec as s; s.load_spec('search_spaces/digits_mlp.yaml')"
    assert imported_after(code) == []
