"""``extends`` chains across folders, paths that follow the file that wrote them, and the resolved spec.

A day-two project keeps its shared base specs (with their trainable and data) in a folder
of their own, extends them from elsewhere, and runs from a third directory.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tunekit import SpecError, load_spec
from tunekit.cli import main
from tunekit.config.growth import resumed_spec
from tunekit.contract import TrainableRef
from tunekit.layout import SPEC_FILE, TRIAL_COLUMNS, TRIALS_FILE

BUILDERS = "def build_data(config, ctx):\n    pass\n\n\ndef build_model(config, ctx):\n    pass\n"
BASE = {
    "name": "wine",
    "trainable": "wine_model.py",
    "metric": {"name": "val_accuracy", "mode": "max"},
    "budget": {"num_samples": 4, "max_epochs": 3, "time_budget_s": 600},
    "space": {
        "learning_rate": {"type": "loguniform", "low": 1e-4, "high": 1e-2},
        "dropout": {"type": "uniform", "low": 0.0, "high": 0.5},
    },
    "data": {"train": "data/train.tfrecord", "colour": "rgb"},
    "tracking": {"enabled": False},
}


def write(path: Path, content: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content if isinstance(content, str) else yaml.safe_dump(content, sort_keys=False))
    return path


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``shared/base.yaml`` beside its trainable and data; ``experiments/`` extends it; run from ``elsewhere/``."""
    write(tmp_path / "shared" / "wine_model.py", BUILDERS)
    write(tmp_path / "shared" / "data" / "train.tfrecord", "")
    write(tmp_path / "shared" / "base.yaml", BASE)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    return tmp_path


def child(project: Path, body: dict[str, object], name: str = "child.yaml") -> Path:
    return write(project / "experiments" / name, {"extends": "../shared/base.yaml", **body})


def test_a_base_specs_relative_trainable_is_found_beside_the_base(project: Path) -> None:
    spec = load_spec(child(project, {"name": "wine-child"}))

    assert isinstance(spec.trainable, TrainableRef)
    assert spec.trainable.source == project / "shared" / "wine_model.py"
    assert spec.raw["trainable"] == str(project / "shared" / "wine_model.py")


def test_a_base_specs_module_and_path_form_starts_from_the_base(project: Path) -> None:
    write(project / "shared" / "src" / "wine" / "__init__.py", "")
    write(project / "shared" / "src" / "wine" / "model.py", BUILDERS)
    write(project / "shared" / "pkg.yaml", {**BASE, "trainable": {"module": "wine.model", "path": "src"}})

    spec = load_spec(write(project / "experiments" / "pkg.yaml", {"extends": "../shared/pkg.yaml"}))

    assert isinstance(spec.trainable, TrainableRef)
    assert spec.trainable.source == project / "shared" / "src" / "wine" / "model.py"
    assert spec.raw["trainable"] == {"module": "wine.model", "path": str(project / "shared" / "src")}


def test_a_trainable_the_child_writes_starts_from_the_childs_folder(project: Path) -> None:
    write(project / "experiments" / "own_model.py", BUILDERS)

    spec = load_spec(child(project, {"trainable": "own_model.py"}))

    assert spec.raw["trainable"] == str(project / "experiments" / "own_model.py")


def test_data_paths_follow_the_file_that_wrote_them_and_other_settings_stay(project: Path) -> None:
    write(project / "experiments" / "val.tfrecord", "")
    write(project / "elsewhere" / "test.tfrecord", "")

    spec = load_spec(child(project, {"data": {"val": "val.tfrecord", "test": "test.tfrecord", "missing": "no/such"}}))

    assert dict(spec.data) == {
        "train": str(project / "shared" / "data" / "train.tfrecord"),  # beside the base
        "colour": "rgb",
        "val": str(project / "experiments" / "val.tfrecord"),  # beside the child
        "test": str(project / "elsewhere" / "test.tfrecord"),  # the working directory, as a fallback
        "missing": "no/such",  # found nowhere: left for build_data (tunekit.data.resolve_path says where it looked)
    }


def test_data_paths_given_by_set_or_keyword_are_found_as_the_top_spec_s_are(project: Path) -> None:
    # A relative --set data path stayed relative, and every trial on a cluster's other node
    # failed to open it; the same path written in the spec file became absolute.
    write(project / "experiments" / "val.tfrecord", "")
    write(project / "elsewhere" / "test.tfrecord", "")
    top = child(project, {})

    given = load_spec(top, overrides=["data.val=val.tfrecord", "data.test=test.tfrecord", "data.colour=bgr"])
    keyword = load_spec(top, sections={"data": {"val": "val.tfrecord", "test": "test.tfrecord", "colour": "bgr"}})

    for spec in (given, keyword):
        assert dict(spec.data) == {
            "train": str(project / "shared" / "data" / "train.tfrecord"),
            "colour": "bgr",  # a setting, not a path: as given
            "val": str(project / "experiments" / "val.tfrecord"),  # beside the top spec
            "test": str(project / "elsewhere" / "test.tfrecord"),  # in the working directory
        }


def test_a_missing_base_names_the_path_tried(project: Path) -> None:
    with pytest.raises(SpecError) as raised:
        load_spec(write(project / "experiments" / "bad.yaml", {"extends": "../shared/nope.yaml"}))

    assert str(raised.value) == (
        f"extends: no such spec file (looked for {project / 'shared' / 'nope.yaml'}), got '../shared/nope.yaml'"
    )


def test_a_list_of_bases_is_merged_in_order_later_over_earlier(project: Path) -> None:
    write(project / "shared" / "fast.yaml", {"budget": {"max_epochs": 1}, "training": {"batch_size": 64}})
    write(project / "shared" / "wide.yaml", {"training": {"batch_size": 128}})
    spec_path = write(
        project / "experiments" / "listed.yaml",
        {"extends": ["../shared/base.yaml", "../shared/fast.yaml", "../shared/wide.yaml"], "name": "listed"},
    )

    spec = load_spec(spec_path)

    assert (spec.name, spec.budget.max_epochs, spec.budget.num_samples, spec.training.batch_size) == (
        "listed",
        1,
        4,
        128,
    )


@pytest.mark.parametrize(
    ("extends", "message"),
    [
        ([], "extends: must be a spec file or a list of spec files (merged in order), got a list of 0"),
        ({"file": "a.yaml"}, "extends: must be a spec file or a list of spec files (merged in order), got a mapping"),
        (["a.yaml", 3], "extends: must be a spec file or a list of spec files (merged in order), got a list of 2"),
    ],
)
def test_what_extends_takes_is_said(project: Path, extends: object, message: str) -> None:
    with pytest.raises(SpecError) as raised:
        load_spec(write(project / "experiments" / "bad.yaml", {"extends": extends}))
    assert str(raised.value) == message


def test_null_removes_an_inherited_parameter_and_setting(project: Path) -> None:
    spec = load_spec(child(project, {"space": {"dropout": None}, "budget": {"time_budget_s": None}}))

    assert spec.space.names == ("learning_rate",)
    assert spec.budget.time_budget_s is None


def test_a_constant_over_an_inherited_distribution_says_how_to_write_it(project: Path) -> None:
    with pytest.raises(SpecError) as raised:
        load_spec(child(project, {"space": {"dropout": 0.1}}))
    assert str(raised.value) == (
        "space.dropout: must be a mapping such as {type: uniform, low: 0, high: 1}; "
        "for a constant write {type: fixed, value: 0.1}, got 0.1"
    )


def test_null_in_a_spec_without_a_base_says_what_null_does(project: Path) -> None:
    with pytest.raises(SpecError) as raised:
        load_spec(write(project / "shared" / "alone.yaml", {**BASE, "space": {"dropout": None}}))
    assert str(raised.value) == (
        "space.dropout: must be a mapping such as {type: uniform, low: 0, high: 1}; "
        "null removes a parameter only over a base spec (extends), got null"
    )


def test_the_resolved_spec_names_its_chain_and_set_values(project: Path) -> None:
    write(project / "shared" / "fast.yaml", {"extends": "base.yaml", "budget": {"max_epochs": 1}})
    spec_path = write(project / "experiments" / "run.yaml", {"extends": "../shared/fast.yaml"})

    spec = load_spec(spec_path, ["budget.num_samples=2"])

    assert spec.spec_dir == str(project / "experiments")
    assert spec.origin == (
        "tunekit's resolved spec: extends merged, --set applied, relative paths absolute, defaults filled in",
        f"spec: {spec_path}",
        f"  extends: {project / 'shared' / 'fast.yaml'}",
        f"    extends: {project / 'shared' / 'base.yaml'}",
        "--set budget.num_samples=2",
    )
    text = spec.to_yaml()
    assert text.startswith("".join(f"# {line}\n" for line in spec.origin) + "name: wine\n")
    recorded = yaml.safe_load(text)
    assert recorded["budget"]["num_samples"] == 2 and recorded["storage"]["path"] == str(
        project / "elsewhere" / "tunekit_results"
    )


def test_validate_print_shows_the_resolved_spec(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec_path = child(project, {"space": {"dropout": None}})

    assert main(["validate", str(spec_path), "--set", "budget.max_epochs=2", "--print"]) == 0

    out = capsys.readouterr().out
    assert out == load_spec(spec_path, ["budget.max_epochs=2"]).to_yaml()
    assert f"trainable: {project / 'shared' / 'wine_model.py'}\n" in out
    assert "  max_concurrent: 1\n" in out  # defaults filled in
    assert "# --set budget.max_epochs=2\n" in out


def test_a_resumed_spec_keeps_its_header_and_adds_its_own_set_values(project: Path) -> None:
    experiment = project / "experiment"
    write(experiment / SPEC_FILE, load_spec(child(project, {})).to_yaml())
    write(experiment / TRIALS_FILE, ",".join(TRIAL_COLUMNS) + "\n")

    spec, grown = resumed_spec(experiment, ["budget.num_samples=8"])

    assert grown and spec.spec_dir == str(project / "experiments")
    assert spec.origin[-2:] == (
        f"  extends: {project / 'shared' / 'base.yaml'}",
        "resume --set budget.num_samples=8",
    )
