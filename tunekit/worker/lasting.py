"""Imports whose objects last as long as the process, made without the garbage collector.

TensorFlow's, Keras's and Ray Tune's imports in a worker create about 420,000 tracked objects
and almost no garbage; while they run, the collector's full collections walk all that exist so
far, again and again: 7 of them freed 75 objects for 1.1 to 1.3 s of the imports' 4 s of CPU
(2 cores), on the path to a search's first epoch. ``lasting_imports`` turns collecting off while
they run and then freezes what they made (``gc.freeze``), so that later collections (each
trial's ``clear_session`` runs a full one) skip it, without the full collection before the
freeze that ``tunekit.worker.trial`` makes (0.3 s, for about 20 objects, which stay).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def lasting_imports() -> Iterator[None]:
    """Within this block the collector does not run; what exists at its end is frozen (kept out
    of every later collection), and the collector is as it was before the block."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()
