"""A spec without ``space:`` whose trainable declares its space in code: ``build_model(hp)``.

The space is found as ``tunekit.Tuner`` finds it (``tunekit.tuner.discover.discover``: ``build_model`` at
the defaults, then each discrete parameter's other values), before the search is launched, so
the searcher proposes whole configurations and ``tunekit validate --print`` and ``plan`` show
the space. Building a Keras model imports TensorFlow, which the driver and the CLI never do:
the builds run in a child process, and only for a spec that leaves ``space:`` out and whose
``build_model``'s first parameter is ``hp`` (read from the source, nothing imported). The space
found is the spec's from then on: spec.yaml records it, and a resume reads it from there.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tunekit.contract import Builders, TrainableRef
from tunekit.errors import SpecError

FOUND_IN = "space (found in build_model(hp))"  # the path errors of the found space name


def space_in_code(trainable: Any, raw: Mapping[str, Any]) -> dict[str, Any] | None:
    """The space ``trainable``'s ``build_model(hp)`` declares, as a spec's ``space`` mapping; None
    when its ``build_model`` takes a config (the spec must then give ``space:``).

    Raises:
        SpecError: the builds failed, or declared nothing searchable (the child's own error).
    """
    if isinstance(trainable, Builders):  # functions of this process: a notebook has Keras already
        from tunekit.tuner.discover import discover
        from tunekit.tuner.hp import takes_hp

        if not takes_hp(trainable.build_model):
            return None
        return discover(_with_context(trainable.build_model, _context(raw))).to_space()
    if not isinstance(trainable, TrainableRef) or not _declares_hp(trainable.source):
        return None
    child = subprocess.run(
        [sys.executable, "-m", "tunekit.config.code_space", json.dumps(_request(trainable, raw))],
        capture_output=True,
        text=True,
        check=False,
    )
    answer = _last_json(child.stdout)
    if child.returncode != 0 or answer is None or "space" not in answer:
        why = (answer or {}).get("error") or (child.stderr.strip().splitlines() or ["no answer"])[-1]
        raise SpecError(FOUND_IN, f"could not be found by building {trainable.describe()}'s build_model: {why}", None)
    return dict(answer["space"])


def _declares_hp(source: Path) -> bool:
    """Whether the module's own ``def build_model`` takes ``hp`` first (its source, not imported)."""
    try:
        tree = ast.parse(source.read_text())
    except (OSError, SyntaxError, ValueError):
        return False
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "build_model":
            arguments = [*node.args.posonlyargs, *node.args.args]
            return bool(arguments) and arguments[0].arg == "hp"
    return False


def _request(trainable: TrainableRef, raw: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "reference": trainable.reference,
        "source": str(trainable.source),
        "import_root": str(trainable.import_root),
        "installed": trainable.installed,
        "context": _context(raw),
    }


def _context(raw: Mapping[str, Any]) -> dict[str, Any]:
    """What ``build_model(hp, ctx)`` sees while the space is found: one replica, float32."""
    training = raw.get("training") if isinstance(raw.get("training"), Mapping) else {}
    budget = raw.get("budget") if isinstance(raw.get("budget"), Mapping) else {}
    batch = training.get("batch_size", 32) if isinstance(training, Mapping) else 32
    return {
        "batch_size": batch,
        "per_replica_batch_size": batch,
        "replicas": 1,
        "precision": "float32",
        "seed": training.get("seed", 0) if isinstance(training, Mapping) else 0,
        "workdir": "",
        "cpus": 1,
        "max_epochs": budget.get("max_epochs", 1) if isinstance(budget, Mapping) else 1,
        "jit_compile": False,
        "data": dict(raw.get("data") or {}) if isinstance(raw.get("data"), Mapping) else {},
    }


def _with_context(build_model: Any, context: dict[str, Any]) -> Any:
    """``build_model(hp)`` as it is; ``build_model(hp, ctx)`` with the context it is found under."""
    from tunekit.contract import TrialContext
    from tunekit.tuner.hp import positional_count

    ctx = TrialContext(**context)
    return (lambda hp: build_model(hp, ctx)) if positional_count(build_model) >= 2 else build_model


def _last_json(text: str) -> dict[str, Any] | None:
    """The child's answer: its last line (a trainable may print while it is imported)."""
    for line in reversed(text.strip().splitlines()):
        try:
            found = json.loads(line)
        except ValueError:
            continue
        return found if isinstance(found, dict) else None
    return None


def _find(request: dict[str, Any]) -> dict[str, Any]:
    from tunekit.contract import load_builders
    from tunekit.tuner.discover import discover

    ref = TrainableRef(
        request["reference"], Path(request["source"]), Path(request["import_root"]), request["installed"]
    )
    build_model = load_builders(ref).build_model
    return {"space": discover(_with_context(build_model, request["context"])).to_space()}


if __name__ == "__main__":
    try:
        print(json.dumps(_find(json.loads(sys.argv[1]))))
    except Exception as error:  # the parent names the spec path; the child says what went wrong
        from tunekit.errors import describe_error

        print(json.dumps({"error": describe_error(error)}))
        sys.exit(1)
