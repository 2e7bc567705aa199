"""Property-based spec validation: malformed specs end in one precise line, valid ones load.

Every example starts from the default spec (search_spaces/digits_mlp.yaml) and changes it
one way: a wrong value at a path, an unknown key, inverted bounds, a removed required
key, or a ``--set`` override. A malformed spec must make ``tunekit run`` print exactly
``tunekit: error: <path>: <rule>`` on stderr, where <path> is the changed path (or one
that the reference ties to it), exit with status 2, and write nothing: no experiment
directory, no MLflow store. Validation is pure, so no example imports TensorFlow or Ray.

Whether a changed value is valid is decided here by a small oracle written from the
spec reference (DESIGN.md and the default spec), not by tunekit's own code. Every
malformed example is first checked with ``load_spec`` so that a spec tunekit wrongly
accepts fails the test instead of starting a search.

Hypothesis runs derandomized (a fixed seed per test), so CI sees the same examples on
every run; ``TUNEKIT_FUZZ_EXAMPLES`` raises the count for a deeper local search.
"""

from __future__ import annotations

import copy
import io
import math
import os
import re
import tempfile
from collections.abc import Callable, Iterator
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st

from tunekit.cli import main
from tunekit.config.resources import local_fit_warning
from tunekit.config.spec import load_spec
from tunekit.errors import SpecError

REPO = Path(__file__).resolve().parents[3]
DEFAULT_SPEC = REPO / "search_spaces" / "digits_mlp.yaml"
BASE: dict[str, Any] = yaml.safe_load(DEFAULT_SPEC.read_text())
EXAMPLES = int(os.environ.get("TUNEKIT_FUZZ_EXAMPLES", "60"))

FUZZ = settings(
    derandomize=True,
    database=None,
    max_examples=EXAMPLES,
    deadline=None,
    # No shrinking: a failure prints its whole example at once instead of minutes later.
    phases=(Phase.explicit, Phase.generate),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

# --------------------------------------------------------------------------- the oracle
# What the spec reference allows at each path of the default spec, with the rest of the
# default spec unchanged (so cross-field rules use its values: grace_period 2, etc.).

_FLOAT_TEXT = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
PRECISIONS = ("auto", "float32", "mixed_float16", "mixed_bfloat16")
TOP_KEYS = (
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
)
SECTION_KEYS: dict[str, tuple[str, ...]] = {
    "metric": ("name", "mode"),
    "budget": ("num_samples", "max_epochs", "max_concurrent", "time_budget_s"),
    "search": ("algorithm", "seed", "n_startup_trials", "warm_start"),
    "scheduler": ("type", "grace_period", "reduction_factor"),
    "resources": ("cpu", "gpu", "gpu_memory"),
    "training": ("batch_size", "precision", "jit_compile", "scale_lr", "seed", "max_failures"),
    "storage": ("path",),
    "tracking": ("enabled", "uri", "experiment", "registered_model"),
    # the parameters of the default space, by their type's keys
    "space.learning_rate": ("type", "low", "high", "when"),
    "space.units": ("type", "values", "when"),
    "space.dropout": ("type", "low", "high", "step", "when"),
    "space.batch_size": ("type", "values", "when"),
}


def is_int(value: object, minimum: int | None = None) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and (minimum is None or value >= minimum)


def as_number(value: object) -> float | None:
    """The number a spec value stands for (YAML 1.1 exponent strings count), else None."""
    if isinstance(value, str) and _FLOAT_TEXT.fullmatch(value.strip()):
        value = float(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def number_where(test: Callable[[float], bool]) -> Callable[[object], bool]:
    def check(value: object) -> bool:
        number = as_number(value)
        return number is not None and test(number)

    return check


def same(a: object, b: object) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def unique_scalars(values: object, element: Callable[[object], bool]) -> bool:
    if not isinstance(values, list) or not values:
        return False
    if not all(element(v) for v in values):
        return False
    return not any(same(v, w) for i, v in enumerate(values) for w in values[:i])


def is_scalar(value: object) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
LEAVES: dict[str, Callable[[object], bool]] = {
    "name": lambda x: isinstance(x, str) and NAME.fullmatch(x) is not None,
    "trainable": lambda x: x == "trainables.digits_mlp",
    "metric.name": lambda x: isinstance(x, str) and x != "",
    "metric.mode": lambda x: x in ("max", "min"),
    "budget.num_samples": lambda x: is_int(x, 1),
    "budget.max_epochs": lambda x: is_int(x, 2),  # >= scheduler.grace_period (2)
    "budget.max_concurrent": lambda x: is_int(x, 1),
    "search.algorithm": lambda x: x in ("tpe", "random"),  # grid needs an all-choice space
    "search.seed": lambda x: is_int(x, 0),
    "search.n_startup_trials": lambda x: is_int(x, 0),
    "scheduler.type": lambda x: x in ("asha", "fifo"),
    "scheduler.grace_period": lambda x: is_int(x, 1) and x <= 20,  # type: ignore[operator]
    "scheduler.reduction_factor": number_where(lambda n: n > 1),
    "resources.cpu": number_where(lambda n: n > 0),
    "resources.gpu": number_where(lambda n: n >= 0 and (n <= 1 or n.is_integer())),
    "training.precision": lambda x: x in PRECISIONS,
    "training.seed": lambda x: is_int(x, 0),
    "space.learning_rate.type": lambda x: x in ("loguniform", "uniform"),
    "space.learning_rate.low": number_where(lambda n: 0 < n < 1e-2),
    "space.learning_rate.high": number_where(lambda n: n > 1e-4),
    "space.units.type": lambda x: x == "choice",
    "space.units.values": lambda x: unique_scalars(x, is_scalar),
    "space.dropout.type": lambda x: x == "uniform",
    "space.dropout.low": number_where(lambda n: n < 0.5),
    "space.dropout.high": number_where(lambda n: n > 0),
    "space.batch_size.type": lambda x: x == "choice",
    "space.batch_size.values": lambda x: unique_scalars(x, lambda v: is_int(v, 1)),
}
# Sections: what a non-mapping value there may be (optional sections may be null).
OPTIONAL_SECTIONS = ("search", "scheduler", "resources", "training", "storage", "tracking", "data")
REQUIRED_SECTIONS = ("metric", "budget", "space")
PARAMS = ("space.learning_rate", "space.units", "space.dropout", "space.batch_size")
REQUIRED_KEYS = (
    "name",
    "trainable",
    "metric",
    "budget",
    "space",
    "metric.name",
    "metric.mode",
    "budget.num_samples",
    "budget.max_epochs",
    "space.learning_rate.type",
    "space.learning_rate.low",
    "space.learning_rate.high",
    "space.units.type",
    "space.units.values",
    "space.dropout.type",
    "space.dropout.low",
    "space.dropout.high",
    "space.batch_size.type",
    "space.batch_size.values",
)
# A value at the key may break a rule the reference states at another path.
RELATED: dict[str, tuple[str, ...]] = {
    "budget.max_epochs": ("scheduler.grace_period",),
    "search.algorithm": ("space", "budget.num_samples"),
    "space.learning_rate.type": ("space.learning_rate",),
    "space.units.type": ("space.units",),
    "space.dropout.type": ("space.dropout",),
    "space.batch_size.type": ("space.batch_size",),
    "space.learning_rate.low": ("space.learning_rate",),
    "space.dropout.low": ("space.dropout",),
    "space.learning_rate.high": ("space.learning_rate",),
    "space.dropout.high": ("space.dropout",),
}

# --------------------------------------------------------------------------- strategies

NASTY_TEXT = [
    "",
    " ",
    "1e-3",
    "1e999",
    "inf",
    ".nan",
    "-1",
    "0x10",
    "max",
    "grid",
    "tpe",
    "a\nb",
    "a: b",
    "[1",
    "{",
    "~",
    "null",
    "yes",
    "\x00",
    "é",
    "1" + "0" * 400,
]
texts = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=12)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    texts,
    st.sampled_from(NASTY_TEXT),
    st.sampled_from([0, -1, 1, 2, 10**400, -(10**400), 0.0, -0.0, 1e308, 5e-324, 1.5]),
)
junk = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(texts, children, max_size=3),
    max_leaves=6,
)
non_mapping_junk = st.one_of(scalars, st.lists(junk, max_size=3))
identifier_keys = st.from_regex(r"[a-z_][a-z0-9_]{0,10}", fullmatch=True)
PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # other keys may be quoted in messages
# Keys a user can type by accident; ':', '.' and '[' are left out so paths stay parseable.
odd_keys = st.one_of(
    st.sampled_from(["a b", "é", "-", "1x", "a\nb", "tab\there", ""]),
    st.text(alphabet=st.characters(exclude_categories=["Cs"], exclude_characters=":.[]"), max_size=6),
    st.integers(-3, 3),
)


@dataclass
class Case:
    """One malformed spec: the mapping, --set overrides, and the path the error must name."""

    spec: dict[str, Any]
    overrides: list[str] = field(default_factory=list)
    path: str = ""
    exact: bool = False  # the error's path must equal ``path``, not merely relate to it
    what: str = ""
    text: str | None = None  # the spec file's text, when it cannot come from dumping ``spec``


def roundtrip(spec: dict[str, Any]) -> dict[str, Any]:
    """The spec as tunekit will read it back from the YAML file the test writes."""
    loaded: dict[str, Any] = yaml.load(dump(spec), Loader=_LOADER)
    return loaded


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def dump(spec: dict[str, Any]) -> str:
    return yaml.dump(spec, Dumper=_DUMPER, sort_keys=False)


def parts(path: str) -> list[str]:
    return path.split(".") if path else []


def get(spec: Any, path: str) -> Any:
    node = spec
    for part in parts(path):
        node = node[part]
    return node


def with_value(path: str, value: Any, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    changed = copy.deepcopy(BASE if spec is None else spec)
    node = changed
    *parents, last = parts(path)
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    return changed


def without(path: str) -> dict[str, Any]:
    changed = copy.deepcopy(BASE)
    *parents, last = parts(path)
    del get(changed, ".".join(parents))[last]
    return changed


def leaf_is_valid(path: str, value: object) -> bool:
    return LEAVES[path](value)


@st.composite
def wrong_leaf_values(draw: st.DrawFn) -> Case:
    path = draw(st.sampled_from(sorted(LEAVES)))
    spec = roundtrip(with_value(path, draw(junk)))
    assume(not leaf_is_valid(path, get(spec, path)))
    return Case(spec, path=path, what="wrong value")


@st.composite
def wrong_sections(draw: st.DrawFn) -> Case:
    path = draw(st.sampled_from(OPTIONAL_SECTIONS + REQUIRED_SECTIONS + PARAMS))
    spec = roundtrip(with_value(path, draw(non_mapping_junk)))
    value = get(spec, path)
    assume(not (path in OPTIONAL_SECTIONS and value is None))
    # A list is metric's several-objectives form: its items' errors name metric[i].
    assume(not (path == "metric" and isinstance(value, list)))
    return Case(spec, path=path, exact=True, what="section of the wrong type")


@st.composite
def unknown_keys(draw: st.DrawFn) -> Case:
    parent = draw(st.sampled_from(["", "space", *SECTION_KEYS]))
    key = draw(st.one_of(identifier_keys, odd_keys))
    allowed = TOP_KEYS if parent == "" else SECTION_KEYS.get(parent, ())
    assume(key not in allowed and not (parent == "space" and key in BASE["space"]))
    # A new parameter in the space is malformed through its body, not its name.
    value = draw(non_mapping_junk if parent == "space" else junk)
    changed = copy.deepcopy(BASE)
    node: dict[Any, Any] = changed  # YAML keys may be any scalar: odd_keys draws integers too
    for part in parts(parent):
        node = node.setdefault(part, {})
    node[key] = value
    spec = roundtrip(changed)
    if isinstance(key, str) and PLAIN_KEY.fullmatch(key):
        return Case(spec, path=f"{parent}.{key}" if parent else key, exact=True, what="unknown key")
    return Case(spec, path=parent, what="odd key")


finite = st.floats(allow_nan=False, allow_infinity=False)


@st.composite
def inverted_bounds(draw: st.DrawFn) -> Case:
    kind = draw(st.sampled_from(["loguniform", "uniform", "int", "grace"]))
    if kind == "grace":
        epochs = draw(st.integers(2, 50))
        spec = with_value("budget.max_epochs", epochs)
        spec = with_value("scheduler.grace_period", draw(st.integers(epochs + 1, epochs + 100)), spec)
        return Case(spec, path="scheduler.grace_period", exact=True, what="grace > max_epochs")
    if kind == "loguniform":
        low = draw(st.floats(min_value=5e-324, max_value=1e300))
        high = draw(st.floats(max_value=low, allow_nan=False, allow_infinity=False))
        body: dict[str, Any] = {"type": "loguniform", "low": low, "high": high}
        return Case(
            with_value("space.learning_rate", body),
            path="space.learning_rate.high",
            exact=True,
            what="inverted loguniform",
        )
    if kind == "uniform":
        low = draw(finite)
        high = draw(st.floats(max_value=low, allow_nan=False, allow_infinity=False))
        body = {"type": "uniform", "low": low, "high": high}
        return Case(with_value("space.dropout", body), path="space.dropout.high", exact=True, what="inverted uniform")
    low_int = draw(st.integers(-(10**6), 10**6))
    body = {"type": "int", "low": low_int, "high": draw(st.integers(low_int - 10**6, low_int - 1))}
    return Case(with_value("space.units", body), path="space.units.high", exact=True, what="inverted int")


@st.composite
def removed_keys(draw: st.DrawFn) -> Case:
    path = draw(st.sampled_from(REQUIRED_KEYS))
    return Case(without(path), path=path, exact=True, what="required key removed")


def yaml_value(text: str) -> tuple[bool, Any]:
    """How ``--set`` reads a value: YAML, empty meaning null. (parsed, value)."""
    if not text.strip():
        return True, None
    try:
        return True, yaml.safe_load(text)
    except yaml.YAMLError:
        return False, None
    except ValueError:  # e.g. an integer of more digits than Python converts
        return False, None


@st.composite
def bad_set_values(draw: st.DrawFn) -> Case:
    path = draw(st.sampled_from(sorted(LEAVES) + list(OPTIONAL_SECTIONS + REQUIRED_SECTIONS)))
    if draw(st.booleans()):
        text = draw(texts | st.sampled_from(NASTY_TEXT))
    else:
        text = yaml.safe_dump(draw(junk), default_flow_style=True, width=10**6).strip()
        text = text.removesuffix("\n...").removesuffix("...").strip()
    parsed, value = yaml_value(text)
    if not parsed:
        return Case(
            copy.deepcopy(BASE),
            [f"{path}={text}"],
            path=f"--set {path}",
            exact=True,
            what="--set value that is not YAML",
        )
    if path in LEAVES:
        assume(not leaf_is_valid(path, value))
    else:
        assume(not (path in OPTIONAL_SECTIONS and value is None))
        assume(not isinstance(value, dict))  # a mapping may well be a valid section
    return Case(copy.deepcopy(BASE), [f"{path}={text}"], path=path, what="bad --set value")


@st.composite
def bad_set_paths(draw: st.DrawFn) -> Case:
    kind = draw(st.sampled_from(["section", "key", "deep", "no_equals", "empty_key"]))
    sections = sorted(SECTION_KEYS.keys() - {k for k in SECTION_KEYS if "." in k})
    if kind == "section":
        key = draw(identifier_keys.filter(lambda k: k not in TOP_KEYS))
        key_path = draw(st.sampled_from([key, f"{key}.x"]))
    elif kind == "key":
        section = draw(st.sampled_from(sections))
        key = draw(identifier_keys.filter(lambda k: k not in SECTION_KEYS[section]))
        key_path = f"{section}.{key}"
    elif kind == "deep":
        section = draw(st.sampled_from(sections))
        key_path = f"{section}.{draw(st.sampled_from(SECTION_KEYS[section]))}.{draw(identifier_keys)}"
    elif kind == "no_equals":
        return Case(copy.deepcopy(BASE), [draw(identifier_keys)], path="--set", exact=True, what="--set without =")
    else:
        return Case(copy.deepcopy(BASE), [f"={draw(texts)}"], path="--set", exact=True, what="--set without a key")
    value = draw(st.sampled_from(["1", "x", "[1, 2]", "{a: 1}", ""]))
    return Case(
        copy.deepcopy(BASE), [f"{key_path}={value}"], path=f"--set {key_path}", exact=True, what=f"--set {kind}"
    )


@st.composite
def bad_extends(draw: st.DrawFn) -> Case:
    value = draw(st.one_of(non_mapping_junk, st.sampled_from(["missing.yaml", "/", "a\x00b", "."])))
    assume(value is not None)  # extends: null means no base
    return Case(roundtrip({"extends": value, **copy.deepcopy(BASE)}), path="extends", exact=True, what="bad extends")


# --------------------------------------------------------------------------- the check

LINE = re.compile(r"tunekit: error: (?P<path>.+?): (?P<rule>\S.*)")


def normalize(path: str) -> str:
    for prefix in ("--set ", "spec."):
        if path.startswith(prefix):
            return path[len(prefix) :]
    return "" if path == "spec" else path


def extends(longer: str, shorter: str) -> bool:
    if not shorter:
        return True
    return longer == shorter or longer.startswith((shorter + ".", shorter + "["))


def related(error_path: str, case: Case) -> bool:
    if case.exact:
        return error_path == case.path or normalize(error_path) == normalize(case.path)
    if case.path.startswith("--set"):
        return error_path.startswith(case.path)
    found, wanted = normalize(error_path), normalize(case.path)
    if found == "":
        return "." not in wanted  # "spec: keys must be strings" for a top-level change
    if extends(found, wanted) or extends(wanted, found):
        return True
    return any(extends(found, other) for other in RELATED.get(wanted, ()))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """An empty working directory for every example: nothing may be written into it."""
    directory = tmp_path_factory.mktemp("fuzz_cwd")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(directory)
        patch.syspath_prepend(str(REPO))  # trainables.digits_mlp stays importable
        yield directory


def repo_state() -> tuple[bool, bool]:
    return (REPO / "mlflow.db").exists(), (REPO / "mlruns").exists()


def check_rejected(case: Case, workdir: Path) -> None:
    before = repo_state()
    with tempfile.TemporaryDirectory() as scratch:
        spec_file = Path(scratch) / "spec.yaml"
        spec_file.write_text(dump(case.spec) if case.text is None else case.text, encoding="utf-8")
        storage = Path(scratch) / "results"
        # Never start a search: a spec tunekit accepts fails here, before `run` is called.
        try:
            load_spec(spec_file, case.overrides)
        except SpecError:
            pass
        else:
            pytest.fail(
                f"{case.what}: tunekit accepted a malformed spec ({case.path}); "
                f"overrides={case.overrides!r}\n{yaml.safe_dump(case.spec, sort_keys=False)}"
            )
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            status = main(["run", str(spec_file), *(f"--set={o}" for o in case.overrides), "--storage", str(storage)])
        text = err.getvalue()
        assert status == 2, text
        assert out.getvalue() == ""
        assert "Traceback" not in text
        assert text.endswith("\n") and text.count("\n") == 1, f"not one line: {text!r}"
        match = LINE.fullmatch(text[:-1])
        assert match, f"not 'tunekit: error: <path>: <rule>': {text!r}"
        if case.path == "<file>":
            case = Case(case.spec, case.overrides, str(spec_file), exact=True, what=case.what)
        assert related(match["path"], case), (
            f"{case.what}: the error names {match['path']!r}, the change was at {case.path!r}: {text!r}"
        )
        assert not storage.exists(), "an experiment directory was created"
    assert os.listdir(workdir) == [], "something was written to the working directory"
    assert repo_state() == before, "an MLflow store appeared in the repository"


@FUZZ
@given(case=wrong_leaf_values())
def test_wrong_value_at_any_leaf_is_one_line_with_its_path(case: Case, workdir: Path) -> None:
    check_rejected(case, workdir)


@FUZZ
@given(case=wrong_sections())
def test_section_or_parameter_of_the_wrong_type(case: Case, workdir: Path) -> None:
    check_rejected(case, workdir)


@FUZZ
@given(case=unknown_keys())
def test_unknown_keys_are_named(case: Case, workdir: Path) -> None:
    check_rejected(case, workdir)


@FUZZ
@given(case=inverted_bounds())
def test_inverted_bounds_name_the_upper_bound(case: Case, workdir: Path) -> None:
    check_rejected(case, workdir)


@FUZZ
@given(case=removed_keys())
def test_removed_required_key_is_named(case: Case, workdir: Path) -> None:
    check_rejected(case, workdir)


@FUZZ
@given(case=st.one_of(bad_set_values(), bad_set_paths()))
def test_bad_set_overrides(case: Case, workdir: Path) -> None:
    check_rejected(case, workdir)


@FUZZ
@given(case=bad_extends())
def test_bad_extends(case: Case, workdir: Path) -> None:
    check_rejected(case, workdir)


# --------------------------------------------------------------------------- valid specs

positive = st.floats(min_value=5e-324, max_value=1e300, allow_nan=False, allow_infinity=False)


@st.composite
def valid_specs(draw: st.DrawFn) -> tuple[dict[str, Any], list[str]]:
    spec = copy.deepcopy(BASE)
    low = draw(positive)
    high = draw(st.floats(min_value=low, max_value=1e301, exclude_min=True, allow_infinity=False))
    spec["space"]["learning_rate"] = {"type": "loguniform", "low": low, "high": high}
    low_u = draw(finite)
    high_u = draw(st.floats(min_value=low_u, allow_nan=False, allow_infinity=False))
    assume(high_u > low_u)
    spec["space"]["dropout"] = {"type": "uniform", "low": low_u, "high": high_u}
    spec["space"]["units"]["values"] = draw(st.lists(st.integers(), min_size=1, max_size=6, unique=True))
    spec["space"]["batch_size"]["values"] = draw(st.lists(st.integers(1, 4096), min_size=1, max_size=6, unique=True))
    if draw(st.booleans()):
        int_low = draw(st.integers(-1000, 1000))
        spec["space"]["layers"] = {"type": "int", "low": int_low, "high": draw(st.integers(int_low, 2000))}
    epochs = draw(st.integers(1, 500))
    spec["budget"] = {
        "num_samples": draw(st.integers(1, 10**6)),
        "max_epochs": epochs,
        "max_concurrent": draw(st.integers(1, 64)),
    }
    spec["scheduler"] = {
        "type": draw(st.sampled_from(["asha", "fifo"])),
        "grace_period": draw(st.integers(1, epochs)),
        "reduction_factor": draw(st.floats(min_value=1, max_value=1e6, exclude_min=True)),
    }
    gpu = draw(st.one_of(st.floats(min_value=0, max_value=1), st.integers(0, 8)))
    spec["resources"] = {"cpu": draw(st.floats(min_value=0.01, max_value=512)), "gpu": gpu}
    spec["search"] = {
        "algorithm": draw(st.sampled_from(["tpe", "random"])),
        "seed": draw(st.integers(0, 2**63)),
        "n_startup_trials": draw(st.integers(0, 100)),
    }
    spec["training"] = {"precision": draw(st.sampled_from(PRECISIONS)), "seed": draw(st.integers(0, 2**32))}
    spec["metric"]["mode"] = draw(st.sampled_from(["max", "min"]))
    overrides = []
    if draw(st.booleans()):
        overrides.append(f"budget.num_samples={draw(st.integers(1, 1000))}")
    if draw(st.booleans()):
        overrides.append(
            f"space.units.values=[{', '.join(map(str, draw(st.lists(st.integers(1, 512), min_size=1, max_size=4, unique=True))))}]"
        )
    return spec, overrides


@FUZZ
@given(drawn=valid_specs())
def test_valid_random_specs_load_and_validate(drawn: tuple[dict[str, Any], list[str]], workdir: Path) -> None:
    spec, overrides = drawn
    with tempfile.TemporaryDirectory() as scratch:
        spec_file = Path(scratch) / "spec.yaml"
        spec_file.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
        loaded = load_spec(spec_file, overrides)
        assert loaded.space.names[:4] == ("learning_rate", "units", "dropout", "batch_size")
        assert loaded.budget.max_epochs == spec["budget"]["max_epochs"]
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            status = main(["validate", str(spec_file), *(f"--set={o}" for o in overrides)])
        assert (status, out.getvalue()) == (0, "ok\n")
        # The only thing validate may add: a warning that this machine cannot run a trial.
        expected = local_fit_warning(loaded.resources)
        assert err.getvalue() == (f"tunekit: warning: {expected}\n" if expected else "")
    assert os.listdir(workdir) == []


# --------------------------------------------------------------------------- regressions
# Specs the fuzzing above found mishandled (tunekit/_validate.py, space.py, spec.py). Each
# must end like any malformed spec: one line naming the path, exit status 2, nothing written.

DEFAULT_TEXT = DEFAULT_SPEC.read_text()
MOMENTUM = {"type": "uniform", "low": 0.1, "high": 0.9}
# Falsy values of the wrong type, which `raw.get(section) or {}` would take for an empty section.
FALSY_SECTIONS: tuple[object, ...] = (0, "", [], False)
FALSY_WARM_STARTS: tuple[object, ...] = (0, "", {}, False)

REGRESSIONS = [
    # _validate.number: math.isfinite() overflows on an int beyond float's range.
    *(
        Case(with_value(path, 10**400), path=path, exact=True, what="huge int")
        for path in (
            "resources.cpu",
            "budget.time_budget_s",
            "scheduler.reduction_factor",
            "space.learning_rate.low",
            "space.dropout.high",
        )
    ),
    # space.FloatRange.contains: float(value) overflows on a huge int.
    Case(
        with_value("search.warm_start", [{"learning_rate": 10**400}]),
        path="search.warm_start[0].learning_rate",
        exact=True,
        what="huge warm-start value",
    ),
    Case(
        with_value("space.momentum", {**MOMENTUM, "when": {"dropout": 10**400}}),
        path="space.momentum.when.dropout",
        exact=True,
        what="huge when value",
    ),
    # space._parse_float_range: (high - low) / step is inf, and round(inf) raises.
    Case(
        with_value("space.dropout", {"type": "uniform", "low": -1e308, "high": 1e308, "step": 1.0}),
        path="space.dropout",
        what="step over an overflowing range",
    ),
    Case(
        with_value("space.dropout", {"type": "uniform", "low": 0.0, "high": 0.5, "step": 1e-320}),
        path="space.dropout.step",
        exact=True,
        what="subnormal step",
    ),
    # spec.parse_spec: `raw.get(section) or {}` takes any falsy value for an empty section.
    *(
        Case(with_value(section, falsy), path=section, exact=True, what=f"falsy {falsy!r}")
        for section in OPTIONAL_SECTIONS
        for falsy in FALSY_SECTIONS
    ),
    *(
        Case(with_value("search.warm_start", falsy), path="search.warm_start", exact=True, what=f"falsy {falsy!r}")
        for falsy in FALSY_WARM_STARTS
    ),
    # spec._resolve_extends: Path.resolve() raises ValueError on a NUL byte.
    Case({"extends": "base\x00.yaml", **BASE}, path="extends", exact=True, what="NUL in extends"),
    # spec.load_spec / apply_override: int() refuses more than 4300 digits with ValueError.
    Case(
        BASE,
        text=DEFAULT_TEXT.replace("num_samples: 24", "num_samples: " + "9" * 5000),
        path="<file>",
        what="5000-digit integer in the file",
    ),
    Case(
        BASE,
        ["budget.num_samples=" + "9" * 5000],
        path="--set budget.num_samples",
        exact=True,
        what="5000-digit integer in --set",
    ),
    # _validate.join / apply_override: a key with a newline splits the message over two lines.
    Case(with_value("budget.a\nb", 1), path="budget", what="newline in a key"),
    Case(with_value("space.a\nb", {"type": "fixed", "value": 1}), path="space", what="newline in a parameter name"),
    Case(BASE, ["bud\nget=1"], path="--set", what="newline in a --set key"),
    # spec.apply_override: extends is resolved before overrides, so --set extends is ignored.
    Case(BASE, ["extends=missing.yaml"], path="--set extends", what="--set extends"),
]


@pytest.mark.parametrize(
    "case", REGRESSIONS, ids=[f"{c.what} at {c.path}".encode("unicode_escape").decode() for c in REGRESSIONS]
)
def test_regressions_found_by_fuzzing(case: Case, workdir: Path) -> None:
    check_rejected(case, workdir)
