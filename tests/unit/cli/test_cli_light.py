"""The command's light paths (--help, validate, plan) import no Ray, TensorFlow or MLflow."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

RUN_MAIN = "import contextlib, io, sys\nfrom tunekit.cli import main\n"


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["run", "--help"],
        ["validate", "search_spaces/digits_mlp.yaml"],
        ["plan", "search_spaces/digits_mlp.yaml"],
    ],
    ids=["help", "run-help", "validate", "plan"],
)
def test_light_commands_import_nothing_heavy(argv: list[str], imported_after: Callable[[str], list[str]]) -> None:
    code = (
        f"{RUN_MAIN}with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    try:\n        status = main({argv!r})\n    except SystemExit as exit:\n        status = exit.code\n"
        "assert status in (0, None), status"
    )
    assert imported_after(code) == []


def test_validate_prints_ok(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from tunekit.cli import main

    monkeypatch.chdir(Path(__file__).resolve().parents[3])
    assert main(["validate", "search_spaces/digits_mlp.yaml"]) == 0
    assert "ok" in capsys.readouterr().out


def test_the_mlflow_link_says_when_mlflow_lacks_part_of_the_search(tmp_path: Path) -> None:
    from tunekit.results.closing import mlflow_link
    from tunekit.tracking.record import TrackingRecord

    ui = "http://127.0.0.1:5000/#/experiments/1"
    record = TrackingRecord("http://127.0.0.1:5000", "digits", "1", "abc", ui_url=ui)
    record.write(tmp_path)  # as the writer left it when the server went away for good
    assert mlflow_link(tmp_path) == f"{ui} (incomplete: `tunekit sync {tmp_path}` sends what MLflow lacks)"
    record.completed().write(tmp_path)
    assert mlflow_link(tmp_path) == ui


def test_plan_shows_the_space_it_plans_with_its_conditions(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tunekit.cli import main

    spec = Path(__file__).resolve().parents[3] / "search_spaces" / "digits_mlp.yaml"
    space = "space.layers={type: choice, values: [1, 2]}"
    second = "space.units_2={type: int, low: 16, high: 64, step: 16, when: {layers: [2]}}"
    assert main(["plan", str(spec), "--set", space, "--set", second]) == 0
    shown = capsys.readouterr().out.splitlines()
    at = shown.index("space:")
    assert shown[at + 1].split() == ["learning_rate", "loguniform", "0.0001", "to", "0.01"]
    assert "  units_2        int 16 to 64, step 16  (when layers is 2)" in shown[at:], shown
