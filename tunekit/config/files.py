"""Reading spec files: their YAML, ``extends`` chains, and paths anchored to the file that wrote them.

A spec may extend bases in other folders; each file's relative paths (its trainable,
``trainable.path``, ``search.warm_start_from``, data files) start from its own folder,
so a base keeps working whichever spec extends it and wherever tunekit runs.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tunekit.errors import DamagedFileError, SpecError

DEFAULT_STORAGE = "tunekit_results"
RESOLVED_HEADER = "tunekit's resolved spec: extends merged, --set applied, relative paths absolute, defaults filled in"
SPEC_LINE = "spec: "  # the header line naming the spec file the search started from


@dataclass
class Chain:
    """What resolving ``extends`` learnt: the files read (the header's lines), and the folder
    of the file whose ``trainable`` won (a relative trainable is looked for there first)."""

    lines: list[str]
    trainable_dir: Path | None = None


def read_yaml(path: Path, label: str, shown: str = "") -> Any:
    """A spec file's YAML; ``label`` is the spec path errors name (the file, or ``extends``,
    when ``shown`` is the base's name as written)."""
    try:
        text = path.read_text()
    except OSError as error:
        if label == "extends":
            raise SpecError(label, f"no such spec file (looked for {path})", shown) from None
        raise SpecError(label, f"cannot read spec file ({error.strerror})", got=False) from None
    except ValueError:  # a NUL byte in the name
        raise SpecError(label, "no such spec file", shown) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        where = _at_line(error)
        if label == "extends":
            raise SpecError(label, f"is not valid YAML{where}", shown) from None
        raise SpecError(label, f"is not valid YAML{where}", got=False) from None
    except ValueError:  # an integer of more than 4300 digits
        raise SpecError(label, "holds a number too long to read", got=False) from None


def read_recorded_spec(path: Path) -> dict[str, Any]:
    """An experiment's spec.yaml as the mapping it records.

    Raises:
        DamagedFileError: it is not valid YAML, or not a mapping (a listing then shows the
            experiment as damaged instead of stopping).
    """
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise DamagedFileError(path, f"not valid YAML{_at_line(error)}") from None
    if not isinstance(raw, dict):
        raise DamagedFileError(path, f"not a mapping of spec keys but {type(raw).__name__}")
    return raw


def _at_line(error: yaml.YAMLError) -> str:
    """`` at line N`` where the parser stopped, or nothing when it does not say."""
    mark = getattr(error, "problem_mark", None)
    return f" at line {mark.line + 1}" if mark is not None else ""


def resolve_extends(
    raw: dict[str, Any], directory: Path, seen: set[Path | None], chain: Chain, depth: int
) -> dict[str, Any]:
    """``extends: base.yaml`` or ``extends: [a.yaml, b.yaml]`` (relative to the spec's file):
    the bases are deep-merged in order, later over earlier, and the spec over them all.

    Lets a grid spec and an ASHA spec share one space definition. Before merging, each
    file's relative paths are made absolute from its own folder.
    """
    written = raw.pop("extends", None)
    _anchor_paths(raw, directory)
    if written is None:
        _note_trainable(raw, directory, chain)
        return raw
    names = written if isinstance(written, list) else [written]
    if not names or not all(isinstance(name, str) and name for name in names):
        raise SpecError("extends", "must be a spec file or a list of spec files (merged in order)", written)
    merged: dict[str, Any] = {}
    for name in names:
        base_path = _base_path(directory, name)
        if base_path in seen:
            raise SpecError("extends", "forms a cycle", name)
        chain.lines.append(f"{'  ' * depth}extends: {base_path}")
        base = read_yaml(base_path, "extends", name)
        if not isinstance(base, dict):
            raise SpecError("extends", "must name a spec that is a mapping", name)
        base = resolve_extends(base, base_path.parent, seen | {base_path}, chain, depth + 1)
        merge_sections(merged, base, over_base=True)
    _note_trainable(raw, directory, chain)
    return merge_sections(merged, raw, over_base=True)


def _base_path(directory: Path, name: str) -> Path:
    try:
        return (directory / Path(name).expanduser()).resolve()
    except (OSError, ValueError):  # ValueError: a NUL byte in the name
        raise SpecError("extends", "no such spec file", name) from None


def _note_trainable(raw: Mapping[str, Any], directory: Path, chain: Chain) -> None:
    if isinstance(raw.get("trainable"), str):
        chain.trainable_dir = directory


def _anchor_paths(raw: dict[str, Any], directory: Path) -> None:
    """Makes one file's relative paths absolute from its folder, before it is merged with others.

    ``trainable.path`` and ``search.warm_start_from`` always; a string in ``data`` when it
    names a file or folder there (else in the working directory), so data written beside a
    spec is found from any directory and other settings (``rgb``, ``mnist``) stay as written.
    A string ``trainable`` is located later, from the folder of the file that wrote it.
    """
    trainable = raw.get("trainable")
    if isinstance(trainable, dict) and isinstance(trainable.get("path"), str) and trainable["path"]:
        trainable["path"] = str(directory / Path(trainable["path"]).expanduser())
    search = raw.get("search")
    if isinstance(search, dict) and search.get("warm_start_from") is not None:
        search["warm_start_from"] = _anchored(search["warm_start_from"], directory)
    if isinstance(raw.get("data"), dict):
        raw["data"] = anchored_data(raw["data"], directory)


def _anchored(value: Any, directory: Path) -> Any:
    if isinstance(value, list):
        return [_anchored(item, directory) for item in value]
    if isinstance(value, str) and value and "\x00" not in value and not Path(value).expanduser().is_absolute():
        return str(directory / Path(value).expanduser())
    return value


def anchored_data(value: Any, directory: Path) -> Any:
    """``data``'s strings that name a file or folder in ``directory`` (else in the working
    directory) made absolute; every other value as given."""
    if isinstance(value, dict):
        return {key: anchored_data(item, directory) for key, item in value.items()}
    if isinstance(value, list):
        return [anchored_data(item, directory) for item in value]
    if not isinstance(value, str) or not value or "://" in value or "\x00" in value or len(value) > 4096:
        return value
    given = Path(value).expanduser()
    if given.is_absolute():
        return value
    for place in (directory, Path.cwd()):
        with contextlib.suppress(OSError):
            if (place / given).exists():
                return str((place / given).resolve())
    return value


def absolute_storage(raw: dict[str, Any]) -> None:
    """``storage.path`` starts from the working directory (results land where you run), written absolute."""
    if raw.get("storage") is None:
        raw["storage"] = {}
    storage = raw["storage"]
    if not isinstance(storage, dict):
        return
    path = storage.setdefault("path", DEFAULT_STORAGE)
    if isinstance(path, str) and path and "://" not in path and "\x00" not in path:
        storage["path"] = str(Path(path).expanduser().resolve())


def merge_sections(raw: dict[str, Any], sections: Mapping[str, Any], *, over_base: bool = False) -> dict[str, Any]:
    """Deep-merges ``sections`` over a raw spec, in place, by the spec's rules; returns ``raw``.

    Mappings merge key by key, except a distribution (a mapping with a ``type``), which
    replaces the one below whole; anything else replaces. ``extends`` and ``load_spec``'s
    ``sections`` follow these rules; so should any code that builds a spec from another.
    With ``over_base`` (a spec over the base it extends), null removes the key below, so
    a spec can drop a parameter of its base's space, or go back to a setting's default.
    """
    for key, value in sections.items():
        _deep_merge(raw, key, value, over_base)
    return raw


def _deep_merge(raw: dict[str, Any], key: str, value: Any, over_base: bool = False) -> None:
    if value is None and over_base:
        raw.pop(key, None)
        return
    # A mapping with a `type` is a whole distribution: it replaces, never blends bounds.
    if isinstance(value, Mapping) and isinstance(raw.get(key), dict) and "type" not in value:
        for sub_key, sub_value in value.items():
            _deep_merge(raw[key], sub_key, sub_value, over_base)
    else:
        raw[key] = copy.deepcopy(value)
