"""The run's settings in a spec: budget, search, scheduler, resources, storage and tracking.

Each section is a frozen type and a parser that checks it against the allowed keys
(``SECTION_KEYS``, which ``--set`` reads too) and the sections parsed before it; ``parse_spec``
(``tunekit.config.spec``) calls them in order and assembles the ``ExperimentSpec``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from tunekit.config import _validate as v
from tunekit.config import pbt
from tunekit.config.files import DEFAULT_STORAGE
from tunekit.config.rungs import parse_rungs
from tunekit.config.space import REPEAT_SEED_KEY, SearchSpace
from tunekit.config.training import TRAINING_KEYS
from tunekit.config.warm_start import parse_sources
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


def optional(section: Mapping[str, Any], key: str, default: Any = None) -> Any:
    """A missing or null section means its defaults; any other value must pass its checks."""
    value = section.get(key)
    return ({} if default is None else default) if value is None else value


def parse_search(raw: object, space: SearchSpace, spec_dir: Path | None) -> SearchSettings:
    section = v.mapping(raw, "search", SECTION_KEYS["search"])
    algorithm = v.one_of(section.get("algorithm", "tpe"), "search.algorithm", ALGORITHMS)
    seed = v.integer(section.get("seed", 0), "search.seed", minimum=0)
    startup = v.integer(section.get("n_startup_trials", 10), "search.n_startup_trials", minimum=0)
    points = v.sequence(optional(section, "warm_start", []), "search.warm_start")
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


def parse_budget(raw: object, search: SearchSettings, space: SearchSpace) -> BudgetSpec:
    section = v.mapping(raw, "budget", SECTION_KEYS["budget"])
    if search.algorithm == "grid":
        # Omitted: every configuration once. A multiple: each configuration that many
        # times, every repeat with its own seed (in the config key REPEAT_SEED_KEY).
        size = space.grid_size()
        num_samples = v.integer(optional(section, "num_samples", size), "budget.num_samples", minimum=1)
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


def parse_scheduler(raw: object, budget: BudgetSpec, search: SearchSettings, space: SearchSpace) -> SchedulerSpec:
    section = v.mapping(raw, "scheduler", SECTION_KEYS["scheduler"])
    kind = v.one_of(section.get("type", "asha"), "scheduler.type", SCHEDULERS)
    if kind == "pbt":
        settings = pbt.parse_pbt_settings(section, budget.num_samples, budget.max_epochs, budget.max_concurrent)
        pbt.check_searched_by(search.algorithm)
        return SchedulerSpec("pbt", 1, 3.0, **settings, mutate=pbt.parse_mutate(section.get("mutate"), space))
    pbt.check_asha_section(section)
    grace, factor, brackets = parse_rungs(section, kind, budget.max_epochs)
    return SchedulerSpec(kind, grace, factor, brackets=brackets)


def scheduler_raw(scheduler: SchedulerSpec) -> dict[str, Any]:
    """The scheduler section as the experiment records it: the settings of its type only."""
    filled = asdict(scheduler)
    kind = scheduler.type
    unused = (pbt.ASHA_KEYS if kind == "pbt" else pbt.PBT_KEYS) + ("brackets",) * (kind != "hyperband")
    return {key: list(value) if key == "mutate" else value for key, value in filled.items() if key not in unused}


def parse_resources(raw: object) -> ResourcesSpec:
    section = v.mapping(raw, "resources", SECTION_KEYS["resources"])
    cpu = v.number(section.get("cpu", 1), "resources.cpu", above=0)
    gpu = v.number(section.get("gpu", 0), "resources.gpu", at_least=0)
    if gpu > 1 and not gpu.is_integer():
        raise SpecError("resources.gpu", "must be a fraction below 1 or a whole number of GPUs", gpu)
    memory = v.one_of(section.get("gpu_memory", "growth"), "resources.gpu_memory", GPU_MEMORY_MODES)
    return ResourcesSpec(cpu, gpu, memory)


def parse_storage(raw: object) -> StorageSpec:
    section = v.mapping(raw, "storage", SECTION_KEYS["storage"])
    path = v.string(section.get("path", DEFAULT_STORAGE), "storage.path")
    return StorageSpec(path, v.number(section.get("outage_s", 300.0), "storage.outage_s", above=0))


def parse_tracking(raw: object) -> TrackingSpec:
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
