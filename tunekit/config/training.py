"""The spec's ``training`` section: settings every trial shares, and their parser.

Apart from ``tunekit.config.spec`` because the section is the spec's largest; that module
reads it through ``parse_training`` and re-exports its vocabularies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from tunekit.config import _validate as v
from tunekit.errors import SpecError

Precision = Literal["auto", "float32", "mixed_float16", "mixed_bfloat16"]
Keep = Literal["last", "best"]
PRECISIONS: tuple[Precision, ...] = get_args(Precision)
KEEP_CHOICES: tuple[Keep, ...] = get_args(Keep)

TRAINING_KEYS = (
    "batch_size",
    "precision",
    "jit_compile",
    "steps_per_execution",
    "scale_lr",
    "seed",
    "max_failures",
    "max_consecutive_failures",
    "checkpoint_every_s",
    "keep",
    "executions",
    "trial_timeout_s",
)


@dataclass(frozen=True)
class TrainingSpec:
    batch_size: int
    precision: Precision
    jit_compile: bool
    scale_lr: bool
    seed: int
    max_failures: int
    # A trial checkpoints at each ASHA rung, at its end, and once its last checkpoint is this
    # old (0: every epoch; PBT: every epoch). See tunekit.worker.checkpoints.CheckpointPolicy.
    checkpoint_every_s: float = 30.0
    # Batches per compiled call; "auto": see tunekit.worker.autocompile.steps_per_execution.
    steps_per_execution: int | Literal["auto"] = "auto"
    # Which epoch a trial that trains to its end keeps: its model, its figure (trials.csv's
    # final_metric, the study's value, MLflow's, TensorBoard's). "last": the last epoch's;
    # "best": the epoch with the best value of the metric (KerasTuner's). tunekit.worker.keep.
    keep: Keep = "last"
    executions: int = 1  # fits of each configuration, in lockstep, reported as their mean (tunekit.worker.executions)
    # How long a running trial may report nothing before it is ended and its worker killed:
    # seconds from its start or its last epoch, or "auto" (tunekit.driver.deadline.TrialDeadline).
    trial_timeout_s: float | Literal["auto"] = "auto"
    # Trials in a row (as they end) that may fail before the search stops; None: no limit
    # (KerasTuner's max_consecutive_failed_trials; tunekit.driver.guard).
    max_consecutive_failures: int | None = None


def parse_training(raw: object) -> TrainingSpec:
    """The ``training`` section, validated, its defaults filled in."""
    section = v.mapping(raw, "training", TRAINING_KEYS)
    return TrainingSpec(
        batch_size=v.integer(section.get("batch_size", 32), "training.batch_size", minimum=1),
        precision=v.one_of(section.get("precision", "auto"), "training.precision", PRECISIONS),
        jit_compile=v.boolean(section.get("jit_compile", False), "training.jit_compile"),
        scale_lr=v.boolean(section.get("scale_lr", False), "training.scale_lr"),
        seed=v.integer(section.get("seed", 0), "training.seed", minimum=0),
        max_failures=v.integer(section.get("max_failures", 2), "training.max_failures", minimum=0),
        checkpoint_every_s=v.number(section.get("checkpoint_every_s", 30.0), "training.checkpoint_every_s", at_least=0),
        steps_per_execution=v.count_or_auto(section.get("steps_per_execution", "auto"), "training.steps_per_execution"),
        keep=v.one_of(section.get("keep", "last"), "training.keep", KEEP_CHOICES),
        executions=v.integer(section.get("executions", 1), "training.executions", minimum=1),
        trial_timeout_s=_seconds_or_auto(section.get("trial_timeout_s", "auto"), "training.trial_timeout_s"),
        max_consecutive_failures=_count_or_none(
            section.get("max_consecutive_failures"), "training.max_consecutive_failures"
        ),
    )


def _count_or_none(value: object, path: str) -> int | None:
    return None if value is None else v.integer(value, path, minimum=1)


def _seconds_or_auto(value: object, path: str) -> float | Literal["auto"]:
    if value == "auto":
        return "auto"
    try:
        return v.number(value, path, above=0)
    except SpecError:
        raise SpecError(path, "must be auto or a number of seconds > 0", value) from None
