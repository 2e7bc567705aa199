"""The fault explorer (``python -m benchmarks.chaos``): its parts on made-up records, and a fixed
sample of seeded fault histories on a real Ray runtime, each breaking no invariant.

The sample's seeds are chosen to cover several fault kinds between them; ``--replay SEED``
runs one of them alone. A history costs a search of 4 trials plus a resume per fault.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest

from benchmarks.chaos import faults, invariants
from benchmarks.chaos.__main__ import run_history
from benchmarks.chaos.history import Moment, plan

# A seed whose history held, with its plan: 497363 a deleted lease, then a paused driver taken over
# from another host, then a second driver from another host. A later fault may come after the
# search completed (a loaded machine trains as fast, and starts slower): the first always comes.
# One history: it proves the explorer runs whole in CI (about 45 s); its runs of tens of histories
# are the proof of the guarantees (docs/how-to/faults.md), and test_lease_faults tries the clocks.
SAMPLE = {497363: "lease-deleted"}


def test_a_history_s_plan_is_the_same_for_the_same_seed_and_names_registered_kinds() -> None:
    kinds = [k for k in faults.KINDS if k not in faults.enabled()]
    plans = [plan(seed, kinds, {"store-full", "store-read-only"}) for seed in range(50)]
    assert plans == [plan(seed, kinds, {"store-full", "store-read-only"}) for seed in range(50)]
    assert all(1 <= len(p) <= 3 and {f.kind for f in p} <= set(kinds) for p in plans)
    assert all(sum(f.kind.startswith("store-") for f in p) <= 1 for p in plans)  # one tmpfs fault at most
    assert {f.kind for p in plans for f in p} == set(kinds)
    assert Moment(False, 2, 0.5).describe() == "0.5 s after 2 more epoch(s) recorded"


def test_a_kind_whose_support_has_not_landed_is_off_and_a_bucket_kind_comes_with_no_folder_kind() -> None:
    waiting = faults.FaultKind("later", "not yet", None, waiting_for="its support")
    assert faults.enabled({"later": waiting}) == {"later": "off: waiting for its support"}
    on = [k for k in faults.KINDS if k not in faults.enabled()]
    assert "storage-outage" in on
    tmpfs = {k for k in on if faults.KINDS[k].tmpfs}
    bucket = frozenset(k for k in on if faults.KINDS[k].bucket)
    folder = frozenset(k for k in on if faults.KINDS[k].folder) | tmpfs
    plans = [{f.kind for f in plan(seed, on, tmpfs, bucket, folder)} for seed in range(200)]
    assert any(p & bucket for p in plans) and any(p & folder for p in plans)
    assert not any(p & bucket and p & folder for p in plans)


@pytest.mark.parametrize("op", faults.DAMAGE_OPS)
def test_damage_changes_the_bytes_in_the_way_it_names(op: str) -> None:
    whole = b"a,b\n1,2\n3,4\n5,6\n"
    damaged = faults.damaged_bytes(whole, op, random.Random(3))
    if op == "cut":
        assert whole.startswith(damaged) and 0 < len(damaged) < len(whole) - 1
    elif op == "flip":
        assert len(damaged) == len(whole) and sum(a != b for a, b in zip(whole, damaged, strict=True)) == 1
        with pytest.raises(UnicodeDecodeError):
            damaged.decode("ascii")
    else:
        assert len(damaged.splitlines()) == len(whole.splitlines()) + 1 and b"\x00" in damaged


@pytest.mark.inconsistent_on_purpose("made-up records that break the invariants")
def test_the_independent_checker_finds_an_epoch_twice_a_short_count_and_a_trial_trained_again(tmp_path: Path) -> None:
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    storage = JournalStorage(JournalFileBackend(str(tmp_path / "study.journal")))
    study = optuna.create_study(study_name="digits-mlp", storage=storage, direction="maximize")
    study.add_trial(optuna.trial.create_trial(value=0.9, params={}, distributions={}))
    (tmp_path / "spec.yaml").write_text("budget: {num_samples: 2}\nmetric: {name: val_accuracy}\n")
    (tmp_path / "trials.csv").write_text(
        "trial_id,number,status,reason,epochs,final_metric\na,0,completed,trained all 1 epochs,1,0.9\n"
    )
    (tmp_path / "epochs.csv").write_text("trial_id,epoch\na,1\na,1\n")
    # The second attempt's span begins before the first one's end (seed 694332: a resume's clock behind).
    (tmp_path / "spans.csv").write_text("trial_id,span,start,end\na,1,0.5,25.9\na,2,11.2,30.0\n")
    console = tmp_path / "console.log"
    console.write_text("[00:10] trial 0 completed after 1 epochs\n[00:02] trial 0 completed after 1 epochs\n")
    # MLflow's trial run holds the epoch trained twice, its latest point the first attempt's
    # value (chaos seed 689409), the study lacks the epoch (seed 724138), and its trial does not
    # name trials.csv's Ray trial (seed 826701).
    _tracked(tmp_path, [(0.9, 1), (0.8, 2)])
    assert invariants.violations(tmp_path, tmp_path / "mlflow.db", [console]) == (
        [
            "trials.csv's trials ['0'] are named by no study trial (ray_trial_id)",
            "epochs.csv holds (trial, epoch) twice: [('a', '1')]",
            "trial 0: epochs.csv holds epochs [1, 1] for 1 epochs",
            "trial 0: the study lacks epochs [1] that epochs.csv holds",
            "trial 0: MLflow's final value 0.8, trials.csv's 0.9",
            "spans.csv: trial a's span starting at 11.2 overlaps the one before (end 25.9)",
        ],
        [
            "trials.csv holds 1 trials for num_samples 2",
            "the consoles said trials [0] ended more than once (trained again)",
        ],
    )
    (tmp_path / "trials.csv").write_bytes(b"trial_id,number,status,reason,epochs\na,0,compl\xe9ted,x,1\n")
    assert invariants.violations(tmp_path, tmp_path / "mlflow.db", [])[0][0].startswith(
        "a record does not read whole: UnicodeDecodeError"
    )


def test_damage_no_resume_read_is_repaired_before_the_final_check_and_nothing_a_resume_wrote_is(
    tmp_path: Path,
) -> None:
    """Seed 389070, replayed: a completed trial's checkpoint damaged; `check` named it with its
    repair, and the explorer (which reads no checkpoints) took the final `check`'s exit 1 for a
    disagreement of its own. Seed 321644: the journal damaged after the search had completed, no
    resume ran, and the explorer could not read it. A table the resume wrote again is never put back,
    nor a checkpoint a resume wrote anew at the damaged one's path (seed 235600)."""
    from types import SimpleNamespace

    from benchmarks.chaos.history import repair_damage_nothing_read

    said: list[str] = []
    resumed = [SimpleNamespace(what="run"), SimpleNamespace(what="check after cut"), SimpleNamespace(what="resume")]
    for name, drivers, now, expected in (
        ("weights.npz", resumed, b"damaged", b"whole"),
        ("weights.npz", resumed, b"written anew", b"written anew"),  # seed 235600: a resume's new checkpoint
        ("trials.csv", resumed, b"damaged", b"damaged"),  # the resume wrote it again: never put back
        ("study.journal", resumed[:2], b"damaged", b"whole"),  # seed 321644: the search completed before the damage
    ):
        damaged, copy = tmp_path / name, tmp_path / f"copy-{name}"
        damaged.write_bytes(now)
        copy.write_bytes(b"whole")
        history = SimpleNamespace(
            restore=(damaged, copy), say=said.append, drivers=drivers, damaged_after=1, damage=b"damaged", earlier=[]
        )
        repair_damage_nothing_read(history)  # type: ignore[arg-type]
        assert damaged.read_bytes() == expected
    assert said == [
        f"the user repairs {name} as `tunekit check` says (a whole copy stands for it)"
        for name in ("weights.npz", "study.journal")
    ]
    # Seed 841380: a checkpoint damaged, then the journal; the journal's refusal was repaired, and
    # the checkpoint's damage, which nothing read, is still the user's to repair at the end.
    checkpoint, copy = tmp_path / "checkpoint_000000" / "weights.npz", tmp_path / "copy-earlier-weights.npz"
    checkpoint.parent.mkdir()
    checkpoint.write_bytes(b"damaged")
    copy.write_bytes(b"whole")
    history = SimpleNamespace(
        restore=None,
        say=said.append,
        drivers=resumed,
        damaged_after=2,
        damage=b"",
        earlier=[((checkpoint, copy), 1, b"damaged")],
    )
    repair_damage_nothing_read(history)  # type: ignore[arg-type]
    assert checkpoint.read_bytes() == b"whole"


def test_each_takeover_comes_from_a_host_no_earlier_driver_had() -> None:
    """Seed 831076: the second of two paused-driver takeovers came from chaos-h2, the host of the
    driver it paused (the first taker): the lease read as taken at once, the taker was refused,
    and the paused driver, which had lost nothing, was held to exit 3."""
    from types import SimpleNamespace

    history = SimpleNamespace(drivers=[SimpleNamespace(what="run")])
    assert faults.taker_host(history) == "chaos-h2"  # type: ignore[arg-type]
    history.drivers.append(SimpleNamespace(what="resume as chaos-h2"))
    assert faults.taker_host(history) == "chaos-h3"  # type: ignore[arg-type]


def _tracked(experiment: Path, points: list[tuple[float, int]]) -> None:
    """A real MLflow store (SQLite) with the search's parent run and trial 0's run holding ``points``
    (value, timestamp) of val_accuracy at step 1; tracking.json naming the parent."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric

    client = MlflowClient(tracking_uri=f"sqlite:///{experiment / 'mlflow.db'}")
    experiment_id = client.create_experiment("chaos")
    parent = client.create_run(experiment_id, run_name="digits-mlp").info.run_id
    child = client.create_run(experiment_id, run_name="trial-0", tags={"mlflow.parentRunId": parent}).info.run_id
    client.log_batch(child, metrics=[Metric("val_accuracy", value, at, 1) for value, at in points])
    client.set_terminated(child, "FINISHED")
    (experiment / "tracking.json").write_text(json.dumps({"parent_run_id": parent}))


@pytest.mark.slow
def test_a_fixed_sample_of_fault_histories_breaks_no_invariant(tmp_path: Path) -> None:
    began = time.monotonic()
    for seed, first in SAMPLE.items():
        history = run_history(seed, tmp_path)
        events = "\n".join(history["events"])
        assert history["injected"][:1] == [first], events
        assert history["violations"] == [], events
    print(f"{len(SAMPLE)} fault histories in {time.monotonic() - began:.0f} s")
