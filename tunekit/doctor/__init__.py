"""``tunekit doctor``: checks of the stack, the GPUs, the cluster, tracking and storage, each with its fix."""

from tunekit.doctor.checks import run_checks

__all__ = ["run_checks"]
