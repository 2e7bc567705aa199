"""One self-contained HTML page for a finished experiment (``tunekit report DIR --html FILE``).

The page holds the summary, the best trial, the ranked trial table and the figures of
``tunekit.results.plots``, inlined as base64 PNG: it can be mailed or attached to a ticket and
opens anywhere without the experiment directory.
"""

from __future__ import annotations

import base64
import datetime as dt
import html
import io
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunekit.layout import ENDED_STATUSES, NEW_PREFIX, OLD_PREFIX, PARAM_PREFIX, TrialStatus
from tunekit.results.best import INHERITED, BestTrial, describe_lineage, no_best_reason
from tunekit.results.ledger import DEFAULT_TOLERANCE
from tunekit.results.load import ExperimentResults
from tunekit.results.summary import Summary, summarize
from tunekit.storage.clock import duration
from tunekit.tracking.record import TrackingRecord

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

FIGURE_TITLES = {
    "learning_curves": "Learning curves",
    "best_so_far": "Best so far against wall time",
    "parallel_coordinates": "Parameters against the metric",
    "param_importance": "Parameter importance",
    "lineage": "PBT lineage: who copied whom",
    "pareto": "Pareto front over all trials",
}
STATUSES = (*ENDED_STATUSES, TrialStatus.RUNNING)
_REASON_WIDTH = 80  # characters of a reason shown in the trial table

_CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #222;
       max-width: 1100px; margin: 24px auto; padding: 0 16px; }
h1 { font-size: 22px; margin-bottom: 2px; } h2 { font-size: 17px; margin-top: 28px;
     border-bottom: 1px solid #ddd; padding-bottom: 4px; }
.sub { color: #666; margin-top: 0; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: 8px 12px; min-width: 120px; }
.card b { display: block; font-size: 18px; }
.card span { color: #666; font-size: 12px; }
table { border-collapse: collapse; font-size: 13px; }
th, td { padding: 3px 8px; border-bottom: 1px solid #eee; text-align: right; white-space: nowrap; }
th { background: #f6f6f6; position: sticky; top: 0; }
td.text, th.text { text-align: left; }
td.reason { max-width: 280px; overflow: hidden; text-overflow: ellipsis; }
tr.best td { background: #eaf6ea; font-weight: 600; }
.status-completed { color: #1f77b4; } .status-pruned { color: #d9730d; }
.status-failed { color: #d62728; } .status-stopped { color: #7f7f7f; }
.scroll { overflow-x: auto; max-height: 520px; overflow-y: auto; }
figure { margin: 12px 0 24px; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #666; font-size: 12px; }
code { background: #f3f3f3; padding: 1px 4px; border-radius: 3px; }
"""


def write_html(
    results: ExperimentResults,
    path: str | Path,
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    price_per_hour: float | None = None,
) -> Path:
    """Writes the report page and returns its path.

    Args:
        results: a loaded experiment (``tunekit.load(dir)``).
        path: the HTML file to write; its folder is created when missing.
        tolerance, price_per_hour: the compute ledger's (``tunekit.results.ledger``).
    """
    from tunekit.results.plots import all_figures

    figures = all_figures(results)
    images = {name: _png_base64(fig) for name, fig in figures.items()}
    page = render_html(results, images, tolerance=tolerance, price_per_hour=price_per_hour)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(page, encoding="utf-8")
    return target


def render_html(
    results: ExperimentResults,
    images: dict[str, str],
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    price_per_hour: float | None = None,
) -> str:
    """The page as a string; ``images`` maps figure names to base64 PNG data."""
    name = results.spec.name
    summary = summarize(results, tolerance, price_per_hour)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>tunekit report: {_e(name)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>{_e(name)}</h1>",
        f'<p class="sub">{_e(str(results.experiment_dir))} · report written '
        f"{dt.datetime.now().strftime('%Y-%m-%d %H:%M')}</p>",
        "<h2>Summary</h2>",
        _summary(results, summary),
        *_front_section(summary),
        "<h2>Best trial</h2>",
        best_section(summary),
        "<h2>Trials, best first</h2>",
        _trial_table(results),
        "<h2>Compute ledger</h2>",
        _ledger_section(summary),
        *_lineage_section(results),
        "<h2>Figures</h2>",
    ]
    for key, title in FIGURE_TITLES.items():
        if key in images:
            parts.append(
                f'<figure><img alt="{_e(title)}" src="data:image/png;base64,{images[key]}">'
                f"<figcaption>{_e(title)}</figcaption></figure>"
            )
        elif key == "param_importance":  # a line saying why, never an empty box
            from tunekit.results.importance import importance

            parts.append(f'<p class="sub">{_e(title)}: none; {_e(importance(results, warn=False).note)}.</p>')
    parts.append("</body></html>")
    return "\n".join(parts)


def page(title: str, heading: str, body: str) -> str:
    """A self-contained page in the report's style around an HTML ``body`` (``tunekit report A B --html``)."""
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>{_e(title)}</title>",
            f"<style>{_CSS}</style></head><body>",
            f"<h1>{_e(heading)}</h1>",
            f'<p class="sub">report written {dt.datetime.now().strftime("%Y-%m-%d %H:%M")}</p>',
            f'<div style="overflow-x: auto">{body}</div>',
            "</body></html>",
        ]
    )


# -------------------------------------------------------------------- sections


def _front_section(summary: Summary) -> list[str]:
    """The Pareto front (several objectives only): each front trial's objective values."""
    pareto = summary.pareto
    if pareto is None:
        return []
    lines = summary.front_lines()
    names = [name for trial in pareto.front[:1] for name in trial.values]
    head = '<tr><th>trial</th><th class="text">id</th>' + "".join(f"<th>{_e(n)}</th>" for n in names) + "</tr>"
    rows = "".join(
        f'<tr><td>{_e(t.number)}</td><td class="text">{_e(t.trial_id)}</td>'
        + "".join(f"<td>{_e(_fmt(t.values[n]))}</td>" for n in names)
        + "</tr>"
        for t in pareto.front
    )
    return ["<h2>Pareto front</h2>", f"<p>{_e(lines[0])}</p>", f"<table>{head}{rows}</table>"]


def _lineage_section(results: ExperimentResults) -> list[str]:
    """PBT's exploit steps as a table (nothing for other schedulers): what each copy changed."""
    if results.spec.scheduler.type != "pbt":
        return []
    steps = results.exploits
    intro = (
        "<p>Every row is one exploit step: the trial took the source trial's checkpoint (weights and "
        "optimizer state) and went on with the source's configuration, mutated values perturbed. "
        "The trial table shows each trial's starting configuration; the best trial's section its "
        "final one, which its model was trained under.</p>"
    )
    if steps.empty:
        return ["<h2>PBT lineage</h2>", intro, "<p>No trial copied another.</p>"]
    rows = [
        f"<tr><td>{_fmt(step['epoch'])}</td><td>{_fmt(step['number'])}</td>"
        f"<td>{_fmt(step['source_number'])} (epoch {_fmt(step['source_epoch'])})</td>"
        f"<td>{_e(_changes(step))}</td></tr>"
        for step in _records(steps)
    ]
    head = "<tr><th>epoch</th><th>trial</th><th>copied trial</th><th>configuration change</th></tr>"
    return ["<h2>PBT lineage</h2>", intro, f"<table>{head}{''.join(rows)}</table>"]


def _changes(step: dict[str, Any]) -> str:
    """``learning_rate 0.00125 → 0.00288, units 64 → 128``: the parameters an exploit changed."""
    names = [key[len(OLD_PREFIX) :] for key in step if key.startswith(OLD_PREFIX)]
    pairs = [(name, _fmt(step[OLD_PREFIX + name]), _fmt(step[NEW_PREFIX + name])) for name in names]
    return ", ".join(f"{name} {old} → {new}" for name, old, new in pairs if old != new)


def _summary(results: ExperimentResults, summary: Summary) -> str:
    spec = results.spec
    budget = spec.budget
    counts = summary.counts
    full = summary.epochs_full_budget
    cards = [
        (
            f"{summary.trials_run} / {summary.trials_planned}",
            "trials run / planned"
            + (f" ({summary.not_started} not started: the time budget ran out)" if summary.not_started else ""),
        ),
        *[
            (str(counts.get(s, 0)), s)
            for s in STATUSES
            if counts.get(s, 0) or s in (TrialStatus.COMPLETED, TrialStatus.PRUNED)
        ],
        (
            f"{summary.epochs_spent} / {full}" if full else str(summary.epochs_spent),
            "epochs spent / every trial to the end",
        ),
        (_share(summary.epochs_spent, full), "of the full budget"),
        (duration(summary.active_seconds), "active time"),
        *(
            [(duration(summary.downtime_seconds), f"stopped between {summary.sessions} sessions")]
            if summary.sessions > 1
            else []
        ),
        (
            "-" if summary.best is None else f"{summary.best.metric:.4g}",
            f"best {results.metric} ({results.mode}), this experiment",
        ),
    ]
    scheduler, search = spec.scheduler, spec.search
    brackets = f", {_e(scheduler.brackets)} brackets" if scheduler.type == "hyperband" else ""
    asha = (
        f" (grace {_e(scheduler.grace_period)}, reduction factor {_e(scheduler.reduction_factor)}{brackets})"
        if scheduler.type in ("asha", "hyperband")
        else ""
    )
    settings = (
        f"search <code>{_e(search.algorithm)}</code> "
        f"(seed {_e(search.seed)}), "
        f"scheduler <code>{_e(scheduler.type)}</code>{asha}, "
        f"up to {_e(budget.max_epochs)} epochs per trial, "
        f"{_e(budget.max_concurrent)} at a time, "
        f"trainable <code>{_e(spec.raw.get('trainable', '?'))}</code>"
    )
    html_cards = "".join(
        f'<div class="card"><b>{_e(value)}</b><span>{_e(label)}</span></div>' for value, label in cards
    )
    return f'<div class="cards">{html_cards}</div><p>{settings}</p>{_tracking(results)}'


def _tracking(results: ExperimentResults) -> str:
    record = TrackingRecord.read(results.experiment_dir)
    if record is None:
        return ""
    opens = f' (<a href="{_e(record.ui_url)}">open its runs in the MLflow UI</a>)' if record.ui_url else ""
    return (
        f"<p>MLflow: experiment <code>{_e(record.experiment_name)}</code> at "
        f"<code>{_e(record.tracking_uri)}</code>, parent run "
        f"<code>{_e(record.parent_run_id)}</code>{opens}</p>"
    )


def best_section(summary: Summary) -> str:
    """The best trial of this experiment with the configuration its model was trained under,
    its PBT lineage, and the best including a warm start's inherited history when that differs."""
    best = summary.best
    if best is None:
        reason = no_best_reason(summary.pareto is not None)
        return f"<p>No best trial: {_e(reason)}.</p>" + _inherited(summary)
    rows = "".join(
        f'<tr><td class="text">{_e(k)}</td><td class="text">{_e(_fmt(v))}</td>'
        f'<td class="text">{_e(_fmt(best.initial_config.get(k)))}</td></tr>'
        for k, v in best.config.items()
    )
    head = '<tr><th class="text">parameter</th><th class="text">value (final)</th><th class="text">at start</th></tr>'
    lineage = "".join(f"<li>{_e(line)}</li>" for line in describe_lineage(best))
    chosen = f"<p>Chosen by {_e(best.rule)}.</p>" if best.rule else ""
    return (
        chosen + f"<p>Trial <b>{_e(best.number)}</b> (<code>{_e(best.trial_id)}</code>) of this experiment: "
        f"{_e(summary.metric)} = <b>{best.metric:.4f}</b> "
        f"after {best.epochs} epochs, {_e(best.status)}.</p>"
        + (f"<p>It ran on {_e(best.ran_on)}.</p>" if best.ran_on else "")
        + f"<table>{head}{rows}</table>"
        + (f"<p>Its configuration changed by PBT's exploit steps:</p><ul>{lineage}</ul>" if lineage else "")
        + _inherited(summary)
    )


def _inherited(summary: Summary) -> str:
    other: BestTrial | None = summary.best_including_history
    if other is None or other.scope != INHERITED:
        return ""
    return (
        f"<p>Including the history a warm start inherited, the best is trial {_e(other.number)} of "
        f"<code>{_e(other.source)}</code>: {_e(_scores(other, summary.metric))} "
        "(Optuna's study, and optuna-dashboard's \"Best Trial\", may show this one).</p>"
    )


def _scores(best: BestTrial, metric: str) -> str:
    """``val_accuracy = 0.9600``, or with several objectives each one's value."""
    if best.values:
        return ", ".join(f"{name} = {value:.6g}" for name, value in best.values.items())
    return f"{metric} = {best.metric:.4f}"


def _trial_table(results: ExperimentResults) -> str:
    if results.trials.empty:
        return "<p>No trials recorded.</p>"
    table = results.ranked()
    params = [c for c in table.columns if c.startswith(PARAM_PREFIX)]
    columns = [
        ("rank", None),
        ("trial", "number"),
        ("id", "trial_id"),
        ("status", "status"),
        ("epochs", "epochs"),
        ("rung", "rung"),
        (f"final {results.metric}", "final_metric"),
        (f"best {results.metric}", "best_metric"),
        ("wall s", "wall_seconds"),
        ("samples/s", "samples_per_second"),
    ]
    if "pareto_rank" in table.columns:  # several objectives: 1 is the front
        columns.insert(4, ("pareto rank", "pareto_rank"))
    # The parameters right after the metric, where a page 1100 px wide still shows them (they sat
    # off-screen to the right after the epochs, rung and throughput columns, and then after the
    # reason's long text: a 1400 px window showed two of four).
    at = next(i for i, (_, key) in enumerate(columns) if key == "best_metric") + 1
    columns[at:at] = [(c[len(PARAM_PREFIX) :], c) for c in params]
    # Why each trial ended (trained all epochs, pruned at a rung, the error): last, the longest text.
    columns.append(("reason", "reason"))
    text_columns = {"trial_id", "status", "reason"}
    head = "".join(f'<th class="{"text" if key in text_columns else ""}">{_e(label)}</th>' for label, key in columns)
    best_id = results.best.trial_id if results.best else None
    body = []
    for rank, row in enumerate(_records(table), start=1):
        cells = []
        for _label, key in columns:
            value = rank if key is None else row.get(key)
            css = "text" if key in text_columns else ""
            if key == "status":
                css += f" status-{_e(value)}"
            if key == "reason":
                cells.append(_reason_cell(_fmt(value)))
                continue
            cells.append(f'<td class="{css.strip()}">{_e(_fmt(value))}</td>')
        css_row = ' class="best"' if row.get("trial_id") == best_id else ""
        body.append(f"<tr{css_row}>{''.join(cells)}</tr>")
    return f'<div class="scroll"><table class="trials"><tr>{head}</tr>{"".join(body)}</table></div>'


def _ledger_section(summary: Summary) -> str:
    """Where the compute went (per rung, pruned share, time to best, cost) and predicted against actual."""
    ledger = summary.ledger
    unit = ledger.slot_unit
    rows = "".join(
        f"<tr><td>{'final' if r.rung is None else r.rung}</td><td>{r.first_epoch}-{r.last_epoch}</td>"
        f"<td>{r.trials}</td><td>{r.epochs}</td><td>{r.slot_hours:.4f}</td></tr>"
        for r in ledger.rungs
    )
    table = (
        f"<table><tr><th>rung</th><th>epochs from-to</th><th>trials</th><th>epochs</th>"
        f"<th>{unit}-hours</th></tr>{rows}</table>"
    )
    facts = [*summary.time_lines(), f"{ledger.slot_hours:.4f} {unit}-hours over {ledger.epochs} epochs"]
    if ledger.pruned_share is not None:
        facts.append(f"{ledger.pruned_share:.0%} spent on trials later pruned")
    if ledger.seconds_to_best is not None and ledger.final_best is not None:
        facts.append(
            f"within {ledger.tolerance:.1%} of the final best ({ledger.final_best:.4g}) after "
            f"{ledger.seconds_to_best:.1f} active s and {ledger.slot_hours_to_best or 0.0:.4f} {unit}-hours"
        )
    if ledger.cost is not None:
        to_best = "" if ledger.cost_to_best is None else f", {ledger.cost_to_best:.4f} to reach that best"
        facts.append(f"cost {ledger.cost:.4f} at {ledger.price_per_hour:g} per {unit}-hour{to_best}")
    parts = ["<ul>" + "".join(f"<li>{_e(fact)}</li>" for fact in facts) + "</ul>", table]
    comparison = summary.predicted_vs_actual
    if comparison:
        cells = "".join(
            f'<tr><td class="text">{_e(row["figure"])}</td><td>{_e(_fmt(row["predicted"]))}</td>'
            f"<td>{_e(_fmt(row['actual']))}</td><td>{_e(_signed(row['error_percent']))}</td></tr>"
            for row in comparison
        )
        parts.append(
            '<h3>Predicted (tunekit plan --probe) against actual</h3><table><tr><th class="text">figure</th>'
            f"<th>predicted</th><th>actual</th><th>error</th></tr>{cells}</table>"
        )
    return "".join(parts)


def _signed(percent: float | None) -> str:
    return "" if percent is None else f"{percent:+.0f}%"


# ------------------------------------------------------------------- helpers


def _reason_cell(reason: str) -> str:
    """The reason's first line, cut to fit a table row; all of it on hover."""
    lines = reason.strip().splitlines()
    shown = lines[0] if lines else ""
    if len(shown) > _REASON_WIDTH:
        shown = shown[: _REASON_WIDTH - 1] + "…"
    title = f' title="{_e(reason)}"' if shown != reason else ""
    return f'<td class="text reason"{title}>{_e(shown)}</td>'


def _png_base64(fig: Figure) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _records(table: pd.DataFrame) -> list[dict[str, Any]]:
    return [dict(zip(table.columns, values, strict=True)) for values in table.itertuples(index=False)]


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.0%}" if whole else "-"


def _fmt(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    if hasattr(value, "item"):
        return _fmt(value.item())
    return str(value)


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))
