"""The user's modules a command imported in the warm runtime, forgotten after it.

A search imports its project's modules in the driver too (the trainable is located and its
space read there). A module kept in ``sys.modules`` would be the next command's, stale: an
edited trainable, or a same-named module of another project. So each command's own imports,
and the folders it put on ``sys.path``, are dropped as it ends; what tunekit and the installed
packages imported stays (that is the runtime's point). Stdlib only.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def forgotten_request_modules(cwd: str) -> Iterator[None]:
    """Within the block, a command runs in ``cwd``; after it, the modules it imported from its
    folders (``cwd`` and those it added to ``sys.path``) and those folders are gone again."""
    path = list(sys.path)
    known = set(sys.modules)
    try:
        yield
    finally:
        places = [Path(cwd).resolve(), *(Path(p).resolve() for p in sys.path if p and p not in path)]
        for name in [name for name in sys.modules if name not in known]:
            if request_module(sys.modules[name], places):
                del sys.modules[name]
        sys.path[:] = path


def request_module(module: object, places: list[Path]) -> bool:
    """Whether ``module`` came from one of ``places`` (a project's folders), not from an installed
    package or tunekit, which may live below a project's folder too (an editable install)."""
    file = getattr(module, "__file__", None)
    if not file:
        return False
    source = Path(file).resolve()
    if _inside(source, Path(__file__).resolve().parents[1]) or _inside(source, Path(sys.prefix).resolve()):
        return False
    return any(_inside(source, place) for place in places)


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents
