"""What a search's end and ``tunekit report`` say of it, in lines: counts, times, the best and its scope.

``tunekit.run`` and ``tunekit.resume`` write ``closing_text`` to their progress stream when the
search ends (the command line's stdout, or a notebook's), and ``tunekit report`` prints the
same ``closing_lines`` below its table: one wording for both.
"""

from __future__ import annotations

from pathlib import Path

from tunekit.layout import ENDED_STATUSES, TrialStatus
from tunekit.results.best import INHERITED, config_text, describe_lineage, no_best_reason
from tunekit.results.load import ExperimentResults
from tunekit.results.summary import Summary, summarize
from tunekit.results.unread import unread_warning
from tunekit.storage.buckets import shown


def closing_text(results: ExperimentResults) -> str:
    """The experiment's folder, ``closing_lines``, and its MLflow page when tracking went to a server."""
    lines = [f"experiment: {shown(results.experiment_dir)}", *closing_lines(results, summarize(results))]
    if link := mlflow_link(results.experiment_dir):
        lines.append(f"mlflow: {link}")
    return "\n".join(lines) + "\n"


def closing_lines(results: ExperimentResults, summary: Summary) -> list[str]:
    """What the search's end and ``tunekit report`` say of it: counts, times, the best (and its scope)."""
    # Trials the tables still hold running (a search under way, or its driver killed) are counted too.
    shown = ENDED_STATUSES + ((TrialStatus.RUNNING,) if summary.counts.get(TrialStatus.RUNNING) else ())
    lines = ["trials: " + ", ".join(f"{summary.counts.get(s, 0)} {s}" for s in shown)]
    if summary.not_started:
        lines[0] += f", {summary.not_started} not started (the time budget ran out)"
    lines += summary.time_lines()
    lines += summary.front_lines()
    best = summary.best
    if best is None:
        lines.append(f"best: none ({no_best_reason(summary.pareto is not None)})")
    elif best.rule:
        values = ", ".join(f"{name}={value:.6g}" for name, value in best.values.items())
        lines.append(f"best: trial {best.number} ({best.trial_id}) {values}, chosen by {best.rule}")
        lines.append(f"best config: {config_text(best.config)}")
        lines += [f"best ran on: {best.ran_on}"] if best.ran_on else []
    else:
        lines.append(
            f"best: trial {best.number} ({best.trial_id}) {results.metric}={best.metric:.4f} "
            f"after {best.epochs} epochs, {best.status}"
        )
        changed = " (after PBT's exploit steps; the model was trained under it)" if best.lineage else ""
        lines.append(f"best config{changed}: {config_text(best.config)}")
        lines += [f"  {line}" for line in describe_lineage(best)]
        lines += [f"best ran on: {best.ran_on}"] if best.ran_on else []
    inherited = summary.best_including_history
    if inherited is not None and inherited.scope == INHERITED:
        scores = ", ".join(f"{name}={value:.6g}" for name, value in inherited.values.items())
        lines.append(
            f"best including warm-start history: trial {inherited.number} of {inherited.source} "
            f"{scores or f'{results.metric}={inherited.metric:.4f}'} ({config_text(inherited.config)})"
        )
    if warning := unread_warning(results):
        lines.append(warning)
    return lines


def mlflow_link(experiment_dir: Path) -> str | None:
    """The MLflow UI page of the experiment's runs, when tracking went to a server, and
    whether MLflow lacks records of it (a server that went away and did not come back)."""
    from tunekit.tracking.record import TrackingRecord

    record = TrackingRecord.read(experiment_dir)
    if record is None or record.ui_url is None:
        return None
    if record.holds_everything:
        return record.ui_url
    return f"{record.ui_url} (incomplete: `tunekit sync {shown(experiment_dir)}` sends what MLflow lacks)"
