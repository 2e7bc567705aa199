"""The documentation site cannot rot: it builds strictly, its reference pages come from the
code, its marked examples run, and a browser renders it.

Examples are checked where a comment marks them, on the line before the fence:

- ``<!-- check: spec FILE -->``: a YAML spec shown from the repository's FILE; it must be
  that file (as YAML) and load with tunekit's own validation.
- ``<!-- check: spec-keys -->``: an annotated spec; every key in it is a real spec key, and
  every spec key is shown (uncommented or in a comment).
- ``<!-- check: python -->``: Python that needs no search; it is run from the repository root.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tunekit.testing.browser import CHROMIUM, chromium, page_text

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
MKDOCS = Path(sys.executable).with_name("mkdocs")
MARKED = re.compile(r"<!-- check: (?P<kind>[\w-]+)(?: (?P<arg>\S+))? -->\n```\w*\n(?P<body>.*?)```", re.S)

sys.path.insert(0, str(DOCS))
import hooks  # noqa: E402  (docs/hooks.py: the generator MkDocs runs)

sys.path.remove(str(DOCS))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``mkdocs build --strict``: a broken link, a missing page or a bad docstring fails it."""
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [str(MKDOCS), "build", "--strict", "--quiet", "--site-dir", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**_env(), "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    return out


def _env() -> dict[str, str]:
    import os

    return dict(os.environ)


def _examples(kind: str) -> list[tuple[Path, str | None, str]]:
    found = []
    for page in sorted(DOCS.rglob("*.md")):
        for match in MARKED.finditer(page.read_text()):
            if match["kind"] == kind:
                found.append((page, match["arg"], match["body"]))
    return found


def test_the_site_builds_strictly_with_the_generated_reference_pages(site: Path) -> None:
    for page in (
        "index.html",
        "reference/spec-keys/index.html",
        "reference/cli/index.html",
        "reference/api/index.html",
    ):
        assert (site / page).is_file(), page
    api = (site / "reference/api/index.html").read_text()
    assert "tunekit.run" in api and "ExperimentResults" in api  # mkdocstrings rendered the docstrings


def test_the_spec_reference_has_every_key_with_a_rule_and_no_rule_for_a_key_that_is_gone() -> None:
    keys = hooks.spec_keys()
    assert sorted(hooks.KEY_RULES) == sorted(keys)
    page = hooks.spec_reference()
    for key in keys:
        assert f"| `{key}` |" in page, key


def test_the_required_keys_are_exactly_those_a_minimal_spec_cannot_lose() -> None:
    from tunekit.config.spec import parse_spec
    from tunekit.errors import SpecError

    parse_spec(hooks._MINIMAL, None, locate_trainable=False)
    for key in hooks.REQUIRED:
        raw: dict[str, Any] = {k: dict(v) if isinstance(v, dict) else v for k, v in hooks._MINIMAL.items()}
        section, _, name = key.partition(".")
        if name:
            del raw[section][name]
        else:
            del raw[section]
        with pytest.raises(SpecError, match="is required"):
            parse_spec(raw, None, locate_trainable=False)


def test_the_cli_reference_has_every_command_and_option() -> None:
    from tunekit.cli import _parser

    page = hooks.cli_reference()
    commands = hooks.subcommands(_parser())
    assert {"run", "resume", "validate", "plan", "report", "check", "status", "doctor", "sync", "logs"} <= set(commands)
    for name, command in commands.items():
        assert f"## tunekit {name}\n" in page
        for action in command._actions:
            for option in action.option_strings:
                assert option in page, (name, option)


def test_specs_shown_from_the_repository_are_those_files_and_valid(tmp_path: Path) -> None:
    import tunekit

    examples = _examples("spec")
    assert examples, "no marked spec example"
    for page, shipped, body in examples:
        assert shipped is not None, page
        source = REPO / shipped
        assert yaml.safe_load(body) == yaml.safe_load(source.read_text()), f"{page} shows {shipped} differently"
        tunekit.load_spec(source)


def test_the_annotated_spec_shows_every_key_and_only_real_ones() -> None:
    [(page, _, body)] = _examples("spec-keys")
    shown = yaml.safe_load(body)
    keys = set(hooks.spec_keys())
    for top, value in shown.items():
        assert top in keys, f"{page}: {top}"
        if isinstance(value, dict) and top not in ("space", "data"):
            for name in value:
                assert f"{top}.{name}" in keys, f"{page}: {top}.{name}"
    for key in keys:  # PBT's keys are shown in a commented-out block
        assert re.search(rf"\b{re.escape(key.rpartition('.')[2])}:", body), f"{page} does not show {key}"


def test_python_examples_run() -> None:
    examples = _examples("python")
    assert examples, "no marked Python example"
    for page, _, body in examples:
        done = subprocess.run(
            [sys.executable, "-c", body], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, f"{page}:\n{body}\n{done.stderr}"


def test_a_browser_renders_the_home_page_and_the_spec_reference(site: Path, tmp_path: Path) -> None:
    if CHROMIUM is None:
        pytest.skip("needs Debian's chromium: apt-get install -y chromium")
    home = page_text((site / "index.html").as_uri(), tmp_path, r"Where to start")
    assert "Hyperparameter search for Keras" in home and "Where to start" in home
    keys = page_text((site / "reference/spec-keys/index.html").as_uri(), tmp_path, r"budget\.max_epochs")
    assert "budget.max_epochs" in keys and "required" in keys
    for name, page in (("home", "index.html"), ("spec-keys", "reference/spec-keys/index.html")):
        shot = tmp_path / f"{name}.png"
        chromium((site / page).as_uri(), tmp_path, f"--screenshot={shot}")
        assert shot.stat().st_size > 20_000, f"{name}: a {shot.stat().st_size}-byte screenshot is a blank page"
