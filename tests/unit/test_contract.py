"""Finding and loading a user's trainable: beside the spec, in the working directory, on a
cluster node without the driver's files, or as functions passed from Python (no Ray, no TensorFlow)."""

from __future__ import annotations

import sys
import types
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tunekit.config.spec import load_spec
from tunekit.contract import Builders, TrainableRef, builders_from, load_builders, locate_trainable
from tunekit.errors import SpecError
from tunekit.tuner.hp import NameChecked

BUILDERS = """
from {helper} import answer

def build_data(config, ctx):
    return answer(), config

def build_model(config, ctx):
    return "model"
"""
SPEC = """
name: contract
trainable: {trainable}
metric: {{name: val_accuracy, mode: max}}
budget: {{num_samples: 1, max_epochs: 1}}
space: {{units: {{type: fixed, value: 1}}}}
"""


@pytest.fixture
def clean_imports() -> Iterator[None]:
    """Each test's project modules have unique names; drop them and their path entries afterwards."""
    modules, path = set(sys.modules), list(sys.path)
    yield
    for name in set(sys.modules) - modules:
        del sys.modules[name]
    sys.path[:] = path


def project(folder: Path, name: str = "model") -> tuple[Path, str]:
    """A trainable file that imports a helper module beside it; returns the file and the helper's name."""
    helper = f"helper_{uuid.uuid4().hex[:8]}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{helper}.py").write_text("def answer():\n    return 42\n")
    source = folder / f"{name}.py"
    source.write_text(BUILDERS.format(helper=helper))
    return source, helper


def test_a_file_beside_the_spec_is_found_from_any_directory_and_imports_its_helper(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_imports: None
) -> None:
    source, _ = project(tmp_path / "proj")
    (tmp_path / "proj" / "spec.yaml").write_text(SPEC.format(trainable="model.py"))
    monkeypatch.chdir(tmp_path)

    spec = load_spec(tmp_path / "proj" / "spec.yaml")

    assert isinstance(spec.trainable, TrainableRef)
    assert spec.trainable.source == source
    assert spec.raw["trainable"] == str(source)
    assert load_builders(spec.trainable).build_data({"a": 1}, None) == (42, {"a": 1})


def test_the_spec_folder_wins_over_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_imports: None
) -> None:
    beside, _ = project(tmp_path / "proj")
    project(tmp_path / "cwd")
    monkeypatch.chdir(tmp_path / "cwd")

    ref = locate_trainable("model.py", spec_dir=tmp_path / "proj")

    assert ref.source == beside


def test_a_dotted_module_beside_the_spec_is_recorded_with_its_folder_for_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_imports: None
) -> None:
    name = f"mod_{uuid.uuid4().hex[:8]}"
    project(tmp_path / "proj", name)
    (tmp_path / "proj" / "spec.yaml").write_text(SPEC.format(trainable=name))
    monkeypatch.chdir(tmp_path)

    spec = load_spec(tmp_path / "proj" / "spec.yaml")

    assert spec.raw["trainable"] == {"module": name, "path": str(tmp_path / "proj")}
    resolved = tmp_path / "resolved.yaml"  # what tunekit writes as the experiment's spec.yaml
    resolved.write_text(spec.to_yaml())
    monkeypatch.chdir("/")
    assert load_spec(resolved).trainable == spec.trainable


def test_a_missing_file_names_every_place_looked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SpecError) as raised:
        locate_trainable("nope.py", spec_dir=tmp_path / "specs")
    assert str(raised.value) == (
        f"trainable: no such trainable file (looked for {tmp_path}/specs/nope.py, {tmp_path}/nope.py), got 'nope.py'"
    )


def test_on_a_node_without_the_driver_files_the_shipped_folder_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_imports: None
) -> None:
    # The driver's folder does not exist here; Ray's runtime environment (py_modules)
    # unpacked a copy under the folder's own name somewhere on the Python path.
    folder = f"proj_{uuid.uuid4().hex[:8]}"
    project(tmp_path / "shipped" / folder)
    monkeypatch.syspath_prepend(str(tmp_path / "shipped"))
    gone = tmp_path / "driver-only" / folder
    ref = TrainableRef(str(gone / "model.py"), gone / "model.py", gone)

    builders = load_builders(ref)

    assert builders.build_data({}, None) == (42, {})


def test_functions_from_python_need_no_trainable_in_the_spec(clean_imports: None) -> None:
    cell = types.ModuleType("__main__")
    exec(
        "def build_data(config, ctx):\n    return 1, 2\n\ndef build_model(config, ctx):\n    return 3\n", cell.__dict__
    )

    trainable = builders_from(build_data=cell.build_data, build_model=cell.build_model)
    spec = load_spec(
        {
            "name": "notebook",
            "metric": {"name": "val_accuracy", "mode": "max"},
            "budget": {"num_samples": 1, "max_epochs": 1},
            "space": {"units": {"type": "fixed", "value": 1}},
        },
        trainable=trainable,
    )

    assert isinstance(spec.trainable, Builders)
    assert spec.raw["trainable"] == "python: __main__.build_data, __main__.build_model"
    loaded = load_builders(spec.trainable)  # the functions, their reads checked against the space
    assert isinstance(loaded.build_data, NameChecked) and isinstance(loaded.build_model, NameChecked)
    assert (loaded.build_data.function, loaded.build_model.function) == (cell.build_data, cell.build_model)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"build_data": 3, "build_model": len}, "build_data: must be a function of (config, ctx), got 'int'"),
        (
            {"build_data": lambda config: 1, "build_model": lambda c, x: 2},
            f"build_data: must be a function of (config, ctx), got '{__name__}.<lambda>'",
        ),
        ({"build_data": lambda c, x: 1}, "build_model: must be a function of (config, ctx), got 'NoneType'"),
        (
            {"trainable": types.ModuleType("m"), "build_data": lambda c, x: 1},
            "trainable: pass either a module or builder functions, not both",
        ),
    ],
)
def test_builders_from_python_are_checked(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError) as raised:
        builders_from(**kwargs)  # type: ignore[arg-type]
    assert str(raised.value) == message


def test_resuming_python_builders_without_them_says_how(tmp_path: Path) -> None:
    resolved = tmp_path / "spec.yaml"
    resolved.write_text(SPEC.format(trainable="'python: __main__.build_data, __main__.build_model'"))
    with pytest.raises(SpecError) as raised:
        load_spec(resolved)
    assert str(raised.value) == (
        "trainable: this experiment's builders were passed from Python; pass them again, "
        "e.g. tunekit.resume(DIR, build_data=..., build_model=...), "
        "got 'python: __main__.build_data, __main__.build_model'"
    )
