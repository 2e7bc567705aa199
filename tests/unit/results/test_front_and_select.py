"""The experiment's Pareto front, each trial's rank and the select rule, from a hand-made trials
table whose answers were worked out by hand: no Ray, no search."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd
import pytest
from matplotlib.text import Annotation

from tunekit.config.spec import ExperimentSpec, parse_spec
from tunekit.results.best import best_trial
from tunekit.results.load import ExperimentResults
from tunekit.results.pareto import INFEASIBLE, FrontTrial, pareto_of

RAW: dict[str, Any] = {
    "name": "front",
    "trainable": "trainables.digits_mlp",
    "metric": [{"name": "val_accuracy", "mode": "max"}, {"name": "model_params", "mode": "min"}],
    "budget": {"num_samples": 7, "max_epochs": 4},
    "constraints": ["latency_ms <= 5"],
    "space": {"units": {"type": "choice", "values": [8, 16, 32, 64]}},
}
# (id, status, accuracy, params, latency). By hand, among the feasible completed a b c d:
# a (0.90, 5000), b (0.80, 1000) and c (0.95, 20000) trade off: front 1; d (0.85, 6000) is
# dominated by a only: front 2. e is more accurate and smaller than all, but 9 ms breaks the
# constraint; f was pruned; g failed before reporting.
ROWS = [
    ("a", "completed", 0.90, 5000.0, 2.0),
    ("b", "completed", 0.80, 1000.0, 1.0),
    ("c", "completed", 0.95, 20000.0, 4.0),
    ("d", "completed", 0.85, 6000.0, 3.0),
    ("e", "completed", 0.99, 500.0, 9.0),
    ("f", "pruned", 0.97, 800.0, 1.0),
    ("g", "failed", None, None, None),
]


def spec(**changes: Any) -> ExperimentSpec:
    raw = copy.deepcopy(RAW)
    raw.update(changes)
    return parse_spec(raw, None, locate_trainable=False)


def table() -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "trial_id": trial_id,
                "number": number,
                "status": status,
                "epochs": 4 if status == "completed" else 1,
                "final_metric": accuracy,
                "final.val_accuracy": accuracy,
                "final.model_params": params,
                "final.latency_ms": latency,
                "params.units": 8,
            }
            for number, (trial_id, status, accuracy, params, latency) in enumerate(ROWS)
        ]
    )


def test_front_ranks_and_why_the_others_have_none() -> None:
    front = pareto_of(table(), spec())
    assert front is not None
    # Best first by the first objective (accuracy).
    assert front.front == [
        FrontTrial("c", 2, {"val_accuracy": 0.95, "model_params": 20000.0}),
        FrontTrial("a", 0, {"val_accuracy": 0.90, "model_params": 5000.0}),
        FrontTrial("b", 1, {"val_accuracy": 0.80, "model_params": 1000.0}),
    ]
    assert front.ranks == {"a": 1, "b": 1, "c": 1, "d": 2}
    assert front.unranked == {"e": INFEASIBLE, "f": "pruned", "g": "failed"}
    assert [front.rank_text(t) for t in "adeg"] == ["1", "2", INFEASIBLE, "failed"]


def test_single_objective_has_no_front() -> None:
    assert pareto_of(table(), spec(metric={"name": "val_accuracy", "mode": "max"}, constraints=None)) is None


@pytest.mark.parametrize(
    ("select", "chosen", "rule"),
    [
        (None, "c", "select: maximize val_accuracy among the Pareto front (the default: the first objective)"),
        ({"minimize": "model_params"}, "b", "select: minimize model_params among the Pareto front"),
        (
            {"maximize": "val_accuracy", "subject_to": ["model_params <= 10000"]},
            "a",
            "select: maximize val_accuracy among the Pareto front subject to model_params <= 10000",
        ),
        # d meets it but is not on the front; e is more accurate but infeasible: nobody.
        ({"maximize": "val_accuracy", "subject_to": ["model_params <= 800"]}, None, ""),
    ],
)
def test_select_picks_among_the_front(select: dict[str, Any] | None, chosen: str | None, rule: str) -> None:
    the_spec = spec(select=select)
    best = best_trial(table(), pd.DataFrame(), "max", the_spec)
    assert (best.trial_id if best else None) == chosen
    if best is not None:
        assert best.rule == rule
        # The best's metric is the rule's metric: model_params when select minimizes it.
        by = next((select[key] for key in ("maximize", "minimize") if select and key in select), "val_accuracy")
        accuracy, params = {row[0]: (row[2], row[3]) for row in ROWS}[best.trial_id]
        assert best.metric == (accuracy if by == "val_accuracy" else params)


def test_pareto_front_and_ranked_tables() -> None:
    results = results_of(spec())
    assert list(results.pareto_front()["trial_id"]) == ["c", "a", "b"]
    ranked = results.ranked()
    assert list(zip(ranked["trial_id"], ranked["pareto_rank"], strict=True))[:4] == [
        ("c", "1"),
        ("a", "1"),
        ("b", "1"),
        ("d", "2"),
    ]
    # select minimizes model_params: its pick, b (1000 params), comes first, then the front by size.
    small = results_of(spec(select={"minimize": "model_params"}))
    assert small.best is not None and small.best.trial_id == "b"
    assert list(small.ranked()["trial_id"])[:4] == ["b", "a", "c", "d"]


def results_of(the_spec: ExperimentSpec) -> ExperimentResults:
    trials = table()
    best = best_trial(trials, pd.DataFrame(), "max", the_spec)
    return ExperimentResults(Path("/nowhere"), the_spec, trials, pd.DataFrame(), best)


def test_the_pareto_figure_and_the_html_page() -> None:
    from matplotlib.figure import Figure

    from tunekit import plots
    from tunekit.results.report import render_html

    two = results_of(spec())
    assert isinstance(plots.pareto(two), Figure)
    assert plots.pareto(two).axes[0].get_title() == "Pareto front: 3 of 6 trials (star: the selected best)"
    drawn = plots.pareto(two).axes[0].get_legend()
    assert drawn is not None
    legend = [text.get_text() for text in drawn.get_texts()]
    # a, b, c on the front (c the pick), d behind it, e breaks the latency constraint, f pruned.
    assert legend == [
        "the selected best",
        "on the front",
        "behind the front",
        "infeasible (breaks a constraint)",
        "pruned (not ranked)",
    ]
    none_chosen = results_of(spec(select={"maximize": "val_accuracy", "subject_to": ["model_params <= 10"]}))
    assert none_chosen.best is None
    assert plots.pareto(none_chosen).axes[0].get_title() == "Pareto front: 3 of 6 trials (the select rule chose none)"
    assert "No best trial: no trial on the Pareto front meets the select rule." in render_html(none_chosen, {})
    three = spec(metric=[*RAW["metric"], {"name": "latency_ms", "mode": "min"}])
    assert plots.pareto(results_of(three)).axes[0].get_xticklabels()[2].get_text() == "latency_ms (min)"
    page = render_html(two, {})
    assert "<h2>Pareto front</h2>" in page
    assert "pareto front: 3 of 4 feasible completed trials" in page
    assert "Chosen by select: maximize val_accuracy among the Pareto front" in page
    assert "<th>pareto rank</th>" in page.replace(' class=""', "")


def test_trials_with_the_same_scores_share_one_solid_mark_counted_beside_it() -> None:
    from tunekit import plots

    the_spec = spec()
    trials = pd.concat([table(), table().iloc[[0]].assign(trial_id="h", number=7)], ignore_index=True)
    best = best_trial(trials, pd.DataFrame(), "max", the_spec)
    ax = plots.pareto(ExperimentResults(Path("/nowhere"), the_spec, trials, pd.DataFrame(), best)).axes[0]
    # h scored as a did: one mark for both, "×2" beside it; g reported nothing, so 6 marks for 7 rows.
    assert [(text.get_text(), cast(Annotation, text).xy) for text in ax.texts] == [("×2", (0.90, 5000.0))]
    points = [tuple(np.asarray(collection.get_offsets())[0]) for collection in ax.collections]
    assert len(points) == len(set(points)) == 6
    # No translucent marks: where two overlap, no colour appears that the legend lacks.
    assert all(collection.get_alpha() is None for collection in ax.collections)


def test_check_holds_a_front_against_its_definition_and_the_feasible_column() -> None:
    import dataclasses

    from tunekit.results.check_pareto import front_findings
    from tunekit.results.summary import summarize

    results = results_of(spec())
    summary = summarize(results)
    assert list(front_findings(results, summary)) == []
    # d (front 2) put on the front, b (front 1) left off; e marked feasible at 9 ms.
    assert summary.pareto is not None
    wrong = dataclasses.replace(summary.pareto, front=[summary.pareto.front[0], FrontTrial("d", 3, {})])
    results.trials.loc[results.trials["trial_id"] == "e", "feasible"] = True
    found = list(front_findings(results, dataclasses.replace(summary, pareto=wrong)))
    assert found == [
        ("trials.csv feasible vs constraints", "trial 4 (e)", False, True),
        ("summary's front vs dominance", "trial 0 (a)", "dominated by a front trial", "not"),
        ("summary's front vs dominance", "trial 1 (b)", "dominated by a front trial", "not"),
        ("summary's front vs dominance", "front trial 3 (d)", "non-dominated", ["a"]),
    ]


def test_check_holds_the_front_against_optuna_s_front_of_the_search_s_own_trials() -> None:
    # A warm-started study also holds the earlier search's trials: one more accurate and
    # smaller than a, b and c dominates them all, yet this search's front stays a, b, c.
    import optuna

    from tunekit.layout import RAY_TRIAL_ATTR
    from tunekit.results.check_pareto import FRONT_VS_STUDY, study_findings
    from tunekit.results.summary import summarize
    from tunekit.search.attrs import HISTORY_ATTR

    results = results_of(spec())
    summary = summarize(results)
    study = optuna.create_study(directions=["maximize", "minimize"])
    units: dict[str, optuna.distributions.BaseDistribution] = {
        "units": optuna.distributions.CategoricalDistribution([8, 16, 32, 64])
    }
    earlier = study.ask(units)
    earlier.set_user_attr(HISTORY_ATTR, "/runs/earlier#3")
    earlier.set_constraint("latency_ms <= 5", -4.0)
    study.tell(earlier, [0.99, 100.0])
    ours: dict[str, optuna.trial.FrozenTrial] = {}
    for trial_id, status, accuracy, params, latency in ROWS:
        trial = study.ask(units)
        trial.set_user_attr(RAY_TRIAL_ATTR, trial_id)
        if status == "completed" and accuracy is not None and params is not None and latency is not None:
            trial.set_constraint("latency_ms <= 5", latency - 5)
            study.tell(trial, [accuracy, params])
        else:
            study.tell(
                trial, state=optuna.trial.TrialState.PRUNED if status == "pruned" else optuna.trial.TrialState.FAIL
            )
        ours[trial_id] = study.trials[-1]
    assert [t.number for t in study.best_trials] == [0]  # Optuna's own, history included
    assert list(study_findings(results, summary, study, ours)) == []
    # A front that leaves out one of the search's own: a finding, each side named.
    assert summary.pareto is not None
    import dataclasses

    short = dataclasses.replace(summary, pareto=dataclasses.replace(summary.pareto, front=summary.pareto.front[:2]))
    found = list(study_findings(results, short, study, ours))
    assert found == [
        (FRONT_VS_STUDY, "pareto front", sorted(t.trial_id for t in summary.pareto.front[:2]), ["a", "b", "c"])
    ]


def test_the_best_including_a_warm_start_s_history_follows_the_select_rule(tmp_path: Path) -> None:
    # Objectives in the other order: the first is model_params (smaller is better), yet select
    # maximizes val_accuracy: own pick c (0.95, 20000 params) against the history's pick.
    import json

    from tunekit.layout import WARM_START_FILE
    from tunekit.results.closing import closing_lines
    from tunekit.results.summary import summarize

    the_spec = spec(
        metric=[{"name": "model_params", "mode": "min"}, {"name": "val_accuracy", "mode": "max"}],
        select={"maximize": "val_accuracy"},
    )
    trials = table()
    results = ExperimentResults(
        tmp_path, the_spec, trials, pd.DataFrame(), best_trial(trials, pd.DataFrame(), "min", the_spec)
    )
    assert results.best is not None and results.best.trial_id == "c"
    earlier = {"source": "/runs/earlier", "number": 13, "trial_id": "5e1f", "status": "completed", "epochs": 9}
    for accuracy, chosen in ((0.94, "c"), (0.97, "5e1f")):
        values = {"model_params": 1482.0, "val_accuracy": accuracy}
        best = {**earlier, "metric": 1482.0, "values": values, "rule": "select: maximize val_accuracy", "config": {}}
        (tmp_path / WARM_START_FILE).write_text(json.dumps({"sources": ["/runs/earlier"], "used": 4, "best": best}))
        summary = summarize(results)
        assert summary.best_including_history is not None
        assert summary.best_including_history.trial_id == chosen, accuracy
    lines = closing_lines(results, summary)
    assert (
        "best including warm-start history: trial 13 of /runs/earlier model_params=1482, val_accuracy=0.97 ()" in lines
    )


def test_time_to_best_with_several_objectives_counts_the_trials_the_select_rule_could_pick() -> None:
    # e is the most accurate early on, but breaks the latency constraint: the search reached
    # its best (c, select's pick, 0.95) when c got there, not when e did.
    from tunekit.results.ledger import _time_to_best

    epochs = pd.DataFrame(
        [
            {"trial_id": "e", "epoch": 1, "time": 1.0, "val_accuracy": 0.99},
            {"trial_id": "a", "epoch": 1, "time": 2.0, "val_accuracy": 0.90},
            {"trial_id": "c", "epoch": 1, "time": 5.0, "val_accuracy": 0.80},
            {"trial_id": "c", "epoch": 2, "time": 8.0, "val_accuracy": 0.95},
        ]
    )
    the_spec = spec()
    trials = table()
    best = best_trial(trials, pd.DataFrame(), "max", the_spec)
    assert best is not None and best.trial_id == "c"
    results = ExperimentResults(Path("/nowhere"), the_spec, trials, epochs, best)
    assert _time_to_best(results, 0.0) == (0.95, 8.0)
    assert _time_to_best(results, 0.06) == (0.95, 2.0)  # a's 0.90 is within 6 %


def test_check_holds_the_ledger_s_final_best_in_select_s_metric() -> None:
    # Objectives model_params then val_accuracy, select maximizes val_accuracy: the ledger's
    # final best is c's val_accuracy, not its size (check said '1.21 vs 0.9083' of a valid search).
    from tunekit.results.check import _figures
    from tunekit.results.summary import summarize

    the_spec = spec(
        metric=[{"name": "model_params", "mode": "min"}, {"name": "val_accuracy", "mode": "max"}],
        select={"maximize": "val_accuracy"},
    )
    trials = table().assign(wall_seconds=1.0, started_at=0.0, ended_at=1.0)
    assert trials["final_metric"].equals(trials["final.val_accuracy"])  # trials.csv's: select's metric
    epochs = pd.DataFrame([{"trial_id": "c", "epoch": 4, "time": 8.0, "val_accuracy": 0.95, "model_params": 20000.0}])
    best = best_trial(trials, pd.DataFrame(), "min", the_spec)
    results = ExperimentResults(Path("/nowhere"), the_spec, trials, epochs, best)
    summary = summarize(results)
    assert summary.ledger.final_best == 0.95
    assert [f for f in _figures(results, summary) if f.what == "final best"] == []
