"""Why Ray cannot join a cluster, in one line: its errors and the lines ``ray.init`` logs.

Stdlib only, apart from this package: ``tunekit doctor``, the probes it runs in children
(``python -m tunekit.doctor.probes``) and the driver's join all read them, and the doctor's
package must not import the probes module it runs with ``-m``.
"""

from __future__ import annotations

import os

ERROR_CAUSES_SHOWN = 3


def describe(error: BaseException | None) -> str:
    """The error and its causes: Ray wraps "InvalidAuthToken" in a bare ConnectionError."""
    parts: list[str] = []
    texts: list[str] = []
    while error is not None and len(parts) < 6:
        texts.append(str(error))
        text = (str(error).strip().splitlines() or [""])[0]
        parts.append(type(error).__name__ + (": " + text if text else ""))
        error = error.__cause__ or error.__context__
    if any("InvalidAuthToken" in text for text in texts):
        return auth_error()
    mismatch = next((text for text in texts if "Version mismatch" in text), None)
    if mismatch is not None:  # Ray's message spreads both sides' versions over lines: keep them all
        return "Version mismatch: " + " ".join(mismatch.split("Version mismatch:", 1)[1].split())
    return " <- ".join(parts[:ERROR_CAUSES_SHOWN])[:500]


def auth_error() -> str:
    """Why a cluster refused this machine, told apart by what this machine sends."""
    mode = os.environ.get("RAY_AUTH_MODE", "unset")
    if mode != "token":
        return f"InvalidAuthToken: the cluster wants its token, this machine sends none (RAY_AUTH_MODE here: {mode})"
    sources = "RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token"
    return f"InvalidAuthToken: the cluster refused this machine's token ({sources})"


def join_error_in(line: str) -> str | None:
    """A line ``ray.init`` logs that already tells why it cannot join (it would retry for minutes)."""
    if "InvalidAuthToken" in line:
        return auth_error()
    if "Version mismatch" in line:
        return " ".join(line.split())[:300]
    return None
