"""``tunekit doctor``: checks the stack, the GPUs, the Ray cluster, MLflow tracking and storage.

Each check prints one line, ``ok``, ``PROBLEM`` or ``skip``, and every problem is followed
by one ``fix:`` line. The exit status is 0 when nothing is wrong and 1 otherwise.

The doctor never hangs and never imports TensorFlow or Ray in its own process:

- TensorFlow (build info, GPUs) is checked in a child (``tunekit.doctor.probes``), so a broken
  install is reported instead of crashing the doctor, and its 4-8 s import runs while
  the fast checks go on.
- A Ray cluster (``--address`` or ``RAY_ADDRESS``) is inspected in a second child:
  ``ray.init(address=...)``, ``ray.cluster_resources()``, ``ray.nodes()``, and a probe
  task pinned to every node that checks the storage directory is writable there and
  shared by all nodes. ``ray.init`` retries an unreachable address for minutes, so a
  TCP connect with a short timeout goes first, and the child has a deadline.
- Without an address the doctor does not start a local Ray (that costs seconds and
  leaves processes behind). It reports what a local Ray would find: Ray counts NVIDIA
  GPUs through NVML, limited by ``CUDA_VISIBLE_DEVICES``, which is what
  ``nvidia-smi`` lists filtered the same way; CPUs come from the affinity mask and
  the cgroup quota, as Ray counts them.

Secrets (``RAY_AUTH_TOKEN``, MLflow passwords and tokens, passwords in URIs) are
never printed.
"""

from __future__ import annotations

import base64
import contextlib
import importlib.metadata
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from tunekit.doctor.probes import MARK, PROBE_PREFIX

OK = "ok"
PROBLEM = "PROBLEM"
SKIP = "skip"

TENSORFLOW_TIMEOUT_S = 120.0
RAY_TIMEOUT_S = 90.0
HTTP_TIMEOUT_S = 5.0
CONNECT_TIMEOUT_S = 3.0
NVIDIA_SMI_TIMEOUT_S = 15.0

# The stack whose versions the doctor prints; alternatives are other wheels of the same project.
STACK: dict[str, tuple[str, ...]] = {
    "tensorflow": ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tf-nightly"),
    "keras": ("keras",),
    "ray": ("ray",),
    "optuna": ("optuna",),
    "mlflow": ("mlflow", "mlflow-skinny"),
}
INSTALL_FIX = "install the tested stack: pip install -c .ci/constraints.txt -e ."
SECRET_ENV = (
    "RAY_AUTH_TOKEN",
    "MLFLOW_TRACKING_TOKEN",
    "MLFLOW_TRACKING_PASSWORD",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
)


@dataclass(frozen=True)
class Check:
    """The outcome of one check: a status, what was seen and, for a problem, the fix."""

    name: str
    status: str
    detail: str
    fix: str = ""

    @property
    def is_problem(self) -> bool:
        return self.status == PROBLEM

    def lines(self) -> list[str]:
        text = [f"{self.status:<8} {self.name}: {self.detail}"]
        if self.is_problem:
            text.append(f"{'':<8} fix: {self.fix}")
        return text


def ok(name: str, detail: str) -> Check:
    return Check(name, OK, detail)


def problem(name: str, detail: str, fix: str) -> Check:
    return Check(name, PROBLEM, detail, fix)


def skip(name: str, detail: str) -> Check:
    return Check(name, SKIP, detail)


def run_checks(address: str | None, tracking_uri: str | None, storage: str, *, stream: TextIO | None = None) -> int:
    """Runs every check and prints one line per check (plus a fix line per problem).

    Args:
        address: a Ray cluster to inspect (``host:port`` or ``ray://host:port``); default
            ``RAY_ADDRESS``; without either, the local machine is described.
        tracking_uri: the MLflow tracking URI; default ``MLFLOW_TRACKING_URI``, else
            ``sqlite:///<cwd>/mlflow.db``.
        storage: the directory that holds experiment directories.
        stream: where to print (default stdout).

    Returns:
        0 when every check passed, 1 when any found a problem.
    """
    out = stream or sys.stdout
    address = address or os.environ.get("RAY_ADDRESS") or None
    tracking_uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri()
    storage_path = storage if _is_uri(storage) else str(Path(storage).expanduser().resolve())

    # The slow children start first and run while the fast checks print.
    quiet_tf = {"TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")}
    tensorflow_child = _probe("tensorflow", (), TENSORFLOW_TIMEOUT_S, env=quiet_tf)
    ray_reachable = check_ray_reachable(address) if address else None
    ray_child = None
    if address and ray_reachable is None:
        ray_child = _probe(
            "ray",
            (address, "" if _is_uri(storage_path) else storage_path),
            RAY_TIMEOUT_S,
            env={"RAY_DEDUP_LOGS": "0"},
        )

    checks: list[Check] = []

    def emit(found: Sequence[Check]) -> None:
        for check in found:
            checks.append(check)
            for line in check.lines():
                print(_redact(line), file=out, flush=True)

    print("tunekit doctor", file=out, flush=True)
    try:
        emit(check_versions())
        emit([check_tracking(tracking_uri)])
        emit([check_storage(storage_path)])
        nvidia = nvidia_gpus()
        emit(check_tensorflow(tensorflow_child.result(), nvidia))
        if address is None:
            emit([check_local_ray(nvidia)])
        elif ray_reachable is not None:
            emit([ray_reachable])
        else:
            assert ray_child is not None
            emit(check_cluster(address, ray_child.result(), storage_path))
    finally:
        tensorflow_child.kill()
        if ray_child is not None:
            ray_child.kill()

    problems = sum(check.is_problem for check in checks)
    if problems:
        print(
            f"tunekit doctor: {problems} problem{'s' if problems > 1 else ''} found; each is followed by its fix",
            file=out,
            flush=True,
        )
        return 1
    print(f"tunekit doctor: all {len(checks)} checks passed", file=out, flush=True)
    return 0


def default_tracking_uri() -> str:
    return f"sqlite:///{Path.cwd() / 'mlflow.db'}"


# --------------------------------------------------------------------------- versions


def check_versions() -> list[Check]:
    """Python and the stack's versions, each against tunekit's own requirements."""
    requirements = _tunekit_requirements()
    checks = []
    python = platform.python_version()
    wanted = _requires_python()
    if wanted and not _satisfies(python, wanted):
        checks.append(
            problem(
                "python",
                f"{python}; tunekit needs Python {wanted}",
                f"use a Python {wanted} interpreter for the virtual environment",
            )
        )
    else:
        checks.append(ok("python", f"{python} ({sys.executable})"))
    for name, distributions in STACK.items():
        found = _installed(distributions)
        if found is None:
            checks.append(problem(name, "not installed", INSTALL_FIX))
            continue
        distribution, version = found
        label = version if distribution == name else f"{version} ({distribution})"
        specifier = requirements.get(name, "")
        if specifier and not _satisfies(version, specifier):
            checks.append(problem(name, f"{label}; tunekit needs {name}{specifier}", INSTALL_FIX))
        else:
            checks.append(ok(name, label))
    return checks


def _installed(distributions: Sequence[str]) -> tuple[str, str] | None:
    for distribution in distributions:
        try:
            return distribution, importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _tunekit_requirements() -> dict[str, str]:
    try:
        from packaging.requirements import InvalidRequirement, Requirement
    except ImportError:  # pragma: no cover - packaging ships with pip's environments
        return {}
    try:
        lines = importlib.metadata.requires("tunekit") or []
    except importlib.metadata.PackageNotFoundError:
        return {}
    wanted: dict[str, str] = {}
    for line in lines:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if requirement.marker is None:
            wanted[requirement.name.lower()] = str(requirement.specifier)
    return wanted


def _requires_python() -> str:
    try:
        found = importlib.metadata.metadata("tunekit").get_all("Requires-Python") or [""]
    except importlib.metadata.PackageNotFoundError:
        return ""
    return str(found[0])


def _satisfies(version: str, specifier: str) -> bool:
    try:
        from packaging.specifiers import InvalidSpecifier, SpecifierSet
        from packaging.version import InvalidVersion
    except ImportError:  # pragma: no cover
        return True
    try:
        return SpecifierSet(specifier).contains(version, prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return True


# --------------------------------------------------------------------------- tracking


def check_tracking(uri: str) -> Check:
    """Whether MLflow can record to ``uri``: a server answers, or a local store is writable."""
    name = f"tracking {_show_uri(uri)}"
    scheme = urllib.parse.urlsplit(uri).scheme.lower() if "://" in uri else ""
    if scheme in ("http", "https"):
        return _check_tracking_server(name, uri)
    if scheme == "sqlite":
        return _check_sqlite(name, uri)
    if scheme in ("", "file"):
        path = Path(urllib.parse.unquote(urllib.parse.urlsplit(uri).path) if scheme else uri)
        return _writable_check(
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
    except urllib.error.HTTPError:
        pass  # something answers; the API call below says whether it is MLflow
    except (urllib.error.URLError, OSError) as error:
        return problem(name, f"not reachable ({_reason(error)})", start_fix)
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
        return problem(name, f"not reachable ({_reason(error)})", start_fix)
    return ok(name, "the MLflow server answers")


def _http_get(url: str) -> bytes:
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
    # SQLAlchemy's form: sqlite:///relative.db, sqlite:////absolute.db, sqlite:// is in memory.
    text = uri.split("?", 1)[0]
    path_text = text[len("sqlite:///") :] if text.lower().startswith("sqlite:///") else ""
    if path_text in ("", ":memory:"):
        return problem(
            name,
            "an in-memory database loses every run when the process ends",
            "use a file, e.g. --tracking-uri sqlite:////absolute/path/mlflow.db",
        )
    path = Path(urllib.parse.unquote(path_text)).expanduser()
    path = (path if path.is_absolute() else Path.cwd() / path).resolve()
    fix = "choose a writable --tracking-uri path or fix its permissions"
    if path.is_dir():
        return problem(name, f"{path} is a directory, not a database file", fix)
    if not path.parent.is_dir():
        return problem(
            name, f"directory {path.parent} does not exist", f"create it (mkdir -p {path.parent}) or fix --tracking-uri"
        )
    # SQLite writes journal files next to the database: the directory must be writable.
    error = _probe_directory(path.parent, create=False)
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


_DATABASE_PORTS = {"postgresql": 5432, "postgres": 5432, "mysql": 3306, "mssql": 1433}


def _check_database(name: str, uri: str, kind: str) -> Check:
    parts = urllib.parse.urlsplit(uri)
    host, port = parts.hostname or "localhost", parts.port or _DATABASE_PORTS[kind]
    error = _connect(host, port)
    if error:
        return problem(name, f"cannot connect to {host}:{port} ({error})", "start the database or fix --tracking-uri")
    return ok(name, f"{host}:{port} accepts connections (credentials not checked)")


# --------------------------------------------------------------------------- storage


def check_storage(storage: str) -> Check:
    """Whether tunekit can create experiment directories under ``storage`` on this machine."""
    if _is_uri(storage):
        return _check_storage_uri(storage)
    return _writable_check(
        f"storage {storage}", Path(storage), "directory", "choose a writable --storage or fix permissions"
    )


def _writable_check(name: str, path: Path, what: str, fix: str) -> Check:
    if path.exists() and not path.is_dir():
        return problem(name, "exists and is not a directory", fix)
    existed = path.is_dir()
    error = _probe_directory(path, create=True)
    if error:
        return problem(name, f"not writable ({error})", fix)
    free = _free_space(path)
    note = "" if existed else " (missing; it will be created)"
    return ok(name, f"{what} writable{note}{free}")


def _probe_directory(path: Path, *, create: bool) -> str:
    """Writes and removes a probe file in ``path`` (creating missing folders, then removing
    them when ``create``). Returns "" on success, else the reason."""
    created: list[Path] = []
    try:
        if create:
            missing = []
            node = path
            while not node.exists() and node != node.parent:
                missing.append(node)
                node = node.parent
            for folder in reversed(missing):
                folder.mkdir()
                created.append(folder)
        probe = path / f"{PROBE_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}"
        with probe.open("x") as handle:
            handle.write("tunekit doctor probe\n")
        probe.unlink()
        return ""
    except OSError as error:
        return error.strerror or str(error)
    finally:
        for folder in reversed(created):
            with contextlib.suppress(OSError):
                folder.rmdir()


def _free_space(path: Path) -> str:
    node = path
    while not node.exists() and node != node.parent:
        node = node.parent
    try:
        free = shutil.disk_usage(node).free
    except OSError:
        return ""
    return f", {free / 2**30:.1f} GiB free"


def _check_storage_uri(uri: str) -> Check:
    child = _probe("storage-uri", (uri,), 30.0)
    result = child.result()
    name = f"storage {_show_uri(uri)}"
    if result.get("error"):
        return problem(
            name,
            f"not writable ({result['error']})",
            "choose a writable --storage or fix its credentials and permissions",
        )
    return ok(name, "a probe object was written and deleted")


# --------------------------------------------------------------------------- GPUs


@dataclass(frozen=True)
class NvidiaView:
    """What ``nvidia-smi`` lists: ``gpus`` is None without a driver; ``error`` when it fails."""

    gpus: tuple[str, ...] | None
    error: str = ""

    @property
    def visible(self) -> int:
        """The GPUs a process here may use: the listed ones, limited by CUDA_VISIBLE_DEVICES."""
        listed = len(self.gpus or ())
        mask = os.environ.get("CUDA_VISIBLE_DEVICES")
        if mask is None:
            return listed
        entries = [e for e in mask.split(",") if e.strip()]
        if not entries or entries[0].strip() == "-1":
            return 0
        return min(listed, len(entries))


def nvidia_gpus() -> NvidiaView:
    executable = shutil.which("nvidia-smi")
    if executable is None:
        return NvidiaView(None)
    try:
        done = subprocess.run(
            [executable, "--query-gpu=index,name,memory.total,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=NVIDIA_SMI_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return NvidiaView((), f"nvidia-smi did not answer in {NVIDIA_SMI_TIMEOUT_S:g} s")
    except OSError as error:
        return NvidiaView((), str(error))
    if done.returncode != 0:
        reason = _last_line(done.stdout + done.stderr) or f"exit status {done.returncode}"
        return NvidiaView((), reason)
    return NvidiaView(tuple(line.strip() for line in done.stdout.splitlines() if line.strip()))


def check_tensorflow(result: dict[str, Any], nvidia: NvidiaView) -> list[Check]:
    """TensorFlow's build (CUDA, cuDNN) and the GPUs it sees, against what nvidia-smi lists."""
    checks: list[Check] = []
    if nvidia.error:
        checks.append(
            problem(
                "gpus (nvidia-smi)",
                f"nvidia-smi fails: {nvidia.error}",
                "repair the NVIDIA driver until nvidia-smi lists the GPUs",
            )
        )
    elif nvidia.gpus is None:
        checks.append(ok("gpus (nvidia-smi)", "no NVIDIA driver here; trials run on CPU"))
    else:
        listed = "; ".join(nvidia.gpus) or "none"
        mask = os.environ.get("CUDA_VISIBLE_DEVICES")
        note = "" if mask is None else f" (CUDA_VISIBLE_DEVICES={mask!r}: {nvidia.visible} visible)"
        checks.append(ok("gpus (nvidia-smi)", f"{len(nvidia.gpus)}: {listed}{note}"))

    if result.get("error"):
        checks.append(
            problem(
                "tensorflow build",
                f"TensorFlow fails to load: {result['error']}",
                "reinstall TensorFlow from the tested stack: "
                "pip install -c .ci/constraints.txt --force-reinstall tensorflow",
            )
        )
        return checks
    version = result.get("version", "?")
    if result.get("cuda_build"):
        build = f"{version}, built with CUDA {result.get('cuda')} and cuDNN {result.get('cudnn')}"
    else:
        build = f"{version}, CPU-only build (no CUDA)"
    wants_gpu = nvidia.visible > 0
    if wants_gpu and not result.get("cuda_build"):
        checks.append(
            problem(
                "tensorflow build",
                build,
                f"install a CUDA build: pip install -c .ci/constraints.txt 'tensorflow[and-cuda]=={version}'",
            )
        )
    else:
        checks.append(ok("tensorflow build", build))

    gpus = result.get("gpus") or []
    described = "; ".join(_describe_tf_gpu(gpu) for gpu in gpus)
    seen = f"{len(gpus)}: {described}" if gpus else "none"
    if len(gpus) < nvidia.visible:
        checks.append(
            problem(
                "gpus (tensorflow)",
                f"{seen}, but nvidia-smi shows {nvidia.visible} usable",
                f"install TensorFlow's CUDA libraries (pip install -c .ci/constraints.txt "
                f"'tensorflow[and-cuda]=={version}') and check the driver supports CUDA "
                f"{result.get('cuda')}",
            )
        )
    else:
        checks.append(ok("gpus (tensorflow)", seen if gpus else "none; trials run on CPU"))
    return checks


def _describe_tf_gpu(gpu: dict[str, Any]) -> str:
    text = str(gpu.get("name", "GPU")).replace("/physical_device:", "")
    if gpu.get("model"):
        text += f" {gpu['model']}"
    capability = gpu.get("compute_capability")
    if capability:
        text += f" (compute {'.'.join(str(c) for c in capability)})"
    return text


# --------------------------------------------------------------------------- Ray


def check_local_ray(nvidia: NvidiaView) -> Check:
    """What ``ray.init()`` without an address does here: join the cluster that the last
    ``ray start`` recorded in the temp dir, or start a local Ray."""
    name = "ray (local)"
    address_file = _ray_temp_dir() / "ray_current_cluster"
    try:
        recorded = address_file.read_text().strip()
    except OSError:
        recorded = ""
    if recorded:
        unreachable = check_ray_reachable(recorded)
        if unreachable is not None:
            # ray.init() would retry this address for minutes instead of starting Ray.
            return problem(
                name,
                f"tunekit run without --address joins {recorded}, recorded in {address_file} "
                f"by `ray start`, but it {unreachable.detail}",
                f"remove {address_file} (its cluster is gone), or pass --address",
            )
        return ok(
            name,
            f"no --address or RAY_ADDRESS: tunekit run joins the cluster at "
            f"{recorded} started here with `ray start` (inspect it: --address auto)",
        )
    cpus = _cpu_count()
    return ok(
        name,
        f"no --address or RAY_ADDRESS: tunekit run starts a local Ray with {cpus:g} CPUs "
        f"and {nvidia.visible} GPUs (counted without starting Ray)",
    )


def _ray_temp_dir() -> Path:
    """Ray's temp dir, found as Ray finds it: RAY_TMPDIR, else TMPDIR on Linux, else /tmp."""
    root = os.environ.get("RAY_TMPDIR")
    if root is None and sys.platform.startswith("linux"):
        root = os.environ.get("TMPDIR")
    return Path(root or "/tmp") / "ray"


def _cpu_count() -> float:
    try:
        count: float = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        count = os.cpu_count() or 1
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            count = min(count, max(1.0, int(quota) / int(period)))
    except (OSError, ValueError):
        pass
    return count


def check_ray_reachable(address: str) -> Check | None:
    """A fast TCP connect to the cluster's address; None when it answers (or cannot be tested)."""
    host_port = address.split("://", 1)[1] if "://" in address else address
    host, sep, port_text = host_port.rpartition(":")
    if not sep or not port_text.isdigit():
        return None  # "auto" and friends: let ray.init resolve them
    error = _connect(host.strip("[]"), int(port_text))
    if error:
        return problem(
            f"ray cluster {address}",
            f"cannot connect ({error})",
            "start the cluster (ray start --head on the head node) or fix --address / RAY_ADDRESS",
        )
    return None


def check_cluster(address: str, result: dict[str, Any], storage: str) -> list[Check]:
    """The cluster's resources and nodes, and the storage as every node sees it."""
    name = f"ray cluster {address}"
    if result.get("error"):
        return [problem(name, f"cannot join: {result['error']}", _ray_fix(result["error"]))]
    resources = result.get("resources", {})
    nodes = result.get("nodes", [])
    checks = [ok(name, f"Ray {result.get('ray_version')}, {len(nodes)} alive node(s), {_resource_text(resources)}")]
    for node in nodes:
        role = ", head" if node.get("head") else ""
        checks.append(ok(f"ray node {node['host']} ({node['ip']})", _resource_text(node["resources"]) + role))
    if not nodes:
        checks.append(problem(name, "no alive nodes", "start the nodes (ray start --address=HEAD:PORT on each)"))
    probe = result.get("storage")
    if probe is None:
        checks.append(
            skip(f"storage {storage} on every node", "not probed from the cluster (only directory paths are)")
        )
        return checks
    checks.append(_storage_on_nodes(storage, probe))
    return checks


def _storage_on_nodes(storage: str, probe: dict[str, Any]) -> Check:
    name = f"storage {storage} on every node"
    fix = (
        "mount one shared volume (NFS, a ReadWriteMany PVC) at this same path on every node, "
        "or choose another --storage"
    )
    failed = [f"{host}: {error}" for host, error in probe.get("write_errors", {}).items()]
    if failed:
        return problem(name, "not writable on " + "; ".join(failed), fix)
    blind = [
        f"{host} does not see the files of {', '.join(others)}"
        for host, others in probe.get("unseen", {}).items()
        if others
    ]
    if blind:
        return problem(name, "not shared: " + "; ".join(blind), fix)
    hosts = probe.get("hosts", [])
    return ok(
        name,
        f"writable and shared by {len(hosts)} node(s)" + (" and this machine" if probe.get("driver_checked") else ""),
    )


def _resource_text(resources: dict[str, Any]) -> str:
    cpus, gpus = resources.get("CPU", 0), resources.get("GPU", 0)
    memory = resources.get("memory", 0) / 2**30
    return f"{cpus:g} CPUs, {gpus:g} GPUs, {memory:.1f} GiB memory"


def _ray_fix(error: str) -> str:
    lowered = error.lower()
    if "auth" in lowered and "token" in lowered:
        return (
            "give this machine the cluster's token: RAY_AUTH_MODE=token and RAY_AUTH_TOKEN "
            "(or RAY_AUTH_TOKEN_PATH) from the cluster's secret; see deploy/README.md"
        )
    if "version" in lowered and "mismatch" in lowered:
        return "install the cluster's Ray and Python versions here (the tested stack pins them)"
    if "did not answer" in lowered:
        return "check the address (ray status on the head node) and that its port is reachable"
    return "check the address (ray status on the head node) and the cluster's logs"


# --------------------------------------------------------------------------- helpers


def _probe(kind: str, args: Sequence[str], timeout_s: float, env: dict[str, str] | None = None) -> _Child:
    """Starts one of ``tunekit.doctor.probes`` in a child; its answer is read later."""
    return _Child(["-m", "tunekit.doctor.probes", kind, *args], timeout_s, env)


class _Child:
    """A Python child in its own process group, with a deadline; killed with its group."""

    def __init__(self, python_args: Sequence[str], timeout_s: float, env: dict[str, str] | None = None) -> None:
        self.timeout_s = timeout_s
        self.deadline = time.monotonic() + timeout_s
        self.process = subprocess.Popen(
            [sys.executable, *python_args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )
        self._result: dict[str, Any] | None = None

    def result(self) -> dict[str, Any]:
        if self._result is not None:
            return self._result
        try:
            left = max(0.1, self.deadline - time.monotonic())
            stdout, stderr = self.process.communicate(timeout=left)
        except subprocess.TimeoutExpired:
            self.kill()
            self._result = {"error": f"did not answer in {self.timeout_s:g} s"}
            return self._result
        for line in reversed(stdout.splitlines()):
            if line.startswith(MARK):
                self._result = dict(json.loads(line[len(MARK) :]))
                return self._result
        reason = _last_line(stderr) or f"exit status {self.process.returncode}"
        self._result = {"error": f"the check crashed ({reason})"}
        return self._result

    def kill(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired, ValueError):
            self.process.communicate(timeout=5)


def _connect(host: str, port: int) -> str:
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            return ""
    except OSError as error:
        return _reason(error)


def _reason(error: BaseException) -> str:
    if isinstance(error, urllib.error.URLError) and not isinstance(error, urllib.error.HTTPError):
        inner = error.reason
        if isinstance(inner, BaseException):
            return _reason(inner)
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


def _is_uri(text: str) -> bool:
    return "://" in text and not text.startswith("file://")


def _show_uri(uri: str) -> str:
    """The URI without its password."""
    if "://" not in uri:
        return uri
    parts = urllib.parse.urlsplit(uri)
    if parts.password is None:
        return uri
    netloc = parts.netloc.rsplit("@", 1)[1]
    return urllib.parse.urlunsplit(
        (parts.scheme, f"{parts.username}:***@{netloc}", parts.path, parts.query, parts.fragment)
    )


def _redact(text: str) -> str:
    for key in SECRET_ENV:
        value = os.environ.get(key)
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return text


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""
