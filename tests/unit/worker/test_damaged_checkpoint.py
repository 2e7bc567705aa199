"""A trial restored from a checkpoint cut short fails with a reason that names the file (no Ray, no TensorFlow).

A user's trial failed with the reason ``BadZipFile: File is not a zip file``: which of
its checkpoints, in which trial's folder, it did not say.
"""

from __future__ import annotations

import contextlib
import json
import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from tunekit.errors import TrialFailure, describe_error
from tunekit.layout import CHECKPOINT_STATE, CHECKPOINT_WEIGHTS
from tunekit.storage.checksums import write_checksums
from tunekit.worker.checkpoints import restore_checkpoint


class Variable:
    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape, self.path, self.value = shape, f"dense/{len(shape)}", None

    def assign(self, value: Any) -> None:
        self.value = value


def model() -> Any:
    weights = [Variable((2, 3)), Variable((3,))]
    optimizer = SimpleNamespace(variables=[Variable(())], build=lambda _: None, learning_rate=0.01)
    return SimpleNamespace(weights=weights, trainable_variables=weights, optimizer=optimizer)


def checkpoint(tmp_path: Path, *, stored: Path | None = None) -> tuple[Any, Path]:
    """A whole checkpoint of epoch 3 in ``tmp_path/checkpoint_000002``, as Ray hands it to the trial:
    ``as_directory`` gives its folder (or a download's copy), ``path`` where the storage keeps it."""
    folder = tmp_path / "checkpoint_000002"
    folder.mkdir()
    np.savez(folder / CHECKPOINT_WEIGHTS, w0=np.ones((2, 3)), w1=np.zeros(3), o0=np.array(4.0))
    (folder / CHECKPOINT_STATE).write_text(json.dumps({"epoch": 3, "config": {"learning_rate": 0.01}}))
    ray_checkpoint = SimpleNamespace(
        path=str(stored or folder), as_directory=lambda: contextlib.nullcontext(str(folder))
    )
    return ray_checkpoint, folder


def failure(ray_checkpoint: Any) -> str:
    with pytest.raises(TrialFailure) as raised:
        restore_checkpoint(ray_checkpoint, model(), train_ds=None, config={"learning_rate": 0.01})
    return describe_error(raised.value)  # the reason the trial is recorded with


def test_a_whole_checkpoint_restores(tmp_path: Path) -> None:
    ray_checkpoint, _ = checkpoint(tmp_path)
    restored = model()
    assert restore_checkpoint(ray_checkpoint, restored, train_ds=None, config={"learning_rate": 0.01}) == (3, "")
    assert restored.weights[0].value.tolist() == [[1.0] * 3] * 2 and restored.optimizer.variables[0].value == 4.0


def test_weights_cut_short_fail_the_trial_with_a_reason_that_names_the_file(tmp_path: Path) -> None:
    ray_checkpoint, folder = checkpoint(tmp_path)
    weights = folder / CHECKPOINT_WEIGHTS
    weights.write_bytes(weights.read_bytes()[:300])
    assert failure(ray_checkpoint) == f"checkpoint {weights}: damaged (File is not a zip file)"
    weights.write_bytes(b"")
    assert failure(ray_checkpoint) == f"checkpoint {weights}: damaged (No data left in file)"
    weights.unlink()
    assert failure(ray_checkpoint) == f"checkpoint {weights}: missing"


def test_a_member_that_fails_its_crc_names_the_file_too(tmp_path: Path) -> None:
    ray_checkpoint, folder = checkpoint(tmp_path)
    weights = folder / CHECKPOINT_WEIGHTS
    data = bytearray(weights.read_bytes())
    data[data.index(b"\x00\x00\xf0?")] ^= 0x01  # inside w0's first 1.0: the archive opens, the member does not read
    weights.write_bytes(bytes(data))
    assert failure(ray_checkpoint) == f"checkpoint {weights}: damaged (Bad CRC-32 for file 'w0.npy')"


def test_a_state_cut_short_names_the_file_where_the_trial_s_storage_keeps_it(tmp_path: Path) -> None:
    # Restored from a bucket, as_directory is a download's copy: the reason names the stored checkpoint.
    stored = Path("/bucket/experiment/trial_a/checkpoint_000002")
    ray_checkpoint, folder = checkpoint(tmp_path, stored=stored)
    (folder / CHECKPOINT_STATE).write_text('{"epoch": 3, "con')
    assert failure(ray_checkpoint) == (
        f"checkpoint {stored / CHECKPOINT_STATE}: damaged (Unterminated string starting at: line 1 column 14 (char 13))"
    )


def sealed_checkpoints(trial_dir: Path, epochs: tuple[int, ...]) -> list[Path]:
    """A trial's checkpoints of ``epochs`` (weights all ``epoch``), each with its checksums, as a worker writes them."""
    folders = []
    for index, epoch in enumerate(epochs):
        folder = trial_dir / f"checkpoint_{index:06d}"
        folder.mkdir(parents=True)
        np.savez(folder / CHECKPOINT_WEIGHTS, w0=np.full((2, 3), epoch), w1=np.zeros(3), o0=np.array(4.0))
        (folder / CHECKPOINT_STATE).write_text(json.dumps({"epoch": epoch, "config": {"learning_rate": 0.01}}))
        write_checksums(folder)
        folders.append(folder)
    return folders


def restore(folder: Path) -> tuple[tuple[int, str], Any]:
    ray_checkpoint = SimpleNamespace(path=str(folder), as_directory=lambda: contextlib.nullcontext(str(folder)))
    restored = model()
    return restore_checkpoint(ray_checkpoint, restored, train_ds=None, config={"learning_rate": 0.01}), restored


def test_any_changed_byte_of_a_payload_passes_the_checkpoint_over_for_the_newest_whole_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = random.Random(3)
    folders = sealed_checkpoints(tmp_path / "trial", (2, 4, 6))
    for name in (CHECKPOINT_WEIGHTS, CHECKPOINT_STATE):
        path = folders[2] / name
        whole = path.read_bytes()
        for position in rng.sample(range(len(whole)), 25):
            data = bytearray(whole)
            data[position] ^= rng.randrange(1, 256)
            path.write_bytes(bytes(data))
            (epoch, note), restored = restore(folders[2])
            assert epoch == 4 and restored.weights[0].value.tolist() == [[4.0] * 3] * 2, (name, position)
            assert note.startswith(f"checkpoint {path}: fails its checksum (SHA-256 "), note
            assert note.endswith("; restored checkpoint_000001 (epoch 4) instead")
            assert capsys.readouterr().err == f"tunekit: warning: {note}\n"  # into the trial's output.log
        path.write_bytes(whole)
    assert restore(folders[2])[0] == (6, "")


def test_with_no_whole_checkpoint_left_the_trial_trains_from_its_first_epoch_and_says_so(tmp_path: Path) -> None:
    folders = sealed_checkpoints(tmp_path / "trial", (2, 4))
    for folder in folders:
        data = bytearray((folder / CHECKPOINT_WEIGHTS).read_bytes())
        data[len(data) // 2] ^= 0x40
        (folder / CHECKPOINT_WEIGHTS).write_bytes(bytes(data))
    (epoch, note), _ = restore(folders[1])
    assert epoch == 0
    assert note.endswith("; no older checkpoint of the trial is whole, so it trains again from its first epoch")


def test_a_full_disk_while_the_checksums_are_written_leaves_no_torn_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A full disk under a checkpoint's save once left checksums.json cut short, and `tunekit
    # check` reported a whole checkpoint as damaged. The record is whole or absent.
    (tmp_path / CHECKPOINT_STATE).write_text("{}")
    real_write = Path.write_text

    def full_disk(self: Path, data: str, *args: Any, **kwargs: Any) -> int:
        real_write(self, data[:7])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full_disk)
    with pytest.raises(OSError, match="No space"):
        write_checksums(tmp_path)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == [CHECKPOINT_STATE]
    write_checksums(tmp_path)
    assert set(json.loads((tmp_path / "checksums.json").read_text())) == {CHECKPOINT_STATE}
