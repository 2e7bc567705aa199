"""Space names no completed trial read, over a hand-made experiment (milliseconds, no Ray)."""

from __future__ import annotations

from pathlib import Path

from tunekit.layout import EPOCHS_FILE, SPEC_FILE, TRIALS_FILE
from tunekit.results.closing import closing_lines
from tunekit.results.load import load
from tunekit.results.summary import summarize
from tunekit.results.unread import unread_names

SPEC = """\
name: unread
trainable: trainables.digits_mlp
metric: {name: val_accuracy, mode: max}
budget: {num_samples: 3, max_epochs: 2, max_concurrent: 1}
scheduler: {type: asha, grace_period: 1, reduction_factor: 2}
resources: {cpu: 1, gpu: 0}
space:
  learning_rate: {type: loguniform, low: 0.0001, high: 0.1}
  layers: {type: choice, values: [1, 2]}
  units_2: {type: choice, values: [8, 16], when: {layers: 2}}
  dropout: {type: uniform, low: 0.0, high: 0.5}
"""
HEADER = "trial_id,number,status,reason,epochs,final_metric,best_metric,rung,wall_seconds,info.precision"
# Trial c, pruned, read units_2: only completed trials count. Trial b read nothing at all (an empty cell).
TRIALS = f"""\
{HEADER},info.space_read
a,0,completed,trained all 2 epochs,2,0.9,0.9,1,4.0,float32,layers;learning_rate
b,1,completed,trained all 2 epochs,2,0.8,0.8,1,4.0,float32,
c,2,pruned,pruned by ASHA at rung 0 (epoch 1),1,0.5,0.5,0,2.0,float32,layers;units_2
"""
EPOCHS = """\
trial_id,epoch,attempt,resumed_from_epoch,time,val_accuracy
a,1,1,0,1,0.8
a,2,1,,2,0.9
b,1,1,0,3,0.7
b,2,1,,4,0.8
c,1,1,0,5,0.5
"""


def experiment(root: Path, trials: str = TRIALS) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / SPEC_FILE).write_text(SPEC)
    (root / TRIALS_FILE).write_text(trials)
    (root / EPOCHS_FILE).write_text(EPOCHS)
    return root


def test_space_names_no_completed_trial_read_are_warned_of_at_the_end(tmp_path: Path) -> None:
    results = load(experiment(tmp_path))
    assert unread_names(results) == ["units_2", "dropout"]
    assert closing_lines(results, summarize(results))[-1] == (
        "warning: space.units_2, space.dropout: no completed trial's builders read them, so the search "
        "varied them for nothing (a name the code spells otherwise, or a branch that never ran)"
    )


def test_nothing_is_warned_of_when_every_name_was_read_or_reads_were_not_recorded(tmp_path: Path) -> None:
    every = TRIALS.replace(",float32,\n", ",float32,units_2;dropout\n")
    results = load(experiment(tmp_path / "every", every))
    assert unread_names(results) == []
    assert not any(line.startswith("warning:") for line in closing_lines(results, summarize(results)))
    unrecorded = "\n".join(line.rsplit(",", 1)[0] for line in TRIALS.splitlines()) + "\n"
    assert unread_names(load(experiment(tmp_path / "unrecorded", unrecorded))) == []
