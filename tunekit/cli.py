"""The ``tunekit`` command.

``--help``, ``validate`` and ``plan`` import neither Ray nor TensorFlow and answer in
well under a second. Errors print one line (``--debug`` shows the traceback).

Exit status: 0 when at least one trial reported the metric; 1 when none did (every
trial failed, or the time budget ran out first), when a fatal trial error stopped the
search, for a storage error (read-only, full, unreachable for longer than
``storage.outage_s``: ``tunekit resume DIR`` continues such a search) or for any other
tunekit error; 2 for an invalid spec or usage; 3 when the driver lost the experiment's lease
to another driver (``tunekit.storage.lease``); 128 + the signal when SIGINT (130) or SIGTERM (143)
stopped the search, which ``tunekit resume DIR`` continues.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tunekit.errors import EXIT_LEASE_LOST, LeaseLostError, SearchInterrupted, SpecError, TunekitError
from tunekit.runtime.commands import add_runtime_commands

if TYPE_CHECKING:
    from tunekit.config.spec import ExperimentSpec

EXIT_FAILURE = 1
EXIT_USAGE = 2


# Commands whose process ends with the search they run (``plan --probe`` runs its search in a
# child process, which ends the same way: tunekit.search.probe).
ENDS_WITH_ITS_SEARCH = ("run", "resume")


def main(argv: Sequence[str] | None = None, *, in_runtime: bool = False) -> int:
    """Runs the command; returns its exit status.

    As the process's own command (``argv`` None: the ``tunekit`` script, ``python -m tunekit.cli``),
    a search command runs on the warm runtime when one is up (``tunekit up``; the command is then
    its thin client: ``tunekit.runtime.client``), and otherwise, having started or joined Ray, ends
    the process itself after its last line (``tunekit.driver.ending``): nothing waits there. Called
    from Python with ``argv``, it returns; ``in_runtime``: called by the runtime for a command.
    """
    parser = _parser()
    args = parser.parse_args(argv)
    args.in_runtime = in_runtime
    if argv is None and args.command in ENDS_WITH_ITS_SEARCH:
        from tunekit.runtime.client import serve_command, why_another_ray

        def cluster() -> str | None:
            resumed = args.experiment_dir if args.command == "resume" else None
            return why_another_ray(args.command, args.address, local=getattr(args, "local", False), resumed=resumed)

        if (served := serve_command(sys.argv[1:], cluster=cluster)) is not None:
            return served
    status = _handled(args)
    if args.command in ENDS_WITH_ITS_SEARCH:
        from tunekit.driver.signals import signalled_while_closing

        status = signalled_while_closing(status)
    if argv is None and args.command in ENDS_WITH_ITS_SEARCH:
        from tunekit.driver.ending import end_command

        end_command(status)
    return status


def _handled(args: argparse.Namespace) -> int:
    """The command's handler, its errors as one line and an exit status."""
    try:
        return int(args.handler(args) or 0)
    except SpecError as error:
        return _fail(args, error, EXIT_USAGE)
    except SearchInterrupted as error:
        if args.debug:
            raise
        from tunekit.driver.signals import interrupted_text

        where = Path(str(error.experiment_dir)) if error.experiment_dir is not None else None
        print(interrupted_text(error.signal_number, where), file=sys.stderr)
        return 128 + error.signal_number
    except LeaseLostError as error:
        return _fail(args, error, EXIT_LEASE_LOST)
    except TunekitError as error:
        return _fail(args, error, EXIT_FAILURE)
    except KeyboardInterrupt:
        print("tunekit: interrupted; `tunekit resume EXPERIMENT_DIR` continues the search", file=sys.stderr)
        return 128 + signal.SIGINT
    except BrokenPipeError:
        # `tunekit report DIR | head -1`: the reader left; exit quietly, as cat does.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except OSError as error:
        # A read-only folder, a full disk, no permission, no bucket, an outage: one line with the fix.
        from tunekit.storage.faults import storage_line

        if (problem := storage_line(error)) is None or args.debug:
            raise
        print(f"tunekit: error: {problem}", file=sys.stderr)
        return EXIT_FAILURE


def _fail(args: argparse.Namespace, error: Exception, status: int) -> int:
    if args.debug:
        raise error
    print(f"tunekit: error: {error}", file=sys.stderr)
    return status


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tunekit", description="Hyperparameter search for Keras on Ray Tune.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="run a search")
    run.add_argument("spec", help="experiment spec (YAML)")
    _add_set(run)
    run.add_argument("--name", help="experiment directory name (default: spec name + timestamp)")
    run.add_argument("--storage", help="directory holding experiment directories (default: storage.path)")
    run.add_argument(
        "--address",
        help="Ray cluster to join (default: RAY_ADDRESS, else a private local Ray; auto: the one `ray start` "
        "recorded here)",
    )
    _add_connect_timeout(run)
    run.add_argument("--tracking-uri", help="MLflow tracking URI (sets tracking.uri)")
    run.set_defaults(handler=_run)

    resume = commands.add_parser(
        "resume", help="finish an interrupted search, or grow one (--set budget.num_samples=N)"
    )
    resume.add_argument("experiment_dir")
    resume.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="budget.KEY=VALUE",
        help="a new budget: num_samples (more trials), max_concurrent or time_budget_s; repeatable",
    )
    where = resume.add_mutually_exclusive_group()
    where.add_argument("--address", help="another Ray cluster to join (default: the one the search ran on)")
    where.add_argument(
        "--local", action="store_true", help="run on a private local Ray, although the search ran on a cluster"
    )
    _add_connect_timeout(resume)
    resume.set_defaults(handler=_resume)

    status = commands.add_parser(
        "status",
        help="a running search from its files: trials running (node, worker, attempt, epoch), last ended; "
        "without a folder: the warm runtime (tunekit up)",
        description="A search from its files, whether it runs or not: its state and active time, its trials "
        "by status, each running trial's node, worker pid, attempt and epoch, the last trials to end with "
        "their final metric (select's with several objectives), and a finished search's best as "
        "`tunekit report` gives it.",
    )
    status.add_argument("experiment_dir", nargs="?", help="without it: the warm runtime (tunekit up), if one is up")
    status.set_defaults(handler=_status)

    add_runtime_commands(commands)

    validate = commands.add_parser("validate", help="check a spec; print ok or the first error")
    validate.add_argument("spec")
    _add_set(validate)
    validate.add_argument(
        "--print",
        action="store_true",
        dest="print_spec",
        help="print the resolved spec (extends merged, --set applied, paths absolute, defaults filled in)",
    )
    validate.set_defaults(handler=_validate)

    plan = commands.add_parser("plan", help="print ASHA's rungs and the epochs the search will spend")
    plan.add_argument("spec")
    _add_set(plan)
    plan.add_argument(
        "--probe",
        action="store_true",
        help="train a few sampled configurations briefly on the target; predict wall time, epochs, slot-hours",
    )
    plan.add_argument("--probe-seconds", type=float, metavar="S", help="the probe's hard time limit (default 90)")
    plan.add_argument("--address", help="probe on this Ray cluster (default: RAY_ADDRESS, else local)")
    plan.add_argument("--storage", help="where the probe's measurement is kept (default: storage.path)")
    plan.add_argument("--format", choices=("table", "json"), default="table")
    plan.set_defaults(handler=_plan)

    report = commands.add_parser(
        "report",
        help="best-first table of a finished experiment; of several: them side by side",
        description="One experiment: its trials best first, the summary and the ledger. Several: their bests, "
        "best configurations, budgets, counts and time to best side by side (tunekit.compare).",
    )
    report.add_argument("experiment_dir", nargs="+", metavar="EXPERIMENT_DIR")
    report.add_argument("--format", choices=("table", "json"), default="table")
    report.add_argument("--html", metavar="FILE", help="also write a self-contained HTML page with tables and plots")
    report.add_argument(
        "--tolerance",
        type=float,
        default=0.01,
        metavar="T",
        help="the ledger's time to best: when the best so far came within T (relative) of the final best (0.01)",
    )
    report.add_argument("--price-per-hour", type=float, metavar="P", help="price of one CPU- or GPU-hour: adds costs")
    report.set_defaults(handler=_report)

    listing = commands.add_parser(
        "ls",
        aliases=["list"],
        help="the experiments in a results folder or bucket prefix: status, trials, best, start, active time",
        description="One line per experiment directly under FOLDER (the folder or bucket prefix searches wrote "
        "to, storage.path, e.g. s3://bucket/experiments), oldest first (tunekit.experiments).",
    )
    listing.add_argument("folder", nargs="?", default="tunekit_results", help="default: tunekit_results")
    listing.add_argument("--format", choices=("table", "json"), default="table")
    listing.set_defaults(handler=_list)

    check = commands.add_parser(
        "check", help="does an experiment agree with itself? (tables, study, checkpoints, ledger, MLflow)"
    )
    check.add_argument("experiment_dir")
    check.add_argument("--no-mlflow", action="store_true", help="leave MLflow's runs out of the comparison")
    check.add_argument("--tracking-uri", help="where the runs are, when not where tracking.json says")
    check.add_argument(
        "--repair", action="store_true", help="first rebuild a damaged study journal from its whole lines and tables"
    )
    check.set_defaults(handler=_check)

    logs = commands.add_parser("logs", help="a trial's output (stdout and stderr) and its error, if it failed")
    logs.add_argument("experiment_dir")
    logs.add_argument("trial", help="the trial's number (as in `tunekit report`) or its Ray trial id")
    logs.set_defaults(handler=_logs)

    retrain = commands.add_parser(
        "retrain", help="train the best configuration (or trial N's) again and export it beside the experiment"
    )
    retrain.add_argument("experiment_dir")
    retrain.add_argument("--trial", help="the trial's number or Ray trial id (default: the best trial)")
    retrain.add_argument(
        "--data",
        choices=("train+validation", "train"),
        default="train+validation",
        help="train plus validation data (default), or train only: the trial again",
    )
    retrain.add_argument("--epochs", type=int, help="epochs to train (default: as many as the trial trained)")
    retrain.set_defaults(handler=_retrain)

    doctor = commands.add_parser("doctor", help="check the stack, GPUs, cluster, tracking and storage")
    doctor.add_argument("--address", help="Ray cluster address to inspect")
    doctor.add_argument("--tracking-uri", help="MLflow tracking URI to check")
    doctor.add_argument("--storage", default="tunekit_results", help="storage directory to check")
    doctor.set_defaults(handler=_doctor)

    sync = commands.add_parser(
        "sync", help="send an experiment's records to MLflow afterwards; run again, nothing is duplicated"
    )
    sync.add_argument("experiment_dir")
    sync.add_argument("--tracking-uri", help="MLflow tracking URI (default: the spec's tracking.uri, as run used)")
    sync.set_defaults(handler=_sync)
    return parser


def _add_connect_timeout(command: argparse.ArgumentParser) -> None:
    from tunekit.driver.connect import CONNECT_TIMEOUT_S

    command.add_argument(
        "--connect-timeout",
        type=float,
        default=CONNECT_TIMEOUT_S,
        metavar="S",
        help=f"seconds joining a cluster may take (default {CONNECT_TIMEOUT_S:g})",
    )


def _add_set(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY.PATH=VALUE",
        help="override a spec value (YAML syntax); repeatable",
    )


def _run(args: argparse.Namespace) -> int:
    from tunekit.driver.runner import run
    from tunekit.driver.session import no_search_after

    overrides = [*args.set, *([f"tracking.uri={args.tracking_uri}"] if args.tracking_uri else [])]
    # The search's closing lines are printed by run itself; the process ends with it.
    with _ends_with_its_search(args), no_search_after():
        run(
            args.spec,
            overrides=overrides,
            name=args.name,
            storage=args.storage,
            address=args.address,
            connect_timeout=args.connect_timeout,
        )
    return 0


def _resume(args: argparse.Namespace) -> int:
    from tunekit.driver.runner import resume
    from tunekit.driver.session import no_search_after

    # The search's closing lines are printed by resume itself; the process ends with it.
    with _ends_with_its_search(args), no_search_after():
        resume(
            args.experiment_dir,
            overrides=args.set,
            address=args.address,
            local=args.local,
            connect_timeout=args.connect_timeout,
        )
    return 0


def _ends_with_its_search(args: argparse.Namespace) -> contextlib.AbstractContextManager[None]:
    """The command's own process: a signal in start-up ends it at once. The warm runtime's process
    serves the next command: there the signal raises, as in a notebook (``StopSignals``)."""
    from tunekit.driver.signals import exit_at_once_in_start_up

    return contextlib.nullcontext() if args.in_runtime else exit_at_once_in_start_up()


def _status(args: argparse.Namespace) -> int:
    from tunekit.results.status import read_status

    if args.experiment_dir is None:
        from tunekit.runtime.client import describe, runtime_status

        print(describe(runtime_status()))
        return 0

    with _warnings_as_lines():
        status = read_status(args.experiment_dir)
    print(status.describe())
    return 0


@contextlib.contextmanager
def _warnings_as_lines() -> Iterator[None]:
    """A reader's warnings of a damaged record as ``tunekit: warning:`` lines, not Python's format."""
    from tunekit.errors import DamagedRecordWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DamagedRecordWarning)
        yield
    for warning in caught:
        if issubclass(warning.category, DamagedRecordWarning):
            print(f"tunekit: warning: {warning.message}", file=sys.stderr)
        else:
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)


def _validate(args: argparse.Namespace) -> int:
    from tunekit.config.resources import local_fit_warning
    from tunekit.config.spec import load_spec

    spec = load_spec(args.spec, args.set)
    warning = local_fit_warning(spec.resources)
    if warning:
        print(f"tunekit: warning: {warning}", file=sys.stderr)
    if args.print_spec:
        print(spec.to_yaml(), end="")
    else:
        print("ok")
    return 0


def _plan(args: argparse.Namespace) -> int:
    import dataclasses
    import json

    from tunekit.config.space import space_lines
    from tunekit.config.spec import load_spec
    from tunekit.search.plan import plan_budget

    spec = load_spec(args.spec, args.set)
    _say_bf16(spec, json_out=args.format == "json")
    if args.probe:
        return _probe(args, spec)
    plan = plan_budget(spec)
    if args.format == "json":
        print(json.dumps(dataclasses.asdict(plan), indent=2))
        return 0
    print(
        f"{spec.name}: {spec.budget.num_samples} trials of up to {spec.budget.max_epochs} epochs, "
        f"{spec.budget.max_concurrent} at a time, scheduler {spec.scheduler.type}"
    )
    print("\n".join(["space:", *space_lines(spec.space)]))  # a space found in build_model(hp) too
    print(plan.describe())
    return 0


def _say_bf16(spec: ExperimentSpec, *, json_out: bool) -> None:
    """A note when the spec trains in bfloat16 on a CPU that emulates it (stderr beside JSON)."""
    from tunekit.doctor.precision import bf16_warning, read_cpuinfo

    if warning := bf16_warning(spec, read_cpuinfo()):
        print(f"tunekit: note: {warning}", file=sys.stderr if json_out else sys.stdout, flush=True)


def _probe(args: argparse.Namespace, spec: ExperimentSpec) -> int:
    """``plan --probe``: measure on the target, predict, keep the measurement for `tunekit run`."""
    import dataclasses
    import json

    from tunekit.runtime.client import usable_runtime
    from tunekit.search.forecast import predict, save_measurement, target_of
    from tunekit.search.plan import plan_budget
    from tunekit.search.probe import DEFAULT_SECONDS, ProbeSettings, describe, probe_sections, probe_slots, run_probe

    seconds = args.probe_seconds or DEFAULT_SECONDS
    slots = probe_slots(spec, args.address)
    sections = probe_sections(spec, slots)
    budget = sections["budget"]
    chosen = "at the corners of the space's cost" if sections.get("search", {}).get("warm_start") else "sampled"
    # Said before anything runs, on stderr when stdout carries JSON.
    print(
        f"probing {target_of(args.address)}: {budget['num_samples']} configurations {chosen}, up to "
        f"{budget['max_epochs']} epochs each, {slots} at a time; at most {seconds:g} s (a hard stop)",
        file=sys.stderr if args.format == "json" else sys.stdout,
        flush=True,
    )
    if (runtime := usable_runtime()) is not None and args.address is None:
        print(
            f"on the warm runtime (tunekit up, pid {runtime['pid']})",
            file=sys.stderr if args.format == "json" else sys.stdout,
        )
    root = Path(args.storage or spec.storage.path).expanduser().resolve()
    measurement = run_probe(ProbeSettings(args.spec, tuple(args.set), args.address, seconds, root), spec)
    saved = save_measurement(root, spec, measurement)
    prediction = predict(spec, measurement)
    if args.format == "json":
        record = {**prediction.to_dict(), "measurement": dataclasses.asdict(measurement), "saved": str(saved)}
        print(json.dumps(record, indent=2))
    else:
        print(plan_budget(spec).describe())
        print(describe(spec, measurement, prediction, saved))
    return 0


def _report(args: argparse.Namespace) -> int:
    from tunekit.results.closing import closing_lines, mlflow_link
    from tunekit.results.display import trial_table
    from tunekit.results.ledger import describe
    from tunekit.results.load import load
    from tunekit.results.summary import summarize

    if len(args.experiment_dir) > 1:
        return _compare(args)
    with _warnings_as_lines():
        results = load(args.experiment_dir[0])
    summary = summarize(results, args.tolerance, args.price_per_hour)
    if args.format == "json":
        print(summary.to_json(results))
    else:
        print(trial_table(results))
        print()
        print("\n".join(closing_lines(results, summary)))
        print(describe(summary.ledger, summary.predicted_vs_actual))
        if link := mlflow_link(results.experiment_dir):
            print(f"mlflow: {link}")
    if args.html:
        from tunekit.results.report import write_html

        page = write_html(results, args.html, tolerance=args.tolerance, price_per_hour=args.price_per_hour)
        # Where the page went; beside JSON on stdout, on stderr so the JSON stays parseable.
        print(f"html report: {page.resolve()}", file=sys.stderr if args.format == "json" else sys.stdout)
    return 0


def _compare(args: argparse.Namespace) -> int:
    """``tunekit report A B ...``: the experiments side by side."""
    from tunekit.results.compare import compare

    comparison = compare(*args.experiment_dir, tolerance=args.tolerance, price_per_hour=args.price_per_hour)
    print(comparison.to_json() if args.format == "json" else comparison.to_text())
    if args.html:
        page = comparison.write_html(args.html)
        print(f"html report: {page.resolve()}", file=sys.stderr if args.format == "json" else sys.stdout)
    return 0


def _list(args: argparse.Namespace) -> int:
    """``tunekit ls FOLDER``."""
    from tunekit.results.compare import describe_experiments, experiments, experiments_json

    table = experiments(args.folder)
    print(experiments_json(table) if args.format == "json" else describe_experiments(table, args.folder))
    return 0


def _check(args: argparse.Namespace) -> int:
    from tunekit.results.check import check_experiment

    if args.repair:
        from tunekit.results.repair import repair_experiment

        repaired = repair_experiment(args.experiment_dir)
        print("\n".join(f"repaired: {line}" for line in repaired) or "repaired: nothing (no damage it rebuilds)")
    report = check_experiment(args.experiment_dir, mlflow=not args.no_mlflow, tracking_uri=args.tracking_uri)
    print(report.describe())
    return 0 if report.ok else EXIT_FAILURE


def _retrain(args: argparse.Namespace) -> int:
    from tunekit.results.load import load
    from tunekit.results.retrain import closing_line, epoch_line, retrain

    def show(epoch: int, epochs: int, metrics: dict[str, float]) -> None:
        print(epoch_line(epoch, epochs, metrics), flush=True)

    done = retrain(load(args.experiment_dir), args.trial, data=args.data, epochs=args.epochs, on_epoch=show)
    print(closing_line(done))
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from tunekit.doctor.checks import run_checks

    return run_checks(address=args.address, tracking_uri=args.tracking_uri, storage=args.storage)


def _sync(args: argparse.Namespace) -> int:
    from tunekit.tracking import sync

    synced = sync(args.experiment_dir, tracking_uri=args.tracking_uri)
    # "holds", not "sent": a second sync sends nothing (it sends only what MLflow lacks).
    print(
        f"MLflow at {synced.tracking_uri} holds all {synced.trials} trials: "
        f"experiment {synced.experiment_id}, parent run {synced.parent_run_id}"
    )
    if synced.ui_url:
        print(f"MLflow UI: {synced.ui_url}")
    return 0


def _logs(args: argparse.Namespace) -> int:

    from tunekit.errors import StorageError
    from tunekit.layout import ERROR_FILE, OUTPUT_FILE, TRIALS_FILE
    from tunekit.storage.buckets import bucket_of, readable, shown
    from tunekit.storage.store import table_rows

    directory = readable(args.experiment_dir)
    name = shown(directory)  # a bucket's URI, never this machine's cache of it
    table = directory / TRIALS_FILE
    if not table.is_file():
        raise StorageError(f"{name}: no {TRIALS_FILE}; not a tunekit experiment, or no trial has started yet")
    rows = table_rows(table)
    wanted = str(args.trial).strip()
    match = [r for r in rows if wanted in (r.get("trial_id"), r.get("number"))]
    if not match:
        known = ", ".join(f"{r.get('number') or '?'} ({r.get('trial_id')})" for r in rows) or "none"
        raise TunekitError(f"trial {wanted}: not in {name}/{TRIALS_FILE}; trials: {known}")
    trial_id = str(match[0]["trial_id"])
    if (bucket := bucket_of(directory)) is not None:  # a log is fetched when asked for, as it is now
        with contextlib.suppress(FileNotFoundError):
            bucket.fetch(directory, f"{trial_id}/{OUTPUT_FILE}", fresh=True)
    output, error = directory / trial_id / OUTPUT_FILE, directory / trial_id / ERROR_FILE
    if not output.is_file() and not error.is_file():
        raise TunekitError(f"trial {wanted} ({trial_id}): neither {OUTPUT_FILE} nor {ERROR_FILE} in {name}/{trial_id}")
    if output.is_file():
        sys.stdout.write(output.read_text(errors="replace"))
    else:
        print(f"({OUTPUT_FILE}: none in {name}/{trial_id})")
    if error.is_file():
        status = match[0].get("status")
        # Ray leaves a failed attempt's traceback in place when a retry of the trial goes on.
        earlier = (
            "" if status in ("failed", "running") else f" (an earlier attempt's; the trial was retried and {status})"
        )
        print(f"--- {name}/{trial_id}/{ERROR_FILE}{earlier}")
        sys.stdout.write(error.read_text(errors="replace"))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
