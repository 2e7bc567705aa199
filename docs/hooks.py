"""MkDocs hooks: the spec and CLI reference pages, generated from tunekit's own code.

``mkdocs build`` and ``mkdocs serve`` call ``on_pre_build``, which writes
``reference/spec-keys.md`` (from ``tunekit.config.sections.SECTION_KEYS``, the section
dataclasses' types and the defaults a minimal spec is given) and ``reference/cli.md``
(from ``tunekit.cli``'s argparse parsers). They are written only when their text changes,
so ``mkdocs serve`` does not rebuild in a loop, and they are not committed (.gitignore):
the code is their only source. ``KEY_RULES`` is the one hand-written part: what each key
means; ``tests/test_docs.py`` fails when a key of the spec has no rule or a rule no key.
"""

from __future__ import annotations

import argparse
import collections.abc
import dataclasses
import types
import typing
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parent
GENERATED = ("reference/spec-keys.md", "reference/cli.md")

KEY_RULES: dict[str, str] = {
    "extends": "a spec file (or a list, merged in order) this one is deep-merged over; relative to this file; "
    "`null` removes an inherited key",
    "name": "letters, digits, `_ . -`; names the experiment, its directory and the Optuna study",
    "trainable": "a dotted module or `path/to/file.py` (beside the spec, then the working directory), "
    "or `{module, path}`; it defines `build_data` and `build_model`",
    "metric": "the objective `{name, mode}`, or a list of up to 4 for a multi-objective search",
    "metric.name": "a metric the trial reports (a Keras log key such as `val_accuracy`, or one tunekit measures: "
    "`model_params`, `model_size_mb`, `latency_ms`, `peak_memory_mb`)",
    "metric.mode": "`max` or `min`",
    "budget.num_samples": "trials (grid: omit for the grid size, or a multiple of it)",
    "budget.max_epochs": "epochs per trial; ASHA's `max_t`",
    "budget.max_concurrent": "trials at once",
    "budget.time_budget_s": "stop the whole search after this many seconds, counted from when Ray Tune starts it "
    "(after Ray is up: the workers' start-up counts); trials running then end `stopped`, and the search is "
    "complete: the report, `tunekit status`, the JSON report's `not_started` and the MLflow parent's "
    "`trials_not_started` say how many trials it never started. A plain resume of a stopped search goes on "
    "with the seconds left; a grown one, or one given a new budget, counts it in full from the resume",
    "search.algorithm": "`tpe` (seeded, constant liar), `random`, `grid`, or `nsga2` with several objectives",
    "search.seed": "the sampler's seed",
    "search.n_startup_trials": "random trials before TPE models the space",
    "search.tpe_history": "TPE models only this many most recent finished trials, and infers its search space "
    "from them (default: all; at least `n_startup_trials`): a proposal's cost stops growing with the search",
    "search.reproducible": "`K`: trial n's proposal waits until trials 0 to n-K-1 have ended and sees only their "
    "results (later ones count as running), so the same seed and results give the same configurations in any "
    "order, at any `max_concurrent` up to K+1 (default: proposals see whatever has ended)",
    "search.warm_start": "configurations run first, in order",
    "search.warm_start_from": "earlier experiments (a directory or a list, relative to the spec file's folder) "
    "whose finished trials become the study's history; they must have the same metric and mode (with several "
    "objectives, the same objectives in any order)",
    "scheduler.type": "`asha`, `hyperband` (ASHA's brackets), `fifo` or `pbt`",
    "scheduler.grace_period": "ASHA and Hyperband: epochs every trial trains before ASHA's first rung",
    "scheduler.reduction_factor": "ASHA and Hyperband: 1 in this many trials goes on at each rung",
    "scheduler.perturbation_interval": "PBT: epochs between exploit steps (< `budget.max_epochs`)",
    "scheduler.quantile_fraction": "PBT: the bottom share copies the top share (0 < x <= 0.5)",
    "scheduler.resample_probability": "PBT: the chance a mutated value is resampled, else multiplied by 0.8 or 1.2",
    "scheduler.mutate": "PBT: the parameters that mutate (default: every unconditional uniform/loguniform one)",
    "scheduler.brackets": "Hyperband: brackets; trial n is in bracket n mod brackets, and bracket b first compares "
    "trials at ASHA's rung b (so at most one more bracket than rungs: the last stops nothing)",
    "resources.cpu": "CPUs per trial; TensorFlow's and tf.data's thread pools are capped to it",
    "resources.gpu": "0.25, 0.5 (a shared GPU) or 1, 2, 4 (whole GPUs; 2 or more: MirroredStrategy)",
    "resources.gpu_memory": "`growth`, or `cap`: a hard limit of the trial's share of GPU memory",
    "training.batch_size": "per replica; may also be searched in `space`",
    "training.precision": "`auto`, `float32`, `mixed_float16` or `mixed_bfloat16`; may also be searched",
    "training.jit_compile": "XLA; may also be searched; refused with `resources.gpu` 2 or more (MirroredStrategy)",
    "training.steps_per_execution": "batches per compiled call: `auto` (16 for a model tunekit compiles, 1 when a "
    "`fit_options` callback acts on batches, the data's length is unknown or under MirroredStrategy) or an integer "
    "for every model",
    "training.scale_lr": "multiply `learning_rate` by the number of replicas",
    "training.seed": "Keras's seed for every trial",
    "training.max_failures": "retries of a trial whose worker died, from its last checkpoint",
    "training.max_consecutive_failures": "`null` (no limit) or an integer >= 1: trials in a row that may fail "
    "before the search stops (KerasTuner's `max_consecutive_failed_trials`)",
    "training.checkpoint_every_s": "a trial checkpoints at each ASHA rung, at its end, and once its last checkpoint "
    "is this many seconds old (`0`: every epoch; PBT: every epoch); a dead worker or a resumed search retrains "
    "the epochs since",
    "training.keep": "which epoch a trial that trains to its end keeps: `last`, or `best` (the epoch with the best "
    "value of the metric, KerasTuner's): its exported model, `final_metric`, the study's value, MLflow's "
    "`tunekit.kept_epoch`; `best` needs one objective and no PBT",
    "training.executions": "fits of each configuration with seeds `seed`, `seed + 1`, ... (KerasTuner's "
    "`executions_per_trial`), trained in lockstep: every epoch reports their mean, which ASHA decides on, and "
    "`<metric>_std` their spread; the model exported is the first's",
    "training.trial_timeout_s": "how long a running trial may report nothing before it is ended as failed and its "
    "worker killed: seconds after its last epoch (an attempt's first epoch: at least 300 s from its start), or "
    "`auto`: no deadline before its first epoch, then 10 times its longest epoch, at least 300 s",
    "space": "parameter -> distribution (`loguniform`, `uniform`, `int`, `choice`, `fixed`; `step`, `log`, `when`)",
    "data": "free-form settings handed to `build_data` as `ctx.data`; relative paths follow the spec's folder",
    "storage": "where experiment directories go",
    "storage.path": "a directory (shared by every node on a cluster)",
    "storage.outage_s": "seconds a storage outage (refused connections, timeouts, 5xx, throttling) is waited "
    "through before the search stops as interrupted, its running trials held for `tunekit resume`",
    "tracking": "MLflow and TensorBoard",
    "tracking.enabled": "record the search in MLflow",
    "tracking.uri": "the tracking server (default: MLflow's own, `sqlite:///mlflow.db` here)",
    "tracking.experiment": "the MLflow experiment (default: the spec's name)",
    "tracking.registered_model": "register the selected trial's model under this name",
    "tracking.required": "an unreachable server fails the search at start-up, and records MLflow lacks at "
    "the end fail it (send them with `tunekit sync`)",
    "tracking.tensorboard": "write TensorBoard logs of every trial (scalars, HParams) to the experiment's "
    "`tensorboard/` folder, with or without MLflow",
    "constraints": 'with several objectives: `"model_params <= 50000"`; trials that break one are never on the front',
    "select": "with several objectives: `{maximize: metric}` or `{minimize: metric}`, with `subject_to: [...]` if "
    "need be, picks the model exported and registered (default: the first objective among front trials)",
    "budget": "how many trials, how long each trains, how many at once",
    "search": "the sampler: what it proposes and where it starts",
    "scheduler": "early stopping (ASHA), none (FIFO), or population-based training (PBT)",
    "resources": "what each trial gets",
    "training": "settings every trial shares",
}

# The smallest valid spec: its keys are the required ones (tests/test_docs.py checks each is).
_MINIMAL = {
    "name": "minimal",
    "trainable": "trainables.digits_mlp",
    "metric": {"name": "val_accuracy", "mode": "max"},
    "budget": {"num_samples": 4, "max_epochs": 10},
    "space": {"learning_rate": {"type": "loguniform", "low": 1e-4, "high": 1e-2}},
}
# Top-level keys parsed by functions rather than one dataclass: their YAML shapes.
TOP_TYPES = {
    "extends": "str or list",
    "name": "str",
    "trainable": "str or mapping",
    "metric": "mapping or list",
    "space": "mapping",
    "data": "mapping",
    "constraints": "list[str]",
    "select": "mapping",
}
REQUIRED = ("name", "metric", "metric.name", "budget", "budget.num_samples", "budget.max_epochs")


def spec_keys() -> list[str]:
    """Every key the spec takes, as ``section.key`` (top-level keys alone)."""
    from tunekit.config.sections import SECTION_KEYS

    keys = list(SECTION_KEYS[""])
    for section, names in SECTION_KEYS.items():
        keys += [f"{section}.{name}" for name in names if section]
    return keys


def spec_reference() -> str:
    from tunekit.config import objectives, training
    from tunekit.config import sections as types_of

    sections: dict[str, Any] = {
        "metric": objectives.MetricSpec,
        "budget": types_of.BudgetSpec,
        "search": types_of.SearchSettings,
        "scheduler": types_of.SchedulerSpec,
        "resources": types_of.ResourcesSpec,
        "training": training.TrainingSpec,
        "storage": types_of.StorageSpec,
        "tracking": types_of.TrackingSpec,
    }
    defaults = _defaults()
    lines = [
        "# Spec keys",
        "",
        "Every key of a spec, with its type, its default and its rule. Generated from "
        "`tunekit.config` by `docs/hooks.py` at each build, so it cannot drift from the code; "
        "[the annotated spec](spec.md) shows them in one file.",
        "",
        "| key | type | default | rule |",
        "|---|---|---|---|",
    ]
    for key in spec_keys():
        section, _, name = key.partition(".")
        kind = _field_type(sections.get(section), name) if name else f"`{TOP_TYPES.get(key, 'mapping')}`"
        default = "required" if key in REQUIRED else defaults.get(key, "")
        cells = [f"`{key}`", kind, default, KEY_RULES.get(key, "")]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines) + "\n"


def _field_type(cls: Any, name: str) -> str:
    if cls is None:
        return ""
    fields = {field.name: field for field in dataclasses.fields(cls)}
    if name not in fields:
        return ""
    try:
        hint = typing.get_type_hints(cls)[name]
        text = _type_text(hint)
    except Exception:
        text = str(fields[name].type)
    return f"`{text}`"


def _type_text(hint: Any) -> str:
    """A field's type as a spec's author reads it: ``int or 'auto'``, ``list of str``, ``mapping``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Literal:
        return " or ".join(repr(value) for value in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_text(arg) for arg in args if arg is not type(None))
    if origin in (tuple, list) and args:
        return f"list of {_type_text(args[0])}"
    if origin in (dict, collections.abc.Mapping) or hint in (dict, collections.abc.Mapping):
        return "mapping"
    text = getattr(hint, "__name__", None) if origin is None else str(hint)
    return (text or str(hint)).replace("typing.", "").replace("collections.abc.", "")


def _defaults() -> dict[str, str]:
    """The defaults a minimal spec is given, PBT's from a minimal PBT spec."""
    from tunekit.config.spec import parse_spec

    found: dict[str, str] = {}
    pbt = {
        **_MINIMAL,
        "scheduler": {"type": "pbt", "perturbation_interval": 2},
        "budget": {"max_epochs": 10, "max_concurrent": 4, "num_samples": 4},
    }
    for raw in (pbt, _MINIMAL):
        parsed = parse_spec(raw, None, locate_trainable=False).raw
        for section, value in parsed.items():
            if isinstance(value, dict) and section not in ("space", "data", "trainable"):
                for name, default in value.items():
                    found[f"{section}.{name}"] = f"`{_yaml(default)}`"
    for key in ("search.n_startup_trials",):  # depends on the space's size
        found[key] = "from the space's size"
    found["storage.path"] = "`tunekit_results`"
    found["trainable"] = "required, unless builders are passed from Python"
    found["space"] = "`{}`"
    found["data"] = "`{}`"
    found["scheduler.perturbation_interval"] = "required with PBT"
    found["scheduler.mutate"] = "the mutable parameters"
    found["scheduler.brackets"] = "`3` (fewer when the rungs are fewer)"
    return found


def _yaml(value: Any) -> str:
    import yaml

    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


def cli_reference() -> str:
    from tunekit.cli import _parser

    parser = _parser()
    lines = [
        "# Command line",
        "",
        "Every `tunekit` command and option, generated from `tunekit.cli`'s argparse parsers by "
        "`docs/hooks.py` at each build. Run `tunekit COMMAND --help` for the same text.",
        "",
    ]
    for name, command in subcommands(parser).items():
        lines += [f"## tunekit {name}", "", "```text", command.format_help().rstrip(), "```", ""]
    return "\n".join(lines)


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            # An alias (`tunekit list` for `tunekit ls`) is the same parser: one section, under its first name.
            found: dict[str, argparse.ArgumentParser] = {}
            for name, command in action.choices.items():
                if all(command is not other for other in found.values()):
                    found[name] = command
            return found
    return {}


def write_generated() -> list[Path]:
    """Writes the generated pages whose text changed; returns them."""
    written = []
    for page, text in zip(GENERATED, (spec_reference(), cli_reference()), strict=True):
        path = DOCS / page
        if not path.is_file() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            written.append(path)
    return written


def on_pre_build(config: Any) -> None:
    import os

    os.environ.setdefault("COLUMNS", "100")  # argparse's help wraps at the terminal's width
    write_generated()
