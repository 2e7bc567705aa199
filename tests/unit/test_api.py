"""The public API as a notebook sees it: real signatures, ``import tunekit.plots``, compact reprs."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import tunekit
from tunekit.results.summary import summarize

from .results.made_up_experiments import asha_experiment

RUNNER = Path(__file__).resolve().parents[2] / "tunekit" / "driver" / "runner.py"


def _runner_signature(name: str) -> list[tuple[str, str, str | None]]:
    """(name, kind, default as source) of each parameter of runner.py's ``name``, read without importing it."""
    tree = ast.parse(RUNNER.read_text())
    func = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    args = func.args
    found = []
    positional = [*args.posonlyargs, *args.args]
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    found += [
        (a.arg, "positional", None if d is None else ast.unparse(d)) for a, d in zip(positional, defaults, strict=True)
    ]
    found += [
        (a.arg, "keyword", None if d is None else ast.unparse(d))
        for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)
    ]
    if args.kwarg:
        found.append((args.kwarg.arg, "var", None))
    return found


def _public_signature(function: object) -> list[tuple[str, str, str | None]]:
    kinds: dict[inspect._ParameterKind, str] = {
        inspect.Parameter.POSITIONAL_OR_KEYWORD: "positional",
        inspect.Parameter.KEYWORD_ONLY: "keyword",
        inspect.Parameter.VAR_KEYWORD: "var",
    }
    found = []
    for p in inspect.signature(function).parameters.values():  # type: ignore[arg-type]
        default = None if p.default is inspect.Parameter.empty else repr(p.default)
        found.append((p.name, kinds[p.kind], default))
    return found


def test_run_and_resume_show_the_drivers_own_parameters() -> None:
    from tunekit.driver.connect import CONNECT_TIMEOUT_S

    for name in ("run", "resume"):
        expected = [
            (n, kind, repr(CONNECT_TIMEOUT_S) if d == "CONNECT_TIMEOUT_S" else d)
            for n, kind, d in _runner_signature(name)
        ]
        assert _public_signature(getattr(tunekit, name)) == expected, name
    assert "(spec, **kwargs)" not in str(inspect.signature(tunekit.run))


def test_import_tunekit_plots_gives_the_one_plots_module() -> None:
    import tunekit.plots
    import tunekit.results.plots
    from tunekit import plots

    assert tunekit.plots is plots is tunekit.results.plots
    assert callable(tunekit.plots.learning_curves)


def test_results_and_summary_print_in_a_few_lines_and_show_as_compact_html(tmp_path: Path) -> None:
    results = tunekit.load(asha_experiment(tmp_path / "digits", "digits"))
    text = repr(results)
    assert text.splitlines() == [
        f"ExperimentResults 'digits' at {tmp_path / 'digits'}",
        "  10 trials (4 completed, 6 pruned) of 10 planned; val_accuracy (max); up to 9 epochs",
        "  best: trial 1, val_accuracy 0.7732 (completed, 9 epochs): learning_rate=0.02154, units=256, dropout=0.1",
    ]
    page = results._repr_html_()
    assert "<b>digits</b>" in page and "top trials" in page and "5 more: <code>results.ranked()</code>" in page
    assert page.count("<tr>") == 3 + 1 + 5  # the best's 3 parameters, the header and 5 trials
    summary = summarize(results)
    assert len(repr(summary).splitlines()) == 3
    assert repr(summary).splitlines()[2].startswith("  active time 1m 37s; 48 of 90 epochs spent;")
    assert "<b>Summary</b>" in summary._repr_html_()
