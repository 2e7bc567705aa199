"""The experiment spec: YAML in, a typed and frozen ExperimentSpec out, or one SpecError.

This is the only module that reads spec files. Everything downstream receives an
``ExperimentSpec`` and can trust it. The run's settings sections (budget, search, scheduler,
resources, storage, tracking) are typed and parsed in ``tunekit.config.sections``.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from tunekit.config import _validate as v
from tunekit.config.code_space import space_in_code
from tunekit.config.combinations import check_combinations, check_keep, check_searched_training_keys
from tunekit.config.files import (
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
from tunekit.config.sections import (
    SECTION_KEYS,
    BudgetSpec,
    ResourcesSpec,
    SchedulerSpec,
    SearchSettings,
    StorageSpec,
    TrackingSpec,
    optional,
    parse_budget,
    parse_resources,
    parse_scheduler,
    parse_search,
    parse_storage,
    parse_tracking,
    scheduler_raw,
)
from tunekit.config.space import SearchSpace, parse_space
from tunekit.config.training import PRECISIONS as PRECISIONS  # re-exported: the spec's vocabularies
from tunekit.config.training import TrainingSpec, parse_training
from tunekit.config.warm_start import check_sources
from tunekit.contract import RecordedTrainable, Trainable, TrainableRef, locate_trainable, with_space_names
from tunekit.errors import SpecError

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")


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
    search = parse_search(optional(raw, "search"), space, spec_dir)
    budget = parse_budget(v.require(raw, "budget", ""), search, space)
    check_scheduler(objectives, optional(raw, "scheduler"))  # before PBT's own settings are checked
    scheduler = parse_scheduler(optional(raw, "scheduler"), budget, search, space)
    constraints = parse_constraints(raw.get("constraints"), objectives)
    selection = parse_selection(raw.get("select"), objectives)
    resources = parse_resources(optional(raw, "resources"))
    training = parse_training(optional(raw, "training"))
    check_searched_training_keys(space, PRECISIONS)
    check_combinations(resources.gpu, training.jit_compile, space)
    check_keep(training.keep, scheduler.type, objectives, constraints)
    storage = parse_storage(optional(raw, "storage"))
    tracking = parse_tracking(optional(raw, "tracking"))
    data = optional(raw, "data")
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
        "scheduler": scheduler_raw(scheduler),
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


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(x) for k, x in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(x) for x in value]
    return value
