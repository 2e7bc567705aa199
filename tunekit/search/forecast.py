"""How long a search will take: measured costs, a simulation of asynchronous ASHA, the prediction.

``tunekit plan SPEC --probe`` (``tunekit.search.probe``) measures what one trial costs on
the real target: the start-up, a trial's first epoch in a new worker (process start and
TensorFlow's import) and in a reused one (building and tracing), the later epochs and
the gaps between trials. This module turns such a ``Measurement`` into a ``Prediction``
for a spec, and keeps measurements under the storage root so ``tunekit run`` can file the
prediction with the experiment. Plain Python: ``tunekit plan`` imports it without Ray.

Why a simulation and not the rung plan's count: Ray's ASHA is asynchronous. A trial
reaching a rung is compared only with the trials that reached it before (the first one
always goes on), so early trials are promoted far more often than the ideal 1/rf, and
the last promoted trials run alone at the end. The default digits search spends about
170 epochs where the ideal plan counts 118. Playing ASHA's own rule over random trial
scores, with the measured costs and the real concurrency, predicts both the epochs and
the tail.
"""

from __future__ import annotations

import bisect
import hashlib
import heapq
import json
import math
import random
import statistics
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from tunekit.config.rungs import bracket_of
from tunekit.config.spec import ExperimentSpec
from tunekit.layout import PREDICTION_FILE, PROBES_DIR
from tunekit.search.costs import CostModel, fit
from tunekit.search.plan import spec_milestones
from tunekit.storage.store import write_json

SIMULATIONS = 300  # searches simulated per prediction; the mean is stable to ~1% at this count
# ...for a small search; a large one averages over its own trials, so fewer searches of it
# give the same stability: at most this many simulated trials in all (at least 10 searches).
SIMULATED_TRIALS = 200_000
# What an epoch's cost depends on, besides the target and budget.max_concurrent (measured_parts).
MEASURED_SECTIONS = ("trainable", "space", "training", "resources", "data")
MEASURED_KEY = "measured_spec"  # in a stored probe: the spec's name and its measured parts
WALL_DEFINITION = (
    "the search's active seconds from its start (tunekit.run called, after the driver's imports) to its last "
    "trial's end; a search resumed or grown adds a start-up per later session"
)


@dataclass(frozen=True)
class Measurement:
    """What a probe measured on one target, in seconds (see ``tunekit.search.probe``)."""

    target: str  # "local", or the Ray address probed
    measured_at: float  # wall-clock seconds
    cpus: float  # the cluster's CPUs and GPUs, as Ray saw them
    gpus: float
    startup_s: float  # search start -> first trial started (Ray, the study, the Tuner)
    new_worker_first_epoch_s: float  # trial start -> first epoch reported, in a new worker
    reused_first_epoch_s: float  # the same in a reused worker (data, model, tracing)
    epoch_s: float  # between two later epochs' reports (training, validation, checkpoint)
    gap_s: float  # a trial's end -> the next trial's start in the freed slot
    end_s: float  # a trial's last report -> its end (final export)
    probe_trials: int
    probe_epochs: int
    probe_seconds: float  # how long the probe ran
    notes: tuple[str, ...] = ()
    # Per configuration the probe ran: {"config": its parameters, "epoch_s": its later epochs' mean}.
    config_costs: tuple[dict[str, Any], ...] = ()

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Measurement:
        # A stored probe also names what it measured.
        known = {field.name for field in fields(cls)} - {"notes", "config_costs"}
        return cls(
            **{key: value for key, value in data.items() if key in known},
            notes=tuple(data.get("notes", ())),
            config_costs=tuple(data.get("config_costs", ())),
        )

    def cost_model(self, spec: ExperimentSpec) -> CostModel | None:
        """Epoch seconds by configuration, from the configurations the probe ran (None before any)."""
        samples = [(c["config"], float(c["epoch_s"])) for c in self.config_costs if isinstance(c.get("config"), dict)]
        return fit(spec.space, samples)


@dataclass(frozen=True)
class Prediction:
    wall_seconds: float
    epochs: float
    slot_hours: float
    slot_unit: str  # "CPU" or "GPU": what slot_hours counts
    concurrency: int
    concurrency_reason: str
    planned_epochs: int  # the rung plan's ideal count, for comparison
    trials: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "predicted_wall_seconds": round(self.wall_seconds, 1),
            "predicted_epochs": round(self.epochs, 1),
            "slot_hours": round(self.slot_hours, 5),
            "slot_unit": self.slot_unit,
            "concurrency": self.concurrency,
            "concurrency_reason": self.concurrency_reason,
            "planned_epochs_ideal": self.planned_epochs,
            "trials": self.trials,
            "wall_definition": WALL_DEFINITION,
        }


# ---------------------------------------------------------------------- concurrency


def concurrency(spec: ExperimentSpec, cpus: float, gpus: float) -> tuple[int, str]:
    """Trials running at once, and why: the smallest of max_concurrent, trials, and what fits."""
    limits = [(spec.budget.max_concurrent, f"max_concurrent {spec.budget.max_concurrent}")]
    limits.append((spec.budget.num_samples, f"{spec.budget.num_samples} trials"))
    resources = spec.resources
    if resources.cpu > 0:
        fit = int(cpus // resources.cpu + 1e-9)
        limits.append((fit, f"{cpus:g} CPUs fit {fit} trials of {resources.cpu:g} CPU"))
    if resources.gpu > 0:
        fit = int(gpus // resources.gpu + 1e-9)
        limits.append((fit, f"{gpus:g} GPUs fit {fit} trials of {resources.gpu:g} GPU"))
    slots, reason = min(limits, key=lambda limit: limit[0])
    return max(1, slots), reason


def slot_units(spec: ExperimentSpec) -> tuple[float, str]:
    """What one trial holds, in the unit slot-hours count: its GPUs when it has any, else its CPUs."""
    if spec.resources.gpu > 0:
        return float(spec.resources.gpu), "GPU"
    return float(spec.resources.cpu), "CPU"


# ------------------------------------------------------------------------ prediction


def predict(spec: ExperimentSpec, measurement: Measurement, simulations: int = SIMULATIONS) -> Prediction:
    """The search's wall time, epochs and slot-hours: the mean of simulated searches."""
    from tunekit.search.plan import plan_budget

    slots, reason = concurrency(spec, measurement.cpus, measurement.gpus)
    units, unit = slot_units(spec)
    rng = random.Random(spec.search.seed)
    searches = min(simulations, max(10, SIMULATED_TRIALS // spec.budget.num_samples))
    model = measurement.cost_model(spec)
    costs = model.pool(spec.search.seed) if model is not None else None
    runs = [_simulate(spec, measurement, slots, rng, costs) for _ in range(searches)]
    return Prediction(
        wall_seconds=statistics.fmean(r.wall for r in runs),
        epochs=statistics.fmean(r.epochs for r in runs),
        slot_hours=statistics.fmean(r.slot_seconds for r in runs) * units / 3600,
        slot_unit=unit,
        concurrency=slots,
        concurrency_reason=reason,
        planned_epochs=plan_budget(spec).planned_epochs,
        trials=spec.budget.num_samples,
    )


@dataclass(frozen=True)
class TrialEpochs:
    """How many epochs trials train, as simulated searches of the spec spread them."""

    counts: tuple[int, ...]  # counts[e]: simulated trials that trained e epochs

    @property
    def mean(self) -> float:
        return sum(e * n for e, n in enumerate(self.counts)) / max(1, sum(self.counts))

    def left_after(self, epochs: int) -> float:
        """The epochs a trial still running after ``epochs`` is expected to train yet."""
        beyond = [(e, n) for e, n in enumerate(self.counts) if e > epochs and n]
        total = sum(n for _, n in beyond)
        return sum((e - epochs) * n for e, n in beyond) / total if total else 0.0


def trial_epochs(spec: ExperimentSpec) -> TrialEpochs:
    """The epochs trials train, by the simulation ``predict`` runs, with nominal costs (a
    later epoch of one unit, a trial's first epoch of three, as tracing makes it).

    Asynchronous ASHA's spread, which the ideal rung plan misses: its first trials train
    long and most later ones stop at the first rung. The console's time left starts from
    it. Simulated searches of 2,000 trials or more in all give a stable spread, so the cost
    stays in milliseconds at any size.
    """
    budget = spec.budget
    nominal = Measurement(
        target="nominal",
        measured_at=0.0,
        cpus=float(budget.max_concurrent) * max(spec.resources.cpu, 1.0),
        gpus=float(budget.max_concurrent) * spec.resources.gpu,
        startup_s=0.0,
        new_worker_first_epoch_s=3.0,
        reused_first_epoch_s=3.0,
        epoch_s=1.0,
        gap_s=0.0,
        end_s=0.0,
        probe_trials=0,
        probe_epochs=0,
        probe_seconds=0.0,
    )
    slots, _ = concurrency(spec, nominal.cpus, nominal.gpus)
    rng = random.Random(spec.search.seed)
    counts = [0] * (budget.max_epochs + 1)
    for _ in range(max(1, min(50, 2000 // budget.num_samples))):  # a few thousand trials in all
        for epochs in _simulate(spec, nominal, slots, rng).trial_epochs:
            counts[epochs] += 1
    return TrialEpochs(tuple(counts))


@dataclass
class _Run:
    wall: float
    trial_epochs: list[int]
    slot_seconds: float

    @property
    def epochs(self) -> int:
        return sum(self.trial_epochs)


@dataclass
class _Trial:
    score: float
    started: float
    epoch_s: float  # what a later epoch of its configuration costs
    epochs: int = 0


def _simulate(
    spec: ExperimentSpec, m: Measurement, slots: int, rng: random.Random, costs: list[float] | None = None
) -> _Run:
    """One search: trials fill the slots, report epochs, and ASHA stops them by Ray's rule.

    Each trial has one random score for all its epochs (its rank among trials is what ASHA
    sees). At a rung, a trial stops when its score is below the (1 - 1/rf) quantile of
    the scores recorded there before it; the first trial at a rung always goes on. A trial's
    epochs cost one of ``costs`` (its configuration's, drawn from the space), else the
    probe's mean; its first epoch is the probe's first epoch with the mean epoch swapped for its own.
    """
    n, max_epochs = spec.budget.num_samples, spec.budget.max_epochs
    # Hyperband: trial i is in bracket i mod B, compared from ASHA's rung b on (tunekit.config.rungs).
    brackets, ordered = spec.scheduler.brackets, spec_milestones(spec)
    milestones = {(b, epoch) for b in range(brackets) for epoch in ordered[b:]}
    quantile = 1 - 1 / spec.scheduler.reduction_factor
    deadline = m.startup_s + spec.budget.time_budget_s if spec.budget.time_budget_s else math.inf
    recorded: dict[tuple[int, int], list[float]] = {rung: [] for rung in milestones}
    events: list[tuple[float, int, int]] = []  # (time, trial index, epoch reported)
    trials: list[_Trial] = []
    ends: list[float] = []
    slot_seconds = 0.0

    def start(at: float, reused: bool) -> None:
        if len(trials) >= n or at >= deadline:
            return
        epoch_s = rng.choice(costs) if costs else m.epoch_s
        trials.append(_Trial(rng.random(), at, epoch_s))
        first = (m.reused_first_epoch_s if reused else m.new_worker_first_epoch_s) + epoch_s - m.epoch_s
        heapq.heappush(events, (at + max(first, epoch_s), len(trials) - 1, 1))

    def end(index: int, at: float) -> None:
        nonlocal slot_seconds
        ends.append(at)
        slot_seconds += at - trials[index].started
        start(at + m.gap_s, reused=True)

    for _ in range(slots):
        start(m.startup_s, reused=False)
    while events:
        at, index, epoch = heapq.heappop(events)
        trial = trials[index]
        if at > deadline:  # the time budget ran out while this epoch trained
            end(index, deadline)
            continue
        trial.epochs = epoch
        stop = epoch >= max_epochs
        if (rung := (bracket_of(index, brackets), epoch)) in milestones:
            seen = recorded[rung]  # kept sorted: a sort per comparison made 10,000 trials take seconds
            stop = stop or (bool(seen) and trial.score < _quantile(seen, quantile))
            bisect.insort(seen, trial.score)
        if stop:
            end(index, at + m.end_s)
        else:
            heapq.heappush(events, (at + trial.epoch_s, index, epoch + 1))
    return _Run(max(ends, default=m.startup_s), [t.epochs for t in trials], slot_seconds)


def _quantile(ordered: list[float], q: float) -> float:
    """numpy's default (linear) percentile of sorted ``ordered``, as Ray's ASHA computes its cutoff."""
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


# --------------------------------------------------------------- stored measurements


def target_of(address: str | None) -> str:
    """Where a search runs: "local", or the Ray address (as given, or RAY_ADDRESS)."""
    import os

    address = address or os.environ.get("RAY_ADDRESS") or None
    return "local" if address in (None, "local") else str(address)


def fingerprint(spec: ExperimentSpec, target: str) -> str:
    """What an epoch's cost depends on (``measured_parts``), as a short hash: a probe's file name."""
    text = json.dumps(measured_parts(spec, target), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def measured_parts(spec: ExperimentSpec, target: str) -> dict[str, Any]:
    """What an epoch's cost depends on: the trainable, space, training, resources, data, target,
    and how many trials share the target (``budget.max_concurrent``: the probe times epochs
    under the spec's own contention, so a probe at 1 must not predict a search at 2).

    The rest of the budget, the scheduler and the search are left out on purpose: a stored
    measurement still predicts the search after ``--set budget.num_samples=48``.
    """
    raw = spec.raw
    relevant = {key: raw.get(key) for key in MEASURED_SECTIONS}
    return {**relevant, "max_concurrent": spec.budget.max_concurrent, "target": target, "code": trainable_code(spec)}


def trainable_code(spec: ExperimentSpec) -> str | None:
    """A short hash of the trainable's source: its module file, or the builders passed from Python.

    An edit to the model or the data pipeline changes what an epoch costs, so it forces a new
    probe, as a changed spec does. Only the trainable's own file counts, not the modules it
    imports. None when the source cannot be read (a recorded spec, a builder without source).
    """
    import inspect

    trainable = spec.trainable
    try:
        source = getattr(trainable, "source", None)
        if isinstance(source, Path):
            data = source.read_bytes()
        else:
            functions = [getattr(trainable, name, None) for name in ("build_data", "build_model", "fit_options")]
            if not any(callable(f) for f in functions):
                return None
            data = "".join(inspect.getsource(f) for f in functions if callable(f)).encode()
    except (OSError, TypeError):
        return None
    return hashlib.sha256(data).hexdigest()[:12]


def measurement_path(storage_root: Path, spec: ExperimentSpec, target: str) -> Path:
    return storage_root / PROBES_DIR / f"{fingerprint(spec, target)}.json"


def save_measurement(storage_root: Path, spec: ExperimentSpec, measurement: Measurement) -> Path:
    """Stores the measurement under its fingerprint, with the spec's name and measured parts
    (``why_no_prediction`` compares a later spec of that name with them)."""
    path = measurement_path(storage_root, spec, measurement.target)
    path.parent.mkdir(parents=True, exist_ok=True)
    measured = {"name": spec.name, **measured_parts(spec, measurement.target)}
    path.write_text(json.dumps({**asdict(measurement), MEASURED_KEY: measured}, indent=2, default=str))
    return path


def load_measurement(storage_root: Path, spec: ExperimentSpec, target: str) -> Measurement | None:
    path = measurement_path(storage_root, spec, target)
    try:
        return Measurement.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None  # no probe of this spec on this target yet (or an unreadable one): no prediction


def why_no_prediction(storage_root: Path, spec: ExperimentSpec, target: str) -> str | None:
    """Why a spec whose name was probed under ``storage_root`` has no stored measurement: what
    differs from the closest probe of that name (the newest of the closest). None when no
    probe of that name is stored."""
    now = json.loads(json.dumps(measured_parts(spec, target), default=str))
    probes: list[tuple[int, float, list[str]]] = []
    for path in (storage_root / PROBES_DIR).glob("*.json"):
        try:
            stored = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        measured = stored.get(MEASURED_KEY) if isinstance(stored, dict) else None
        if isinstance(measured, dict) and measured.get("name") == spec.name:
            changes = _changes(measured, now)
            probes.append((len(changes), -float(stored.get("measured_at") or 0.0), changes))
    if not probes:
        return None
    _, _, changes = min(probes)
    return (
        f"no prediction for this search: the closest probe of {spec.name} under {storage_root} measured "
        f"{'; '.join(changes) or 'another spec'} (`tunekit plan --probe` with the same spec and --set values "
        "measures this one)"
    )


def _changes(probed: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """What a search's measured parts changed from a probe's, in the spec's own paths."""
    changes = []
    for key, value in now.items():
        before = probed.get(key)
        if before == value:
            continue
        if key == "code":
            changes.append("the trainable's code as it was then (it changed since)")
        elif isinstance(before, dict) and isinstance(value, dict):
            for name in sorted(before.keys() | value.keys()):
                if before.get(name) != value.get(name):
                    changes.append(f"{key}.{name} {_brief(before.get(name))}, not {_brief(value.get(name))}")
        else:
            path = "budget.max_concurrent" if key == "max_concurrent" else key
            changes.append(f"{path} {_brief(before)}, not {_brief(value)}")
    return changes


def _brief(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def attach_prediction(
    spec: ExperimentSpec, experiment_dir: Path, address: str | None, launched_at: float
) -> str | None:
    """Files the prediction of a stored probe of this spec with the experiment (``prediction.json``).

    ``launched_at`` is when the search started, the zero of the predicted wall time; the
    report measures the actual one from it. Without a matching probe nothing is written, and
    when a probe of a spec of this name is stored it returns why that probe does not apply.
    """
    target = target_of(address)
    measurement = load_measurement(experiment_dir.parent, spec, target)
    if measurement is None:
        return why_no_prediction(experiment_dir.parent, spec, target)
    record = {
        **predict(spec, measurement).to_dict(),
        "launched_at": launched_at,
        "measurement": asdict(measurement),
        "filed_at": time.time(),
    }
    write_json(experiment_dir / PREDICTION_FILE, record, indent=2)
    return None


def read_prediction(experiment_dir: Path) -> dict[str, Any] | None:
    try:
        record = json.loads((experiment_dir / PREDICTION_FILE).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None
