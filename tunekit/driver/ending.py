"""The ``tunekit`` command's end: nothing after its last line.

A search command's process ends with its search. Python's own exit would then stop the Ray
the command started gracefully and tear down every module: Ray's shutdown spends about 0.4 s
on the driver's core worker, then sends each of its processes SIGTERM and waits up to 1 s for
each (its autoscaler monitor takes the whole second), and clearing the modules of Ray, Tune,
MLflow and pandas takes about 1 s more: 2.5-3 s after the closing lines, which nothing needs.
Everything the search keeps is written before its closing lines (the tables, the study, Ray
Tune's saved state, MLflow's writer joined, a bucket's last upload, the lease released), so
the command ends the Ray it started at once and leaves without the interpreter's teardown. So
does the child process in which ``tunekit plan --probe`` runs its search, which the command waits for.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys


def end_command(status: int) -> None:
    """Ends the process now with ``status``, after a search command that started or joined Ray.

    Its own local Ray's processes are killed without waiting (they hold nothing the search
    keeps); a cluster it joined is left (the driver disconnects). Called after the command's
    last line; returns only when the process started or joined no Ray (a spec error, say),
    whose exit is quick.
    """
    session = sys.modules.get("tunekit.driver.session")
    if session is None or session.OWNED_RAY is None:
        return
    local = bool(session.OWNED_RAY["local"])
    logging.shutdown()  # log files' handlers flushed
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    if local:
        # The driver's Ray client may complain on stderr that its raylet is gone, in the
        # moment before the exit: ended on purpose, not the user's news.
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 2)
        session.kill_owned_local_ray()
    else:
        session.shutdown()  # a joined cluster lives on: only disconnect from it
    os._exit(status)
