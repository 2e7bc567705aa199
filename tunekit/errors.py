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

    Checked before the experiment directory is made, so ``experiment_dir`` is None from
    ``run`` (nothing was written); from ``resume`` it is the experiment, which
    ``tunekit resume DIR --address`` can run on a bigger cluster.
    """

    def __init__(self, message: str, experiment_dir: object = None) -> None:
        super().__init__(message)
        self.experiment_dir = experiment_dir


class ClusterError(TunekitError):
    """A Ray cluster could not be joined: nothing listens, it refused the token, versions
    differ, or it did not answer within the connect timeout. Nothing was started or written.

    ``ray_log`` holds Ray's own lines from the attempt (for a log file, never the console).
    """

    def __init__(self, message: str, *, ray_log: str = "") -> None:
        super().__init__(message)
        self.ray_log = ray_log


class StorageError(TunekitError):
    """The experiment storage is missing, not writable, or not reachable from every node."""


class DamagedFileError(StorageError):
    """An experiment file is damaged: a table cut mid-line, JSON that does not parse, a
    required file missing. Readers raise it instead of yielding what they could read.

    Attributes:
        path: the damaged file.
        problem: what is wrong with it ("cut short (its last line has no end)").
    """

    def __init__(self, path: object, problem: str, repair: str = "") -> None:
        self.path, self.problem = path, problem
        repair = repair or f"`tunekit check {getattr(path, 'parent', path)}` for details"
        super().__init__(f"{path}: {problem}; {repair}")


class DamagedRecordWarning(UserWarning):
    """A record is missing or damaged, yet what is read is whole without it (the study, when
    the tables hold the results): readers say it (the CLI as ``tunekit: warning:``)."""


class NoSpaceError(StorageError):
    """The experiment's storage filled up (ENOSPC). Nothing the search recorded is lost; once
    space is freed, ``tunekit resume`` continues it.

    Attributes:
        experiment_dir: the experiment (None when it could not be created).
        path: the file being written.
    """

    def __init__(self, message: str, experiment_dir: object = None, path: object = None) -> None:
        super().__init__(message)
        self.experiment_dir, self.path = experiment_dir, path


class StorageUnreachableError(StorageError):
    """The storage was unreachable for longer than ``storage.outage_s`` (transient errors all the
    while: refused connections, timeouts, 5xx). The search stopped as a signal stops it: its
    running trials are held, and ``tunekit resume`` continues it once the storage is back.

    Attributes:
        experiment_dir: the experiment (None when the outage came before it was made).
    """

    def __init__(self, message: str, experiment_dir: object = None) -> None:
        super().__init__(message)
        self.experiment_dir = experiment_dir


class LeaseHeldError(StorageError):
    """Another driver holds the experiment's lease: one writer at a time (``tunekit.storage.lease``)."""


# The exit status of a driver that lost its lease (``tunekit.driver.fencing``): 1 and 2 are
# taken by failures and usage, 128 + N by signals.
EXIT_LEASE_LOST = 3


class LeaseLostError(StorageError):
    """This driver no longer holds the experiment's lease: another driver took it over (this one
    was paused, or cut off from the storage, past the stale window), or it was deleted. It must
    not write again; its trials are the new holder's (``tunekit.storage.lease``).

    Attributes:
        holder: who holds it now (a ``tunekit.storage.lease.Holder``), None when nobody does.
    """

    def __init__(self, message: str, holder: object = None) -> None:
        super().__init__(message)
        self.holder = holder


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
    encountered when calling ..."), so lines are joined, not cut to the first. tunekit's
    own trial errors (``TrialFailure``, ``FatalTrialError``) are written as reasons: their
    message alone, whole ("non-finite loss at epoch 2").

    For a traceback as text (Ray's ``Trial.error_msg``, a trial's ``error.txt``): the last
    exception it names, with its message, read the same way; else its last line; ``""``
    when the text is empty.

    TensorFlow's graph errors put a stack between the error and its cause ("Graph
    execution error: Detected at node X defined at (most recent call last): File ...
    <cause>"); the stack is dropped so the cause fits (see ``root_cause``).
    """
    if isinstance(error, TrialFailure | FatalTrialError):
        return _one_line(str(error))
    line = _describe_traceback(error) if isinstance(error, str) else _brief(type(error).__name__, str(error))
    return line if len(line) <= limit else line[: limit - 1] + _CUT


# TensorFlow's "where was this op defined" block: a header, then frames ('  File "...", line
# N, in f'), blank lines and, in some versions, indented source lines. The cause follows it.
_GRAPH_STACK = re.compile(
    r"Detected at node \S+ defined at \(most recent call last\):[ \t]*(?:\n|$)"
    r"(?:[ \t]*(?:File \"[^\n]*)?(?:\n|$)| {4,}\S[^\n]*(?:\n|$))*"
)
# A Python exception line: a dotted class name at the start of a line, then ": message" or nothing.
_EXCEPTION_LINE = re.compile(r"([A-Za-z_][\w.]*)(?:: (.*))?:?")
_CUT = "…"


def root_cause(message: str) -> str:
    """``message`` without TensorFlow's "Detected at node ... defined at" stacks.

    The stack names the Python frames that built the failing op: the same error shows other
    line numbers in every trial, and it pushed the cause (``data/train.tfrecord; No such
    file or directory``) past any reasonable cut.
    """
    return _GRAPH_STACK.sub("", message)


def _brief(type_name: str, message: str) -> str:
    text = _one_line(root_cause(message))
    return f"{type_name}: {text}" if text else type_name


# Terminal styling: Keras sets parts of some messages in bold ("\x1b[1m...\x1b[0m").
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _one_line(text: str) -> str:
    return re.sub(r"\s+", " ", _ANSI_ESCAPE.sub("", text)).strip()


def _describe_traceback(text: str) -> str:
    """The last exception a traceback text names, as ``describe_error`` gives an exception.

    The exception line is the first unindented line after a frame's indented ones (Python's
    format and Ray's alike); the lines after it are its message. TensorFlow's stacks are
    dropped first: their frames sit inside a message and would look like a traceback's.
    """
    lines = root_cause(text).strip().splitlines()
    for index in range(len(lines) - 1, 0, -1):
        after_frame = lines[index - 1][:1].isspace() and lines[index - 1].strip()
        match = _EXCEPTION_LINE.fullmatch(lines[index]) if after_frame else None
        if match:
            first = match.group(2) or ""
            message = "\n".join([first, *lines[index + 1 :]])
            return _brief(match.group(1).rsplit(".", 1)[-1], message)
    return _one_line(lines[-1]) if lines else ""


# What differs between two trials hitting one error, each with what stands in for it.
_VARYING = (
    (re.compile(r"\bline \d+"), "line N"),  # a frame's line number
    (re.compile(r"(\.py[cw]?):\d+(?::\d+)?"), r"\1:N"),  # path.py:12 or path.py:12:5
    (re.compile(r"\b0x[0-9a-fA-F]+\b"), "0x?"),  # memory addresses, "<object at 0x7f...>"
    (re.compile(r"\b(pid|ip|id|actor_id|node_id|task_id|worker_id)=[^\s,)\]]+"), r"\1=?"),  # Ray's and Python's ids
    (re.compile(r"\btmp[a-z0-9_]{8}\b"), "tmp?"),  # tempfile's random directory names
    (re.compile(r"(?<=/)[0-9a-f]{8}(?=[/\s'\",:;]|$)"), "<trial>"),  # a trial's folder: its Ray id
    (re.compile(r"(?<=[A-Za-z])_\d+\b"), "_N"),  # TensorFlow's numbered names: dense_3, __inference_f_4065
    (re.compile(r"\b\d[\d,.]* ?(GB|MB|MiB|GiB)\b"), r"N \1"),  # a killed worker's memory figures
)
# A reason is cut at a fixed length, so one error whose text holds a longer line number is
# cut a few characters sooner: cut reasons are compared on this many characters of their start.
_CUT_FINGERPRINT = 200


def failure_fingerprint(reason: str) -> str:
    """What two failures share when they are the same error: ``reason`` normalised.

    Line numbers, memory addresses, object and process ids, temporary directories, trial
    ids and TensorFlow's numbered op and layer names differ between trials that hit one
    error; they are replaced by placeholders, so the failure guard recognises the error.
    """
    text = _one_line(reason)
    cut = text.endswith(_CUT)
    for pattern, placeholder in _VARYING:
        text = pattern.sub(placeholder, text)
    return text[:_CUT_FINGERPRINT] if cut else text
