"""Storage errors in two kinds, and a bounded wait through the transient ones.

* **Transient**: the storage is briefly away and will be back: a connection refused or reset,
  a timeout, an HTTP 5xx, throttling (pyarrow's ``AWS Error NETWORK_CONNECTION``, ``SLOW_DOWN``).
  Tried again with backoff (``retrying``, ``Outage``) for up to ``storage.outage_s`` seconds,
  measured on this process's monotonic clock; past that the search ends as interrupted
  (``StorageUnreachableError``): its running trials are held for ``tunekit resume``.
* **Permanent**: trying again changes nothing: a read-only file system, no permission, a full
  disk, no such bucket, bad credentials. Raised at once; the command says it in one line with
  the fix (``permanent_problem``).

The lease (``tunekit.storage.lease``) calls ``retrying`` or ``is_transient`` for its own store calls.
"""

from __future__ import annotations

import errno
import re
import socket
import time
from collections.abc import Callable
from typing import TypeVar

from tunekit.errors import NoSpaceError, StorageUnreachableError

OUTAGE_S = 300.0  # storage.outage_s's default: how long an outage is waited through
FIRST_WAIT_S = 0.5  # the first pause before trying again; doubled after each failure
LONGEST_WAIT_S = 5.0  # the longest pause: a storage that is back is found within this

T = TypeVar("T")

_TRANSIENT_ERRNOS = {
    errno.ECONNREFUSED,
    errno.ECONNRESET,
    errno.ECONNABORTED,
    errno.ETIMEDOUT,
    errno.EHOSTUNREACH,
    errno.ENETUNREACH,
    errno.ENETDOWN,
    errno.EPIPE,
    errno.EAGAIN,
}
_PERMANENT_ERRNOS = {errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT}
# pyarrow's and the cloud SDKs' errors are OSErrors without an errno: their text names the kind
# (the AWS SDK's error names, "AWS Error NETWORK_CONNECTION during PutObject operation: ...").
_PERMANENT_TEXT = re.compile(
    r"access.?denied|forbidden|no.?such.?bucket|invalid.?access.?key|signature.?does.?not.?match"
    r"|expired.?token|invalid.?token|unrecognized.?client|read-only file system|permission denied"
    r"|no space left|\b403\b",
    re.IGNORECASE,
)
_TRANSIENT_TEXT = re.compile(
    r"network.?connection|connection (?:was )?(?:refused|reset|aborted|closed)|could ?n[o']t connect"
    r"|timed? ?out|timeout was reached|throttl|slow.?down|too many requests|service.?unavailable"
    r"|internal.?(?:error|failure)|temporarily unavailable|broken pipe|request.?timeout"
    r"|http (?:status|response code):? ?(?:5\d\d|429)\b|\[code (?:5\d\d|429)\]",
    re.IGNORECASE,
)


def _chain(error: BaseException) -> list[BaseException]:
    """``error`` and its causes and contexts, outermost first."""
    seen: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and all(current is not e for e in seen):
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def is_permanent(error: BaseException) -> bool:
    """A storage error that trying again cannot mend: read-only, no permission, no space, no
    such bucket, bad credentials (anywhere in ``error``'s chain)."""
    for link in _chain(error):
        if isinstance(link, NoSpaceError):
            return True
        if isinstance(link, OSError) and link.errno in _PERMANENT_ERRNOS:
            return True
        if isinstance(link, OSError | StorageUnreachableError) and _PERMANENT_TEXT.search(str(link)):
            return True
    return False


def is_transient(error: BaseException) -> bool:
    """A storage error that passes by itself: a refused or reset connection, a timeout, an
    HTTP 5xx, throttling. Never one that is also permanent (``is_permanent``)."""
    if is_permanent(error) or isinstance(error, StorageUnreachableError):
        return False
    for link in _chain(error):
        if isinstance(link, ConnectionError | TimeoutError | socket.timeout):
            return True
        if isinstance(link, OSError) and link.errno in _TRANSIENT_ERRNOS:
            return True
        if isinstance(link, OSError) and _TRANSIENT_TEXT.search(str(link)):
            return True
    return False


def permanent_problem(error: BaseException, where: object = None) -> str | None:
    """A permanent storage error as the command's one line: ``where`` (default: the file the
    error names), what is wrong and the fix; None for any other error."""
    if not is_permanent(error):
        return None
    link = next((e for e in _chain(error) if isinstance(e, OSError | NoSpaceError)), error)
    where = where or getattr(link, "filename", None) or getattr(link, "path", None)
    code = link.errno if isinstance(link, OSError) else errno.ENOSPC
    text = f"{link}".lower()
    place = f"storage {where}" if where else "storage"
    if code == errno.EROFS or "read-only" in text:
        return f"{place}: read-only; fix: make it writable (remount it read-write), then run the command again"
    if code in (errno.ENOSPC, errno.EDQUOT) or "no space" in text:
        return f"{place}: no space left on its device; fix: free some space, then run the command again"
    if code in (errno.EACCES, errno.EPERM) or "permission denied" in text:
        return f"{place}: permission denied; fix: give this user write access to it, then run the command again"
    if "bucket" in text:
        return f"{place}: no such bucket ({_one_line(link)}); fix: create it (tunekit does not create buckets)"
    return f"{place}: access denied ({_one_line(link)}); fix: check the credentials and their permissions"


def storage_line(error: BaseException) -> str | None:
    """The command's one line for a storage error that reached it as a bare ``OSError``: the
    outage that stopped the search when one is in its chain (a later store call failed on the
    way out), a permanent error with its fix, a transient one; None for any other error."""
    for link in _chain(error):
        if isinstance(link, StorageUnreachableError):
            return str(link)
    if (problem := permanent_problem(error)) is not None:
        return problem
    if is_transient(error):
        fix = "check its endpoint and the network, then run the command again"
        return f"storage unreachable ({_one_line(error)}); fix: {fix}"
    return None


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())[:300]


class Outage:
    """How long a storage has been unreachable, on this process's monotonic clock.

    ``failed`` after each transient error and ``reached`` after each success: the first failure
    says once that ``what`` is unreachable, the first success after it says once that it is
    back; a failure ``bound_s`` seconds after the first raises ``StorageUnreachableError``.
    """

    def __init__(
        self,
        what: str,
        bound_s: float = OUTAGE_S,
        say: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.what, self.bound_s, self._say, self._clock = what, bound_s, say, clock
        self.began: float | None = None

    @property
    def ongoing(self) -> bool:
        return self.began is not None

    def left_s(self) -> float:
        """Seconds of the bound left (the whole bound when no outage is on)."""
        return self.bound_s if self.began is None else max(0.0, self.began + self.bound_s - self._clock())

    def failed(self, error: BaseException) -> None:
        """One more transient failure; raises ``StorageUnreachableError`` once the bound has passed."""
        now = self._clock()
        if self.began is None:
            self.began = now
            self._tell(f"{self.what} is unreachable ({_one_line(error)}); trying again for up to {self.bound_s:g} s")
        if now - self.began >= self.bound_s:
            raise self.unreachable(error) from error

    def unreachable(self, error: BaseException) -> StorageUnreachableError:
        """The outage as the error that ends the search, ``error`` its last failure."""
        # At least the bound: the lease's fence refuses writes only after as long unconfirmed.
        lasted = max(self._clock() - self.began if self.began is not None else 0.0, self.bound_s)
        return StorageUnreachableError(
            f"{self.what}: unreachable for {lasted:.0f} s, past storage.outage_s ({self.bound_s:g} s); "
            f"last error: {_one_line(error)}"
        )

    def reached(self) -> None:
        if self.began is not None:
            self._tell(f"{self.what} is reachable again after {self._clock() - self.began:.0f} s")
            self.began = None

    def _tell(self, line: str) -> None:
        if self._say is not None:
            self._say(line)


def retrying(
    call: Callable[[], T],
    what: str,
    *,
    outage_s: float = OUTAGE_S,
    say: Callable[[str], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``call()``, tried again with backoff (``FIRST_WAIT_S`` doubling to ``LONGEST_WAIT_S``)
    while it fails with a transient storage error, for up to ``outage_s`` seconds.

    ``what`` names the storage in what is said ("storage s3://exps/team"). Any other error,
    a permanent one above all, is raised at once; past the bound ``StorageUnreachableError``.
    """
    outage = Outage(what, outage_s, say, clock)
    wait = FIRST_WAIT_S
    while True:
        try:
            result = call()
        except Exception as error:
            if not is_transient(error):
                raise
            outage.failed(error)
            sleep(min(wait, max(outage.left_s(), 0.01)))
            wait = min(2 * wait, LONGEST_WAIT_S)
            continue
        outage.reached()
        return result
