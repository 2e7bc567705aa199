"""A new SQLite store made in a scratch file with SQLite's syncs off, then linked into place."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunekit.tracking.client import MlflowRunClient, new_sqlite_store


def test_a_new_store_is_whole_and_mlflow_uses_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    database = tmp_path / "mlflow.db"
    assert new_sqlite_store(database)
    assert database.is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["mlflow.db"]  # no scratch file left behind
    client = MlflowRunClient(f"sqlite:///{database}")
    experiment = client.create_experiment("digits", {"k": "v"})
    run = client.create_run(experiment, start_ms=1, name="trial-0", tags={"t": "1"})
    client.set_terminated(run, "FINISHED", 2)
    default = client._client.get_experiment("0")
    assert (default.name, default.artifact_location) == (
        "Default",
        str(tmp_path / "mlruns" / "0"),
    )  # as MLflow makes it


def test_a_store_another_process_made_first_stays_theirs(tmp_path: Path) -> None:
    database = tmp_path / "mlflow.db"
    database.write_bytes(b"theirs")
    assert not new_sqlite_store(database)
    assert database.read_bytes() == b"theirs"
    assert [p.name for p in tmp_path.iterdir()] == ["mlflow.db"]


def test_a_missing_folder_is_left_to_mlflow(tmp_path: Path) -> None:
    assert not new_sqlite_store(tmp_path / "absent" / "mlflow.db")
    assert not (tmp_path / "absent").exists()


REPO = Path(__file__).resolve().parents[3]


def test_the_store_is_prepared_in_the_background_only_when_tracking_is_on(tmp_path: Path) -> None:
    from tunekit.config.spec import load_spec
    from tunekit.tracking import prepare

    shipped = REPO / "search_spaces" / "digits_mlp.yaml"
    off = load_spec(shipped, [f"tracking.uri=sqlite:///{tmp_path / 'off.db'}", "tracking.enabled=false"])
    prepare.prepare_in_background(off)
    prepare.wait(60)
    assert not (tmp_path / "off.db").exists()
    on = load_spec(shipped, [f"tracking.uri=sqlite:///{tmp_path / 'on.db'}"])
    prepare.prepare_in_background(on)
    prepare.wait(60)
    assert (tmp_path / "on.db").is_file()  # made and opened; the writer finds MLflow's store for the URI open
