"""Which pieces of the per-epoch and per-trial overhead grew since the published figures.

``python -m benchmarks.regressions [--out DIR] [--threshold 0.2] [--publish]``

Reads the breakdown of the last overhead run (``DIR/overhead/overhead.json`` or
``DIR/overhead.json``, written by ``python -m benchmarks.run --quick --only overhead``) and
compares each of tunekit's pieces with ``benchmarks/published/overhead.json``, the figures
the performance page states (with their commit and date). It prints the pieces that grew
by more than the threshold. ``--publish`` makes the last run the published one.

A guard, not a test: timings on a shared machine vary, so it names suspects for a person
to measure again; the exit status is 1 when something grew, for scripts that want it.

The same code runs slower on a slower (or busier) machine. Each run measures the machine's
pace twice, and the published figures are scaled by the ratio of the two runs' yardsticks
before they are compared, so a piece that grew with the machine is not flagged:

* the search's start-up and per-trial overhead by plain Ray Tune's start-up in the same run
  (Ray's start, a worker, TensorFlow's import: processes and imports, whose pace does not
  follow a model's steps);
* every other piece by the model's own later epoch in plain Keras (train and validate).

The search's per-trial overhead spreads the start-up over the run's trials, so it is compared
only between runs of the same mode (quick or full).

Like with like: the published record names what tunekit's side did about tracking
(``tracking``: ``on``, the overhead benchmark's headline since 2026-11-28, or ``off``, its
second row; a record without it is from before, when tunekit ran untracked), and it is
compared with the run's row of the same kind, yardsticks included. ``--publish`` publishes
the headline (``--tracking off``: the untracked row).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks import common
from benchmarks.overhead import side_loads

PUBLISHED = Path(__file__).resolve().parent / "published" / "overhead.json"
THRESHOLD = 0.20
NOISE_MS = 1.0  # a piece under a millisecond that doubles is noise, not a regression


def row_of(details: dict[str, Any], tracking: str) -> dict[str, Any] | None:
    """The run's details for one kind of row (``on``: both sides tracked, ``off``: both untracked),
    in the shape ``pieces_of`` and the yardsticks read, or None when the run has no such row.

    A run from before the equal-terms change has no ``tracking`` key: its tunekit side was
    untracked (its plain side tracked), so it answers only for ``off``. A run of the whole-process
    row alone (``overhead --rows whole``) has no in-window summary and answers for neither."""
    if "summary" not in details:
        return None
    kind = details.get("tracking")
    if kind is None:
        return details if tracking == "off" else None
    if kind == tracking:
        return details
    other = details.get("untracked") if tracking == "off" else None
    if other is None:
        return None
    keras = (details.get("breakdown") or {}).get("plain_keras")
    return {
        "summary": other["summary"],
        "breakdown": {**other["breakdown"], **({"plain_keras": keras} if keras is not None else {})},
    }


def pieces_of(details: dict[str, Any]) -> dict[str, float]:
    """tunekit's pieces as one flat table of milliseconds, with the search's start-up and per-trial overhead."""
    breakdown, summary = details["breakdown"]["tunekit"], details["summary"]["tunekit"]
    flat = {
        f"search: {name}": 1000 * summary[key]
        for name, key in (("start-up", "startup_s"), ("per-trial overhead", "overhead_per_trial_s"))
        if summary.get(key) is not None
    }
    flat.update({f"per epoch: {k}": v for k, v in breakdown["per_epoch_ms"].items()})
    flat.update({f"per trial: {k}": v for k, v in breakdown["per_trial_ms"].items()})
    if breakdown.get("tracing_ms") is not None:
        flat["per trial: tracing"] = breakdown["tracing_ms"]
    return flat


STARTUP_PIECES = ("search: start-up", "search: per-trial overhead")
PER_RUN_PIECE = "search: per-trial overhead"  # its value depends on the run's number of trials


def startup_yardstick_ms(details: dict[str, Any]) -> float | None:
    """The machine's pace at starting a search: plain Ray Tune's start-up in this run, in ms."""
    startup = (details["summary"].get("plain_ray_tune") or {}).get("startup_s")
    return None if startup is None else 1000 * float(startup)


def yardstick_ms(details: dict[str, Any]) -> float | None:
    """The machine's pace in this run: plain Keras's later epoch (train and validate), in ms."""
    keras = (details["breakdown"].get("plain_keras") or {}).get("per_epoch_ms") or {}
    pieces = [keras.get("epoch.train"), keras.get("epoch.validate")]
    return None if None in pieces else float(sum(pieces))  # type: ignore[arg-type]


def grown(
    published: dict[str, float],
    now: dict[str, float],
    threshold: float = THRESHOLD,
    pace: float = 1.0,
    startup_pace: float | None = None,
) -> list[str]:
    """One line per piece that grew by more than ``threshold`` (and by more than NOISE_MS), largest
    first. ``pace``: how much slower this machine ran a model's steps than the published run's;
    ``startup_pace``: how much slower it started a search (``pace`` when not measured). Each
    published figure is scaled by its own."""
    rows = []
    for name, unscaled in published.items():
        before = unscaled * (startup_pace if startup_pace is not None and name in STARTUP_PIECES else pace)
        after = now.get(name)
        if after is None or after - before <= NOISE_MS or after <= before * (1 + threshold):
            continue
        rows.append((after / before if before else float("inf"), f"{name}: {before:.1f} ms -> {after:.1f} ms"))
    rows += [(float("inf"), f"{name}: new, {now[name]:.1f} ms") for name in now.keys() - published.keys()]
    return [f"{text} (x{ratio:.2f})" if ratio != float("inf") else text for ratio, text in sorted(rows, reverse=True)]


def _last_run(out: Path) -> dict[str, Any]:
    for candidate in (out / "overhead" / "overhead.json", out / "overhead.json"):
        if candidate.is_file():
            return json.loads(candidate.read_text())
    raise SystemExit(f"no overhead run in {out}: run python -m benchmarks.run --quick --only overhead first")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.regressions", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=common.DEFAULT_OUT, help="the benchmarks' output directory")
    p.add_argument("--threshold", type=float, default=THRESHOLD, help="growth that counts (default 0.2: 20%%)")
    p.add_argument("--publish", action="store_true", help="make the last run the published figures")
    p.add_argument(
        "--tracking",
        choices=("on", "off"),
        default="on",
        help="with --publish: the row to publish (on: the tracked headline, default; off: the untracked row)",
    )
    args = p.parse_args(argv)
    run = _last_run(args.out)
    if args.publish:
        details = row_of(run["details"], args.tracking)
        if details is None:
            raise SystemExit(f"the last overhead run has no tracking {args.tracking} row to publish")
        now = pieces_of(details)
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        record = {
            "tracking": args.tracking,
            "commit": commit,
            "date": run["date"],
            "mode": run["mode"],
            "pieces_ms": now,
            "yardstick_ms": yardstick_ms(details),
            "startup_yardstick_ms": startup_yardstick_ms(details),
        }
        PUBLISHED.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        print(f"published {len(now)} pieces of {run['date']} (commit {commit}) to {PUBLISHED}")
        return 0
    published = json.loads(PUBLISHED.read_text())
    tracking = published.get("tracking", "off")
    details = row_of(run["details"], tracking)
    if details is None:
        print(f"the last run has no tracking {tracking} row, which the published figures are: nothing compared")
        return 2
    now = pieces_of(details)
    before = dict(published["pieces_ms"])
    print(
        f"against the published figures of commit {published['commit']} ({published['date']}, {published['mode']} run, "
        + (
            f"the row with tracking {tracking} for both sides):"
            if "tracking" in published
            else "tunekit untracked, from before the equal-terms change):"
        )
    )
    sides = run["details"].get("sides") or {}
    loads = side_loads(sides.get("tunekit", {}), sides.get("plain", {}))
    if loads:
        # The yardsticks run in the same process as their side: a side run busier than the other skews both.
        print(f"  this run's sides{loads}")
    pace = _pace(
        "plain Keras's later epoch",
        published.get("yardstick_ms"),
        yardstick_ms(details),
        "figures are compared as measured",
    )
    startup_pace = _pace(
        "plain Ray Tune's start-up",
        published.get("startup_yardstick_ms"),
        startup_yardstick_ms(details),
        "the start-up is scaled by plain Keras's pace",
    )
    if published["mode"] != run["mode"]:
        print(
            f"  this is a {run['mode']} run: its per-trial overhead is left out "
            "(it spreads the start-up over other trials)"
        )
        before.pop(PER_RUN_PIECE, None)
        now.pop(PER_RUN_PIECE, None)
    lines = grown(before, now, args.threshold, pace if pace is not None else 1.0, startup_pace)
    for line in lines or ["nothing grew by more than " + f"{args.threshold:.0%}"]:
        print(f"  {line}")
    return 1 if lines else 0


def _pace(yardstick: str, then: float | None, here: float | None, otherwise: str) -> float | None:
    """How much slower this run's machine was by one yardstick; None (and what happens instead)
    when a side lacks it."""
    if not then or not here:
        print(f"  no {yardstick} on one side: {otherwise}")
        return None
    print(f"  the machine's pace: {yardstick} took {here:.1f} ms against {then:.1f} ms then (x{here / then:.2f})")
    return here / then


if __name__ == "__main__":
    sys.exit(main())
