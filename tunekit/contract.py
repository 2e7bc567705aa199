"""The trainable contract: what a user module must define and what tunekit hands it.

A trainable is a module (dotted name, importable from the working directory) or a
``.py`` file that defines ``build_data(config, ctx)`` and ``build_model(config, ctx)``.
Validation reads the module's source with ``ast`` instead of importing it, because
importing a trainable imports TensorFlow, which costs seconds.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from tunekit.errors import SpecError

REQUIRED_BUILDERS = ("build_data", "build_model")


@dataclass(frozen=True)
class TrialContext:
    """What tunekit decided for this trial; builders read it, never change devices themselves.

    Attributes:
        batch_size: the global batch size (per-replica batch × replicas). Batch the
            datasets with it.
        per_replica_batch_size: the batch each replica sees.
        replicas: number of model replicas (GPUs under MirroredStrategy, else 1).
        precision: the Keras dtype policy in force (``float32``, ``mixed_float16``, ...).
        seed: the trial's seed; use it for shuffling and augmentation.
        workdir: a private scratch directory for this trial.
        cpus: CPUs granted to the trial; cap parallel input work at this.
        max_epochs: the most epochs the trial may train.
        jit_compile: whether tunekit compiles the model with XLA.
        data: the spec's ``data`` section (paths, image size, ...), as written.
    """

    batch_size: int
    per_replica_batch_size: int
    replicas: int
    precision: str
    seed: int
    workdir: str
    cpus: int
    max_epochs: int
    jit_compile: bool
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TrainableRef:
    """A validated pointer to a trainable: a dotted module name or an absolute file path."""

    reference: str
    source: Path

    @property
    def is_file(self) -> bool:
        return self.reference.endswith(".py")


def locate_trainable(reference: str, path: str = "trainable", base_dir: Path | None = None) -> TrainableRef:
    """Finds the trainable's source and checks it defines the builders, without importing it."""
    if reference.endswith(".py"):
        source = Path(reference)
        if not source.is_absolute():
            source = (base_dir or Path.cwd()) / source
        if not source.is_file():
            raise SpecError(path, "no such trainable file", reference)
        ref = TrainableRef(str(source.resolve()), source.resolve())
    else:
        _ensure_cwd_importable()
        try:
            found = importlib.util.find_spec(reference)
        except (ImportError, ValueError) as error:
            raise SpecError(path, f"cannot import module ({error})", reference) from None
        if found is None or found.origin is None or not found.origin.endswith(".py"):
            raise SpecError(path, "cannot import module: not found on the Python path", reference)
        ref = TrainableRef(reference, Path(found.origin))
    missing = _missing_builders(ref.source)
    if missing:
        raise SpecError(path, f"must define {' and '.join(f'{m}(config, ctx)' for m in missing)}", reference)
    return ref


def load_trainable(ref: TrainableRef) -> ModuleType:
    """Imports the trainable (in a worker). Import errors propagate to the caller."""
    if not ref.is_file:
        _ensure_cwd_importable()
        return importlib.import_module(ref.reference)
    digest = hashlib.sha1(ref.reference.encode()).hexdigest()[:8]
    name = f"tunekit_trainable_{ref.source.stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ref.source)
    assert spec is not None and spec.loader is not None  # guaranteed: the file exists
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _missing_builders(source: Path) -> list[str]:
    try:
        tree = ast.parse(source.read_text(), filename=str(source))
    except SyntaxError:
        # Let the import in the worker report the syntax error with its line.
        return []
    defined: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            defined.add(node.name)
        elif isinstance(node, ast.Assign):
            defined |= {target.id for target in node.targets if isinstance(target, ast.Name)}
        elif isinstance(node, ast.ImportFrom):
            defined |= {alias.asname or alias.name for alias in node.names}
    return [name for name in REQUIRED_BUILDERS if name not in defined]


def _ensure_cwd_importable() -> None:
    # Console scripts put their own bin/ first on sys.path, not the working directory;
    # trainables are resolved from the directory the user runs tunekit in.
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
