"""Whether MLflow can record to the tracking URI: a server answers, or a local store is writable."""

from __future__ import annotations

import base64
import logging
import os
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from tunekit.doctor.network import connect, reason
from tunekit.doctor.report import Check, ok, problem, skip
from tunekit.doctor.storage import probe_directory, writable_check
from tunekit.environment import redact_uri, sqlite_database

logger = logging.getLogger(__name__)

HTTP_TIMEOUT_S = 5.0
_DATABASE_PORTS = {"postgresql": 5432, "postgres": 5432, "mysql": 3306, "mssql": 1433}


def default_tracking_uri() -> str:
    return f"sqlite:///{Path.cwd() / 'mlflow.db'}"


def check_tracking(uri: str) -> Check:
    """Whether MLflow can record to ``uri``: a server answers, or a local store is writable."""
    name = f"tracking {redact_uri(uri)}"
    scheme = urllib.parse.urlsplit(uri).scheme.lower() if "://" in uri else ""
    if scheme in ("http", "https"):
        return _check_tracking_server(name, uri)
    if scheme == "sqlite":
        return _check_sqlite(name, uri)
    if scheme in ("", "file"):
        path = Path(urllib.parse.unquote(urllib.parse.urlsplit(uri).path) if scheme else uri)
        return writable_check(
            name,
            path.expanduser().resolve(),
            "MLflow file store",
            "choose a writable --tracking-uri directory or fix its permissions",
        )
    if scheme.split("+")[0] in _DATABASE_PORTS:
        return _check_database(name, uri, scheme.split("+")[0])
    return skip(name, f"scheme {scheme!r} is not checked by the doctor")


def _check_tracking_server(name: str, uri: str) -> Check:
    base = uri.rstrip("/")
    start_fix = (
        "start the server (mlflow server --host 127.0.0.1 --port PORT "
        "--backend-store-uri sqlite:///mlflow.db) or fix --tracking-uri"
    )
    try:
        _http_get(base + "/health")
    except urllib.error.HTTPError as error:
        # Something answers; the API call below says whether it is MLflow.
        logger.debug("%s/health answers HTTP %s", redact_uri(base), error.code)
    except (urllib.error.URLError, OSError) as error:
        return problem(name, f"not reachable ({reason(error)})", start_fix)
    try:
        _http_get(base + "/api/2.0/mlflow/experiments/search?max_results=1")
    except urllib.error.HTTPError as error:
        if error.code in (401, 403):
            return problem(
                name,
                f"refused the credentials (HTTP {error.code})",
                "set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, or MLFLOW_TRACKING_TOKEN, from a secret",
            )
        return problem(
            name, f"answers HTTP {error.code} to the MLflow API", "point --tracking-uri at the MLflow server's base URL"
        )
    except (urllib.error.URLError, OSError) as error:
        return problem(name, f"not reachable ({reason(error)})", start_fix)
    return ok(name, "the MLflow server answers")


def _http_get(url: str) -> bytes:
    """GETs ``url`` with MLflow's credentials, sent as a header, never in the URL."""
    parts = urllib.parse.urlsplit(url)
    headers = {"User-Agent": "tunekit-doctor"}
    user = parts.username or os.environ.get("MLFLOW_TRACKING_USERNAME")
    password = parts.password or os.environ.get("MLFLOW_TRACKING_PASSWORD")
    if os.environ.get("MLFLOW_TRACKING_TOKEN"):
        headers["Authorization"] = f"Bearer {os.environ['MLFLOW_TRACKING_TOKEN']}"
    elif user and password:
        pair = base64.b64encode(f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}".encode())
        headers["Authorization"] = f"Basic {pair.decode()}"
    netloc = parts.hostname or ""
    if ":" in netloc:
        netloc = f"[{netloc}]"
    if parts.port:
        netloc += f":{parts.port}"
    clean = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))
    request = urllib.request.Request(clean, headers=headers)
    with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
        return bytes(response.read(65536))


def _check_sqlite(name: str, uri: str) -> Check:
    path = sqlite_database(uri)
    if path is None:
        return problem(
            name,
            "an in-memory database loses every run when the process ends",
            "use a file, e.g. --tracking-uri sqlite:////absolute/path/mlflow.db",
        )
    fix = "choose a writable --tracking-uri path or fix its permissions"
    if path.is_dir():
        return problem(name, f"{path} is a directory, not a database file", fix)
    if not path.parent.is_dir():
        return problem(
            name, f"directory {path.parent} does not exist", f"create it (mkdir -p {path.parent}) or fix --tracking-uri"
        )
    # SQLite writes journal files next to the database: the directory must be writable.
    error = probe_directory(path.parent, create=False)
    if error:
        return problem(name, f"directory {path.parent} is not writable ({error})", fix)
    if not path.exists():
        return ok(name, f"directory {path.parent} writable; the database will be created")
    try:
        with path.open("r+b") as handle:
            header = handle.read(16)
    except OSError as failure:
        return problem(name, f"{path} is not writable ({failure.strerror or failure})", fix)
    if header and header != b"SQLite format 3\x00":
        return problem(
            name, f"{path} is not a SQLite database", "point --tracking-uri at an MLflow SQLite file or a new file name"
        )
    return ok(name, f"{path} writable")


def _check_database(name: str, uri: str, kind: str) -> Check:
    parts = urllib.parse.urlsplit(uri)
    host, port = parts.hostname or "localhost", parts.port or _DATABASE_PORTS[kind]
    error = connect(host, port)
    if error:
        return problem(name, f"cannot connect to {host}:{port} ({error})", "start the database or fix --tracking-uri")
    return ok(name, f"{host}:{port} accepts connections (credentials not checked)")
