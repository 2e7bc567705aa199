"""Shared fixtures: image folders made from scikit-learn's digits, and the GPU skip rule."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]

# A developer's warm runtime (tunekit up) must not serve the suite's searches; the runtime's own
# test starts one of its own and clears this for its commands.
os.environ["TUNEKIT_RUNTIME"] = "off"


def write_digits_folder(root: Path, *, size: int = 32, per_class: int | None = None, image_format: str = "png") -> Path:
    """Writes scikit-learn's digits as ``root/<digit>/<index>.<ext>`` RGB images of side ``size``.

    Args:
        root: the folder to create (one sub-folder per digit).
        size: side the 8×8 digits are upscaled to (bilinear).
        per_class: keep only the first N images of each digit (all 1,797 when None).
        image_format: ``png`` or ``jpeg``.
    """
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    seen: dict[int, int] = {}
    extension = "png" if image_format == "png" else "jpg"
    for index, (pixels, label) in enumerate(zip(digits.images, digits.target, strict=True)):
        label = int(label)
        if per_class is not None and seen.get(label, 0) >= per_class:
            continue
        seen[label] = seen.get(label, 0) + 1
        gray = Image.fromarray((pixels / 16.0 * 255).round().astype(np.uint8))
        image = gray.resize((size, size), Image.Resampling.BILINEAR).convert("RGB")
        folder = root / str(label)
        folder.mkdir(parents=True, exist_ok=True)
        image.save(folder / f"{index:04d}.{extension}")
    return root


@pytest.fixture(scope="session")
def digits_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """All 1,797 digits as 32×32 RGB PNGs in ten class sub-folders (read-only: copy to change)."""
    return write_digits_folder(tmp_path_factory.mktemp("digits") / "images")


@pytest.fixture(scope="session")
def small_digits_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """30 digits of each class as 16×16 RGB PNGs: enough to train a few epochs in seconds."""
    return write_digits_folder(tmp_path_factory.mktemp("small_digits") / "images", size=16, per_class=30)


@cache
def nvidia_gpu_visible() -> bool:
    """True when ``nvidia-smi -L`` lists a GPU (checked without importing TensorFlow)."""
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return listing.returncode == 0 and "GPU" in listing.stdout


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not any(item.get_closest_marker("gpu") for item in items) or nvidia_gpu_visible():
        return
    skip = pytest.mark.skip(reason="needs a real NVIDIA GPU")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)


def trial_infos(results: object) -> list[dict]:
    """What each trial ran on, from the ``info.*`` columns of trials.csv (lists were ';'-joined)."""
    table = results.trials  # type: ignore[attr-defined]
    columns = [c for c in table.columns if c.startswith("info.")]
    infos = []
    for _, row in table.iterrows():
        info = {c[len("info.") :]: row[c] for c in columns}
        for key in ("ray_gpu_ids", "device_names"):
            value = info.get(key)
            if isinstance(value, float):  # pandas reads a column of single GPU ids as numbers
                value = None if value != value else str(int(value))
            info[key] = str(value).split(";") if value not in (None, "") else []
        infos.append(info)
    return infos


# ------------------------------------------------------------ the command, the doctor

TUNEKIT = str(Path(sys.executable).parent / "tunekit")
STORAGE_FIX = "fix: choose a writable --storage or fix permissions"


def cli_env() -> dict[str, str]:
    """The environment a user's shell gives ``tunekit``: no Ray address from this session."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_tunekit(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``tunekit ARGS`` as a separate process from the repository root."""
    return subprocess.run(
        [TUNEKIT, *args], cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> pytest.MonkeyPatch:
    """No address, tracking URI or device mask from outside, and a Ray temp dir of its own
    (a stale /tmp/ray/ray_current_cluster left by another cluster is a real problem, but
    not this test's)."""
    for key in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path_factory.mktemp("ray_tmpdir")))
    return monkeypatch
