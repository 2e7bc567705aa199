"""The experiment spec: YAML in, a typed and frozen ExperimentSpec out, or one SpecError.

This is the only module that reads spec files. Everything downstream receives an
``ExperimentSpec`` and can trust it.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import yaml

from tunekit.config import _validate as v
from tunekit.config import pbt
from tunekit.config.code_space import space_in_code
from tunekit.config.combinations import check_combinations, check_keep, check_searched_training_keys
from tunekit.config.files import (
    DEFAULT_STORAGE,
    RESOLVED_HEADER,
    SPEC_LINE,
    Chain,
    absolute_storage,
    anchored_data,
    merge_sections,
    read_yaml,
    resolve_extends,
)
from tunekit.config.objectives import METRIC_MODES as METRIC_MODES  # re-exported: the spec's vocabularies
from tunekit.config.objectives import (
    Constraint,
    MetricSpec,
    Selection,
    check_scheduler,
    objectives_raw,
    parse_constraints,
    parse_objectives,
    parse_selection,
    raw_extras,
)
from tunekit.config.objectives import MetricMode as MetricMode
from tunekit.config.rungs import parse_rungs
from tunekit.config.space import REPEAT_SEED_KEY, SearchSpace, parse_space
from tunekit.config.training import PRECISIONS as PRECISIONS  # re-exported: the spec's vocabularies
from tunekit.config.training import TRAINING_KEYS, TrainingSpec, parse_training
from tunekit.config.warm_start import check_sources, parse_sources
from tunekit.contract import RecordedTrainable, Trainable, TrainableRef, locate_trainable, with_space_names
from tunekit.errors import SpecError

# The closed vocabularies of the spec: each a Literal type, its allowed values derived from it.
Algorithm = Literal["tpe", "random", "grid", "nsga2"]
SchedulerType = Literal["asha", "hyperband", "fifo", "pbt"]
# "growth": grow on demand; "cap": a hard limit of the GPU share × the device's memory.
GpuMemoryMode = Literal["growth", "cap"]

ALGORITHMS: tuple[Algorithm, ...] = get_args(Algorithm)
SCHEDULERS: tuple[SchedulerType, ...] = get_args(SchedulerType)
GPU_MEMORY_MODES: tuple[GpuMemoryMode, ...] = get_args(GpuMemoryMode)

# The one table of allowed keys: the section parsers and the --set checker both read it.
SECTION_KEYS: dict[str, tuple[str, ...]] = {
    "": (
        "extends",
        "name",
        "trainable",
        "metric",
        "budget",
        "search",
        "scheduler",
        "resources",
        "training",
        "space",
        "data",
        "storage",
        "tracking",
        "constraints",
        "select",
    ),
    "metric": ("name", "mode"),
    "budget": ("num_samples", "max_epochs", "max_concurrent", "time_budget_s"),
    "search": ("algorithm", "seed", "n_startup_trials", "tpe_history", "warm_start", "warm_start_from", "reproducible"),
    "scheduler": (
        "type",
        "grace_period",
        "reduction_factor",
        "perturbation_interval",
        "quantile_fraction",
        "resample_probability",
        "mutate",
        "brackets",
    ),
    "resources": ("cpu", "gpu", "gpu_memory"),
    "training": TRAINING_KEYS,
    "storage": ("path", "outage_s"),
    "tracking": ("enabled", "uri", "experiment", "registered_model", "required", "tensorboard"),
}
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")


@dataclass(frozen=True)
class BudgetSpec:
    num_samples: int
    max_epochs: int
    max_concurrent: int
    time_budget_s: float | None


@dataclass(frozen=True)
class SearchSettings:
    algorithm: Algorithm
    seed: int
    n_startup_trials: int
    warm_start: tuple[Mapping[str, Any], ...]
    # Earlier experiments' directories (absolute) whose finished trials seed the study.
    warm_start_from: tuple[str, ...] = ()
    # TPE models only this many most recent finished trials (None: all of them).
    tpe_history: int | None = None
    # Trial n's proposal sees only trials < n - K ended (it waits for them); None: whatever ended.
    reproducible: int | None = None


@dataclass(frozen=True)
class SchedulerSpec:
    type: SchedulerType
    grace_period: int
    reduction_factor: float
    # PBT only (tunekit.config.pbt): epochs between perturbations, the share of the
    # population copied from and into, the chance to resample instead of perturb, and
    # the parameters that mutate.
    perturbation_interval: int = 0
    quantile_fraction: float = 0.25
    resample_probability: float = 0.25
    mutate: tuple[str, ...] = ()
    brackets: int = 1  # Hyperband's (tunekit.config.rungs); 1 for ASHA


@dataclass(frozen=True)
class ResourcesSpec:
    cpu: float
    gpu: float
    gpu_memory: GpuMemoryMode


@dataclass(frozen=True)
class StorageSpec:
    path: str
    outage_s: float = 300.0  # how long transient storage errors are waited through (tunekit.storage.faults)


@dataclass(frozen=True)
class TrackingSpec:
    enabled: bool
    uri: str | None
    experiment: str | None
    registered_model: str | None
    # An unreachable server fails the search at start-up, and records MLflow did not take
    # by the end fail it too (`tunekit sync` sends them later); false: a warning, as ever.
    required: bool = False
    # TensorBoard logs of every trial in <experiment>/tensorboard/ (tunekit.tracking.tensorboard),
    # written whether MLflow tracking is on or off.
    tensorboard: bool = True


@dataclass(frozen=True)
class ExperimentSpec:
    name: str
    trainable: Trainable  # a module named in the spec, or builder functions passed from Python
    metric: MetricSpec  # the first objective: the one metric of a single-objective search
    budget: BudgetSpec
    search: SearchSettings
    scheduler: SchedulerSpec
    resources: ResourcesSpec
    training: TrainingSpec
    space: SearchSpace
    storage: StorageSpec
    tracking: TrackingSpec
    data: Mapping[str, Any]  # free-form settings for build_data (paths, sizes), handed over as ctx.data
    raw: Mapping[str, Any]  # the validated input, defaults filled in; written as spec.yaml
    # The folder of the spec file the search started from (ctx.spec_dir); "" when unknown.
    spec_dir: str = ""
    # Where the spec came from (the files of its extends chain, the --set values): spec.yaml's header.
    origin: tuple[str, ...] = ()
    # Every objective, ``metric`` first (tunekit.config.objectives); several make the search
    # multi-objective. ``constraints`` and ``select`` only with several.
    objectives: tuple[MetricSpec, ...] = ()
    constraints: tuple[Constraint, ...] = ()
    select: Selection | None = None

    @property
    def multi_objective(self) -> bool:
        return len(self.objectives) > 1

    def to_yaml(self) -> str:
        """The resolved spec as YAML, after a comment header naming what it was made from."""
        header = "".join(f"# {line}\n" for line in self.origin)
        return header + yaml.safe_dump(_plain(self.raw), sort_keys=False)

    # ``ExperimentResults.spec`` was the spec.yaml mapping before it was an ExperimentSpec;
    # notebooks that read ``results.spec["name"]`` keep working.
    def __getitem__(self, key: str) -> Any:
        return self.raw[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.raw.get(key, default)


def load_spec(
    source: str | Path | Mapping[str, Any],
    overrides: Iterable[str] = (),
    sections: Mapping[str, Any] | None = None,
    trainable: Trainable | None = None,
) -> ExperimentSpec:
    """Reads, overrides and validates a spec.

    Args:
        source: a YAML file path, or an already-parsed mapping.
        overrides: ``key.path=value`` strings (the CLI's ``--set``); values are YAML.
        sections: nested mappings deep-merged over the spec (the Python API's keywords).
        trainable: builders passed from Python; the spec's ``trainable`` is then ignored
            and may be omitted.

    Raises:
        SpecError: with the spec path, the rule and the offending value.
    """
    overrides, sections = list(overrides), sections or {}
    top = None if isinstance(source, Mapping) else Path(source).resolve()
    raw: Any = copy.deepcopy(dict(source)) if isinstance(source, Mapping) else read_yaml(Path(source), str(source))
    spec_dir = top.parent if top else None
    if not isinstance(raw, dict):
        raise SpecError("spec", "must be a mapping at the top level", raw)
    # Relative paths in a spec file (extends, the trainable, data) start from that file's
    # folder, base specs included; a spec given as a mapping starts from the working directory.
    # Data paths given here (keywords, --set) are looked for as the top spec's are.
    here = spec_dir or Path.cwd()
    chain = Chain([RESOLVED_HEADER, f"{SPEC_LINE}{top}" if top else "spec: a mapping passed from Python"])
    raw = resolve_extends(raw, here, {top} if top else set(), chain, depth=1)
    merge_sections(raw, {k: anchored_data(v, here) if k == "data" else v for k, v in sections.items()})
    for assignment in overrides:
        apply_override(raw, assignment, data_dir=here)
    if "trainable" in sections or any(a.startswith("trainable") for a in overrides):
        chain.trainable_dir = None  # a trainable given here starts from the top spec's folder
    chain.lines += [f"python keyword: {key}" for key in sections] + [f"--set {a}" for a in overrides]
    absolute_storage(raw)
    spec = parse_spec(raw, spec_dir, trainable, trainable_dir=chain.trainable_dir)
    check_sources(spec.search.warm_start_from, tuple((o.name, o.mode) for o in spec.objectives))
    return dataclasses.replace(spec, spec_dir=str(here), origin=tuple(chain.lines))


def apply_override(raw: dict[str, Any], assignment: str, *, data_dir: Path | None = None) -> None:
    """One ``key.path=value`` applied to the raw spec, checked against the schema; data paths anchored at data_dir."""
    key_path, sep, text = assignment.partition("=")
    if not sep or not key_path:
        raise SpecError("--set", "expected key.path=value", assignment)
    parts = key_path.split(".")
    if not key_path.isprintable():
        key_path = repr(key_path)  # keeps the message on one line
    try:
        value = yaml.safe_load(text) if text.strip() else None
    except (yaml.YAMLError, ValueError):  # ValueError: an integer of more than 4300 digits
        raise SpecError(f"--set {key_path}", "value is not valid YAML", text) from None
    if parts[0] == "extends":
        raise SpecError("--set extends", "cannot be overridden; write extends in the spec file", got=False)
    section = parts[0]
    if section not in SECTION_KEYS[""]:
        raise SpecError(
            f"--set {key_path}", f"unknown section; valid sections are {', '.join(SECTION_KEYS[''])}", section
        )
    if section in SECTION_KEYS and len(parts) > 1 and (len(parts) > 2 or parts[1] not in SECTION_KEYS[section]):
        raise SpecError(
            f"--set {key_path}",
            f"unknown key; valid keys under {section} are {', '.join(SECTION_KEYS[section])}",
            got=False,
        )
    if section == "data" and data_dir is not None:
        value = anchored_data(value, data_dir)
    node: Any = raw
    for depth, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise SpecError(f"--set {key_path}", f"{'.'.join(parts[: depth + 1])} is not a mapping", child)
        node = child
    node[parts[-1]] = value


def parse_spec(
    raw: Mapping[str, Any],
    spec_dir: Path | None,
    trainable: Trainable | None = None,
    *,
    locate_trainable: bool = True,
    trainable_dir: Path | None = None,
) -> ExperimentSpec:
    """Validates a raw spec mapping. Pure: touches no files beyond reading the trainable's source
    (a spec without ``space:`` and a ``build_model(hp)`` builds it in a child: tunekit.config.code_space).

    ``spec_dir`` is the spec file's folder, where relative trainable paths are looked for
    first (then the working directory); None for a spec given as a mapping.
    ``trainable_dir``, when set, replaces it for the trainable: the folder of the base spec
    that wrote it.

    With ``locate_trainable=False`` the spec is one an experiment recorded (its
    ``spec.yaml``): the trainable is kept as written (a ``RecordedTrainable``), never looked
    for, so results load after the code moved or when the builders came from Python.
    """
    v.mapping(raw, "spec", SECTION_KEYS[""])
    name = v.string(
        v.require(raw, "name", ""),
        "name",
        pattern=_NAME,
        rule="must start with a letter or digit and use only letters, digits, '_', '.' and '-'",
    )
    if trainable is None:
        if locate_trainable:
            trainable = _trainable(v.require(raw, "trainable", ""), trainable_dir or spec_dir)
        else:
            trainable = RecordedTrainable(copy.deepcopy(raw.get("trainable") or ""))
    # A record without its space (MLflow params leave it out) still describes the search.
    recorded_without_space = not locate_trainable and not raw.get("space")
    given = raw.get("space") if raw.get("space") is not None or not locate_trainable else space_in_code(trainable, raw)
    space = SearchSpace(()) if recorded_without_space else parse_space(given, "space")
    trainable = with_space_names(trainable, space.names)  # trials check their builders' reads against it
    objectives = parse_objectives(v.require(raw, "metric", ""))
    search = _search(_optional(raw, "search"), space, spec_dir)
    budget = _budget(v.require(raw, "budget", ""), search, space)
    check_scheduler(objectives, _optional(raw, "scheduler"))  # before PBT's own settings are checked
    scheduler = _scheduler(_optional(raw, "scheduler"), budget, search, space)
    constraints = parse_constraints(raw.get("constraints"), objectives)
    selection = parse_selection(raw.get("select"), objectives)
    resources = _resources(_optional(raw, "resources"))
    training = parse_training(_optional(raw, "training"))
    check_searched_training_keys(space, PRECISIONS)
    check_combinations(resources.gpu, training.jit_compile, space)
    check_keep(training.keep, scheduler.type, objectives, constraints)
    storage = _storage(_optional(raw, "storage"))
    tracking = _tracking(_optional(raw, "tracking"))
    data = _optional(raw, "data")
    if not isinstance(data, Mapping):
        raise SpecError("data", "must be a mapping of settings for build_data", data)
    data_section: dict[str, Any] = copy.deepcopy(dict(data))
    filled = {
        "name": name,
        "trainable": _resolved_trainable(trainable),
        "metric": objectives_raw(objectives),
        "budget": asdict(budget),
        "search": {
            **asdict(search),
            "warm_start": [dict(p) for p in search.warm_start],
            "warm_start_from": list(search.warm_start_from),
        },
        "scheduler": _scheduler_raw(scheduler),
        "resources": asdict(resources),
        "training": asdict(training),
        "space": copy.deepcopy(dict(given or {})),
        "data": data_section,
        "storage": asdict(storage),
        "tracking": asdict(tracking),
        **raw_extras(constraints, selection),
    }
    return ExperimentSpec(
        name,
        trainable,
        objectives[0],
        budget,
        search,
        scheduler,
        resources,
        training,
        space,
        storage,
        tracking,
        data_section,
        filled,
        objectives=objectives,
        constraints=constraints,
        select=selection,
    )


def _trainable(raw: object, spec_dir: Path | None) -> TrainableRef:
    """``trainable: NAME_OR_FILE``, or ``{module: NAME, path: FOLDER}`` for a module in a folder."""
    if isinstance(raw, Mapping):
        v.mapping(raw, "trainable", ("module", "path"))
        module = v.string(v.require(raw, "module", "trainable"), "trainable.module")
        folder = Path(v.string(v.require(raw, "path", "trainable"), "trainable.path")).expanduser()
        if not folder.is_absolute():
            folder = (spec_dir or Path.cwd()) / folder
        if not folder.is_dir():
            raise SpecError("trainable.path", "no such folder", str(folder))
        return locate_trainable(module, "trainable.module", folder)
    reference = v.string(raw, "trainable")
    if reference.startswith("python:"):
        raise SpecError(
            "trainable",
            "this experiment's builders were passed from Python; pass them again, "
            "e.g. tunekit.resume(DIR, build_data=..., build_model=...)",
            reference,
        )
    return locate_trainable(reference, "trainable", spec_dir)


def _resolved_trainable(trainable: Trainable) -> str | dict[str, str]:
    """How spec.yaml records the trainable so that ``tunekit resume`` finds it from anywhere."""
    if isinstance(trainable, RecordedTrainable):
        return copy.deepcopy(trainable.recorded) if isinstance(trainable.recorded, str) else dict(trainable.recorded)
    if not isinstance(trainable, TrainableRef):
        return trainable.describe()
    if trainable.is_file:
        return str(trainable.source)
    if trainable.installed:
        return trainable.reference
    return {"module": trainable.reference, "path": str(trainable.import_root)}


def _optional(section: Mapping[str, Any], key: str, default: Any = None) -> Any:
    """A missing or null section means its defaults; any other value must pass its checks."""
    value = section.get(key)
    return ({} if default is None else default) if value is None else value


def _search(raw: object, space: SearchSpace, spec_dir: Path | None) -> SearchSettings:
    section = v.mapping(raw, "search", SECTION_KEYS["search"])
    algorithm = v.one_of(section.get("algorithm", "tpe"), "search.algorithm", ALGORITHMS)
    seed = v.integer(section.get("seed", 0), "search.seed", minimum=0)
    startup = v.integer(section.get("n_startup_trials", 10), "search.n_startup_trials", minimum=0)
    points = v.sequence(_optional(section, "warm_start", []), "search.warm_start")
    if points and algorithm == "grid":
        raise SpecError("search.warm_start", "is not used by grid search; remove it", points)
    warm_start = []
    for index, point in enumerate(points):
        point_path = v.join("search.warm_start", index)
        if not isinstance(point, Mapping):
            raise SpecError(point_path, "must map parameter names to values", point)
        space.check_point(point, point_path)
        warm_start.append(dict(point))
    sources = parse_sources(section.get("warm_start_from"), spec_dir, algorithm)
    if algorithm == "grid":
        space.grid_size()  # every parameter expands, and the grid is of a sane size
    lag = section.get("reproducible")
    reproducible = None if lag is None else v.integer(lag, "search.reproducible", minimum=0)
    return SearchSettings(
        algorithm, seed, startup, tuple(warm_start), sources, _tpe_history(section, algorithm, startup), reproducible
    )


def _tpe_history(section: Mapping[str, Any], algorithm: str, startup: int) -> int | None:
    value = section.get("tpe_history")
    if value is None:
        return None
    if algorithm != "tpe":
        raise SpecError("search.tpe_history", f"applies to search.algorithm tpe only, not {algorithm}", value)
    # Fewer than the start-up trials and TPE would never leave its random start.
    return v.integer(value, "search.tpe_history", minimum=max(1, startup))


def _budget(raw: object, search: SearchSettings, space: SearchSpace) -> BudgetSpec:
    section = v.mapping(raw, "budget", SECTION_KEYS["budget"])
    if search.algorithm == "grid":
        # Omitted: every configuration once. A multiple: each configuration that many
        # times, every repeat with its own seed (in the config key REPEAT_SEED_KEY).
        size = space.grid_size()
        num_samples = v.integer(_optional(section, "num_samples", size), "budget.num_samples", minimum=1)
        if num_samples % size:
            raise SpecError(
                "budget.num_samples", f"must be a multiple of the grid size ({size}) for grid search", num_samples
            )
        if num_samples > size and REPEAT_SEED_KEY in space.names:
            rule = f"repeats each grid point with its own {REPEAT_SEED_KEY}, which the space searches itself"
            raise SpecError("budget.num_samples", f"{rule}; use {size}", num_samples)
    else:
        num_samples = v.integer(v.require(section, "num_samples", "budget"), "budget.num_samples", minimum=1)
    max_epochs = v.integer(v.require(section, "max_epochs", "budget"), "budget.max_epochs", minimum=1)
    max_concurrent = v.integer(section.get("max_concurrent", 1), "budget.max_concurrent", minimum=1)
    if (lag := search.reproducible) is not None and max_concurrent > lag + 1:
        rule = f"must be at most {lag + 1}: search.reproducible {lag} runs no more at once"
        raise SpecError("budget.max_concurrent", rule, max_concurrent)
    time_budget = section.get("time_budget_s")
    time_budget_s = None if time_budget is None else v.number(time_budget, "budget.time_budget_s", above=0)
    return BudgetSpec(num_samples, max_epochs, max_concurrent, time_budget_s)


def _scheduler(raw: object, budget: BudgetSpec, search: SearchSettings, space: SearchSpace) -> SchedulerSpec:
    section = v.mapping(raw, "scheduler", SECTION_KEYS["scheduler"])
    kind = v.one_of(section.get("type", "asha"), "scheduler.type", SCHEDULERS)
    if kind == "pbt":
        settings = pbt.parse_pbt_settings(section, budget.num_samples, budget.max_epochs, budget.max_concurrent)
        pbt.check_searched_by(search.algorithm)
        return SchedulerSpec("pbt", 1, 3.0, **settings, mutate=pbt.parse_mutate(section.get("mutate"), space))
    pbt.check_asha_section(section)
    grace, factor, brackets = parse_rungs(section, kind, budget.max_epochs)
    return SchedulerSpec(kind, grace, factor, brackets=brackets)


def _scheduler_raw(scheduler: SchedulerSpec) -> dict[str, Any]:
    """The scheduler section as the experiment records it: the settings of its type only."""
    filled = asdict(scheduler)
    kind = scheduler.type
    unused = (pbt.ASHA_KEYS if kind == "pbt" else pbt.PBT_KEYS) + ("brackets",) * (kind != "hyperband")
    return {key: list(value) if key == "mutate" else value for key, value in filled.items() if key not in unused}


def _resources(raw: object) -> ResourcesSpec:
    section = v.mapping(raw, "resources", SECTION_KEYS["resources"])
    cpu = v.number(section.get("cpu", 1), "resources.cpu", above=0)
    gpu = v.number(section.get("gpu", 0), "resources.gpu", at_least=0)
    if gpu > 1 and not gpu.is_integer():
        raise SpecError("resources.gpu", "must be a fraction below 1 or a whole number of GPUs", gpu)
    memory = v.one_of(section.get("gpu_memory", "growth"), "resources.gpu_memory", GPU_MEMORY_MODES)
    return ResourcesSpec(cpu, gpu, memory)


def _storage(raw: object) -> StorageSpec:
    section = v.mapping(raw, "storage", SECTION_KEYS["storage"])
    path = v.string(section.get("path", DEFAULT_STORAGE), "storage.path")
    return StorageSpec(path, v.number(section.get("outage_s", 300.0), "storage.outage_s", above=0))


def _tracking(raw: object) -> TrackingSpec:
    section = v.mapping(raw, "tracking", SECTION_KEYS["tracking"])
    optional = {key: section.get(key) for key in ("uri", "experiment", "registered_model")}
    for key, value in optional.items():
        if value is not None:
            v.string(value, f"tracking.{key}")
    enabled = v.boolean(section.get("enabled", True), "tracking.enabled")
    required = v.boolean(section.get("required", False), "tracking.required")
    if required and not enabled:
        raise SpecError("tracking.required", "must be false when tracking.enabled is false", required)
    tensorboard = v.boolean(section.get("tensorboard", True), "tracking.tensorboard")
    return TrackingSpec(
        enabled=enabled,
        uri=optional["uri"],
        experiment=optional["experiment"],
        registered_model=optional["registered_model"],
        required=required,
        tensorboard=tensorboard,
    )


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(x) for k, x in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(x) for x in value]
    return value
