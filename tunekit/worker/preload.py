"""TensorFlow imported in a worker process as it starts, before any trial asks for it.

tunekit's own local Ray runs this module in each of its Python worker processes as the
process starts (Ray's ``preload_python_modules``, ``tunekit.driver.session``), and starts
as many idle workers as trials run at once: at ``ray.init``, while the driver builds the
study and the Tuner, and again after each search, so a later search in the same process
finds its workers with TensorFlow imported. A Ray that tunekit joins or that the caller
started never runs it.

Only imports: nothing here touches a device. Importing TensorFlow and Keras does not
initialise TensorFlow's runtime (its context and the physical devices stay unread), so
the trial's actor still configures threads, GPU memory and devices itself, once Ray has
told it which GPUs are its own (``tunekit.worker.devices``).

Whether a process ran it, and when: ``sys.modules.get("tunekit.worker.preload")`` and its
``STARTED`` and ``ENDED`` (seconds since the epoch); importing the module would run it. The
warm runtime's workers (``tunekit up``) also record them in a file of their own, by which the
runtime counts its ready workers (``PRELOADED_DIR_ENV``).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from tunekit.worker.lasting import lasting_imports
from tunekit.worker.profile import PRELOADED_DIR_ENV, PROFILE_DIR_ENV

STARTED = time.time()


def _import_for_trials() -> None:
    # What a trial's actor imports before its first line of tunekit: Ray Tune's function
    # trainable (the actor's class), TensorFlow and Keras, tunekit's trial modules.
    import keras  # noqa: F401
    import ray.tune.trainable.function_trainable  # noqa: F401
    import tensorflow  # noqa: F401

    # the trial's module, and the two it imports as a trial starts
    import tunekit.worker.executions
    import tunekit.worker.reporter
    import tunekit.worker.trial  # noqa: F401


# Without the collector, and then out of its sight (as the trial does once per worker:
# tunekit.worker.trial._freeze_imported_objects), so that the full collection the trial then
# makes walks only what came after, not the ~420,000 objects the imports made.
with lasting_imports():
    _import_for_trials()
ENDED = time.time()


if directory := os.environ.get(PROFILE_DIR_ENV):  # the benchmarks' view of each worker
    Path(directory, f"preload-{os.getpid()}.json").write_text(json.dumps({"started": STARTED, "ended": ENDED}))
if directory := os.environ.get(PRELOADED_DIR_ENV):  # the warm runtime's count of its ready workers
    Path(directory, f"{os.getpid()}.json").write_text(json.dumps({"started": STARTED, "ended": ENDED}))
