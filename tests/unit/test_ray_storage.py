"""Ray's artifact upload tried again when a file of the trial's folder vanished under it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyarrow import fs

from tunekit.compat.ray_storage import VANISHED_FILE_TRIES, _past_vanished_files, vanished_under_upload


def _vanished(tmp_path: Path) -> FileNotFoundError:
    """pyarrow's own error for a file listed, then gone when opened (as a background sync meets it)."""
    try:
        fs.LocalFileSystem().open_input_stream(str(tmp_path / "heartbeat.tmp"))
    except FileNotFoundError as error:
        return error
    raise AssertionError("the file exists")


def test_a_file_replaced_during_the_sync_is_synced_again_not_a_failed_trial(tmp_path: Path) -> None:
    calls: list[Any] = []

    def persist_artifacts(self: Any, force: bool = False) -> str:
        calls.append(force)
        if len(calls) < 3:
            raise _vanished(tmp_path)
        return "synced"

    assert vanished_under_upload(_vanished(tmp_path))
    assert _past_vanished_files(persist_artifacts)(object(), force=True) == "synced"
    assert calls == [True, True, True]


def test_a_folder_that_never_settles_and_other_missing_files_still_fail(tmp_path: Path) -> None:
    calls: list[int] = []

    def always_vanishing(self: Any) -> None:
        calls.append(1)
        raise _vanished(tmp_path)

    with pytest.raises(FileNotFoundError, match="Failed to open local file"):
        _past_vanished_files(always_vanishing)(object())
    assert len(calls) == VANISHED_FILE_TRIES

    def folder_gone(self: Any) -> None:
        calls.append(2)
        raise FileNotFoundError(2, "No such file or directory", str(tmp_path / "gone"))

    with pytest.raises(FileNotFoundError, match="No such file"):
        _past_vanished_files(folder_gone)(object())
    assert calls.count(2) == 1
