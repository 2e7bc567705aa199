"""tunekit's TensorBoard logs, driven with made-up trials and read back from the event files.

The event files are read with ``tunekit.testing.runs.read_events`` (tensorboardX's protos), so the
tests need neither TensorFlow nor a TensorBoard server (the e2e suite runs one).
"""

from __future__ import annotations

import pickle
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from tensorboardX.proto.api_pb2 import DataType
from tensorboardX.proto.plugin_hparams_pb2 import HParamsPluginData

from tunekit.config.spec import load_spec
from tunekit.driver.records import EpochRow, TrialRecord
from tunekit.errors import SpecError
from tunekit.layout import TENSORBOARD_DIR, TrialStatus
from tunekit.storage.clock import SearchClock
from tunekit.testing.runs import read_events
from tunekit.tracking.tensorboard import STATUS_FAILURE, STATUS_SUCCESS, STATUS_UNKNOWN, TensorBoardLogger

REPO = Path(__file__).resolve().parents[3]
DIGITS_SPEC = REPO / "search_spaces" / "digits_mlp.yaml"


def hparams(events: list[Any], tag: str) -> list[Any]:
    return [
        HParamsPluginData.FromString(value.metadata.plugin_data.content)
        for event in events
        for value in event.summary.value
        if value.tag == tag
    ]


def scalars(events: list[Any]) -> dict[str, list[tuple[int, float]]]:
    found: dict[str, list[tuple[int, float]]] = {}
    for event in events:
        for value in event.summary.value:
            if value.WhichOneof("value") == "simple_value":
                found.setdefault(value.tag, []).append((event.step, value.simple_value))
    return found


def fake_recorder() -> Any:
    clock = SearchClock.new()
    clock.begin()
    return SimpleNamespace(clock=clock, trials={}, epochs=[], exploits=[])


def feed(logger: TensorBoardLogger, recorder: Any, number: int, epochs: int, status: TrialStatus, reason: str) -> None:
    record = TrialRecord(f"t{number}", number, {"learning_rate": 0.01, "units": 64, "dropout": 0.1 * number})
    recorder.trials[record.trial_id] = record
    logger.trial_started(record)
    for epoch in range(1, epochs + 1):
        row = EpochRow(record.trial_id, epoch, {"val_accuracy": 0.5 + 0.1 * epoch, "loss": float("nan")}, 1, None, 0.1)
        recorder.epochs.append(row)
        logger.epoch_reported(record, row)
    record.status, record.reason, record.epochs, record.ended_at = status, reason, epochs, time.time()
    logger.trial_ended(record)


@pytest.fixture
def spec() -> Any:
    return load_spec(DIGITS_SPEC, ["budget.max_epochs=3"])


def test_one_run_per_trial_with_scalars_params_and_status(tmp_path: Path, spec: Any) -> None:
    logger = TensorBoardLogger(spec, tmp_path)
    recorder = fake_recorder()
    logger.experiment_started(recorder)
    started = time.perf_counter()
    feed(logger, recorder, 0, 3, TrialStatus.COMPLETED, "trained all 3 epochs")
    feed(logger, recorder, 1, 1, TrialStatus.PRUNED, "pruned by ASHA at rung 0 (epoch 1)")
    feed(logger, recorder, 2, 2, TrialStatus.FAILED, "NaN loss")
    assert time.perf_counter() - started < 0.05  # the hooks only queue
    assert pickle.loads(pickle.dumps(logger))._thread is None
    logger.experiment_ended(recorder)

    logdir = tmp_path / TENSORBOARD_DIR
    assert sorted(p.name for p in logdir.iterdir() if p.is_dir()) == ["trial-0", "trial-1", "trial-2"]
    (experiment,) = hparams(read_events(logdir), "_hparams_/experiment")
    infos = {info.name: info for info in experiment.experiment.hparam_infos}
    assert infos["learning_rate"].domain_interval.min_value == pytest.approx(1e-4)
    assert infos["units"].type == DataType.DATA_TYPE_FLOAT64
    assert list(infos["units"].domain_discrete.values) and infos["units"].WhichOneof("domain") == "domain_discrete"
    assert [m.name.tag for m in experiment.experiment.metric_infos] == ["val_accuracy"]

    events = read_events(logdir / "trial-0")
    found = scalars(events)  # the NaN loss is left out; simple_value is a float32
    assert list(found) == ["val_accuracy"]
    assert found["val_accuracy"] == [(1, pytest.approx(0.6)), (2, pytest.approx(0.7)), (3, pytest.approx(0.8))]
    (start,) = hparams(events, "_hparams_/session_start_info")
    assert start.session_start_info.hparams["units"].number_value == 64
    statuses = [
        hparams(read_events(logdir / f"trial-{n}"), "_hparams_/session_end_info")[0].session_end_info.status
        for n in range(3)
    ]
    assert statuses == [STATUS_SUCCESS, STATUS_UNKNOWN, STATUS_FAILURE]
    texts = [
        value.tensor.string_val[0].decode()
        for event in read_events(logdir / "trial-1")
        for value in event.summary.value
        if value.tag.startswith("outcome")
    ]
    assert texts == ["pruned: pruned by ASHA at rung 0 (epoch 1)"]


def test_a_resume_appends_only_what_is_new_and_a_signal_stop_has_no_session_end(tmp_path: Path, spec: Any) -> None:
    logger = TensorBoardLogger(spec, tmp_path)
    recorder = fake_recorder()
    logger.experiment_started(recorder)
    feed(logger, recorder, 0, 2, TrialStatus.STOPPED, "the search was stopped after 2 epochs")
    logger.experiment_ended(recorder)
    run = tmp_path / TENSORBOARD_DIR / "trial-0"
    assert not hparams(read_events(run), "_hparams_/session_end_info")

    # The resumed driver hears the whole record again, then the trial's further epochs.
    again = TensorBoardLogger(spec, tmp_path)
    record = recorder.trials["t0"]
    record.status, record.reason = TrialStatus.RUNNING, ""
    again.experiment_started(recorder)
    row = EpochRow("t0", 3, {"val_accuracy": 0.9}, 2, 2, 0.2)
    again.epoch_reported(record, row)
    record.status, record.reason = TrialStatus.COMPLETED, "trained all 3 epochs"
    again.trial_ended(record)
    again.experiment_ended(recorder)

    events = read_events(run)
    assert [step for step, _ in scalars(events)["val_accuracy"]] == [1, 2, 3]
    assert len(hparams(events, "_hparams_/session_start_info")) == 1
    (end,) = hparams(events, "_hparams_/session_end_info")
    assert end.session_end_info.status == STATUS_SUCCESS
    assert len(hparams(read_events(run.parent), "_hparams_/experiment")) == 1


def test_the_spec_key_turns_it_off_and_is_checked() -> None:
    assert load_spec(DIGITS_SPEC).tracking.tensorboard is True
    assert load_spec(DIGITS_SPEC, ["tracking.tensorboard=false"]).tracking.tensorboard is False
    with pytest.raises(SpecError, match=r"tracking\.tensorboard"):
        load_spec(DIGITS_SPEC, ["tracking.tensorboard=sometimes"])


def test_pbt_exploits_show_as_steps_of_the_mutated_parameters_and_a_resume_adds_only_new_ones(
    tmp_path: Path,
) -> None:
    from tunekit.search.pbt import ExploitStep

    pbt_spec = load_spec(REPO / "search_spaces" / "digits_mlp_pbt.yaml")
    mutated = list(pbt_spec.scheduler.mutate)
    logger = TensorBoardLogger(pbt_spec, tmp_path)
    recorder = fake_recorder()
    logger.experiment_started(recorder)
    feed(logger, recorder, 0, 2, TrialStatus.RUNNING, "")
    feed(logger, recorder, 1, 2, TrialStatus.RUNNING, "")
    params = recorder.trials["t0"].params
    first = {name: params.get(name, 0.01) for name in mutated}
    recorder.exploits.append(
        ExploitStep("t0", 2, "t1", 2, first, {**first, mutated[0]: first[mutated[0]] * 1.2}, wall_time=time.time())
    )
    logger.tick(recorder)
    logger.experiment_ended(recorder)

    run = tmp_path / TENSORBOARD_DIR / "trial-0"
    found = scalars(read_events(run))[f"pbt/{mutated[0]}"]
    assert [step for step, _ in found] == [0, 2]
    assert found[1][1] == pytest.approx(found[0][1] * 1.2)
    texts = [
        v.tensor.string_val[0].decode()
        for e in read_events(run)
        for v in e.summary.value
        if v.tag.startswith("exploit")
    ]
    assert len(texts) == 1 and texts[0].startswith("epoch 2: copied trial 1 (epoch 2);")

    # A resumed driver hears every step again; only the new exploit is written.
    recorder.exploits.append(ExploitStep("t0", 4, "t1", 4, first, {**first, mutated[0]: 0.5}, wall_time=time.time()))
    again = TensorBoardLogger(pbt_spec, tmp_path)
    again.experiment_started(recorder)
    again.tick(recorder)
    again.experiment_ended(recorder)
    assert [step for step, _ in scalars(read_events(run))[f"pbt/{mutated[0]}"]] == [0, 2, 4]
