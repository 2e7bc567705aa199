"""How results show in a notebook and at a prompt: a few lines of text, or compact HTML.

``ExperimentResults`` and ``Summary`` print as a headline, the counts, the best configuration and
(in Jupyter, ``_repr_html_``) a small ranked table, instead of a dump of their fields;
``trial_table`` is ``tunekit report``'s table of every trial. Figures are ``Summary``'s
(``tunekit.results.summarize``); this module only renders them.
"""

from __future__ import annotations

import html
from typing import Any

from tunekit.layout import ENDED_STATUSES, FINAL_PREFIX, PARAM_PREFIX, TrialStatus, finite
from tunekit.results.best import BestTrial, no_best_reason
from tunekit.storage.buckets import shown
from tunekit.storage.clock import duration

# ExperimentResults and Summary are not imported: their modules import this one, for their reprs.
ExperimentResults = Any
Summary = Any
RANKED_SHOWN = 5  # trials in the notebook's ranked table
_STATUSES = (*ENDED_STATUSES, TrialStatus.RUNNING)
_STYLE = "font-size:12px;border-collapse:collapse"
_CELL = "padding:2px 8px;border-bottom:1px solid #eee"


def figures_shown_in_jupyter() -> None:
    """In Jupyter, a figure returned as a cell's result shows as a PNG, without ``%matplotlib inline``.

    tunekit builds ``matplotlib.figure.Figure`` without pyplot, so Jupyter's inline backend never
    registers its PNG display for them and a plot cell would print ``<Figure size 800x450 ...>``.
    This registers it, once, in a running IPython; a display already registered (``%matplotlib
    inline``, the user's own) is left as it is.
    """
    import sys

    if "IPython" not in sys.modules:  # not in Jupyter or IPython: nothing to register with
        return
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        return
    from IPython.core.pylabtools import print_figure
    from matplotlib.figure import Figure

    png = shell.display_formatter.formatters["image/png"]
    try:
        png.lookup_by_type(Figure)
    except KeyError:
        png.for_type(Figure, lambda fig: print_figure(fig, "png", bbox_inches="tight"))


def counts_text(counts: dict[str, int], run: int, planned: int | None = None) -> str:
    """``10 trials (4 completed, 6 pruned) of 10 planned``."""
    parts = [f"{counts[s]} {s}" for s in map(str, _STATUSES) if counts.get(s)]
    text = f"{run} trial{'' if run == 1 else 's'}" + (f" ({', '.join(parts)})" if parts else "")
    return text + (f" of {planned} planned" if planned is not None else "")


def best_text(best: BestTrial | None, metric: str, several_objectives: bool = False) -> str:
    """``best: trial 3, val_accuracy 0.9722 (completed, 9 epochs): lr=0.0031, units=128``."""
    if best is None:
        return f"best: none ({no_best_reason(several_objectives)})"
    config = ", ".join(f"{name}={_value(value)}" for name, value in best.config.items())
    return (
        f"best: trial {best.number if best.number is not None else best.trial_id}, {metric} {best.metric:.4g} "
        f"({best.status}, {best.epochs} epochs): {config}"
    )


def results_text(results: ExperimentResults) -> str:
    """``repr(results)``: three lines."""
    counts = _counts(results)
    return "\n".join(
        [
            f"ExperimentResults {results.spec.name!r} at {shown(results.experiment_dir)}",
            f"  {counts_text(counts, len(results.trials), results.spec.budget.num_samples)}; "
            f"{results.metric} ({results.mode}); up to {results.spec.budget.max_epochs} epochs",
            f"  {best_text(results.best, results.metric, results.spec.multi_objective)}",
        ]
    )


def results_html(results: ExperimentResults) -> str:
    """The notebook's view: headline, counts, best configuration, the top trials."""
    counts = _counts(results)
    head = (
        f"<b>{html.escape(results.spec.name)}</b> "
        f'<span style="color:#666">{html.escape(str(results.experiment_dir))}</span><br>'
        f"{html.escape(counts_text(counts, len(results.trials), results.spec.budget.num_samples))}; "
        f"{html.escape(results.metric)} ({results.mode}); up to {results.spec.budget.max_epochs} epochs"
    )
    return f"<div>{head}{_best_html(results.best, results.metric)}{_ranked_html(results)}</div>"


def summary_text(summary: Summary) -> str:
    """``repr(summary)``: a few lines."""
    lines = [
        f"Summary: {counts_text(summary.counts, summary.trials_run, summary.trials_planned)}; "
        f"{summary.metric} ({summary.mode})",
        f"  {best_text(summary.best, summary.metric, summary.pareto is not None)}",
        f"  {_times(summary)}",
    ]
    return "\n".join(lines)


def summary_html(summary: Summary) -> str:
    return (
        f"<div><b>Summary</b>: {html.escape(counts_text(summary.counts, summary.trials_run, summary.trials_planned))}; "
        f"{html.escape(summary.metric)} ({summary.mode}){_best_html(summary.best, summary.metric)}"
        f"<br>{html.escape(_times(summary))}</div>"
    )


# ------------------------------------------------------------------- internals


def _times(summary: Summary) -> str:
    ledger = summary.ledger
    to_best = "" if ledger.seconds_to_best is None else f"; time to best {duration(ledger.seconds_to_best)}"
    return (
        f"active time {duration(summary.active_seconds)}; {summary.epochs_spent} of "
        f"{summary.epochs_full_budget} epochs spent; {ledger.slot_hours:.3g} {ledger.slot_unit}-hours{to_best}"
    )


def _counts(results: ExperimentResults) -> dict[str, int]:
    if results.trials.empty:
        return {}
    return {str(s): int(c) for s, c in results.trials["status"].value_counts().items()}


def _best_html(best: BestTrial | None, metric: str) -> str:
    if best is None:
        return "<br>best: none"
    number = best.number if best.number is not None else best.trial_id
    cells = "".join(
        f'<tr><td style="{_CELL};text-align:left">{html.escape(name)}</td>'
        f'<td style="{_CELL};text-align:right">{html.escape(_value(value))}</td></tr>'
        for name, value in best.config.items()
    )
    return (
        f"<br>best: trial {html.escape(str(number))}, <b>{html.escape(metric)} {best.metric:.4g}</b> "
        f"({html.escape(best.status)}, {best.epochs} epochs)"
        f'<table style="{_STYLE}">{cells}</table>'
    )


def _ranked_html(results: ExperimentResults) -> str:
    if results.trials.empty:
        return ""
    table = results.ranked().head(RANKED_SHOWN)
    params = [c for c in table.columns if c.startswith(PARAM_PREFIX)]
    columns = ["number", "status", "epochs", "final_metric", *params]
    header = "".join(
        f'<th style="{_CELL}">{html.escape(_header(c, results.metric))}</th>' for c in columns if c in table
    )
    rows = []
    for row in table.to_dict("records"):
        cells = "".join(
            f'<td style="{_CELL};text-align:right">{html.escape(_value(row.get(c)))}</td>'
            for c in columns
            if c in table
        )
        rows.append(f"<tr>{cells}</tr>")
    more = len(results.trials) - len(table)
    tail = f'<span style="color:#666">{more} more: <code>results.ranked()</code></span>' if more > 0 else ""
    return f'<br>top trials<table style="{_STYLE}"><tr>{header}</tr>{"".join(rows)}</table>{tail}'


def _header(column: str, metric: str) -> str:
    if column == "final_metric":
        return metric
    return column[len(PARAM_PREFIX) :] if column.startswith(PARAM_PREFIX) else column


def _value(value: Any) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return ""
    number = finite(value)
    if number is not None and not isinstance(value, int):
        return f"{number:.4g}"
    return str(value)


def trial_table(results: ExperimentResults) -> str:
    """``tunekit report``'s table: every trial ranked, best first, with its parameters and a one-line reason."""
    if results.trials.empty:
        return "no trials recorded"
    table = results.ranked()
    params = [c for c in table.columns if c.startswith(PARAM_PREFIX)]
    # Several objectives: each trial's Pareto rank and every objective's final value.
    finals = [c for c in table.columns if c.startswith(FINAL_PREFIX)] or ["final_metric"]
    ranks = ["pareto_rank"] if "pareto_rank" in table.columns else []
    shown = table[["number", "status", *ranks, "epochs", *finals, "best_metric", "wall_seconds", *params, "reason"]]
    renamed = {c: c[len(PARAM_PREFIX) :] for c in params} | {c: c[len(FINAL_PREFIX) :] for c in finals}
    shown = shown.rename(columns=renamed | {"final_metric": results.metric, "best_metric": f"best {results.metric}"})
    reasons = shown["reason"].map(short_reason)
    width = max(len("reason"), *(len(r) for r in reasons))
    # text reads from the left: pad so pandas' right alignment leaves the column flush left
    shown = shown.assign(reason=[r.ljust(width) for r in reasons])
    shown = shown.rename(columns={"reason": "reason".ljust(width)})
    return "\n".join(
        line.rstrip() for line in shown.to_string(index=False, float_format=lambda x: f"{x:.4g}").splitlines()
    )


REASON_WIDTH = 60


def short_reason(value: object) -> str:
    """One line of at most REASON_WIDTH characters (empty for no reason)."""
    if value is None or (isinstance(value, float) and value != value):
        return ""
    text = " ".join(str(value).split())
    return text if len(text) <= REASON_WIDTH else text[: REASON_WIDTH - 3] + "..."
