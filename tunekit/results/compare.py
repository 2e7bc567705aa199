"""Experiments side by side: the experiments under a results folder, and a comparison of several.

``experiments(folder)`` lists every experiment directly under a results folder (the
``storage.path`` its searches wrote to), one row each; ``tunekit ls FOLDER`` prints it.
``compare(a, b, ...)`` puts experiments side by side: their bests and best configurations,
budgets, counts, time to best, and their best so far against active time and against the
epochs they spent, on one figure; ``tunekit report A B [--html FILE]`` renders it.

Every figure is the experiment's own ``tunekit.results.summarize``: a comparison renders
summaries, it computes none of its own, so it agrees with each experiment's ``tunekit report``.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunekit.errors import TunekitError
from tunekit.layout import ENDED_STATUSES, PARAM_PREFIX, SPEC_FILE, TrialStatus, finite
from tunekit.results.display import figures_shown_in_jupyter
from tunekit.results.ledger import DEFAULT_TOLERANCE
from tunekit.results.load import ExperimentResults, load
from tunekit.results.pareto import selectable_trials
from tunekit.results.summary import Summary, active_seconds, summarize
from tunekit.storage.buckets import experiments_under, is_uri, readable, redacted
from tunekit.storage.clock import SearchClock, duration

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

COUNTED = (*ENDED_STATUSES, TrialStatus.RUNNING)
EXPERIMENT_COLUMNS = (
    "experiment",
    "name",
    "status",
    "trials",
    *(str(s) for s in COUNTED),
    "planned",
    "metric",
    "mode",
    "best",
    "best_trial",
    "started",
    "active_seconds",
    "path",
)


# -------------------------------------------------------------------- listing


def experiments(folder: str | Path) -> pd.DataFrame:
    """One row per experiment directly under ``folder`` (a results folder), oldest first.

    Columns: ``experiment`` (its directory's name), ``name`` (the spec's), ``status``
    (``finished``, ``running``, ``interrupted``: stopped before its end, ``tunekit resume``
    continues it, ``not started``, or ``damaged: <why>``), ``trials`` and one count per trial
    status, ``planned`` trials, ``metric`` and ``mode``, ``best`` (the best trial's final
    value, as ``tunekit report`` gives it) and ``best_trial`` (its number), ``started`` (a
    timestamp), ``active_seconds`` (the search's running time, stops excluded) and ``path``.

    ``folder`` may itself be an experiment: then it is the one row. It may be a storage URI
    (``s3://bucket/prefix``): then each experiment's records are read from the bucket, and
    ``path`` is its URI.

    Raises:
        TunekitError: ``folder`` is not a directory; StorageError: a URI cannot be listed.
    """
    import pandas as pd

    if is_uri(folder):
        rows = [_experiment_row(readable(uri), redacted(uri)) for uri in experiments_under(str(folder))]
    else:
        root = Path(folder).expanduser().resolve()
        if not root.is_dir():
            raise TunekitError(f"{root}: not a directory (give the folder your searches wrote to, storage.path)")
        found = [root] if (root / SPEC_FILE).is_file() else sorted(p.parent for p in root.glob(f"*/{SPEC_FILE}"))
        rows = [_experiment_row(directory, str(directory)) for directory in found]
    table = pd.DataFrame(rows, columns=list(EXPERIMENT_COLUMNS))
    if not table.empty:
        table["started"] = pd.to_datetime(table["started"], unit="s")
        table = table.sort_values(["started", "experiment"], na_position="last", kind="stable").reset_index(drop=True)
    return table


def _experiment_row(directory: Path, path: str) -> dict[str, Any]:
    from tunekit.results.status import read_status

    row: dict[str, Any] = {"experiment": directory.name, "path": path}
    try:
        status = read_status(directory)
        results = load(directory)
    except (TunekitError, OSError, ValueError) as error:
        return row | {"status": f"damaged: {error}", "trials": 0}
    clock = SearchClock.read(directory)
    if status.heard_s_ago is None:
        state = "not started"
    elif status.complete:
        state = "finished"
    else:
        state = "running" if status.alive else "interrupted"
    counts = results.trials["status"].value_counts() if not results.trials.empty else {}
    best = results.best
    return row | {
        "name": results.spec.name,
        "status": state,
        "trials": len(results.trials),
        **{str(s): int(counts.get(str(s), 0)) for s in COUNTED},
        "planned": results.spec.budget.num_samples,
        "metric": results.metric,
        "mode": results.mode,
        "best": None if best is None else best.metric,
        "best_trial": None if best is None else best.number,
        "started": None if clock is None else clock.started_at,
        "active_seconds": active_seconds(clock, results.trials),
    }


def describe_experiments(table: pd.DataFrame, folder: str | Path) -> str:
    """``tunekit ls FOLDER``: the listing as text, one experiment a line."""
    if table.empty:
        return f"no experiments in {redacted(str(folder)) if is_uri(folder) else Path(folder).expanduser().resolve()}"
    shown = table.assign(
        started=[_when(v) for v in table["started"]],
        active=[duration(finite(v)) for v in table["active_seconds"]],
        best=[_number(v) for v in table["best"]],
        metric=[
            f"{m} ({o})" if isinstance(m, str) else "" for m, o in zip(table["metric"], table["mode"], strict=True)
        ],
        trials=[_counts(row) for row in table.to_dict("records")],
    )
    columns = ["experiment", "status", "trials", "metric", "best", "started", "active"]
    widths = {c: max(len(c), *(len(str(v)) for v in shown[c])) for c in columns}
    lines = ["  ".join(c.ljust(widths[c]) for c in columns).rstrip()]
    lines += ["  ".join(str(row[c]).ljust(widths[c]) for c in columns).rstrip() for row in shown.to_dict("records")]
    return "\n".join(lines)


def experiments_json(table: pd.DataFrame) -> str:
    """``tunekit ls --format json``: the rows, numbers exact (pandas' own JSON rounds them to 15 digits)."""
    shown = table.assign(started=[None if _when(v) == "" else v.isoformat() for v in table["started"]])
    rows = shown.astype(object).where(shown.notna(), None).to_dict("records")
    return json.dumps(rows, indent=2, default=_plain)


def _counts(row: dict[str, Any]) -> str:
    """``10: 4 completed, 6 pruned`` (the statuses that occur)."""
    parts = [f"{int(row[s])} {s}" for s in map(str, COUNTED) if finite(row.get(s)) and int(row[s])]
    return f"{int(row.get('trials') or 0)}" + (f": {', '.join(parts)}" if parts else "")


# ----------------------------------------------------------------- comparison


@dataclass(frozen=True)
class Comparison:
    """Several experiments side by side (``tunekit.compare``).

    Attributes:
        table: one row per experiment (indexed by its label: its directory's name): the metric
            and mode, ``best`` and ``best_trial``, ``time_to_best_s`` (active seconds until the
            best so far came within the ledger's tolerance of the final best), active seconds,
            slot-hours and epochs spent, trial counts by status, the budget (``num_samples``,
            ``max_epochs``, ``scheduler``, ``search``) and the best configuration
            (``params.*``; empty where an experiment has no such parameter).
        curves: per experiment, its best so far at each reported epoch, in time order:
            ``time`` (active seconds), ``epochs`` (epochs spent so far) and ``best``.
        notes: what a reader should know before comparing (different metrics or modes).
        experiments: the loaded experiments, in the order given.
    """

    table: pd.DataFrame
    curves: dict[str, pd.DataFrame]
    notes: list[str] = field(default_factory=list)
    experiments: list[ExperimentResults] = field(default_factory=list, repr=False)

    def figure(self, *, path: str | Path | None = None) -> Figure:
        """Best so far against active time (left) and against epochs spent (right), one line per experiment."""
        from matplotlib.figure import Figure

        figures_shown_in_jupyter()
        fig = Figure(figsize=(11.0, 4.2), dpi=100, layout="constrained")
        by_time, by_epochs = fig.subplots(1, 2, sharey=True)
        metrics = sorted({str(m) for m in self.table["metric"]}) if not self.table.empty else []
        for label, curve in self.curves.items():
            if curve.empty:
                continue
            best = self.table.loc[label, "best"]
            shown = f"{label} ({_number(best)})"
            (line,) = by_time.step(curve["time"], curve["best"], where="post", linewidth=2, label=shown)
            by_epochs.step(curve["epochs"], curve["best"], where="post", linewidth=2, color=line.get_color())
        for ax, xlabel in ((by_time, "active time since the search started (s)"), (by_epochs, "epochs spent")):
            ax.grid(alpha=0.25)
            ax.set_xlabel(xlabel)
        by_time.set_ylabel(f"best {' / '.join(metrics)} so far")
        if any(not curve.empty for curve in self.curves.values()):
            by_time.legend(fontsize=8, frameon=False, loc="best")
        else:
            by_time.text(0.5, 0.5, "no experiment reported its metric", ha="center", transform=by_time.transAxes)
        fig.suptitle("best so far, " + " against ".join(self.table.index.astype(str)), fontsize=10)
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            fig.savefig(path, format="png")
        return fig

    def side_by_side(self) -> pd.DataFrame:
        """The table turned for reading: one column per experiment, one row per figure, formatted."""
        shown = self.table.copy()
        for column in ("time_to_best_s", "active_seconds"):
            shown[column] = [duration(finite(v)) for v in shown[column]]
        for column in ("best", "slot_hours"):
            shown[column] = [_number(v) for v in shown[column]]
        shown = shown.rename(columns=_ROW_NAMES)
        turned = shown.T.astype(object)
        return turned.where(turned.notna(), "")

    def to_text(self) -> str:
        lines = [*(f"note: {note}" for note in self.notes)]
        lines.append(self.side_by_side().to_string())
        return "\n".join(line.rstrip() for line in "\n".join(lines).splitlines())

    def to_json(self) -> str:
        table = self.table.reset_index(names="experiment").astype(object)
        rows = table.where(table.notna(), None).to_dict("records")
        return json.dumps({"notes": self.notes, "experiments": rows}, indent=2, default=_plain)

    def to_html(self, *, images: bool = True) -> str:
        """An HTML fragment: the notes, the side-by-side table and (with ``images``) the figure inline."""
        parts = [f'<p style="color:#8a5a00">note: {html.escape(note)}</p>' for note in self.notes]
        parts.append(self.side_by_side().to_html(classes="tunekit-compare", border=0, escape=True))
        if images and self.curves:
            parts.append(
                f'<img alt="best so far" style="max-width:100%" src="data:image/png;base64,{_png(self.figure())}">'
            )
        return "\n".join(parts)

    def write_html(self, path: str | Path) -> Path:
        """A self-contained page of the comparison (``tunekit report A B --html FILE``)."""
        from tunekit.results.report import page

        labels = ", ".join(map(str, self.table.index))
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(page(f"tunekit comparison: {labels}", f"Comparison: {labels}", self.to_html()), "utf-8")
        return target

    def _repr_html_(self) -> str:
        return self.to_html()

    def __repr__(self) -> str:
        labels = ", ".join(map(str, self.table.index))
        return f"Comparison of {len(self.table)} experiments ({labels})\n{self.to_text()}"


_ROW_NAMES = {
    "time_to_best_s": "time to best",
    "active_seconds": "active time",
    "epochs_spent": "epochs spent",
    "slot_hours": "slot-hours",
    "best_trial": "best trial",
}


def compare(
    *experiments: str | Path | ExperimentResults,
    tolerance: float = DEFAULT_TOLERANCE,
    price_per_hour: float | None = None,
) -> Comparison:
    """Experiments side by side (see ``Comparison``); each given as a directory or a loaded experiment.

    Args:
        experiments: two or more (one works too), as paths or ``tunekit.load`` results.
        tolerance, price_per_hour: the ledger's (time to best; costs).

    Raises:
        TunekitError: no experiment given; NotAnExperimentError: a path is not one.
    """
    import pandas as pd

    if not experiments:
        raise TunekitError("compare: give at least one experiment (a directory or tunekit.load(...))")
    loaded = [e if isinstance(e, ExperimentResults) else load(e) for e in experiments]
    labels = _labels([r.experiment_dir for r in loaded])
    rows, curves = [], {}
    for label, results in zip(labels, loaded, strict=True):
        summary = summarize(results, tolerance, price_per_hour)
        rows.append(_comparison_row(label, results, summary))
        curves[label] = progress(results)
    table = _integers_kept(pd.DataFrame(rows), rows).set_index("experiment")
    table.index.name = None
    return Comparison(table, curves, _notes(loaded, labels), loaded)


def _integers_kept(table: pd.DataFrame, rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Columns of whole numbers stay whole where an experiment has no value (a parameter the other's
    space lacks): pandas would make them floats (``units`` 64.0) to hold the gap."""
    for column in table.columns:
        values = [row[column] for row in rows if row.get(column) is not None]
        if len(values) < len(rows) and values and all(type(v) is int for v in values):
            table[column] = table[column].astype("Int64")
    return table


def _comparison_row(label: str, results: ExperimentResults, summary: Summary) -> dict[str, Any]:
    spec, best = results.spec, summary.best
    row: dict[str, Any] = {
        "experiment": label,
        "name": spec.name,
        "metric": summary.metric,
        "mode": summary.mode,
        "best": None if best is None else best.metric,
        "best_trial": None if best is None else best.number,
        "time_to_best_s": summary.ledger.seconds_to_best,
        "active_seconds": summary.active_seconds,
        "slot_hours": summary.ledger.slot_hours,
        "epochs_spent": summary.epochs_spent,
        "trials": summary.trials_run,
        **{str(s): summary.counts.get(str(s), 0) for s in COUNTED},
        "num_samples": spec.budget.num_samples,
        "max_epochs": spec.budget.max_epochs,
        "scheduler": spec.scheduler.type,
        "search": spec.search.algorithm,
    }
    if best is not None:
        row |= {f"{PARAM_PREFIX}{name}": value for name, value in best.config.items()}
    return row


def progress(results: ExperimentResults) -> pd.DataFrame:
    """The best so far at each reported epoch, in time order: ``time`` (active s), ``epochs`` (spent), ``best``.

    An epoch trained twice (a retry after a crash) is spent once, as the summary counts it. With
    several objectives the best is ``select``'s metric over the trials the rule could pick.
    """
    import pandas as pd

    metric, epochs = results.metric, results.epochs
    if epochs.empty or metric not in epochs.columns or "time" not in epochs.columns:
        return pd.DataFrame(columns=["time", "epochs", "best"])
    rows = epochs.dropna(subset=["time"]).sort_values("time", kind="stable")
    rows = rows.drop_duplicates(["trial_id", "epoch"], keep="first")
    spent = pd.Series(range(1, len(rows) + 1), index=rows.index)
    counted = rows
    if results.spec.multi_objective:
        counted = rows[rows["trial_id"].astype(str).isin(selectable_trials(results.trials, results.spec))]
    values = counted[metric].astype(float)
    best = values.cummax() if results.mode == "max" else values.cummin()
    curve = pd.DataFrame({"time": counted["time"].astype(float), "epochs": spent.loc[counted.index], "best": best})
    return curve.dropna(subset=["best"]).reset_index(drop=True)


def _labels(directories: Sequence[Path]) -> list[str]:
    """Each experiment's directory name; with its parent's when two share a name."""
    names = [d.name for d in directories]
    labels = [f"{d.parent.name}/{d.name}" if names.count(d.name) > 1 else d.name for d in directories]
    return [label if labels.count(label) == 1 else f"{label} ({i + 1})" for i, label in enumerate(labels)]


def _notes(loaded: list[ExperimentResults], labels: list[str]) -> list[str]:
    notes = []
    metrics = {(r.metric, r.mode) for r in loaded}
    if len(metrics) > 1:
        each = ", ".join(f"{label}: {r.metric} ({r.mode})" for label, r in zip(labels, loaded, strict=True))
        notes.append(f"the experiments do not share a metric, so their bests do not compare: {each}")
    return notes


def _png(fig: Figure) -> str:
    import base64
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _plain(value: Any) -> Any:
    """numpy scalars as Python numbers in JSON (anything else as its text)."""
    return value.item() if hasattr(value, "item") else str(value)


def _number(value: Any) -> str:
    number = finite(value)
    return "" if number is None else f"{number:.4g}"


def _when(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)) or str(value) == "NaT":
        return ""
    return str(value)[:16]
