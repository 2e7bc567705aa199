"""The exception hierarchy: one base, one class per kind of failure the user must tell apart."""

from __future__ import annotations

import re


class TunekitError(Exception):
    """Base of every error tunekit raises on purpose."""


class SpecError(TunekitError, ValueError):
    """A spec (or an override of it) breaks a rule.

    The message always reads ``<path>: <rule>, got <value>`` so the user can find the
    offending line without a traceback.
    """

    def __init__(self, path: str, rule: str, value: object = ..., *, got: bool = True) -> None:
        self.path = path
        self.rule = rule
        self.value = value
        text = f"{path}: {rule}"
        if got and value is not ...:
            text += f", got {_show(value)}"
        super().__init__(text)


class SearchAborted(TunekitError):
    """The search was stopped on purpose: a fatal trial error or one repeated in every trial.

    ``experiment_dir`` is the experiment directory (results so far stay loadable), when known.
    """

    def __init__(self, message: str, experiment_dir: object = None) -> None:
        super().__init__(message)
        self.experiment_dir = experiment_dir


class NoResultError(TunekitError):
    """The search ran, but no trial reported the metric (all failed, or the time budget ended first).

    The experiment directory is complete and loadable: ``tunekit.load(error.experiment_dir)``.
    """

    def __init__(self, message: str, experiment_dir: object = None) -> None:
        super().__init__(message)
        self.experiment_dir = experiment_dir


class SearchInterrupted(TunekitError):
    """SIGINT (Ctrl-C) or SIGTERM stopped the search; ``tunekit resume`` continues it.

    Attributes:
        experiment_dir: the experiment directory (a ``Path``), or None when the signal came
            before it existed.
        signal_number: the signal that stopped the search (``signal.SIGINT`` or ``SIGTERM``).
    """

    def __init__(self, message: str, experiment_dir: object = None, signal_number: int = 2) -> None:
        super().__init__(message)
        self.experiment_dir = experiment_dir
        self.signal_number = signal_number


class ResourceError(TunekitError):
    """A trial asks for more CPUs or GPUs than any node of the cluster can ever give.

    ``experiment_dir`` holds the spec only; ``tunekit resume DIR --address`` can run it on a
    bigger cluster.
    """

    def __init__(self, message: str, experiment_dir: object = None) -> None:
        super().__init__(message)
        self.experiment_dir = experiment_dir


class StorageError(TunekitError):
    """The experiment storage is missing, not writable, or not reachable from every node."""


class NotAnExperimentError(StorageError):
    """A directory given as an experiment holds no tunekit experiment (no ``spec.yaml``).

    Raised alike by ``tunekit.load``, ``tunekit.resume`` and the commands that read one.
    """

    def __init__(self, directory: object, missing: str) -> None:
        super().__init__(f"{directory}: not a tunekit experiment (no {missing})")
        self.directory = directory


class TrialFailure(TunekitError):
    """A trial failed for its own reasons (non-finite loss, a bug in one config).

    Raised inside a trial; the search records the reason and goes on.
    """


class FatalTrialError(TunekitError):
    """A trial hit an error that every trial will hit (bad metric name, import error)."""


def _show(value: object) -> str:
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, bool) or value is None:
        return str(value).lower() if value is not None else "null"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return f"a list of {len(value)}"
    return repr(value)


def describe_error(error: BaseException | str, limit: int = 500) -> str:
    """A failure's brief reason on one line: the one helper for trial reasons.

    For an exception: its type and message, condensed but whole where it fits. Keras's
    messages run over several lines and open with a line that says little ("Exception
    encountered when calling ..."), so lines are joined, not cut to the first.

    For a traceback as text (Ray's ``Trial.error_msg``): its last line, which names the
    error; ``""`` when the text is empty.
    """
    if isinstance(error, str):
        lines = [line for line in error.strip().splitlines() if line.strip()]
        line = re.sub(r"\s+", " ", lines[-1]).strip() if lines else ""
    else:
        text = re.sub(r"\s+", " ", str(error)).strip()
        line = f"{type(error).__name__}: {text}" if text else type(error).__name__
    return line if len(line) <= limit else line[: limit - 1] + "…"
