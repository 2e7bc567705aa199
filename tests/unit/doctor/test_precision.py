"""bfloat16 on a CPU without native bfloat16: `tunekit plan` and `tunekit doctor` say so."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunekit.config.spec import load_spec
from tunekit.doctor import precision
from tunekit.doctor.precision import bf16_warning, check_cpu_bf16, native_bf16

REPO = Path(__file__).resolve().parents[3]
DIGITS = REPO / "search_spaces" / "digits_mlp.yaml"
# /proc/cpuinfo's shape, cut to the lines that matter (two processors, as Linux lists them).
WITHOUT = "processor\t: 0\nmodel name\t: Intel Xeon\nflags\t\t: fpu sse2 avx avx2 avx512f avx512_vnni\n\n" * 2
WITH = WITHOUT.replace("avx512_vnni", "avx512_vnni avx512_bf16")
AMX = WITHOUT.replace("avx512_vnni", "amx_bf16 amx_tile")
ARM = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes bf16 i8mm\n"


def test_native_bfloat16_is_read_from_the_cpus_flags() -> None:
    assert [native_bf16(text) for text in (WITHOUT, WITH, AMX, ARM)] == [False, True, True, True]
    assert native_bf16("no flags here") is None


def test_plan_warns_of_bfloat16_on_a_cpu_that_emulates_it() -> None:
    bf16 = load_spec(DIGITS, ["training.precision=mixed_bfloat16"])
    warning = bf16_warning(bf16, WITHOUT)
    assert warning is not None and warning.startswith("training.precision is mixed_bfloat16, but this machine's CPU")
    assert precision.SLOWDOWN in warning and "use training.precision: float32" in warning
    assert bf16_warning(bf16, WITH) is None and bf16_warning(bf16, AMX) is None  # native: nothing to say
    assert bf16_warning(bf16, None) is None  # no /proc/cpuinfo (not Linux): nothing said
    assert bf16_warning(load_spec(DIGITS), WITHOUT) is None  # float32
    assert bf16_warning(load_spec(DIGITS, ["training.precision=mixed_bfloat16", "resources.gpu=1"]), WITHOUT) is None
    searched = load_spec(DIGITS, ["space.precision={type: choice, values: [float32, mixed_bfloat16]}"])
    assert (bf16_warning(searched, WITHOUT) or "").startswith("space.precision can take mixed_bfloat16")


def test_tunekit_plan_prints_the_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tunekit.cli import main

    fake = tmp_path / "cpuinfo"
    fake.write_text(WITHOUT)
    monkeypatch.setattr(precision, "CPUINFO", fake)
    assert main(["plan", str(DIGITS), "--set", "training.precision=mixed_bfloat16"]) == 0
    assert capsys.readouterr().out.startswith("tunekit: note: training.precision is mixed_bfloat16, but")
    fake.write_text(WITH)
    assert main(["plan", str(DIGITS), "--set", "training.precision=mixed_bfloat16"]) == 0
    assert "note:" not in capsys.readouterr().out


def test_doctor_says_what_this_cpu_has() -> None:
    assert check_cpu_bf16(WITH).detail.startswith("native (avx512_bf16)")
    emulated = check_cpu_bf16(WITHOUT)
    assert emulated.status == "ok" and emulated.detail.startswith("not native (no avx512_bf16 or amx_bf16)")
    assert check_cpu_bf16(None).status == "skip"
