"""``tracking.required`` refusing an unreachable server, and ``load_from_mlflow`` refusing an ambiguous name."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_tunekit

from tunekit.config.spec import load_spec
from tunekit.errors import SpecError
from tunekit.results.mlflow import ambiguity_message
from tunekit.testing.servers import free_port

REPO = Path(__file__).resolve().parents[3]
DIGITS_SPEC = REPO / "search_spaces" / "digits_mlp.yaml"


def test_required_tracking_refuses_an_unreachable_server_in_one_line_and_writes_nothing(tmp_path: Path) -> None:
    uri = f"http://127.0.0.1:{free_port()}"
    done = run_tunekit(
        "run", str(DIGITS_SPEC), "--storage", str(tmp_path), "--set", "tracking.required=true", "--tracking-uri", uri
    )
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"tunekit: error: tracking.required: no answer from MLflow at {uri}; start the tracking server or fix "
        "tracking.uri, or set tracking.required: false to search without it and send the runs later with "
        "`tunekit sync DIR`"
    ]
    assert list(tmp_path.iterdir()) == []  # refused before the experiment directory exists (and before Ray)


def test_required_tracking_defaults_to_false_and_needs_tracking_enabled() -> None:
    assert load_spec(DIGITS_SPEC).tracking.required is False
    assert load_spec(DIGITS_SPEC, ["tracking.required=true"]).tracking.required is True
    with pytest.raises(SpecError) as refused:
        load_spec(DIGITS_SPEC, ["tracking.required=true", "tracking.enabled=false"])
    assert str(refused.value) == "tracking.required: must be false when tracking.enabled is false, got true"
    with pytest.raises(SpecError) as refused:
        load_spec(DIGITS_SPEC, ["tracking.required=sometimes"])
    assert str(refused.value) == "tracking.required: must be true or false, got 'sometimes'"


def test_an_ambiguous_experiment_name_lists_every_search_newest_first() -> None:
    message = ambiguity_message(
        "digits-mlp", [("b2c4", 1_767_225_600_000, 12), ("a1f3", 1_767_139_200_000, 1), ("9e0d", 1_767_052_800_500, 0)]
    )
    assert message == (
        "MLflow experiment 'digits-mlp' holds 3 tunekit searches; pass experiment_dir= or run_id= for one of "
        "them, or latest=True for the newest: b2c4 (started 2026-01-01 00:00:00 UTC, 12 trials); "
        "a1f3 (started 2025-12-31 00:00:00 UTC, 1 trial); 9e0d (started 2025-12-30 00:00:00 UTC, 0 trials)"
    )
