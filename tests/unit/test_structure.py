"""The package's shape, checked rather than hoped for: no import circles (lazy imports
included), no module over 600 lines, one owner of the experiment's file names."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "tunekit"
MAX_LINES = 600


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def import_graph() -> dict[str, set[str]]:
    """Every tunekit module each module imports, at the top or inside functions."""
    known = modules()
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tunekit"):
                targets = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            graph[name] |= {t for t in targets if t in known and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circles_lazy_imports_included() -> None:
    assert cycles(import_graph()) == []


def test_the_cycle_finder_sees_a_circle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_is_over_600_lines() -> None:
    sizes = {name: len(path.read_text().splitlines()) for name, path in modules().items()}
    assert {name: size for name, size in sizes.items() if size > MAX_LINES} == {}


def test_only_layout_spells_the_experiment_file_names() -> None:
    names = re.compile(
        r"[\"'](spec\.yaml|study\.db|trials\.csv|epochs\.csv|tracking\.json|started\.json|"
        r"model\.keras|model\.weights\.h5|error\.txt|output\.log|weights\.npz|state\.json)[\"']"
    )
    spelled = {name: names.findall(path.read_text()) for name, path in modules().items() if name != "tunekit.layout"}
    assert {name: found for name, found in spelled.items() if found} == {}


ARCHITECTURE = PACKAGE.parent / "docs" / "explanation" / "architecture.md"


def part_of(name: str) -> str:
    """The top-level part a module belongs to, spelled as the architecture page spells it."""
    path = modules()[name]
    if path.parent == PACKAGE:
        return path.name
    return path.relative_to(PACKAGE).parts[0] + "/"


def tree_parts() -> set[str]:
    """Every package and top-level module of tunekit/, as the architecture page names them."""
    return {part_of(name) for name in modules()}


def page_parts() -> dict[str, set[str]]:
    """The architecture page's table: each part it names, with the parts it may import."""
    rows = re.findall(r"^\| `tunekit/([^`]+)` \| [^|]+ \| ([^|]+) \|", ARCHITECTURE.read_text(), re.M)
    assert len({part for part, _ in rows}) == len(rows), f"{ARCHITECTURE}: a part named twice"
    return {part: set(re.findall(r"`([^`]+)`", imports)) for part, imports in rows}


def test_the_architecture_page_names_every_package_and_top_level_module_and_nothing_else() -> None:
    assert set(page_parts()) == tree_parts()


def test_each_part_imports_only_what_the_architecture_page_allows_it() -> None:
    allowed = page_parts()
    graph = import_graph()
    found: dict[str, set[str]] = {}
    for name, targets in graph.items():
        for target in targets:
            if part_of(target) != part_of(name):
                found.setdefault(part_of(name), set()).add(part_of(target))
    beyond = {part: sorted(used - allowed.get(part, set())) for part, used in found.items()}
    assert {part: used for part, used in beyond.items() if used} == {}


def test_the_page_reader_sees_a_part_and_its_imports() -> None:
    assert page_parts()["layout.py"] == set()
    assert "storage/" in page_parts()["driver/"]
