"""Settings that each validate alone but fail together: refused before anything runs.

Each check names both settings in one line, as every spec error does (path, rule, value).
"""

from __future__ import annotations

from collections.abc import Collection

from tunekit.config.space import Choice, Fixed, IntRange, SearchSpace, kind_name
from tunekit.errors import SpecError

# Why XLA and MirroredStrategy are refused together: every trial failed at its first step with
# ``InvalidArgumentError ... Trying to access resource conv2d/kernel/replica_1 ... device:CPU:1 from
# device:CPU:0`` (TensorFlow's xla/known_issues: a compiled cluster cannot reach another replica's
# variables). tunekit runs MirroredStrategy when a trial owns 2 or more whole GPUs.
XLA_WITH_REPLICAS = (
    "must be false when resources.gpu is 2 or more: MirroredStrategy's replicas cannot run XLA-compiled "
    "steps (every trial fails with 'Trying to access resource ... replica_1'); set training.jit_compile: "
    "false, or resources.gpu: 1"
)


def check_combinations(gpu: float, jit_compile: bool, space: SearchSpace) -> None:
    """Refuses XLA (``training.jit_compile``, set or searched) with MirroredStrategy (``resources.gpu >= 2``).

    Raises:
        SpecError: naming ``training.jit_compile`` (or the searched ``space.jit_compile`` value)
            and ``resources.gpu``.
    """
    if gpu < 2:
        return
    if jit_compile:
        raise SpecError("training.jit_compile", XLA_WITH_REPLICAS, True)
    for param in space.params:
        if param.name != "jit_compile":
            continue
        dist = param.distribution
        values = dist.values if isinstance(dist, Choice) else (dist.value,) if isinstance(dist, Fixed) else ()
        for index, value in enumerate(values):
            if value is True:
                path = f"space.jit_compile.values[{index}]" if isinstance(dist, Choice) else "space.jit_compile.value"
                raise SpecError(path, XLA_WITH_REPLICAS.replace("set training.jit_compile", "search only"), True)


def check_keep(keep: str, scheduler: str, objectives: Collection[object], constraints: Collection[object]) -> None:
    """``training.keep: best`` needs one best epoch and one configuration behind it.

    Several objectives (or constraints) have no single best epoch, and PBT's trials change
    their configuration as they train: the best epoch's weights would belong to a configuration
    the trial no longer has.
    """
    if keep != "best":
        return
    if len(objectives) > 1 or constraints:
        rule = "must be last with several objectives or constraints (no single best epoch)"
        raise SpecError("training.keep", rule, keep)
    if scheduler == "pbt":
        raise SpecError(
            "training.keep", "must be last with scheduler.type: pbt (an earlier epoch ran another configuration)", keep
        )


def check_searched_training_keys(space: SearchSpace, precisions: Collection[str]) -> None:
    """Training settings named in the space must only take values the training section allows
    (``precisions``: the ``training.precision`` values there are)."""
    checks = {
        "batch_size": lambda x: isinstance(x, int) and not isinstance(x, bool) and x >= 1,
        "precision": lambda x: x in precisions,
        "jit_compile": lambda x: isinstance(x, bool),
    }
    for param in space.params:
        if param.name not in checks:
            continue
        dist = param.distribution
        if isinstance(dist, IntRange) and param.name == "batch_size" and dist.low >= 1:
            continue
        if not isinstance(dist, Choice | Fixed):
            raise SpecError(
                f"space.{param.name}.type", "must be choice or fixed for a training setting", kind_name(dist)
            )
        values = dist.values if isinstance(dist, Choice) else (dist.value,)
        for index, value in enumerate(values):
            if not checks[param.name](value):
                raise SpecError(f"space.{param.name}.values[{index}]", f"is not a valid training.{param.name}", value)
