"""TCP connects with a short timeout, and the reasons they fail, in a few words."""

from __future__ import annotations

import socket
import urllib.error

CONNECT_TIMEOUT_S = 3.0


def connect(host: str, port: int) -> str:
    """Connects to ``host:port`` and closes at once; "" when it answers, else the reason."""
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            return ""
    except OSError as error:
        return reason(error)


def reason(error: BaseException) -> str:
    """A network error in a few words: "connection refused", "timed out", "unknown host (...)"."""
    if isinstance(error, urllib.error.URLError) and not isinstance(error, urllib.error.HTTPError):
        inner = error.reason
        if isinstance(inner, BaseException):
            return reason(inner)
        return str(inner)
    if isinstance(error, ConnectionRefusedError):
        return "connection refused"
    if isinstance(error, TimeoutError | socket.timeout):
        return "timed out"
    if isinstance(error, socket.gaierror):
        return f"unknown host ({error.strerror})"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror.lower()
    return str(error) or type(error).__name__
