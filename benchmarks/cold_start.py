"""From launch to the first epoch: tunekit's critical path piece by piece, against KerasTuner's.

What a user feels first: the seconds from starting a search to its first trained epoch.

* tunekit: a fresh Python process runs the default spec (``search_spaces/digits_mlp.yaml``,
  tracking to MLflow's default SQLite store, new, in a fresh folder, as a first ``tunekit
  run`` does) with a budget of 2 trials x 2 epochs, FIFO: the path to the first epoch is the
  default search's (2 trials at a time, 1 CPU each), and the rest is short. Timestamps are
  taken in the driver (imports, ``ray.init``, the study and the Tuner, Tune's loop start) and
  in the trial (its process's start, ``build_data``, ``build_model``, by the overhead
  benchmark's trainable); the first epoch is the driver's receipt of it (``epochs.csv``).
* KerasTuner: a fresh Python process imports ``keras_tuner`` (and so Keras and TensorFlow),
  builds a ``Hyperband`` over the same space with the same data and model code
  (``trainables.digits_mlp``), and searches in the same process; its first epoch is the end of
  the first trial's first epoch (a Keras callback). The process stops there.

The sides alternate (tunekit, KerasTuner, tunekit, ...), each in its own process; every pair
gives a ratio, and the median of the pairs is the figure (target: tunekit within 1.5x).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import common
from tunekit.worker.profile import PROFILE_DIR_ENV

NAME = "cold_start"
TITLE = "launch to the first epoch: tunekit's critical path against KerasTuner's in-process first epoch"
TARGET = 1.5
ROUNDS = {"smoke": 1, "quick": 3, "full": 5}
SEED = 0

DEFINITIONS = {
    "first epoch": "seconds from launching the side's Python process to its first trained epoch: for tunekit the "
    "driver's receipt of the first epoch's report, for KerasTuner the end of its first trial's first epoch",
    "pieces (tunekit)": "imports: launch to tunekit.run called (tunekit and the spec: Ray and the driver's modules "
    "are tunekit.run's own, as for a user); before Ray: the experiment folder, lease, checks, Ray's import; "
    "ray.init (beside it, Ray Tune's and the driver's imports, and MLflow's preparation); study and Tuner; "
    "Tune's start: Tuner.fit to Tune's loop calling the recorder's setup; to the "
    "trial's build_data: the trial actor's start (its process, TensorFlow's import, tunekit's trial module) "
    "after Tune's loop asked for it; build: build_data and build_model; first epoch: compile, the first epoch "
    "(tracing its steps) and its report reaching the driver",
    "pieces (KerasTuner)": "imports: launch to keras_tuner imported (Keras, TensorFlow); tuner: Hyperband built; "
    "build and data: the first trial's model built and compiled, its data; first epoch: on_epoch_begin to "
    "on_epoch_end of the first epoch (tracing included)",
    "worker process start": "the first trial's worker process creation, from launch (tunekit prestarts workers "
    "as ray.init ends; a worker started later shows here)",
    "worker's TensorFlow import": "the first trial's worker importing TensorFlow, Keras, Ray Tune's trainable and "
    "tunekit's trial modules as the process starts (tunekit.worker.preload), from launch; absent when the "
    "worker did not preload",
}


# ------------------------------------------------------------------------- the tunekit side


def _run_tunekit(launched: float, workdir: Path) -> dict[str, Any]:
    workdir.mkdir(parents=True, exist_ok=True)
    os.chdir(workdir)
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    import tunekit

    marks: dict[str, float] = {}
    spec = tunekit.load_spec(
        common.digits_spec(
            trainable="benchmarks.overhead",
            budget={"num_samples": 2, "max_epochs": 2, "max_concurrent": 2},
            scheduler={"type": "fifo"},
        )
    )
    marks["imported"] = time.time()
    from benchmarks import overhead
    from tunekit.driver import session

    timing_dir = workdir / "timing"
    timing_dir.mkdir()
    os.environ[overhead.TIMING_DIR_ENV] = str(timing_dir)
    # Each worker of tunekit's local Ray notes when its preload (TensorFlow's import) ran.
    profile_dir = workdir / "profile"
    profile_dir.mkdir()
    os.environ[PROFILE_DIR_ENV] = str(profile_dir)
    _wrap(session, "_init", marks, "ray_init")
    prestart = session._prestart_warm_workers

    def timed_after_prestart(*args: Any, **kwargs: Any) -> None:
        prestart(*args, **kwargs)
        # The run imports these while Ray starts (fit.AFTER_RAY_STARTS): imported here before
        # that, they would delay Ray's start, as they did before.
        _time_tuner_and_loop(marks)

    session._prestart_warm_workers = timed_after_prestart
    marks["run_called"] = time.time()
    results = tunekit.run(spec, name="search", storage=workdir / "experiments", progress=False)
    marks["run_returned"] = time.time()
    epochs = results.epochs
    started_at = results.started_at or marks["run_called"]
    first = epochs.sort_values("time").iloc[0] if not epochs.empty else None
    builds = sorted(common.read_json_files(timing_dir, "*.json"), key=lambda t: t["build_started"])
    trial = builds[0] if builds else {}
    if first is not None:
        marks["first_epoch"] = started_at + float(first["time"])
    for key in ("build_started", "build_ended", "process_started"):
        if key in trial:
            marks[key] = float(trial[key])
    preload = profile_dir / f"preload-{trial.get('pid')}.json"
    if preload.is_file():  # the first trial's worker imported TensorFlow as it started
        times = json.loads(preload.read_text())
        marks["preload_started"], marks["preload_ended"] = float(times["started"]), float(times["ended"])
    return {
        "side": "tunekit",
        "launched": launched,
        "marks": {key: value - launched for key, value in marks.items()},
        "first_epoch_seconds": None if first is None else float(first["epoch_seconds"]),
    }


def _time_tuner_and_loop(marks: dict[str, float]) -> None:
    from tunekit.driver import recorder, tune_run

    _wrap(tune_run, "tuner_for", marks, "tuner")
    setup = recorder.Recorder.setup

    def timed_setup(self: Any, *args: Any, **kwargs: Any) -> None:
        marks.setdefault("loop_started", time.time())
        setup(self, *args, **kwargs)

    recorder.Recorder.setup = timed_setup  # type: ignore[method-assign]


def _wrap(module: Any, name: str, marks: dict[str, float], label: str) -> None:
    original = getattr(module, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        marks.setdefault(f"{label}_started", time.time())
        try:
            return original(*args, **kwargs)
        finally:
            marks.setdefault(f"{label}_ended", time.time())

    setattr(module, name, timed)


# ---------------------------------------------------------------------- the KerasTuner side


def _run_kerastuner(launched: float, workdir: Path, result: Path) -> dict[str, Any]:
    """Writes ``result`` and ends the process at the first epoch's end (KerasTuner would record an
    exception there as a failed trial and go on)."""
    marks: dict[str, float] = {}
    import keras
    import keras_tuner

    marks["imported"] = time.time()
    from benchmarks import quality
    from trainables import digits_mlp
    from tunekit.contract import TrialContext

    keras.utils.set_random_seed(SEED)
    space = common.digits_spec()["space"]

    def context(batch_size: int) -> TrialContext:
        return TrialContext(
            batch_size=batch_size, per_replica_batch_size=batch_size, replicas=1, precision="float32", seed=SEED,
            workdir=str(workdir), cpus=os.cpu_count() or 1, max_epochs=20, jit_compile=False, data={},
        )  # fmt: skip

    class FirstEpoch(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            marks.setdefault("epoch_began", time.time())

        def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            marks["first_epoch"] = time.time()
            done = {"side": "kerastuner", "launched": launched, "marks": {k: v - launched for k, v in marks.items()}}
            common.write_json(result, common.clean(done))
            sys.stdout.flush()
            os._exit(0)  # the figure is in; the rest of the search is not measured

    class DigitsHyperModel(keras_tuner.HyperModel):
        def build(self, hp: Any) -> Any:
            marks.setdefault("build_started", time.time())
            config = {name: quality._kt_param(hp, name, param) for name, param in space.items()}
            model = digits_mlp.build_model(config, context(int(config["batch_size"])))
            model.compile(
                optimizer=keras.optimizers.Adam(learning_rate=float(config["learning_rate"])),
                loss="sparse_categorical_crossentropy",
                metrics=["accuracy"],
            )
            return model

        def fit(self, hp: Any, model: Any, *args: Any, **kwargs: Any) -> Any:
            train_ds, val_ds = digits_mlp.build_data({}, context(int(hp.get("batch_size"))))
            marks.setdefault("build_ended", time.time())
            kwargs["verbose"] = 0
            kwargs["callbacks"] = [*kwargs.pop("callbacks", []), FirstEpoch()]
            return model.fit(train_ds, validation_data=val_ds, **kwargs)

    tuner = keras_tuner.Hyperband(
        DigitsHyperModel(), objective="val_accuracy", max_epochs=20, factor=3, seed=SEED,
        directory=str(workdir), project_name="kerastuner", overwrite=True,
    )  # fmt: skip
    marks["tuner_built"] = time.time()
    tuner.search(verbose=0)
    raise RuntimeError("KerasTuner's search ended without a first epoch")


# -------------------------------------------------------------------------------- analysis

TUNEKIT_PIECES = (  # (name, from mark, to mark); "" is the launch
    ("imports (tunekit, the spec)", "", "run_called"),
    ("before Ray (folder, lease, checks, Ray's import)", "run_called", "ray_init_started"),
    ("ray.init", "ray_init_started", "ray_init_ended"),
    ("study and Tuner", "tuner_started", "tuner_ended"),
    ("Tune's start (Tuner.fit to its loop)", "tuner_ended", "loop_started"),
    ("to the trial's build_data (actor, TensorFlow import, trial module)", "loop_started", "build_started"),
    ("build (data, model)", "build_started", "build_ended"),
    ("first epoch (compile, tracing, steps, report)", "build_ended", "first_epoch"),
    # The first trial's worker, beside the driver's pieces above:
    ("worker: launch to its process's start", "", "process_started"),
    ("worker: its start to its preload (Python, Ray's worker start-up)", "process_started", "preload_started"),
    ("worker: its preload (Ray Tune, TensorFlow, Keras, tunekit's trial modules)", "preload_started", "preload_ended"),
    ("worker: preload's end to the trial's build_data (actor, trial set-up)", "preload_ended", "build_started"),
)
KERASTUNER_PIECES = (
    ("imports (keras_tuner, Keras, TensorFlow)", "", "imported"),
    ("tuner built", "imported", "tuner_built"),
    ("build and data (model, compile, data)", "tuner_built", "epoch_began"),
    ("first epoch (tracing, steps)", "epoch_began", "first_epoch"),
)


def pieces(marks: dict[str, float], table: tuple[tuple[str, str, str], ...]) -> dict[str, float | None]:
    """Seconds per piece from a side's marks (seconds from launch); None where a mark is missing."""
    out: dict[str, float | None] = {}
    for name, start, end in table:
        begin = 0.0 if start == "" else marks.get(start)
        finish = marks.get(end)
        out[name] = None if begin is None or finish is None else finish - begin
    return out


def analyse(runs: list[dict[str, Any]]) -> dict[str, Any]:
    tk = [r for r in runs if r["side"] == "tunekit"]
    kt = [r for r in runs if r["side"] == "kerastuner"]
    pairs = list(zip(tk, kt, strict=False))
    ratios = [common.ratio(a["marks"].get("first_epoch"), b["marks"].get("first_epoch")) for a, b in pairs]
    ratio = common.median(r for r in ratios if r is not None)

    def median_pieces(side: list[dict[str, Any]], table: tuple[tuple[str, str, str], ...]) -> dict[str, float | None]:
        per_run = [pieces(r["marks"], table) for r in side]
        return {name: common.median(p[name] for p in per_run if p[name] is not None) for name, _, _ in table}

    return {
        "ratio": ratio,
        "ratios": ratios,
        "met": None if ratio is None else ratio <= TARGET,
        "tunekit_first_epoch_s": common.median(r["marks"].get("first_epoch") for r in tk),
        "kerastuner_first_epoch_s": common.median(r["marks"].get("first_epoch") for r in kt),
        "tunekit_pieces": median_pieces(tk, TUNEKIT_PIECES),
        "kerastuner_pieces": median_pieces(kt, KERASTUNER_PIECES),
        "worker_process_started_s": common.median(r["marks"].get("process_started") for r in tk),
        "worker_preload_started_s": common.median(r["marks"].get("preload_started") for r in tk),
        "worker_preload_ended_s": common.median(r["marks"].get("preload_ended") for r in tk),
        "preloaded_runs": sum("preload_ended" in r["marks"] for r in tk),
    }


def main(argv: list[str] | None = None) -> int:
    p = common.parser(NAME, __doc__.splitlines()[0])
    p.add_argument("--side", choices=("tunekit", "kerastuner"), help=argparse.SUPPRESS)
    p.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--launched", type=float, help=argparse.SUPPRESS)
    p.add_argument("--rounds", type=int, help="tunekit/KerasTuner pairs (default: by mode)")
    args = p.parse_args(argv)
    if args.side:
        if args.side == "kerastuner":
            _run_kerastuner(args.launched, args.workdir, args.result)  # ends the process itself
        common.write_json(args.result, common.clean(_run_tunekit(args.launched, args.workdir)))
        return 0

    report = common.Report(NAME, TITLE, args.mode, args.out)
    runs: list[dict[str, Any]] = []
    with common.Workdir(NAME, args.keep) as workdir:
        for round_ in range(args.rounds or ROUNDS[args.mode]):
            for side in ("tunekit", "kerastuner"):  # one after the other, never at the same time
                print(f"[{NAME}] round {round_ + 1}: {side} ...", flush=True)
                side_dir = workdir / f"{round_}-{side}"
                load = os.getloadavg()[0]
                launched = time.time()
                result = common.run_child(
                    f"benchmarks.{NAME}",
                    ["--side", side, "--workdir", str(side_dir), "--launched", repr(launched)],
                    side_dir,
                    side,
                )
                result["load_before"] = load
                runs.append(result)
    a = analyse(runs)
    figures = [
        common.figure(
            "first epoch from launch, tunekit / KerasTuner (median of pairs)",
            a["ratio"],
            "x",
            f"<= {TARGET:g}x",
            a["met"],
            note="pairs: " + ", ".join(common.fmt(r) for r in a["ratios"]),
        ),
        common.figure("tunekit first epoch from launch", a["tunekit_first_epoch_s"], "s"),
        common.figure("KerasTuner first epoch from launch", a["kerastuner_first_epoch_s"], "s"),
        common.figure("tunekit first trial's worker process started, from launch", a["worker_process_started_s"], "s"),
        common.figure(
            "tunekit first trial's worker: TensorFlow import started, from launch", a["worker_preload_started_s"], "s"
        ),
        common.figure(
            "tunekit first trial's worker: TensorFlow import ended, from launch",
            a["worker_preload_ended_s"],
            "s",
            note=f"preloaded in {a['preloaded_runs']} of the tunekit runs",
        ),
    ]
    for name, value in a["tunekit_pieces"].items():
        figures.append(common.figure(f"tunekit: {name}", value, "s"))
    for name, value in a["kerastuner_pieces"].items():
        figures.append(common.figure(f"KerasTuner: {name}", value, "s"))
    ratios = [
        f"first epoch from launch: tunekit {common.fmt(a['tunekit_first_epoch_s'])} s vs KerasTuner "
        f"{common.fmt(a['kerastuner_first_epoch_s'])} s -> {common.fmt(a['ratio'])}x (target <= {TARGET:g}x)"
    ]
    setup = {
        "tunekit": "the default spec (tracked, MLflow's default SQLite store new in a fresh folder), 2 trials x 2 "
        "epochs FIFO, 2 at a time on 1 CPU each; the trainable is benchmarks.overhead (trainables.digits_mlp's "
        "builders, timed)",
        "KerasTuner": "Hyperband (factor 3, max 20 epochs) over the same space, same data and model code, in one "
        "process with TensorFlow's default threads (every core)",
        "order": "tunekit, KerasTuner, tunekit, ...: each in its own fresh process",
    }
    notes = [
        "Other processes shared the CPU during this run; see load_before/load_after and each run's load.",
        "Sums of pieces differ from the first epoch by the gaps between them (e.g. the driver's work between "
        "tunekit.run and ray.init that is not a named piece).",
    ]
    return report.finish(figures, ratios, DEFINITIONS, setup, notes, {"runs": runs, "analysis": a})


if __name__ == "__main__":
    sys.exit(main())
