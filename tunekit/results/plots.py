"""Figures of a finished experiment: learning curves, best so far, parameters, importance.

Every function takes ``ExperimentResults`` (``tunekit.load(dir)`` or
``tunekit.results.load_from_mlflow``), returns a ``matplotlib.figure.Figure`` and, given
``path``, also saves it as PNG. Figures are built with ``matplotlib.figure.Figure``,
never ``pyplot``: no GUI backend is needed on a headless machine (saving renders with
Agg), and nothing piles up in pyplot's figure registry. In Jupyter a returned figure shows
as the cell's result (``tunekit.results.display.figures_shown_in_jupyter``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunekit.layout import PARAM_PREFIX, TrialStatus
from tunekit.results.display import figures_shown_in_jupyter
from tunekit.results.importance import FewTrialsWarning
from tunekit.results.load import ExperimentResults
from tunekit.results.parallel_axes import metric_axis, param_axis
from tunekit.results.pareto import selectable_trials
from tunekit.search.plan import spec_milestones

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

STATUS_COLORS: dict[str, str] = {
    TrialStatus.COMPLETED: "#1f77b4",
    TrialStatus.PRUNED: "#ff7f0e",
    TrialStatus.STOPPED: "#7f7f7f",
    TrialStatus.RUNNING: "#9467bd",
    TrialStatus.FAILED: "#d62728",
}
BEST_COLOR = "#2ca02c"
TOP_COLORS = ("#17becf", "#e377c2", "#8c564b", "#bcbd22", "#393b79", "#9c9ede", "#637939", "#e7969c")


_SIZE = (8.0, 4.5)


def learning_curves(
    results: ExperimentResults, metric: str | None = None, *, top: int = 3, path: str | Path | None = None
) -> Figure:
    """The metric per epoch of every trial; early-stopped trials end in a cross at their stop epoch.

    ASHA's rungs are dotted vertical lines. The best trial is drawn thick and green and the next
    ``top - 1`` of ``results.ranked()`` each in a colour of its own; the legend and a label at the
    end of each of their lines name them by trial number. The other trials are thin, by status.
    """
    from matplotlib.ticker import MaxNLocator

    metric = metric or results.metric
    fig, ax = _figure()
    epochs = results.epochs
    if epochs.empty or metric not in epochs.columns:
        return _finish(_empty(fig, ax, f"no epoch reported {metric}"), path)
    status_of = (
        dict(zip(results.trials["trial_id"], results.trials["status"], strict=True)) if not results.trials.empty else {}
    )
    best_id = results.best.trial_id if results.best else None
    numbers = _trial_numbers(results)
    reported = set(epochs["trial_id"].astype(str))
    ranked = [] if results.trials.empty else [str(t) for t in results.ranked()["trial_id"]]
    leaders = [t for t in ranked if t in reported and t != best_id][: max(top - 1, 0)]
    leader_colors = dict(zip(leaders, TOP_COLORS, strict=False))
    seen: dict[str, int] = {}
    marked: list[Any] = []
    for trial_id, rows in epochs.groupby("trial_id", sort=False):
        rows = rows.sort_values("epoch").drop_duplicates("epoch", keep="last")
        status = str(status_of.get(trial_id, TrialStatus.RUNNING))
        seen[status] = seen.get(status, 0) + 1
        color = STATUS_COLORS.get(status, "#7f7f7f")
        is_best, leader = trial_id == best_id, leader_colors.get(str(trial_id))
        shown = BEST_COLOR if is_best else leader or color
        ax.plot(
            rows["epoch"],
            rows[metric],
            color=shown,
            linewidth=2.6 if is_best else 1.8 if leader else 1.0,
            alpha=1.0 if is_best or leader else 0.55,
            zorder=4 if is_best else 3 if leader else 2,
            marker="o" if len(rows) == 1 else None,
            markersize=3,
        )
        last = rows.iloc[-1]
        if is_best or leader:
            label = f" {numbers.get(str(trial_id), trial_id)}"
            ax.annotate(label, (last["epoch"], last[metric]), fontsize=7, color=shown, va="center")
            if leader:
                value = f"{last[metric]:.4g}, {status}"
                marked.append(_line(leader, f"trial {numbers.get(str(trial_id), trial_id)} ({value})", width=1.8))
        if status in (TrialStatus.PRUNED, TrialStatus.STOPPED, TrialStatus.FAILED):
            ax.plot(
                [last["epoch"]],
                [last[metric]],
                marker="x",
                color=shown,
                markersize=8,
                mew=2,
                zorder=4,
            )
    _rung_lines(ax, results)
    handles = [
        _line(STATUS_COLORS.get(s, "#7f7f7f"), f"{s} ({n})", marker="x" if s != TrialStatus.COMPLETED else None)
        for s, n in sorted(
            seen.items(),
            key=lambda item: list(STATUS_COLORS).index(item[0]) if item[0] in STATUS_COLORS else 99,
        )
    ]
    if best_id is not None and results.best is not None:
        handles.append(
            _line(
                BEST_COLOR,
                f"best: trial {results.best.number} ({results.best.metric:.4g})",
                width=2.6,
            )
        )
    handles += marked
    ax.legend(handles=handles, loc="best", fontsize=8, frameon=False)
    ax.set_xlabel("epoch")
    ax.set_ylabel(metric)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(
        f"{metric} per epoch, {sum(seen.values())} trials (x: stopped early at that epoch)",
        fontsize=10,
    )
    return _finish(fig, path)


def best_so_far(results: ExperimentResults, *, path: str | Path | None = None) -> Figure:
    """The best metric value reported so far against wall time since the search started.

    With several objectives: ``select``'s metric, its line over the trials the rule could
    pick (``selectable_trials``), as the time to best; every epoch is still a dot.
    """
    metric = results.metric
    fig, ax = _figure()
    epochs = results.epochs
    if epochs.empty or metric not in epochs.columns or "time" not in epochs.columns:
        return _finish(_empty(fig, ax, f"no epoch reported {metric}"), path)
    rows = epochs[["trial_id", "time", metric]].dropna().sort_values("time")
    counted = rows
    if results.spec.multi_objective:
        counted = rows[rows["trial_id"].astype(str).isin(selectable_trials(results.trials, results.spec))]
        if counted.empty:
            return _finish(_empty(fig, ax, "no trial meets the select rule"), path)
    running = counted[metric].cummax() if results.mode == "max" else counted[metric].cummin()
    status_of = (
        dict(zip(results.trials["trial_id"], results.trials["status"], strict=True)) if not results.trials.empty else {}
    )
    colors = [STATUS_COLORS.get(str(status_of.get(t, TrialStatus.RUNNING)), "#7f7f7f") for t in rows["trial_id"]]
    ax.scatter(rows["time"], rows[metric], s=12, c=colors, alpha=0.45, linewidths=0, label="each epoch")
    ax.step(
        counted["time"],
        running,
        where="post",
        color=BEST_COLOR,
        linewidth=2.2,
        label=f"best {metric} so far",
    )
    final = running.iloc[-1]
    ax.annotate(
        f"{final:.4g}",
        (counted["time"].iloc[-1], final),
        textcoords="offset points",
        xytext=(4, 4),
        fontsize=8,
        color=BEST_COLOR,
    )
    ax.set_xlabel("wall time since the search started (s)")
    ax.set_ylabel(metric)
    ax.set_title(f"best {metric} so far ({results.mode})", fontsize=10)
    ax.legend(loc="lower right" if results.mode == "max" else "upper right", fontsize=8, frameon=False)
    return _finish(fig, path)


def parallel_coordinates(results: ExperimentResults, *, path: str | Path | None = None) -> Figure:
    """One line per trial across its parameters and final metric, coloured by that metric.

    Numeric parameters are scaled to [0, 1] (on a log scale for loguniform and ``log``
    ranges); choices and other categorical values sit at evenly spaced positions.
    """
    from matplotlib import colormaps
    from matplotlib.colors import Normalize

    fig, ax = _figure(width=max(_SIZE[0], 1.6 * (len(_param_columns(results)) + 1)))
    trials = results.trials
    columns = _param_columns(results)
    if trials.empty or not columns:
        return _finish(_empty(fig, ax, "no trials with parameters"), path)
    axes = [param_axis(results, column) for column in columns]
    axes.append(metric_axis(trials["final_metric"], results.metric))
    values = trials["final_metric"]
    finite = values.dropna()
    low, high = (float(finite.min()), float(finite.max())) if not finite.empty else (0.0, 1.0)
    if low == high:
        low, high = low - 0.5, high + 0.5
    norm = Normalize(low, high)
    cmap = colormaps["viridis"] if results.mode == "max" else colormaps["viridis_r"]
    order = values.fillna(-math.inf if results.mode == "max" else math.inf).argsort()
    if results.mode == "min":
        order = order[::-1]
    for index in order:  # best drawn last, on top
        row = trials.iloc[int(index)]
        ys = [axis.position(row[axis.column]) for axis in axes]
        value = row["final_metric"]
        missing = _missing(value)
        ax.plot(
            range(len(axes)),
            ys,
            color="#bbbbbb" if missing else cmap(norm(float(value))),
            linewidth=1.0 if missing else 1.8,
            linestyle="--" if missing else "-",
            alpha=0.9,
        )
    for x, axis in enumerate(axes):
        ax.axvline(x, color="#444444", linewidth=0.8)
        for position, label in axis.ticks:
            ax.text(
                x + 0.04,
                position,
                label,
                fontsize=7,
                va="center",
                ha="left",
                color="#333333",
                bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.7, "pad": 0.5},
            )
    ax.set_xticks(range(len(axes)), [axis.label for axis in axes], fontsize=8)
    ax.set_xlim(-0.2, len(axes) - 0.4)
    ax.set_ylim(-0.06, 1.06)
    ax.set_yticks([])
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    mappable = _scalar_mappable(cmap, norm)
    fig.colorbar(mappable, ax=ax, label=f"final {results.metric}", fraction=0.03, pad=0.02)
    ax.set_title(
        f"parameters of {len(trials)} trials against final {results.metric} (dashed: no metric)",
        fontsize=10,
    )
    return _finish(fig, path)


def param_importance(results: ExperimentResults, *, path: str | Path | None = None) -> Figure:
    """Parameter importance from every trial, pruned ones included (``ExperimentResults.importance``).

    It uses the deepest epoch that at least ``MIN_TRIALS_FOR_IMPORTANCE`` trials reached: the
    last, else an ASHA rung, and says which in its title. When no epoch has enough, the figure
    is one short line saying why (no empty box), and a ``FewTrialsWarning`` is issued.
    """
    import warnings

    from tunekit.results.importance import importance

    found = importance(results, warn=False)
    if not found:
        if found.few_trials:
            warnings.warn(f"parameter importance {found.note}", FewTrialsWarning, stacklevel=2)
        fig, ax = _figure()
        fig.set_size_inches(_SIZE[0], 0.5)
        return _finish(_empty(fig, ax, f"parameter importance: none; {found.note}"), path)
    fig, ax = _figure()
    fig.set_size_inches(_SIZE[0], min(_SIZE[1], 1.2 + 0.35 * len(found)))
    names = list(found)[::-1]
    ax.barh(names, [found[n] for n in names], color="#1f77b4")
    for y, name in enumerate(names):
        ax.text(found[name], y, f" {found[name]:.2f}", va="center", fontsize=8)
    ax.set_xlim(0, max(1.0, max(found.values()) * 1.15))
    ax.set_xlabel(f"importance for {results.metric} ({found.evaluator}, sums to 1)")
    ax.set_title(f"parameter importance: {found.note}", fontsize=10)
    return _finish(fig, path)


def lineage(results: ExperimentResults, metric: str | None = None, *, path: str | Path | None = None) -> Figure:
    """PBT's lineage: each trial's metric per epoch, and a dashed jump wherever it copied
    another trial's checkpoint, from the source's point (where its curve then goes on).

    Each jump is labelled ``#trial←#source`` by Optuna trial numbers; ``results.exploits``
    has the configurations before and after.
    """
    from matplotlib.ticker import MaxNLocator

    metric = metric or results.metric
    fig, ax = _figure(width=9.0)
    epochs, steps = results.epochs, results.exploits
    if epochs.empty or metric not in epochs.columns:
        return _finish(_empty(fig, ax, f"no epoch reported {metric}"), path)
    if steps.empty:
        return _finish(_empty(fig, ax, "no exploit steps: not a PBT search, or no trial copied another"), path)
    numbers = _trial_numbers(results)
    value_at = {(str(r.trial_id), int(r.epoch)): float(getattr(r, metric)) for r in epochs.itertuples()}
    colors = _trial_colors(list(numbers))
    for trial_id, rows in epochs.groupby("trial_id", sort=False):
        rows = rows.sort_values("epoch")
        mine = steps[steps["trial_id"] == trial_id].sort_values("epoch")
        cuts = [int(e) for e in mine["epoch"]]
        color = colors.get(str(trial_id), "#555555")
        for start, end in zip([0, *cuts], [*cuts, math.inf], strict=True):
            segment = rows[(rows["epoch"] > start) & (rows["epoch"] <= end)]
            ax.plot(segment["epoch"], segment[metric], color=color, linewidth=1.3, marker=".")
        for step in mine.itertuples():
            source = (str(step.source_trial_id), int(step.source_epoch))
            after = rows[rows["epoch"] > int(step.epoch)]
            if source not in value_at or after.empty:
                continue
            x1, y1 = int(after["epoch"].iloc[0]), float(after[metric].iloc[0])
            ax.plot([source[1], x1], [value_at[source], y1], color=color, linestyle="--", linewidth=1.1)
            ax.scatter([source[1]], [value_at[source]], color=color, s=18, zorder=3)
            label = f"#{numbers.get(str(trial_id), '?')}←#{numbers.get(source[0], '?')}"
            ax.annotate(label, (x1, y1), fontsize=7, color=color, xytext=(2, -9), textcoords="offset points")
    handles = [_line(colors[t], f"trial {n}") for t, n in numbers.items() if t in colors]
    ax.legend(handles=handles, fontsize=8, loc="lower right")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch")
    ax.set_ylabel(metric)
    count = f"{len(steps)} exploit step{'' if len(steps) == 1 else 's'}"
    ax.set_title(f"PBT lineage: {count} (dashed: the trial goes on from the source's checkpoint)")
    return _finish(fig, path)


def pareto(results: ExperimentResults, *, path: str | Path | None = None) -> Figure:
    """The Pareto front over every trial: a scatter for two objectives, parallel coordinates
    (each objective scaled to [0, 1], better up) for more. Front trials are green, the
    selected best a star; infeasible trials are crosses, pruned ones faint."""
    from tunekit.results.pareto import INFEASIBLE, final_values, pareto_of

    fig, ax = _figure()
    front = pareto_of(results.trials, results.spec)
    if front is None:
        return _finish(_empty(fig, ax, "one objective: no Pareto front"), path)
    names = [o.name for o in results.spec.objectives]
    rows = [(str(r["trial_id"]), final_values(r)) for _, r in results.trials.iterrows()]
    rows = [(t, v) for t, v in rows if all(n in v for n in names)]
    best = results.best.trial_id if results.best else None

    def mark(trial_id: str) -> tuple[str, dict[str, Any]]:
        """What a trial's mark stands for, as the legend says it, and how it is drawn."""
        if trial_id == best:
            return "the selected best", {"color": BEST_COLOR, "marker": "*", "s": 160, "zorder": 4}
        if front.ranks.get(trial_id) == 1:
            return "on the front", {"color": BEST_COLOR, "marker": "o", "s": 50, "zorder": 3}
        status = front.unranked.get(trial_id)
        if status == INFEASIBLE:
            failed = STATUS_COLORS[TrialStatus.FAILED]
            return "infeasible (breaks a constraint)", {"color": failed, "marker": "x", "s": 40, "zorder": 2}
        if status is not None:  # faint, in a solid colour: overlapping marks blend into none the legend lacks
            look = {"color": _faded(STATUS_COLORS.get(status, "#7f7f7f")), "marker": "o", "s": 25, "zorder": 1}
            return f"{status} (not ranked)", look
        completed = STATUS_COLORS[TrialStatus.COMPLETED]
        return "behind the front", {"color": completed, "marker": "o", "s": 25, "zorder": 2}

    if len(names) == 2:
        # Trials with the same scores share one mark (the most telling on top), counted beside it.
        at: dict[tuple[float, float], list[str]] = {}
        for trial_id, values in rows:
            at.setdefault((values[names[0]], values[names[1]]), []).append(trial_id)
        for (x, y), trial_ids in at.items():
            look = max((mark(t)[1] for t in trial_ids), key=lambda look: look["zorder"])
            outline: dict[str, Any] = {"edgecolors": "white", "linewidths": 0.6} if look["marker"] != "x" else {}
            ax.scatter(x, y, **look, **outline)  # white outlines part touching marks; an x is all outline
            if len(trial_ids) > 1:
                ax.annotate(f"×{len(trial_ids)}", (x, y), fontsize=7, xytext=(5, 3), textcoords="offset points")
        edge = sorted((t.values[names[0]], t.values[names[1]]) for t in front.front)
        ax.step([x for x, _ in edge], [y for _, y in edge], where="post", color=BEST_COLOR, linewidth=1.0)
        ax.set_xlabel(front.objectives[0])
        ax.set_ylabel(front.objectives[1])
    else:
        columns = {n: [v[n] for _, v in rows] for n in names}
        for trial_id, values in rows:
            ys = []
            for objective in results.spec.objectives:
                low, high = min(columns[objective.name]), max(columns[objective.name])
                share = 0.5 if high == low else (values[objective.name] - low) / (high - low)
                ys.append(share if objective.mode == "max" else 1 - share)
            _, look = mark(trial_id)
            ax.plot(
                range(len(names)),
                ys,
                color=look["color"],
                linewidth=2.0 if look["zorder"] > 2 else 0.8,
                zorder=look["zorder"],
                marker="*" if trial_id == best else None,  # as in the two-objective scatter
                markersize=12,
            )
        ax.set_xticks(range(len(names)), front.objectives, fontsize=8)
        ax.set_yticks([])
    shown = dict(mark(trial_id) for trial_id, _ in rows)
    if len(names) == 2:
        ax.legend(handles=_legend_marks(shown, lines=False), fontsize=8, loc="best")
    else:  # lines cross the whole plot: the legend goes under it
        marks = _legend_marks(shown, lines=True)
        ax.legend(handles=marks, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=len(marks))
    picked = "star: the selected best" if best is not None else "the select rule chose none"
    ax.set_title(f"Pareto front: {len(front.front)} of {len(rows)} trials ({picked})", fontsize=10)
    return _finish(fig, path)


def _legend_marks(shown: dict[str, dict[str, Any]], *, lines: bool) -> list[Any]:
    """One legend entry per kind of mark drawn: its marker (a scatter) or its line (parallel coordinates)."""
    from matplotlib.lines import Line2D

    order = ("the selected best", "on the front", "behind the front")
    labels = sorted(shown, key=lambda label: (order.index(label) if label in order else len(order), label))
    marks = []
    for label in labels:
        look = shown[label]
        mark = Line2D([], [], color=look["color"], label=label)
        if lines:
            mark.set_linewidth(2.0 if look["zorder"] > 2 else 0.8)
            if look["marker"] == "*":
                mark.set_marker("*")
                mark.set_markersize(12)
        else:
            mark.set_linestyle("none")
            mark.set_marker(look["marker"])
            mark.set_markersize(look["s"] ** 0.5)
        marks.append(mark)
    return marks


def all_figures(results: ExperimentResults) -> dict[str, Figure]:
    """Every figure above, by name, in the order a report shows them (the lineage for PBT only).

    Parameter importance is left out when there is none (``results.importance().note`` says why:
    the report writes that line instead of an empty figure).
    """
    from tunekit.results.importance import importance

    figures = {
        "learning_curves": learning_curves(results),
        "best_so_far": best_so_far(results),
        "parallel_coordinates": parallel_coordinates(results),
    }
    if importance(results, warn=False):
        figures["param_importance"] = param_importance(results)
    if results.spec.scheduler.type == "pbt":
        figures["lineage"] = lineage(results)
    if results.spec.multi_objective:
        figures["pareto"] = pareto(results)
    return figures


# ------------------------------------------------------------------- internals


def _param_columns(results: ExperimentResults) -> list[str]:
    return [c for c in results.trials.columns if c.startswith(PARAM_PREFIX)] if not results.trials.empty else []


def _rung_lines(ax: Axes, results: ExperimentResults) -> None:
    for index, epoch in enumerate(spec_milestones(results.spec)):
        ax.axvline(epoch, color="#999999", linestyle=":", linewidth=1, zorder=1)
        ax.text(
            epoch,
            1.0,
            f" rung {index}",
            transform=ax.get_xaxis_transform(),
            fontsize=7,
            color="#666666",
            va="top",
            ha="left",
        )


def _trial_numbers(results: ExperimentResults) -> dict[str, int | str]:
    """{trial id: its Optuna number (or the id when it has none)}, in the trials table's order."""
    if results.trials.empty:
        return {}
    return {
        str(row.trial_id): str(row.trial_id) if _missing(row.number) else int(row.number)
        for row in results.trials.itertuples()
    }


def _trial_colors(trial_ids: list[str]) -> dict[str, str]:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if len(trial_ids) <= 10 else "tab20"]
    return {trial_id: _hex(cmap(i % cmap.N)) for i, trial_id in enumerate(trial_ids)}


def _faded(color: str, share: float = 0.5) -> str:
    """``color`` mixed with white: what a half-transparent mark looks like on white, as a solid colour."""
    from matplotlib.colors import to_rgb

    return _hex([c + (1 - c) * share for c in to_rgb(color)])


def _hex(rgba: Any) -> str:
    return "#{:02x}{:02x}{:02x}".format(*(round(c * 255) for c in rgba[:3]))


def _figure(width: float = _SIZE[0]) -> tuple[Figure, Axes]:
    from matplotlib.figure import Figure

    figures_shown_in_jupyter()
    fig = Figure(figsize=(width, _SIZE[1]), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    ax.grid(alpha=0.25)
    return fig, ax


def _empty(fig: Figure, ax: Axes, message: str) -> Figure:
    ax.axis("off")
    ax.text(
        0.5,
        0.5,
        message,
        ha="center",
        va="center",
        fontsize=10,
        wrap=True,
        color="#555555",
        transform=ax.transAxes,
    )
    return fig


def _finish(fig: Figure, path: str | Path | None) -> Figure:
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, format="png")
    return fig


def _line(color: str, label: str, *, marker: str | None = None, width: float = 1.4) -> Any:
    from matplotlib.lines import Line2D

    return Line2D([], [], color=color, label=label, marker=marker, linewidth=width)


def _scalar_mappable(cmap: Any, norm: Any) -> Any:
    from matplotlib.cm import ScalarMappable

    return ScalarMappable(norm=norm, cmap=cmap)


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))
