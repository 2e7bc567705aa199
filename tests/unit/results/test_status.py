"""``tunekit status`` from an experiment's files: is the search running, and where are its trials."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from tunekit.layout import HEARTBEAT_FILE, LEDGER_FILE, STARTED_FILE
from tunekit.results.status import read_status

SPEC = "name: s\nmetric: {name: val_accuracy, mode: max}\nbudget: {num_samples: 4, max_epochs: 3}\n"


def experiment(root: Path, *, running: bool | None, heard_s_ago: float) -> Path:
    """One trial running since its span began, before its first report (no node or pid yet)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "spec.yaml").write_text(SPEC)
    (root / "trials.csv").write_text("trial_id,number,status,reason,epochs\nt1,0,running,,0\n")
    (root / "spans.csv").write_text("trial_id,span,start,end,attempt,node_id,pid\nt1,1,1.0,,1,,\n")
    (root / "epochs.csv").write_text("trial_id,epoch,time\n")
    now = time.time()
    clock: dict[str, object] = {"started_at": now - 100, "sessions": [[now - 100, now - heard_s_ago]]}
    if running is not None:
        clock["running"] = running
    (root / STARTED_FILE).write_text(json.dumps(clock))
    return root


def test_a_running_trial_shows_its_worker_from_its_heartbeat_before_its_first_report(tmp_path: Path) -> None:
    root = experiment(tmp_path / "e", running=True, heard_s_ago=1.0)
    (root / "t1").mkdir()
    beat = {"epoch": 1, "phase": "train", "step": 5, "steps": 40, "at": time.time(), "node_id": "abcdef1234", "pid": 77}
    (root / "t1" / HEARTBEAT_FILE).write_text(json.dumps(beat))
    status = read_status(root)
    assert status.alive and [(r.node_id, r.pid) for r in status.running] == [("abcdef1234", "77")]
    assert "search: running" in status.describe()


def test_a_trial_shows_its_worker_from_its_start_however_long_its_data_and_model_take(tmp_path: Path) -> None:
    # The worker announces itself as the trial starts (tunekit.worker.heartbeat.announce), then
    # writes nothing until a long epoch's batches: 3 minutes of data loading still show where.
    from tunekit.worker.heartbeat import announce, read_heartbeat

    root = experiment(tmp_path / "e", running=True, heard_s_ago=1.0)
    (root / "t1").mkdir()
    announce(root / "t1")
    beat = json.loads((root / "t1" / HEARTBEAT_FILE).read_text())
    assert (beat["epoch"], beat["phase"], beat["pid"]) == (0, "start", os.getpid())
    (root / "t1" / HEARTBEAT_FILE).write_text(json.dumps({**beat, "node_id": "feed0001", "at": time.time() - 180}))
    assert read_heartbeat(root / "t1") is None  # too old to say where inside an epoch it is...
    status = read_status(root)
    assert [(r.node_id, r.pid) for r in status.running] == [("feed0001", str(os.getpid()))]  # ...not where it runs
    assert f"feed0001  {os.getpid():>7}" in status.describe()


def test_a_session_its_driver_ended_is_not_running_however_recent(tmp_path: Path) -> None:
    # Right after a Ctrl-C the clock's end is seconds old: it said "running" for 15 s.
    ended = read_status(experiment(tmp_path / "ended", running=False, heard_s_ago=1.0))
    assert not ended.alive and "search: not running (`tunekit resume` continues it)" in ended.describe()
    # A killed driver leaves "running": true behind; silence tells.
    killed = read_status(experiment(tmp_path / "killed", running=True, heard_s_ago=60.0))
    assert not killed.alive
    # Its trials.csv still says running: status says what that means now, not "1 running".
    assert "trials: 1 interrupted (running when their driver died; `tunekit resume` trains them on)" in (
        killed.describe()
    )
    assert "trials: 1 running" in read_status(experiment(tmp_path / "alive", running=True, heard_s_ago=1.0)).describe()
    # started.json from a tunekit that kept no such flag: silence alone, as before.
    older = read_status(experiment(tmp_path / "older", running=None, heard_s_ago=1.0))
    assert older.alive


def test_a_search_with_stopped_trials_is_not_finished(tmp_path: Path) -> None:
    # A grid search stopped by Ctrl-C with all its trials started read "finished".
    root = experiment(tmp_path / "e", running=False, heard_s_ago=1.0)
    rows = "".join(f"t{i},{i},completed,,3\n" for i in range(2)) + "t2,2,stopped,,1\nt3,3,stopped,,1\n"
    (root / "trials.csv").write_text("trial_id,number,status,reason,epochs\n" + rows)
    assert "search: not running (`tunekit resume` continues it)" in read_status(root).describe()
    (root / "trials.csv").write_text("trial_id,number,status,reason,epochs\n" + rows.replace("stopped", "pruned"))
    (root / LEDGER_FILE).write_text("{}")  # the driver's last word: it ended the search itself
    assert "search: finished" in read_status(root).describe()
    # A finished search says its best as the report does (ledger.json's summary); a running one does not.
    best = {"trial_id": "t1", "number": 1, "metric": 0.9, "values": {"model_params": 610.0, "val_accuracy": 0.9}}
    summary = {"metric": "val_accuracy", "best": best, "pareto": {"front": [{"trial_id": "t1"}, {"trial_id": "t0"}]}}
    (root / LEDGER_FILE).write_text(json.dumps({"summary": summary}))
    assert (
        read_status(root).describe().splitlines()[3]
        == "best: trial 1 (t1) model_params=610, val_accuracy=0.9; front of 2"
    )
    (root / LEDGER_FILE).write_text(
        json.dumps({"summary": {**summary, "best": {**best, "values": {}}, "pareto": None}})
    )
    assert read_status(root).best == "best: trial 1 (t1) val_accuracy=0.9"
    assert read_status(experiment(tmp_path / "alive", running=True, heard_s_ago=1.0)).best == ""


def test_trials_the_failure_guard_stopped_are_ended_for_good_as_the_time_budget_s_are(tmp_path: Path) -> None:
    # Ray never runs them again: a search whose every trial started stayed "not running
    # (`tunekit resume` continues it)" forever, and each resume announced them once more.
    root = experiment(tmp_path / "e", running=False, heard_s_ago=1.0)
    (root / LEDGER_FILE).write_text("{}")
    failed = "".join(f"t{i},{i},failed,RuntimeError: the data folder is missing,0\n" for i in range(3))
    guard = "t3,3,stopped,the failure guard stopped the search after 0 epochs,0\n"
    (root / "trials.csv").write_text("trial_id,number,status,reason,epochs\n" + failed + guard)
    assert "search: finished" in read_status(root).describe()  # 4 of 4: resume offers to grow it
    (root / "spec.yaml").write_text(SPEC.replace("num_samples: 4", "num_samples: 6"))
    budget = "t4,4,stopped,the search's time budget of 9 s ran out after 1 epoch,1\n"
    (root / "trials.csv").write_text("trial_id,number,status,reason,epochs\n" + failed + guard + budget)
    assert "search: finished: the time budget ran out, 1 not started" in read_status(root).describe()


def test_a_killed_driver_on_this_host_is_not_running_at_once(tmp_path: Path) -> None:
    # A second user's status, 5 s after kill -9 of the driver, still said "running" (for 15 s).
    import socket
    import subprocess
    import sys

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    root = experiment(tmp_path / "killed", running=True, heard_s_ago=1.0)
    clock = json.loads((root / STARTED_FILE).read_text())
    (root / STARTED_FILE).write_text(
        json.dumps({**clock, "driver": {"host": socket.gethostname(), "pid": int(gone.stdout)}})
    )
    assert not read_status(root).alive
    (root / STARTED_FILE).write_text(
        json.dumps({**clock, "driver": {"host": socket.gethostname(), "pid": os.getpid()}})
    )
    assert read_status(root).alive  # this process is alive: the driver's word stands
    # A driver killed with kill -9 stays a zombie until its parent reaps it: dead all the same.
    killed = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 10
        while Path(f"/proc/{killed.pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z":
            assert time.monotonic() < deadline, "the child never became a zombie"
            time.sleep(0.01)
        (root / STARTED_FILE).write_text(
            json.dumps({**clock, "driver": {"host": socket.gethostname(), "pid": killed.pid}})
        )
        assert not read_status(root).alive
    finally:
        killed.wait()


def test_a_search_whose_space_ran_out_is_finished_as_resume_judges_it(tmp_path: Path) -> None:
    # A 2-point grid under num_samples 4: `tunekit resume` said "complete: nothing to resume"
    # while `tunekit status` told the user to resume it. Both now ask search_complete.
    import optuna

    from tunekit.results.completion import search_complete
    from tunekit.search.attrs import EXHAUSTED_ATTR
    from tunekit.search.plan import study_storage

    root = experiment(tmp_path / "grid", running=False, heard_s_ago=1.0)
    rows = "".join(f"t{i},{i},completed,,3\n" for i in range(2))
    (root / "trials.csv").write_text("trial_id,number,status,reason,epochs\n" + rows)
    (root / LEDGER_FILE).write_text("{}")
    study = optuna.create_study(study_name="s", storage=study_storage(root))
    assert "search: not running (`tunekit resume` continues it)" in read_status(root).describe()
    study.set_user_attr(EXHAUSTED_ATTR, "the grid's 2 configurations all ran")
    assert "search: finished" in read_status(root).describe()
    assert search_complete(root, "s", 4, [{"status": "completed"}] * 2)


def test_active_time_is_rounded_as_the_report_rounds_it(tmp_path: Path) -> None:
    # 46.99 s of active time: status said 0m 46s, the report and the console 0m 47s.
    from tunekit.storage.clock import duration

    root = experiment(tmp_path / "e", running=False, heard_s_ago=1.0)
    clock = json.loads((root / STARTED_FILE).read_text())
    end = clock["sessions"][0][1]
    (root / STARTED_FILE).write_text(json.dumps({**clock, "sessions": [[end - 46.99, end]]}))
    assert "active 0m 47s" in read_status(root).describe()
    assert duration(46.99) == "0m 47s" and duration(3725) == "1h 02m" and duration(None) == "-"


def test_a_trial_pbt_paused_is_listed_off_its_worker_not_as_running_on_it(tmp_path: Path) -> None:
    root = experiment(tmp_path / "e", running=True, heard_s_ago=1.0)
    (root / "trials.csv").write_text("trial_id,number,status,reason,epochs\nt1,0,running,,2\nt2,1,running,,2\n")
    # t1 trains its third epoch in its second span; t2 reported its second and waits for PBT's meeting.
    (root / "spans.csv").write_text(
        "trial_id,span,start,end,attempt,node_id,pid\n"
        "t1,1,1.0,5.0,1,abcdef1234,77\nt1,2,9.0,,1,abcdef1234,77\nt2,1,1.0,8.0,1,abcdef1234,78\n"
    )
    (root / "epochs.csv").write_text("trial_id,epoch,time\nt1,1,3.0\nt1,2,5.0\nt2,1,4.0\nt2,2,8.0\n")
    status = read_status(root)
    assert [(r.number, r.pid, r.epoch) for r in status.running] == [("0", "77", 3)]
    assert status.waiting == ["1"]
    assert "paused (off their worker until PBT's next meeting or a free slot): trials 1" in status.describe()
    assert "trials: 2 running (1 of them paused) of 4 planned" in status.describe()
