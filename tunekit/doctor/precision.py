"""bfloat16 on a CPU: native, or emulated and slower than float32.

Keras's ``mixed_bfloat16`` on a CPU pays off only where the CPU computes in bfloat16 itself
(x86's ``avx512_bf16`` or ``amx_bf16``, Arm's ``bf16``). Elsewhere each op converts to float32
and back: a user's plain-Keras check ran 2.7x slower than float32, and on this project's 2-core
machine, whose CPU has ``avx512_bf16``, a small CNN's epoch (``benchmarks/eta_cnn.py``, 32
filters, one thread) took 1.9x to 2.0x float32's with oneDNN kept off its bfloat16
instructions (``ONEDNN_MAX_CPU_ISA=AVX512_CORE_VNNI``), against 0.9x to 1.2x with them (three
runs each, 2026-11-28, load 6 to 10). ``tunekit plan`` says so for a spec that trains in
bfloat16 on CPUs (``bf16_warning``), and ``tunekit doctor`` says what this CPU has
(``check_cpu_bf16``). Linux's ``/proc/cpuinfo`` is read; elsewhere nothing is said.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tunekit.config.space import Choice
from tunekit.doctor.report import OK, SKIP, Check

if TYPE_CHECKING:
    from tunekit.config.spec import ExperimentSpec

CPUINFO = Path("/proc/cpuinfo")
BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")  # x86's two, Arm's one (its "Features" line)
BF16 = "mixed_bfloat16"
# Measured as the module's docstring says; the digits MLP's epochs, mostly per-step overhead,
# moved within their noise (0.7x to 1.9x either way) and are not quoted.
SLOWDOWN = (
    "a small CNN's epoch took 1.9x to 2.0x float32's with a CPU's bfloat16 instructions turned off, "
    "0.9x to 1.2x with them"
)


def cpu_flags(cpuinfo: str) -> set[str] | None:
    """The CPU's feature flags from ``/proc/cpuinfo``'s text (its first ``flags`` or ``Features``
    line); None when the text has none (not Linux, or an unknown format)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return set(value.split())
    return None


def native_bf16(cpuinfo: str) -> bool | None:
    """Whether the CPU computes in bfloat16 itself; None when its flags are unknown."""
    flags = cpu_flags(cpuinfo)
    return None if flags is None else any(flag in flags for flag in BF16_FLAGS)


def read_cpuinfo() -> str | None:
    try:
        return CPUINFO.read_text(errors="replace")
    except OSError:
        return None


def bf16_on_cpu(spec: ExperimentSpec) -> str | None:
    """Where a spec trains in bfloat16 on CPUs: ``training.precision`` or a searched
    ``space.precision`` that can take mixed_bfloat16; None otherwise (or when trials hold GPUs)."""
    if spec.resources.gpu > 0:
        return None
    if spec.training.precision == BF16:
        return f"training.precision is {BF16}"
    for param in spec.space.params:
        if param.name == "precision" and isinstance(param.distribution, Choice) and BF16 in param.distribution.values:
            return f"space.precision can take {BF16}"
    return None


def bf16_warning(spec: ExperimentSpec, cpuinfo: str | None) -> str | None:
    """One line when the spec trains in bfloat16 on this machine's CPU and the CPU lacks native
    bfloat16; None otherwise (also when the CPU's flags cannot be read)."""
    where = bf16_on_cpu(spec)
    if where is None or cpuinfo is None or native_bf16(cpuinfo) is not False:
        return None
    return (
        f"{where}, but this machine's CPU has no native bfloat16 ({', '.join(BF16_FLAGS[:2])} absent): "
        f"each op is emulated through float32 and runs slower than float32 itself ({SLOWDOWN}); "
        "use training.precision: float32 on this CPU"
    )


def check_cpu_bf16(cpuinfo: str | None) -> Check:
    """``tunekit doctor``'s line on bfloat16: native on this CPU, or emulated (and slower)."""
    native = None if cpuinfo is None else native_bf16(cpuinfo)
    if native is None:
        return Check("CPU bfloat16", SKIP, "no /proc/cpuinfo flags to read")
    if native:
        have = sorted((cpu_flags(cpuinfo or "") or set()) & set(BF16_FLAGS))
        return Check("CPU bfloat16", OK, f"native ({', '.join(have)}): mixed_bfloat16 can pay off on CPU trials")
    return Check(
        "CPU bfloat16",
        OK,
        f"not native (no {' or '.join(BF16_FLAGS[:2])}): mixed_bfloat16 is emulated, slower than float32 "
        f"({SLOWDOWN}); keep float32 for CPU trials here",
    )
