"""What a test passes to a run and reads back from it: ``tunekit run``'s ``--set`` arguments and
a TensorBoard run's events (read without TensorFlow)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def cli_sets(overrides: list[str]) -> list[str]:
    """Spec overrides as ``tunekit run``'s arguments: ``["--set", "a=1", "--set", "b=2"]``."""
    return [part for value in overrides for part in ("--set", value)]


def read_events(run_dir: Path) -> list[Any]:
    """Every event of a TensorBoard run's event files, in the order TensorBoard reads them.

    Event files are TFRecords (length, its CRC, the event, its CRC); tensorboardX's protos parse
    the events, so neither TensorFlow nor TensorBoard's reader is needed.
    """
    import struct

    from tensorboardX.proto.event_pb2 import Event

    events: list[Any] = []
    for path in sorted(run_dir.glob("events.out.tfevents.*")):
        data = path.read_bytes()
        at = 0
        while at + 12 <= len(data):
            (length,) = struct.unpack("<Q", data[at : at + 8])
            events.append(Event.FromString(data[at + 12 : at + 12 + length]))
            at += 12 + length + 4
    return events
