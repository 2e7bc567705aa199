"""Made-up experiment directories on disk (spec, tables, clock): no Ray, no search.

``asha_experiment`` writes a 10-trial ASHA search (max 9 epochs, grace 1, reduction factor 3:
rungs at epochs 1 and 3) in which only ``completed`` trials train to the end; the rest are
pruned at epoch 1 or 3. Each trial's score rises with its ``units`` and falls with the distance
of its learning rate from 1e-2, so importance has something to find.
"""

from __future__ import annotations

import math
from pathlib import Path

from tunekit.layout import EPOCHS_FILE, SPEC_FILE, TRIALS_FILE
from tunekit.results.summary import write_ledger
from tunekit.storage.clock import SearchClock

SPEC = """\
name: {name}
trainable: trainables.digits_mlp
metric: {{name: val_accuracy, mode: max}}
budget: {{num_samples: {trials}, max_epochs: 9, max_concurrent: 2}}
scheduler: {{type: asha, grace_period: 1, reduction_factor: 3}}
search: {{algorithm: tpe, seed: 0}}
resources: {{cpu: 1, gpu: 0}}
space:
  learning_rate: {{type: loguniform, low: 0.0001, high: 0.1}}
  units: {{type: choice, values: [16, 64, 256]}}
  dropout: {{type: uniform, low: 0.0, high: 0.5}}
"""
UNITS = (16, 64, 256)


def score(lr: float, units: int, dropout: float, epoch: int) -> float:
    return 0.5 + 0.1 * UNITS.index(units) - 0.05 * abs(math.log10(lr) + 2) + 0.01 * epoch - 0.001 * dropout


def asha_experiment(
    root: Path,
    name: str = "asha",
    *,
    completed: int = 4,
    trials: int = 10,
    started_at: float = 1000.0,
    seconds_per_epoch: float = 2.0,
    offset: float = 0.0,
    finished: bool = True,
) -> Path:
    """An experiment directory: ``trials`` trials, the first ``completed`` of which train all 9 epochs."""
    root.mkdir(parents=True, exist_ok=True)
    (root / SPEC_FILE).write_text(SPEC.format(name=name, trials=trials))
    trial_rows = [
        "trial_id,number,status,reason,epochs,final_metric,best_metric,rung,wall_seconds,started_at,ended_at,"
        "params.learning_rate,params.units,params.dropout"
    ]
    epoch_rows = ["trial_id,epoch,attempt,resumed_from_epoch,time,val_accuracy"]
    clock = 0.0
    for number in range(trials):
        lr = 10 ** (-4 + 3 * ((number * 7) % trials) / max(trials - 1, 1))
        units = UNITS[(number * 2) % 3]
        dropout = (number % 5) / 10
        epochs = 9 if number < completed else (3 if number % 2 else 1)
        status = "completed" if number < completed else "pruned"
        values = [score(lr, units, dropout, e) + offset for e in range(1, epochs + 1)]
        start = clock
        for epoch, value in enumerate(values, start=1):
            clock += seconds_per_epoch
            epoch_rows.append(f"t{number},{epoch},1,,{clock},{value}")
        trial_rows.append(
            f"t{number},{number},{status},,{epochs},{values[-1]},{max(values)},,{clock - start},"
            f"{started_at + start},{started_at + clock},{lr},{units},{dropout}"
        )
    (root / TRIALS_FILE).write_text("\n".join(trial_rows) + "\n")
    (root / EPOCHS_FILE).write_text("\n".join(epoch_rows) + "\n")
    SearchClock(started_at, [[started_at, started_at + clock + 1.0]], running=False).write(root)
    if finished:
        write_ledger(root)  # what the driver writes last: the search ended by itself
    return root
