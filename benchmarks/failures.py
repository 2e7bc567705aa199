"""Failures teach the search: how many failing configurations TPE proposes when a failed trial
informs it (tunekit now) against Optuna's plain FAIL, which its samplers ignore (tunekit before).

What is measured is the sampler's choices, so no model trains: tunekit's own searcher
(``OptunaStudySearcher``, with the sampler ``build_sampler`` makes for the shipped default
search, ``search_spaces/digits_mlp.yaml``: TPE, 8 random start-up trials, constant liar) is
asked for a configuration and told its outcome, one trial at a time, on an in-memory Optuna
study. No Ray runtime starts (only Ray Tune's ``Searcher`` class is imported) and no
TensorFlow: a run takes seconds.

The outcome is synthetic and deterministic. A learning rate in the top third of the space's
log range (above 10^-2.67, about 2.2e-3) diverges: the trial fails on its own, as
``tunekit.worker.trial`` reports a non-finite loss (a "trial" failure). Below it, the
validation accuracy grows with the learning rate (and prefers dropout near 0.2, more units,
smaller batches), so the best configurations border the failing region, as they often do.

Two arms, same seeds, same space, same 24 trials:

* ``plain``: the study is told FAIL and TPE ignores the trial (``teach_failures=False``).
* ``taught``: the study is told FAIL as well (its record is unchanged), and TPE sees the
  failed trial as infeasible (``tunekit.compat.optuna_failures``).

Both arms make the same 8 random start-up proposals for a seed (``n_startup_trials``). A
failed trial counts toward them only when failures teach: plain FAIL trials are not seen at
all, so the plain arm samples at random until 8 trials have not failed, then TPE chooses.
Random search would fail a third of its trials (8 of 24) on average.
A second pair of arms does the same with two objectives (MOTPE: val_accuracy, and
model_params from the units), as ``search_spaces/digits_mlp_pareto.yaml`` searches.
"""

from __future__ import annotations

import math
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import common

NAME = "failures"
TITLE = "failed trials TPE proposes: failures taught to the sampler vs plain FAIL (synthetic, no Ray)"
DIVERGES_ABOVE = 10 ** (-4 + 2 * 2 / 3)  # the top third of log10(learning_rate) in [-4, -2]
ARMS = ("plain", "taught")
MODES: dict[str, dict[str, Any]] = {
    "smoke": {"trials": 12, "seeds": (0,)},
    "quick": {"trials": 24, "seeds": (0, 1, 2)},
    "full": {"trials": 24, "seeds": tuple(range(10))},
}
DEFINITIONS = {
    "failed": "trials whose configuration is in the failing region (learning rate above 10^-2.67), of all the "
    "trials of a search",
    "failed after the start-up": "the same, among the trials after the first 8 (random in both arms): in the "
    "taught arm TPE chose them all, in the plain arm TPE chose those after 8 trials had not failed",
    "best accuracy": "the highest synthetic val_accuracy among the search's trials that did not fail",
}


def accuracy(config: dict[str, Any]) -> float:
    """The synthetic validation accuracy of a configuration outside the failing region."""
    rate = (math.log10(config["learning_rate"]) + 4) / 2  # 0 .. 2/3 below the failing region
    return (
        0.85
        + 0.12 * rate
        - 0.06 * abs(config["dropout"] - 0.2)
        + 0.01 * math.log2(config["units"] / 32) / 3
        - 0.01 * math.log2(config["batch_size"] / 16) / 2
    )


def model_params(config: dict[str, Any]) -> float:
    """The digits MLP's parameters for its units (64 inputs, 10 classes)."""
    units = int(config["units"])
    return float(64 * units + units + units * 10 + 10)


def search(arm: str, seed: int, trials: int, objectives: int, workdir: Path) -> dict[str, Any]:
    """One search of ``trials`` trials; which failed, in order, and the best accuracy found."""
    import optuna

    from tunekit.config.spec import load_spec
    from tunekit.layout import EPOCH_KEY, FAILURE_KEY, FAILURE_KIND_KEY
    from tunekit.search.searcher import OptunaStudySearcher
    from tunekit.search.study import build_sampler

    sections: dict[str, Any] = {"budget": {"num_samples": trials}, "search": {"seed": seed}}
    if objectives == 2:
        sections["metric"] = [{"name": "val_accuracy", "mode": "max"}, {"name": "model_params", "mode": "min"}]
    spec = load_spec(common.digits_spec(**sections))
    searcher = OptunaStudySearcher(spec, workdir, storage=optuna.storages.InMemoryStorage())
    searcher.study.sampler = build_sampler(spec, teach_failures=arm == "taught")
    failed: list[bool] = []
    best: float | None = None
    for number in range(trials):
        trial_id = f"{arm}-{seed}-{number}"
        config = searcher.suggest(trial_id)
        if config is None:
            raise RuntimeError(f"the searcher had no configuration for trial {number}")
        if config["learning_rate"] > DIVERGES_ABOVE:
            failed.append(True)
            # A failure of the trial's own, as tunekit.worker.trial reports a non-finite loss.
            result: dict[str, Any] = {EPOCH_KEY: 1, FAILURE_KEY: "non-finite loss", FAILURE_KIND_KEY: "trial"}
        else:
            failed.append(False)
            value = accuracy(config)
            best = value if best is None else max(best, value)
            # Every epoch trained: COMPLETE with this value (no pruning: the searcher is asked alone).
            result = {EPOCH_KEY: spec.budget.max_epochs, "val_accuracy": value, "model_params": model_params(config)}
        searcher.on_trial_complete(trial_id, result)
    recorded = [trial.state.name for trial in searcher.study.trials].count("FAIL")
    return {
        "failed": sum(failed),
        "failed_after_startup": sum(failed[8:]),
        "recorded_fail": recorded,
        "order": failed,
        "best_accuracy": best,
    }


def main(argv: list[str] | None = None) -> int:
    p = common.parser(NAME, __doc__.splitlines()[0])
    args = p.parse_args(argv)
    settings = MODES[args.mode]
    trials, seeds = int(settings["trials"]), tuple(settings["seeds"])
    report = common.Report(NAME, TITLE, args.mode, args.out)
    runs: dict[str, dict[str, dict[int, dict[str, Any]]]] = {}
    with tempfile.TemporaryDirectory(prefix="tunekit-bench-failures-") as workdir:
        for objectives, label in ((1, "tpe"), (2, "motpe")):
            for arm in ARMS:
                for seed in seeds:
                    run = search(arm, seed, trials, objectives, Path(workdir))
                    runs.setdefault(label, {}).setdefault(arm, {})[seed] = run
                    print(
                        f"[{NAME}] {label}, {arm}, seed {seed}: {run['failed']} of {trials} failed "
                        f"({run['failed_after_startup']} of the {max(trials - 8, 0)} after the start-up)",
                        flush=True,
                    )
    figures, ratios = [], []
    for label, title in (("tpe", "TPE"), ("motpe", "MOTPE, two objectives")):
        plain, taught = runs[label]["plain"], runs[label]["taught"]
        per_seed = {arm: [runs[label][arm][seed]["failed"] for seed in seeds] for arm in ARMS}
        fewer = all(t < p for t, p in zip(per_seed["taught"], per_seed["plain"], strict=True))
        for arm, runs_of_arm in (("plain FAIL (before)", plain), ("failures taught (after)", taught)):
            counts = [runs_of_arm[seed]["failed"] for seed in seeds]
            picks = [runs_of_arm[seed]["failed_after_startup"] for seed in seeds]
            figures.append(
                common.figure(
                    f"{title}, {arm}: failed trials per seed",
                    ", ".join(f"{c}/{trials}" for c in counts),
                    note=f"seeds {', '.join(map(str, seeds))}",
                )
            )
            figures.append(
                common.figure(f"{title}, {arm}: failed trials in all", sum(counts), f"of {trials * len(seeds)}")
            )
            figures.append(
                common.figure(
                    f"{title}, {arm}: failed after the start-up", sum(picks), f"of {max(trials - 8, 0) * len(seeds)}"
                )
            )
            if label == "tpe":
                best = [runs_of_arm[seed]["best_accuracy"] for seed in seeds]
                figures.append(
                    common.figure(f"{title}, {arm}: best accuracy per seed", ", ".join(common.fmt(b, 4) for b in best))
                )
        honest = all(run["recorded_fail"] == run["failed"] for arm in ARMS for run in runs[label][arm].values())
        figures.append(
            common.figure(f"{title}: the study records every failed trial as FAIL", honest, target="yes", met=honest)
        )
        figures.append(
            common.figure(
                f"{title}: fewer failed trials with failures taught, on every seed",
                fewer,
                target="yes",
                met=fewer,
            )
        )
        total_plain = sum(per_seed["plain"])
        total_taught = sum(per_seed["taught"])
        ratios.append(
            f"{title}: failed trials, failures taught / plain FAIL = {total_taught}/{total_plain} = "
            f"{common.fmt(common.ratio(total_taught, total_plain))}"
        )
    setup = {
        "space": "search_spaces/digits_mlp.yaml's (learning_rate 1e-4..1e-2 log, units, dropout, batch_size)",
        "sampler": "tunekit's build_sampler: TPE, n_startup_trials 8, constant liar, multivariate",
        "trials": f"{trials} per search, asked and told one at a time",
        "seeds": f"search.seed {', '.join(map(str, seeds))}, each arm once per seed",
        "failing region": "learning_rate above 10^-2.67 (a third of the log range): a 'trial' failure",
    }
    notes = [
        "The sampler's choices only: no Ray runtime, no TensorFlow, a synthetic deterministic outcome.",
        "Random search would fail a third of its trials on average (8 of 24).",
        "Both arms record every failed trial as FAIL in the study; only what TPE sees differs.",
    ]
    return report.finish(figures, ratios, DEFINITIONS, setup, notes, {"runs": runs})


if __name__ == "__main__":
    sys.exit(main())
