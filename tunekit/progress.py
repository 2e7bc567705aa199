"""Live progress on the terminal: one redrawn status line on a TTY, one line per ended trial otherwise."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from tunekit.recorder import EpochRow, Recorder, TrialRecord


class ConsoleProgress:
    """A recorder listener that shows trials running, pruned, finished and failed, and the best so far."""

    def __init__(self, metric: str, num_samples: int, stream: TextIO | None = None) -> None:
        self._metric = metric
        self._num_samples = num_samples
        self._stream = stream or sys.stdout
        self._live = self._stream.isatty()
        self._started = time.monotonic()
        self._last_draw = 0.0
        self._recorder: Recorder | None = None

    def experiment_started(self, recorder: Recorder) -> None:
        self._recorder = recorder

    def trial_started(self, record: TrialRecord) -> None:
        pass

    def epoch_reported(self, record: TrialRecord, row: EpochRow) -> None:
        pass

    def trial_ended(self, record: TrialRecord) -> None:
        if self._recorder is None:
            return
        if self._live:
            self._draw(force=True)
            return
        detail = f" ({record.reason})" if record.reason else ""
        value = "" if record.final_metric is None else f" {self._metric}={record.final_metric:.4f}"
        print(
            f"[{self._elapsed()}] trial {record.number} {record.status} after {record.epochs} epochs"
            f"{value}{detail} | {self.status_line()}",
            file=self._stream,
            flush=True,
        )

    def tick(self, recorder: Recorder) -> None:
        self._recorder = recorder
        if self._live:
            self._draw(force=False)

    def experiment_ended(self, recorder: Recorder) -> None:
        self.finish()

    def finish(self) -> None:
        if self._live and self._recorder is not None:
            self._draw(force=True)
            print(file=self._stream, flush=True)

    def status_line(self) -> str:
        assert self._recorder is not None
        counts = self._recorder.counts()
        best = self._recorder.best()
        best_text = "-" if best is None else f"{best.final_metric:.4f} (trial {best.number})"
        return (
            f"running {counts['running']}, completed {counts['completed']}, pruned {counts['pruned']}, "
            f"failed {counts['failed']}, started {len(self._recorder.trials)}/{self._num_samples}; "
            f"best {self._metric} {best_text}"
        )

    def _draw(self, *, force: bool) -> None:
        now = time.monotonic()
        if not force and now - self._last_draw < 1.0:
            return
        self._last_draw = now
        self._stream.write(f"\r\x1b[2K[{self._elapsed()}] {self.status_line()}")
        self._stream.flush()

    def _elapsed(self) -> str:
        seconds = int(time.monotonic() - self._started)
        return f"{seconds // 60:02d}:{seconds % 60:02d}"
