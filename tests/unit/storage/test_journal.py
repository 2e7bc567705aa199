"""The study journal verified whole (tunekit.storage.journal), refused by a resume and rebuilt by
``tunekit check --repair`` (tunekit.results.repair), on every kind of damage.

Damage is generated, not chosen: every cut offset in a stretch, single-byte changes at
positions a seeded RNG samples, a line inserted before every line.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import optuna
import pytest

from tunekit.driver.resumable import check_resumable
from tunekit.errors import DamagedFileError
from tunekit.layout import JOURNAL_SEAL_FILE, RAY_TRIAL_ATTR, STUDY_FILE, TRIALS_FILE
from tunekit.results.check import TABLES_VS_STUDY, check_experiment
from tunekit.results.load import load
from tunekit.results.repair import repair_experiment
from tunekit.search.history import optuna_distribution
from tunekit.search.plan import study_storage
from tunekit.storage.journal import SEAL_BLOCK, JournalSealer, verify_journal

from ..results.made_up_experiments import asha_experiment

GARBAGE = (
    b"\n",
    b"not json\n",
    b'{"op_code": 7, "worker_id": "w", "trial_id": 99, "step": 1, "intermediate_value": 1}\n',
)


def sealed_experiment(root: Path, *, seal: bool = True) -> Path:
    """A made-up 10-trial ASHA experiment with the study its search would have kept, sealed."""
    asha_experiment(root, completed=3)
    results = load(root)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name=results.spec.name, storage=study_storage(root), direction="maximize")
    distributions = {p.name: optuna_distribution(p.distribution) for p in results.spec.space.params}
    for row in results.trials.to_dict("records"):
        study.enqueue_trial({name: row[f"params.{name}"] for name in distributions})  # the table's config
        trial = study.ask(distributions)
        trial.set_user_attr(RAY_TRIAL_ATTR, row["trial_id"])
        epochs = results.epochs[results.epochs["trial_id"] == row["trial_id"]]
        for epoch, value in zip(epochs["epoch"], epochs["val_accuracy"], strict=True):
            trial.report(float(value), int(epoch))
        complete = row["status"] == "completed"
        state = optuna.trial.TrialState.COMPLETE if complete else optuna.trial.TrialState.PRUNED
        study.tell(trial, row["final_metric"] if complete else None, state=state)
    if seal:
        JournalSealer(root).seal()
    return root


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return sealed_experiment(tmp_path_factory.mktemp("whole") / "asha")


def journal_lines(root: Path) -> list[bytes]:
    return (root / STUDY_FILE).read_bytes().splitlines(keepends=True)


def line_of(data: bytes, position: int) -> int:
    return data.count(b"\n", 0, position) + 1


def test_a_whole_journal_has_no_damage_and_its_seal_covers_every_line(whole: Path) -> None:
    report = verify_journal(whole / STUDY_FILE)
    assert (report.damage, report.torn_tail) == (None, 0)
    seal = json.loads((whole / JOURNAL_SEAL_FILE).read_text())
    assert seal["lines"] == report.lines == len(journal_lines(whole)) > 3 * SEAL_BLOCK
    assert seal["bytes"] == (whole / STUDY_FILE).stat().st_size


def test_every_cut_is_damage_but_a_torn_last_line(whole: Path, tmp_path: Path) -> None:
    data = (whole / STUDY_FILE).read_bytes()
    last_line_start = data.rfind(b"\n", 0, len(data) - 1) + 1
    rng = random.Random(50)
    offsets = sorted({*range(len(data) // 3, len(data) // 3 + 300), *rng.sample(range(len(data)), 150)})
    (tmp_path / TRIALS_FILE).write_bytes((whole / TRIALS_FILE).read_bytes())
    (tmp_path / JOURNAL_SEAL_FILE).write_bytes((whole / JOURNAL_SEAL_FILE).read_bytes())
    for offset in offsets:
        (tmp_path / STUDY_FILE).write_bytes(data[:offset])
        report = verify_journal(tmp_path / STUDY_FILE)
        assert report.damage is not None, offset
        assert report.damage[0] <= line_of(data, offset), (offset, report.damage)
        assert "is missing" in report.damage[1]
    # A torn last line of a journal its seal has not seen yet: a kill mid-write.
    assert last_line_start < len(data) - 1
    (tmp_path / JOURNAL_SEAL_FILE).unlink()
    JournalSealer(tmp_path).journal.write_bytes(data[:last_line_start])
    JournalSealer(tmp_path).seal()
    (tmp_path / STUDY_FILE).write_bytes(data[: last_line_start + 17])
    report = verify_journal(tmp_path / STUDY_FILE)
    assert (report.damage, report.torn_tail) == (None, 17)


def test_every_changed_byte_is_found_at_or_before_its_line(whole: Path, tmp_path: Path) -> None:
    data = (whole / STUDY_FILE).read_bytes()
    (tmp_path / TRIALS_FILE).write_bytes((whole / TRIALS_FILE).read_bytes())
    (tmp_path / JOURNAL_SEAL_FILE).write_bytes((whole / JOURNAL_SEAL_FILE).read_bytes())
    rng = random.Random(5050)
    for position in rng.sample(range(len(data)), 300):
        changed = bytearray(data)
        changed[position] ^= rng.randrange(1, 256)
        (tmp_path / STUDY_FILE).write_bytes(bytes(changed))
        report = verify_journal(tmp_path / STUDY_FILE)
        assert report.damage is not None, position
        line = line_of(data, position)
        first = (line - 1) // SEAL_BLOCK * SEAL_BLOCK + 1  # the seal names a block of lines
        assert first <= report.damage[0] <= line, (position, report.damage)


def test_a_line_inserted_anywhere_is_named_by_its_number(whole: Path, tmp_path: Path) -> None:
    lines = journal_lines(whole)
    (tmp_path / TRIALS_FILE).write_bytes((whole / TRIALS_FILE).read_bytes())
    (tmp_path / JOURNAL_SEAL_FILE).write_bytes((whole / JOURNAL_SEAL_FILE).read_bytes())
    for index in range(len(lines)):
        for garbage in GARBAGE:
            (tmp_path / STUDY_FILE).write_bytes(b"".join([*lines[:index], garbage, *lines[index:]]))
            report = verify_journal(tmp_path / STUDY_FILE)
            assert report.damage is not None and report.damage[0] == index + 1, (index, garbage, report.damage)


def test_without_a_seal_lines_cut_from_the_middle_are_found_by_the_trials_the_table_names(tmp_path: Path) -> None:
    root = sealed_experiment(tmp_path / "asha", seal=False)  # an experiment from before the seal
    data = (root / STUDY_FILE).read_bytes()
    lines = data.splitlines(keepends=True)
    for keep in range(0, len(lines) - 20, 7):
        (root / STUDY_FILE).write_bytes(b"".join(lines[:keep]))
        report = verify_journal(root / STUDY_FILE)
        assert report.damage is not None and "no line of the journal created" in report.damage[1], keep


def test_a_resume_refuses_damage_before_the_tail_in_one_line_naming_the_line_and_the_repair(tmp_path: Path) -> None:
    root = sealed_experiment(tmp_path / "asha")
    data = (root / STUDY_FILE).read_bytes()
    (root / STUDY_FILE).write_bytes(data[: len(data) // 2])  # cut mid-line, as a torn tail looks
    with pytest.raises(DamagedFileError) as refused:
        check_resumable(root)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"{root / STUDY_FILE}: line {line_of(data, len(data) // 2)} is missing")
    assert f"`tunekit check --repair {root}` rebuilds the study" in message
    assert (root / STUDY_FILE).read_bytes() == data[: len(data) // 2]  # nothing cut back


def test_a_resume_cuts_back_a_torn_last_line_alone_and_says_so(tmp_path: Path) -> None:
    root = sealed_experiment(tmp_path / "asha")
    data = (root / STUDY_FILE).read_bytes()
    (root / STUDY_FILE).write_bytes(data + b'{"op_code": 7, "work')
    assert check_resumable(root) == [
        f"{STUDY_FILE}: cut back a torn last line (20 bytes, a write cut short by a kill or a full disk) before "
        "appending; the study lost that one write, which the resume redoes"
    ]
    assert (root / STUDY_FILE).read_bytes() == data


def test_a_cut_past_the_seal_that_looks_torn_is_damage_when_a_trial_folder_lost_its_trial(tmp_path: Path) -> None:
    """Chaos seed 69869: the lines after the seal's held a trial's ask (its Ray id); cut mid-line,
    the journal looks torn at its tail, and only the trial's folder tells the lines were lost."""
    root = sealed_experiment(tmp_path / "asha")
    sealed = (root / STUDY_FILE).read_bytes()
    study = optuna.load_study(study_name=load(root).spec.name, storage=study_storage(root))
    trial = study.ask()
    trial.set_user_attr(RAY_TRIAL_ATTR, "5c0ffee5")  # the ask's line the cut takes
    trial.report(0.5, 1)
    (root / "5c0ffee5" / "checkpoint_000000").mkdir(parents=True)  # Ray started it
    data = (root / STUDY_FILE).read_bytes()
    (root / STUDY_FILE).write_bytes(data[: len(sealed) + 30])  # the ask's line cut mid-way
    with pytest.raises(DamagedFileError) as refused:
        check_resumable(root)
    assert "trial folders 5c0ffee5 hold trials no line of the journal names" in str(refused.value)
    assert f"`tunekit check --repair {root}` rebuilds the study" in str(refused.value)
    wheres = {STUDY_FILE, TABLES_VS_STUDY, f"{TRIALS_FILE} vs trial folders"}  # the made-up tables lack the rest
    assert STUDY_FILE in [f.where for f in check_experiment(root, mlflow=False).findings if f.where in wheres]
    repaired = repair_experiment(root)
    assert "trial folders no record names now (5c0ffee5) are moved to .orphans/" in repaired[0], repaired
    assert check_resumable(root) == []
    assert not [f for f in check_experiment(root, mlflow=False).findings if f.where in wheres]


def test_check_reports_journal_damage_as_a_disagreement_with_its_repair(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tunekit.cli import main

    root = sealed_experiment(tmp_path / "asha")
    lines = journal_lines(root)
    (root / STUDY_FILE).write_bytes(b"".join([*lines[:40], b"garbage\n", *lines[40:]]))
    report = check_experiment(root, mlflow=False)
    journal = [f for f in report.findings if f.where == STUDY_FILE]
    assert [f.actual.split(";")[0] for f in journal] == ["line 41 does not parse as JSON"]
    assert f"`tunekit check --repair {root}`" in journal[0].actual
    assert not [f for f in report.findings if f.where == TABLES_VS_STUDY]  # the damaged replay is not compared
    assert main(["check", str(root), "--no-mlflow"]) == 1
    assert "study.journal: every line whole: 'yes' vs 'line 41 does not parse as JSON" in capsys.readouterr().out


def damaged_copies(whole: Path, tmp_path: Path) -> list[tuple[str, Path]]:
    """Copies of ``whole`` each damaged one way: a cut in the middle, a line inserted, a byte changed."""
    data = (whole / STUDY_FILE).read_bytes()
    lines = data.splitlines(keepends=True)
    rng = random.Random(4242)
    changed = bytearray(data)
    changed[rng.randrange(len(data) // 4, len(data))] ^= rng.randrange(1, 256)
    kinds = {
        "cut": data[: rng.randrange(len(data) // 4, 3 * len(data) // 4)],
        "inserted": b"".join([*lines[:23], rng.choice(GARBAGE), *lines[23:]]),
        "changed": bytes(changed),
        "cut at a line's end": b"".join(lines[: len(lines) // 2]),
    }
    copies = []
    for kind, damaged in kinds.items():
        root = tmp_path / kind.replace(" ", "-")
        root.mkdir()
        for path in whole.iterdir():
            (root / path.name).write_bytes(path.read_bytes())
        (root / STUDY_FILE).write_bytes(damaged)
        copies.append((kind, root))
    return copies


def test_check_repair_rebuilds_every_kind_of_damage_into_a_study_that_agrees_with_the_tables(
    whole: Path, tmp_path: Path
) -> None:
    expected = optuna.load_study(study_name="asha", storage=study_storage(whole)).trials
    for kind, root in damaged_copies(whole, tmp_path):
        assert verify_journal(root / STUDY_FILE).damage is not None, kind
        repaired = repair_experiment(root)
        assert len(repaired) == 1 and repaired[0].startswith(f"{STUDY_FILE}: rebuilt ("), (kind, repaired)
        assert (root / f"{STUDY_FILE}.damaged").is_file()
        assert verify_journal(root / STUDY_FILE).damage is None, kind
        trials = optuna.load_study(study_name="asha", storage=study_storage(root)).trials
        assert [(t.number, t.state, t.value, t.params, t.intermediate_values) for t in trials] == [
            (t.number, t.state, t.value, t.params, t.intermediate_values) for t in expected
        ], kind
        assert [t.user_attrs[RAY_TRIAL_ATTR] for t in trials] == [t.user_attrs[RAY_TRIAL_ATTR] for t in expected]
        report = check_experiment(root, mlflow=False)
        study = [f for f in report.findings if "study" in f.where or f.where == STUDY_FILE]
        assert not study, (kind, report.describe())
        assert check_resumable(root) == [], kind


def test_check_repair_rebuilds_a_missing_study_from_the_tables(whole: Path, tmp_path: Path) -> None:
    root = tmp_path / "asha"
    root.mkdir()
    for path in whole.iterdir():
        if path.name != STUDY_FILE:
            (root / path.name).write_bytes(path.read_bytes())
    with pytest.raises(DamagedFileError, match="missing, while the search has run"):
        check_resumable(root)
    assert repair_experiment(root)[0].startswith(f"{STUDY_FILE}: rebuilt (it was missing): 0 trials")
    trials = optuna.load_study(study_name="asha", storage=study_storage(root)).trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 3 + ["PRUNED"] * 7
