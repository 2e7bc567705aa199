"""``tunekit doctor``: checks of the stack, the GPUs, the cluster, tracking and storage, each with its fix.

One module per family of checks (``stack``, ``tracking``, ``storage``, ``gpus``,
``cluster``); ``checks.run_checks`` runs them all; ``probes`` are the slow checks that run
in child processes.
"""

from tunekit.doctor.checks import run_checks
from tunekit.doctor.report import OK, PROBLEM, SKIP, Check

__all__ = ["OK", "PROBLEM", "SKIP", "Check", "run_checks"]
