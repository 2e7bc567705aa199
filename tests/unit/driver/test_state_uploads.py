"""Ray's experiment-state uploads to a local folder: whole files, and only those its staging folder changed."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pyarrow.fs
import pytest
from ray.train._internal.storage import _FilesystemSyncer

from tunekit.compat import ray_tune
from tunekit.compat.ray_saved_state import damaged_saved_state
from tunekit.compat.ray_tune import copy_changed_files, whole_file_state_uploads


def _write(path: Path, text: str, mtime_ns: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.utime(path, ns=(mtime_ns, mtime_ns))


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path]:
    """Ray's staging folder after a restore and a save, and the experiment folder."""
    staging, experiment = tmp_path / "staging", tmp_path / "experiment"
    second = 1_000_000_000
    # Ray saved its state again in staging after the last upload.
    _write(experiment / "experiment_state-1.json", '"old state"', 10 * second)
    _write(staging / "experiment_state-1.json", '"new state"', 20 * second)
    # Downloaded at restore (newer than the folder's copy), and since rewritten by tunekit.
    _write(staging / "started.json", "restore-time sessions", 20 * second)
    _write(experiment / "started.json", "this session too", 30 * second)
    # Downloaded at restore and never changed: the same bytes, an older file in the folder.
    _write(staging / "ledger.json", "the ledger", 20 * second)
    _write(experiment / "ledger.json", "the ledger", 5 * second)
    _write(staging / "trial" / "result.json", "new", 20 * second)
    _write(staging / "skipped.tmp", "excluded", 20 * second)
    return staging, experiment


def test_only_what_staging_changed_is_copied_and_tunekit_s_newer_files_stay(folders: tuple[Path, Path]) -> None:
    staging, experiment = folders
    copy_changed_files(staging, experiment, exclude=["*.tmp"])

    assert (experiment / "experiment_state-1.json").read_text() == '"new state"'
    assert (experiment / "trial" / "result.json").read_text() == "new"
    assert (experiment / "started.json").read_text() == "this session too"  # reverted before
    assert (experiment / "ledger.json").stat().st_mtime_ns == 5 * 1_000_000_000  # not touched
    assert not (experiment / "skipped.tmp").exists()
    assert not list(experiment.rglob("*.partial"))
    # The save's index last, after the files it goes with: a kill between them leaves the older index.
    times = {path.name: path.stat().st_mtime_ns for path in experiment.rglob("*.json")}
    assert times["experiment_state-1.json"] >= times["result.json"]


def test_a_copy_cut_short_leaves_the_previous_whole_file(
    folders: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    staging, experiment = folders

    write_bytes = Path.write_bytes

    def killed_midway(target: Path, data: bytes) -> int:
        write_bytes(target, data[:6])  # what a kill during the copy leaves behind
        raise KeyboardInterrupt

    monkeypatch.setattr(Path, "write_bytes", killed_midway)
    with pytest.raises(KeyboardInterrupt):
        copy_changed_files(staging, experiment)
    assert (experiment / "experiment_state-1.json").read_text() == '"old state"'


def test_a_state_ray_left_cut_short_in_staging_never_replaces_the_whole_one(folders: tuple[Path, Path]) -> None:
    # Ray dumps its state into the staging file in place; a stop mid-dump left it cut short,
    # and the copy made the experiment's whole one a torn one that resume refused (1 in 28 stops).
    staging, experiment = folders
    _write(staging / "experiment_state-1.json", '{"trial_data": [["{}", ', 40 * 1_000_000_000)
    copy_changed_files(staging, experiment)
    assert (experiment / "experiment_state-1.json").read_text() == '"old state"'  # nothing lost
    assert (experiment / "trial" / "result.json").read_text() == "new"  # the rest still copied


def test_a_pickle_cut_short_in_staging_is_not_copied_and_a_json_one_is(folders: tuple[Path, Path]) -> None:
    # Ray pickles its callbacks' and searcher's states into staging in place, from its loop, while
    # its sync thread copies: a copy may read one mid-dump (a cut experiment state was seen so).
    import pickle

    staging, experiment = folders
    whole = pickle.dumps({"records": list(range(100))}, protocol=5)
    _write(experiment / "callback-states-1.pkl", "", 10 * 1_000_000_000)
    (experiment / "callback-states-1.pkl").write_bytes(whole)
    (staging / "callback-states-1.pkl").write_bytes(whole[:-7])
    (staging / "searcher-state-1.pkl").write_text('{"numbers": {"a": 0}}')  # tunekit's searcher saves JSON
    copy_changed_files(staging, experiment)
    assert (experiment / "callback-states-1.pkl").read_bytes() == whole  # the older whole one stays
    assert (experiment / "searcher-state-1.pkl").read_text() == '{"numbers": {"a": 0}}'
    (staging / "callback-states-1.pkl").write_bytes(pickle.dumps({"records": []}, protocol=5))
    copy_changed_files(staging, experiment)
    assert pickle.loads((experiment / "callback-states-1.pkl").read_bytes()) == {"records": []}


def test_a_local_experiment_folder_gets_the_whole_file_copy_and_remote_storage_ray_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_FilesystemSyncer, "_sync_up_command", _FilesystemSyncer._sync_up_command)
    whole_file_state_uploads()
    whole_file_state_uploads()  # a second search in the process: patched once
    local = _FilesystemSyncer(storage_filesystem=pyarrow.fs.LocalFileSystem())
    command, kwargs = local._sync_up_command(str(tmp_path), str(tmp_path / "experiment"))
    assert command is ray_tune.copy_changed_files
    assert kwargs == {"source": tmp_path, "destination": tmp_path / "experiment", "exclude": []}
    remote = _FilesystemSyncer(storage_filesystem=pyarrow.fs.SubTreeFileSystem("/", pyarrow.fs.LocalFileSystem()))
    command, _ = remote._sync_up_command(str(tmp_path), "experiment")
    assert command is not ray_tune.copy_changed_files


def test_a_damaged_newest_save_is_named(tmp_path: Path) -> None:
    (tmp_path / "experiment_state-1.json").write_text('{"trial_data": []}')
    (tmp_path / "search_gen_state-1.json").write_text("")  # an older save: restore reads the newest
    (tmp_path / "search_gen_state-2.json").write_bytes(b"\x80\x05}\x94.")  # a pickle, as Ray writes it
    assert damaged_saved_state(tmp_path) is None
    (tmp_path / "callback-states-2.pkl").write_bytes(b"")
    assert damaged_saved_state(tmp_path) == ("callback-states-2.pkl", "empty")
    (tmp_path / "callback-states-2.pkl").write_bytes(b"\x80\x05")
    (tmp_path / "experiment_state-2.json").write_text('{"trial_data": [')
    assert damaged_saved_state(tmp_path) == ("experiment_state-2.json", "cut short")


def test_resume_over_a_damaged_save_refuses_before_ray_starts(tmp_path: Path) -> None:
    # Ray would log the failed read and start a new search over this one's tables.
    import sys

    import tunekit
    from tunekit.config.spec import load_spec
    from tunekit.errors import StorageError

    repo = Path(__file__).resolve().parents[3]
    (tmp_path / "spec.yaml").write_text(load_spec(repo / "search_spaces" / "digits_mlp.yaml").to_yaml())
    (tmp_path / "experiment_state-1.json").write_text('{"trial_data": []}')
    (tmp_path / "search_gen_state-1.json").write_text("")
    (tmp_path / "study.journal").write_text("")
    with pytest.raises(StorageError) as refused:
        tunekit.resume(tmp_path, progress=False)
    assert str(refused.value) == (
        f"{tmp_path / 'search_gen_state-1.json'}: empty, as Ray's saved state (its driver was killed while "
        "Ray wrote it); a resume would start a new search over this one's records; its results stay readable "
        "(`tunekit report`), and `tunekit run` starts the search again elsewhere"
    )
    assert not (tmp_path / "driver.lease").exists()  # the refused resume let go of its lease
    assert "ray" not in sys.modules or not __import__("ray").is_initialized()


def test_a_trials_saved_state_keeps_no_trailing_averages_of_its_results(monkeypatch: pytest.MonkeyPatch) -> None:
    from ray.tune.experiment import Trial
    from ray.tune.trainable.metadata import _TrainingRunMetadata

    def saved_metadata() -> tuple[int, dict[str, float]]:
        trial = Trial("trainable", stub=True, trial_id="t1")
        for epoch in range(1, 21):
            trial.update_last_result({"training_iteration": epoch, "epoch": epoch, "loss": 1.0 / epoch})
        return len(trial.get_json_state()[1]), trial.run_metadata.metric_analysis["loss"]

    # Ray 2.60's own default, whatever an earlier search in this process set (restored after the test).
    monkeypatch.setattr(_TrainingRunMetadata.__init__, "__defaults__", ((5, 10),))
    ray_size, ray_loss = saved_metadata()
    ray_tune.no_trailing_averages()
    size, loss = saved_metadata()
    assert set(ray_loss) - set(loss) == {"last-5-avg", "last-10-avg"}
    assert loss == {"max": 1.0, "min": 0.05, "avg": pytest.approx(sum(1 / e for e in range(1, 21)) / 20), "last": 0.05}
    assert size < ray_size / 2, (size, ray_size)


def test_a_trials_saved_state_names_tunekit_s_folder_function_instead_of_pickling_it() -> None:
    from ray.tune.experiment import Trial

    from tunekit.driver.tune_run import trial_dir_name

    def saved_state(creator: Callable[[Trial], str]) -> str:
        trial = Trial("trainable", stub=True, trial_id="t1", trial_dirname_creator=creator)
        return trial.get_json_state()[0]

    assert trial_dir_name(Trial("trainable", stub=True, trial_id="t1")) == "t1"
    # Every save writes every trial's state: a lambda there is its whole code, in hex.
    assert len(saved_state(trial_dir_name)) < len(saved_state(lambda trial: trial.trial_id)) - 900
