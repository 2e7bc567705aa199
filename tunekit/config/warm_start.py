"""``search.warm_start_from``: earlier experiments whose finished trials seed a new study.

Parsing (``parse_sources``) only resolves the paths: relative ones start from the spec
file's folder, like ``extends``. Checking them (``check_sources``) reads each earlier
experiment's ``spec.yaml``; ``load_spec`` does it for a spec a user wrote, never for one
an experiment recorded (its sources may have moved since; their history is in its study).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tunekit.config import _validate as v
from tunekit.errors import SpecError
from tunekit.layout import SPEC_FILE, STUDY_FILE, study_file

KEY = "search.warm_start_from"
_VERB = {"max": "maximises", "min": "minimises"}


def parse_sources(raw: object, spec_dir: Path | None, algorithm: str) -> tuple[str, ...]:
    """The earlier experiments' directories, absolute; one path or a list of them."""
    if raw is None:
        return ()
    entries = [raw] if isinstance(raw, str) else v.sequence(raw, KEY)
    if entries and algorithm == "grid":
        raise SpecError(KEY, "is not used by grid search (it ignores history); remove it", raw)
    base = spec_dir or Path.cwd()
    return tuple(
        str((base / Path(v.string(entry, v.join(KEY, index))).expanduser()).resolve())
        for index, entry in enumerate(entries)
    )


def check_sources(sources: tuple[str, ...], objectives: tuple[tuple[str, str], ...]) -> None:
    """Each source is an experiment directory with a study, searched for the same objectives
    (``(name, mode)`` pairs; with several, in any order: history values are matched by name).

    Raises:
        SpecError: naming ``search.warm_start_from[i]``, the rule and the directory.
    """
    for index, source in enumerate(sources):
        path = v.join(KEY, index)
        directory = Path(source)
        if not directory.is_dir():
            raise SpecError(path, "no such experiment directory", source)
        if not (directory / SPEC_FILE).is_file():
            raise SpecError(path, f"is not a tunekit experiment (no {SPEC_FILE})", source)
        if not study_file(directory).is_file():
            raise SpecError(path, f"holds no Optuna study ({STUDY_FILE}); no trial of it ever started", source)
        recorded = recorded_objectives(directory)
        if not recorded:
            raise SpecError(path, f"the earlier experiment's {SPEC_FILE} names no metric", source)
        if sorted(recorded) != sorted(objectives):
            raise SpecError(
                path,
                f"metric must match: the earlier experiment {_describe(recorded)}, this one {_describe(objectives)}",
                source,
            )


def _describe(objectives: tuple[tuple[str, str], ...]) -> str:
    return " and ".join(f"{_VERB.get(mode, mode)} {name}" for name, mode in objectives)


def recorded_objectives(directory: Path) -> tuple[tuple[str, str], ...]:
    """The (name, mode) of each objective an experiment searched, in its order, from its
    ``spec.yaml`` (``metric:`` one mapping or a list); empty when unreadable."""
    try:
        raw: Any = yaml.safe_load((directory / SPEC_FILE).read_text())
    except (OSError, yaml.YAMLError, ValueError):
        raw = None
    metric = raw.get("metric") if isinstance(raw, dict) else None
    entries = [metric] if isinstance(metric, dict) else metric if isinstance(metric, list) else []
    if not all(isinstance(entry, dict) for entry in entries):
        return ()
    return tuple((str(entry.get("name")), str(entry.get("mode"))) for entry in entries)
