"""Where an experiment's Optuna study lives: a journal file, or an earlier experiment's SQLite file."""

from __future__ import annotations

from pathlib import Path

import optuna

from tunekit.layout import SQLITE_STUDY_FILE, STUDY_FILE, study_file
from tunekit.search.plan import study_storage


def add_trials(storage: optuna.storages.BaseStorage, values: list[float]) -> None:
    study = optuna.create_study(study_name="s", storage=storage, direction="maximize", load_if_exists=True)
    for value in values:
        trial = study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
        study.tell(trial, value)


def test_a_new_experiment_keeps_its_study_in_a_journal_another_process_can_read(tmp_path: Path) -> None:
    assert study_file(tmp_path) == tmp_path / STUDY_FILE
    add_trials(study_storage(tmp_path), [0.2, 0.7])
    add_trials(study_storage(tmp_path), [0.5])  # a resumed driver: a new storage replays the journal
    study = optuna.load_study(study_name="s", storage=study_storage(tmp_path))
    assert [t.value for t in study.trials] == [0.2, 0.7, 0.5]
    assert (tmp_path / STUDY_FILE).read_text().count("\n") > 3 and not (tmp_path / SQLITE_STUDY_FILE).exists()


def test_an_experiment_made_before_the_journal_is_read_from_its_sqlite_file(tmp_path: Path) -> None:
    add_trials(optuna.storages.get_storage(f"sqlite:///{tmp_path / SQLITE_STUDY_FILE}"), [0.4])
    assert study_file(tmp_path) == tmp_path / SQLITE_STUDY_FILE
    add_trials(study_storage(tmp_path), [0.6])  # resumed: the same SQLite study goes on
    study = optuna.load_study(study_name="s", storage=study_storage(tmp_path))
    assert [t.value for t in study.trials] == [0.4, 0.6]
    assert not (tmp_path / STUDY_FILE).exists()
