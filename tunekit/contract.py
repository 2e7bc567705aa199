"""The trainable contract: what a user's code must define and what tunekit hands it.

A trainable is a module (a dotted name or a ``.py`` file, found beside the spec or in
the working directory) that defines ``build_data(config, ctx)``, ``build_model(config,
ctx)`` and optionally ``fit_options(config, ctx)``; or the same functions passed from
Python. Validation reads a module's source with ``ast`` instead of importing it, because
importing a trainable imports TensorFlow, which costs seconds.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import importlib
import importlib.machinery
import importlib.util
import inspect
import sys
from collections.abc import Callable, Mapping
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
        workdir: Ray's scratch directory for this trial on the worker's local disk; it is
            not kept with the experiment (write what you keep to ``trial_dir``).
        cpus: CPUs granted to the trial; cap parallel input work at this.
        max_epochs: the most epochs the trial may train.
        jit_compile: whether tunekit compiles the model with XLA.
        data: the spec's ``data`` section (paths, image size, ...); relative paths that
            name a file or folder beside the spec that wrote them (else in the working
            directory) are absolute.
        spec_dir: the folder of the spec file the search was started from (the working
            directory for a spec given as a mapping); ``tunekit.data.resolve_path`` looks
            for relative data paths there first.
        trial_dir: the trial's folder in the experiment directory, kept with its results.
            A ``keras.callbacks.TensorBoard`` with a relative ``log_dir`` writes there.
        trial_number: the trial's number, as in trials.csv, MLflow (``trial-7``) and
            TensorBoard; None only outside a search (a test calling the builders).
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
    spec_dir: str = ""
    trial_dir: str = ""
    trial_number: int | None = None


@dataclass(frozen=True)
class TrainableRef:
    """A validated pointer to a trainable module.

    Attributes:
        reference: the dotted module name, or the absolute path of a ``.py`` file.
        source: the module's source file.
        import_root: the directory that must be on ``sys.path`` for the module, and the
            modules beside it, to import: where a dotted name was found, or the file's folder.
        installed: a dotted name found on the Python path (an installed package), not in
            the spec's folder or the working directory.
    """

    reference: str
    source: Path
    import_root: Path
    installed: bool = False
    # The space's parameter names, which the builders' reads are checked against (load_builders).
    space_names: tuple[str, ...] | None = None

    @property
    def is_file(self) -> bool:
        return self.reference.endswith(".py")

    def describe(self) -> str:
        return self.reference


@dataclass(frozen=True)
class Builders:
    """Builder functions passed from Python (a notebook) instead of a module named in the spec.

    They travel to the workers by Ray's serialisation (cloudpickle): functions defined in
    a notebook or ``__main__`` go by value, functions of an importable module by name.
    """

    build_data: Callable[..., Any]
    build_model: Callable[..., Any]
    fit_options: Callable[..., Any] | None = None
    # As TrainableRef's: the space's names, which the builders' reads are checked against.
    space_names: tuple[str, ...] | None = None
    # The space names the checked builders of a trial have read so far (``load_builders``).
    reads: set[str] | None = field(default=None, compare=False, repr=False)

    def describe(self) -> str:
        names = [_qualified(f) for f in (self.build_data, self.build_model, self.fit_options) if f is not None]
        return "python: " + ", ".join(names)


@dataclass(frozen=True)
class RecordedTrainable:
    """The trainable as an experiment's ``spec.yaml`` recorded it, not looked for.

    Loading results needs no code: the module may have moved since, or the builders were
    passed from Python (``python: ...``). Such a spec describes an experiment; it cannot
    run one (``load_builders`` refuses it).
    """

    recorded: str | Mapping[str, str]

    def describe(self) -> str:
        if isinstance(self.recorded, Mapping):
            return f"{self.recorded.get('module', '')} in {self.recorded.get('path', '')}"
        return self.recorded


Trainable = TrainableRef | Builders | RecordedTrainable


def locate_trainable(reference: str, path: str = "trainable", spec_dir: Path | None = None) -> TrainableRef:
    """Finds the trainable's source and checks it defines the builders, without importing it.

    A relative file path or a dotted name is looked for beside the spec file first, then
    in the working directory (then, for a dotted name, on the Python path).
    """
    places = _search_dirs(spec_dir)
    if reference.endswith(".py"):
        ref = _locate_file(reference, path, places)
    else:
        ref = _locate_module(reference, path, places)
    missing = _missing_builders(ref.source)
    if missing:
        raise SpecError(path, f"must define {' and '.join(f'{m}(config, ctx)' for m in missing)}", reference)
    return ref


def builders_from(
    trainable: ModuleType | None = None,
    build_data: Callable[..., Any] | None = None,
    build_model: Callable[..., Any] | None = None,
    fit_options: Callable[..., Any] | None = None,
) -> Trainable | None:
    """The trainable the Python API was handed: a module object or builder functions, else None."""
    if trainable is not None:
        if build_data or build_model or fit_options:
            raise SpecError("trainable", "pass either a module or builder functions, not both", got=False)
        source = getattr(trainable, "__file__", None)
        if source and source.endswith(".py") and trainable.__name__ != "__main__":
            return locate_trainable(str(Path(source).resolve()))
        build_data = getattr(trainable, "build_data", None)
        build_model = getattr(trainable, "build_model", None)
        fit_options = getattr(trainable, "fit_options", None)
    elif build_data is None and build_model is None and fit_options is None:
        return None
    data_builder = _builder("build_data", build_data)
    model_builder = _builder("build_model", build_model)
    options_builder = None if fit_options is None else _builder("fit_options", fit_options)
    return Builders(data_builder, model_builder, options_builder)


def load_builders(trainable: Trainable) -> Builders:
    """The builder functions (in a worker). Import errors propagate to the caller.

    With the space's names known (``with_space_names``), each builder's reads are checked:
    a key the space lacks is a fatal ``UnknownParameterError`` naming the space's keys, and a
    ``build_model(hp)`` gets KerasTuner's ``hp`` over the trial's values (``tunekit.tuner.hp``).
    """
    if isinstance(trainable, RecordedTrainable):
        raise SpecError(
            "trainable", "was read from a finished experiment's record, not located; load the spec again", got=False
        )
    if isinstance(trainable, Builders):
        builders = trainable
    else:
        module = _import(trainable)
        builders = Builders(module.build_data, module.build_model, getattr(module, "fit_options", None))
    if trainable.space_names is None:
        return builders
    from tunekit.tuner.hp import NameChecked

    names = trainable.space_names
    reads: set[str] = set()  # one set for the three: the search's end warns of names none read
    return Builders(
        NameChecked(builders.build_data, names, "build_data", reads),
        NameChecked(builders.build_model, names, "build_model", reads),
        None if builders.fit_options is None else NameChecked(builders.fit_options, names, "fit_options", reads),
        reads=reads,
    )


def whole_trial(builders: Builders) -> Callable[..., Any] | None:
    """A ``build_model`` that runs its trial whole (a KerasTuner tuner's ``run_trial``: it builds,
    fits and reports itself); None for every other builder."""
    function: Any = getattr(builders.build_model, "function", builders.build_model)  # NameChecked's
    return function.run_whole_trial if getattr(function, "runs_whole_trial", False) else None


def with_space_names(trainable: Trainable, names: tuple[str, ...]) -> Trainable:
    """The trainable, told the space's names so that its builders' reads are checked in trials."""
    if isinstance(trainable, RecordedTrainable):
        return trainable
    return dataclasses.replace(trainable, space_names=names)


def _import(ref: TrainableRef) -> ModuleType:
    if not ref.is_file:
        # On a cluster node without the driver's files, Ray's runtime environment put the
        # module's top-level package on the path already.
        if ref.import_root.is_dir() and str(ref.import_root) not in sys.path:
            sys.path.insert(0, str(ref.import_root))
        return importlib.import_module(ref.reference)
    root = _reachable_root(ref.import_root)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))  # the trainable's helper modules beside it import from here
    source = root / ref.source.name
    digest = hashlib.sha1(ref.reference.encode()).hexdigest()[:8]
    name = f"tunekit_trainable_{source.stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, source)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the trainable file {source}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _reachable_root(root: Path) -> Path:
    """The import root on this node.

    On a cluster node that does not share the driver's filesystem, the root arrived
    through Ray's runtime environment (``py_modules``) as a package named after the
    folder; its unpacked location replaces the driver's path.
    """
    if root.is_dir():
        return root
    shipped = importlib.import_module(root.name)
    return Path(next(iter(shipped.__path__)))


def _search_dirs(spec_dir: Path | None) -> list[Path]:
    places = [spec_dir.resolve()] if spec_dir is not None else []
    cwd = Path.cwd().resolve()
    return places + ([cwd] if cwd not in places else [])


def _locate_file(reference: str, path: str, places: list[Path]) -> TrainableRef:
    given = Path(reference).expanduser()
    candidates = [given] if given.is_absolute() else [place / given for place in places]
    for candidate in candidates:
        if candidate.is_file():
            source = candidate.resolve()
            return TrainableRef(str(source), source, source.parent)
    looked = ", ".join(str(c) for c in candidates)
    raise SpecError(path, f"no such trainable file (looked for {looked})", reference)


def _locate_module(reference: str, path: str, places: list[Path]) -> TrainableRef:
    top = reference.split(".")[0]
    for place in places:
        if importlib.machinery.PathFinder.find_spec(top, [str(place)]) is None:
            continue
        if str(place) not in sys.path:
            sys.path.insert(0, str(place))
        found = _find_spec(reference, path)
        if found is not None and found.origin is not None and found.origin.endswith(".py"):
            return TrainableRef(reference, Path(found.origin), place)
    found = _find_spec(reference, path)
    if found is None or found.origin is None or not found.origin.endswith(".py"):
        looked = ", ".join(str(p) for p in places)
        raise SpecError(path, f"cannot import module: not found in {looked} or on the Python path", reference)
    source = Path(found.origin)
    return TrainableRef(reference, source, source.parents[len(reference.split(".")) - 1], installed=True)


def _find_spec(reference: str, path: str) -> importlib.machinery.ModuleSpec | None:
    try:
        return importlib.util.find_spec(reference)
    except (ImportError, ValueError) as error:
        raise SpecError(path, f"cannot import module ({error})", reference) from None


def _builder(name: str, function: object) -> Callable[..., Any]:
    if callable(function) and name == "build_model" and _takes_hp(function):
        return function  # KerasTuner's build_model(hp), or build_model(hp, ctx)
    if not callable(function) or not _takes_two_arguments(function):
        raise SpecError(name, "must be a function of (config, ctx)", _shown(function))
    return function


def _takes_hp(function: Callable[..., Any]) -> bool:
    from tunekit.tuner.hp import takes_hp

    return takes_hp(function)


def _takes_two_arguments(function: Callable[..., Any]) -> bool:
    try:
        inspect.signature(function).bind(None, None)
    except TypeError:
        return False
    except ValueError:  # no signature (a builtin): let the call decide
        return True
    return True


def _qualified(function: Callable[..., Any]) -> str:
    return f"{getattr(function, '__module__', '?')}.{getattr(function, '__qualname__', repr(function))}"


def _shown(value: object) -> str:
    return _qualified(value) if callable(value) else type(value).__name__


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
