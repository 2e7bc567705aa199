"""Where experiments live: a local or shared folder, or a bucket (``s3://``, ``gs://``, any URI
pyarrow's file systems open).

A bucket experiment is the source of truth; tunekit works on a local mirror of its small
files, the experiment's *cache*:

* **The driver** (``run``, ``resume``) keeps its live records (tables, study journal, clock,
  records) in the cache and uploads what changed every few seconds and at every
  stop (``tunekit.storage.mirror``); a SIGKILLed driver loses at most those seconds, as Ray's own saved
  state does. Ray Tune writes its saved state and every trial's checkpoints straight to the
  bucket (``storage_path``), from whichever node runs the trial.
* **A resume from anywhere** pulls the experiment's files but the checkpoints' payloads into a
  fresh cache, mends Ray's saved state there, and pushes the mended files back before Ray
  reads them.
* **Readers** (``report``, ``status``, ``check``, ``logs``, ``tunekit.load``) pull the small
  files into a read cache; a model is fetched when asked for (``model_path``).

The caches live under ``$TUNEKIT_CACHE`` (default ``~/.cache/tunekit``), in ``buckets/{driver,read}/
<scheme>/<bucket>/<prefix>/<experiment>``. Credentials and endpoints come from the usual
environment (``AWS_*``, ``AWS_ENDPOINT_URL``, ``GOOGLE_APPLICATION_CREDENTIALS``) or the URI's
query (``?endpoint_override=127.0.0.1:9000&scheme=http``); a URI never goes through ``Path``
(``Path("s3://b/x").resolve()`` is a local folder named ``s3:``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunekit.errors import StorageError
from tunekit.layout import (
    FINAL_MODEL,
    FINAL_WEIGHTS,
    OUTPUT_FILE,
    SPEC_FILE,
)
from tunekit.storage.fences import check_fences

CACHE_ENV = "TUNEKIT_CACHE"
# A checkpoint's payloads: fetched when asked for, never pulled with the records.
PAYLOAD_SUFFIXES = (".npz", ".keras", ".h5")
# What the driver never uploads: temporary files, and the lease (kept in the bucket directly).
NOT_PUSHED = (".partial", ".stale")


def is_uri(text: str | os.PathLike[str]) -> bool:
    """A ``scheme://`` storage location (``file://`` is a local directory)."""
    text = str(text)
    return "://" in text and not text.startswith("file://")


def local_path(location: str | os.PathLike[str]) -> Path:
    """A local location as an absolute path (``file://`` stripped); never call it on a URI."""
    text = str(location)
    if text.startswith("file://"):
        text = urllib.parse.urlparse(text).path
    return Path(text).expanduser().resolve()


def join_uri(base: str, name: str) -> str:
    """``base``/``name``, the query (``?endpoint_override=...``) kept at the end."""
    head, _, query = base.partition("?")
    joined = head.rstrip("/") + "/" + name.strip("/")
    return f"{joined}?{query}" if query else joined


def without_query(uri: str) -> str:
    return uri.partition("?")[0]


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "tunekit").expanduser()


@dataclass(frozen=True)
class Bucket:
    """An experiment folder in object storage: ``uri`` is ``scheme://bucket/prefix/name[?query]``."""

    uri: str

    @property
    def name(self) -> str:
        return without_query(self.uri).rstrip("/").rsplit("/", 1)[-1]

    @property
    def parent_uri(self) -> str:
        """The storage URI the experiment lives under (Ray Tune's ``storage_path``)."""
        head, _, query = self.uri.partition("?")
        parent = head.rstrip("/").rsplit("/", 1)[0]
        return f"{parent}?{query}" if query else parent

    def cache(self, role: str) -> Path:
        """This machine's mirror of the experiment: ``driver`` (a search's live files) or ``read``."""
        parsed = urllib.parse.urlparse(without_query(self.uri))
        # Named as the experiment (its last part), as Ray Tune names the experiment after its folder.
        return cache_root() / "buckets" / role / parsed.scheme / parsed.netloc / parsed.path.strip("/")

    def filesystem(self) -> tuple[Any, str]:
        """pyarrow's file system and the experiment's path in it (one client per URI and process)."""
        return _filesystem(self.uri)

    def exists(self) -> bool:
        """Whether an experiment is there (its ``spec.yaml``)."""
        from pyarrow import fs

        filesystem, path = self.filesystem()
        return bool(filesystem.get_file_info(f"{path}/{SPEC_FILE}").type == fs.FileType.File)

    def listing(self) -> dict[str, tuple[int, float]]:
        """Every file of the experiment: relative path -> (size, modification time)."""
        from pyarrow import fs

        filesystem, path = self.filesystem()
        found: dict[str, tuple[int, float]] = {}
        for info in filesystem.get_file_info(fs.FileSelector(path, recursive=True, allow_not_found=True)):
            if info.type == fs.FileType.File:
                mtime = info.mtime.timestamp() if info.mtime is not None else 0.0
                found[info.path[len(path) + 1 :]] = (info.size or 0, mtime)
        return found

    def pull(self, cache: Path, *, payloads: bool = False, fresh: bool = False) -> Path:
        """Downloads the experiment's files into ``cache`` (what changed since the last pull);
        without ``payloads``, checkpoints' weights and models stay in the bucket (``fetch``). The
        trials' ``output.log`` files stay there always (``fetch`` one): every reader pulls, and a
        search's logs can outweigh all its records."""
        filesystem, path = self.filesystem()
        if fresh and cache.exists():
            shutil.rmtree(cache)
        cache.mkdir(parents=True, exist_ok=True)
        for relative, (size, _) in self.listing().items():
            if relative.endswith(f"/{OUTPUT_FILE}") or (not payloads and _is_payload(relative)):
                continue
            target = cache / relative
            if target.is_file() and target.stat().st_size == size and not _changes(relative):
                continue
            _download(filesystem, f"{path}/{relative}", target)
        return cache

    def fetch(self, cache: Path, relative: str, *, fresh: bool = False) -> Path:
        """One file of the experiment in ``cache``: downloaded when missing, or always when
        ``fresh`` (a file that grows, as a running trial's log). Raises FileNotFoundError."""
        target = cache / relative
        if fresh or not target.is_file():
            filesystem, path = self.filesystem()
            _download(filesystem, f"{path}/{relative}", target)
        return target

    def push(self, cache: Path, relatives: list[str]) -> None:
        """Uploads these files of ``cache`` in this order (each whole: an object store replaces
        objects whole), each once this process has proved it still holds the experiment's lease,
        if it holds one.

        Every file is read before any is sent, the last first: the driver keeps writing while
        an upload takes its second, so a file read after the ones sent before it could hold rows
        they lack (epochs.csv read after the study's journal was sent held epochs the bucket's
        journal did not, and an outage that began then left them so for the resume). Read in
        reverse, each file sent first covers what the ones sent after it hold.
        """
        filesystem, path = self.filesystem()
        contents: dict[str, bytes] = {}
        for relative in reversed(relatives):
            with contextlib.suppress(FileNotFoundError):
                contents[relative] = (cache / relative).read_bytes()
        for relative in relatives:
            if relative not in contents:
                continue
            check_fences()
            with filesystem.open_output_stream(f"{path}/{relative}") as stream:
                stream.write(contents[relative])

    def delete(self, relative: str) -> None:
        filesystem, path = self.filesystem()
        with contextlib.suppress(FileNotFoundError, OSError):
            filesystem.delete_file(f"{path}/{relative}")

    def make_empty_folder(self, relative: str) -> None:
        """An empty folder (an object store's marker object), as Ray sees a checkpoint folder."""
        filesystem, path = self.filesystem()
        filesystem.create_dir(f"{path}/{relative}")

    def remove_empty_folder(self, relative: str) -> None:
        """Removes a folder ``make_empty_folder`` made, if it is still there and still empty."""
        from pyarrow import fs

        filesystem, path = self.filesystem()
        with contextlib.suppress(FileNotFoundError, OSError):
            if not filesystem.get_file_info(fs.FileSelector(f"{path}/{relative}", allow_not_found=True)):
                filesystem.delete_dir(f"{path}/{relative}")


@functools.lru_cache(maxsize=64)
def _filesystem(uri: str) -> tuple[Any, str]:
    """Why cached: opening a URI makes a new S3 client (credentials, region, connection pool),
    and the driver's mirror opens its bucket every 2 s: 1.4x the driver's CPU in a 12-trial search."""
    from pyarrow import fs

    try:
        filesystem, path = fs.FileSystem.from_uri(uri)
    except (OSError, ValueError) as error:
        raise StorageError(f"{redacted(uri)}: cannot open ({error})") from None
    return filesystem, path.rstrip("/")


def _is_payload(relative: str) -> bool:
    return "/" in relative and relative.endswith(PAYLOAD_SUFFIXES)


def _changes(relative: str) -> bool:
    """Files rewritten in place with the same size can still differ: always pull the records."""
    return "/" not in relative


def _download(filesystem: Any, source: str, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    with filesystem.open_input_stream(source) as stream, partial.open("wb") as out:
        while chunk := stream.read(1 << 20):
            out.write(chunk)
    os.replace(partial, target)


# In a bucket experiment's cache: the experiment's URI, so every module that gets the cache
# as its experiment directory can find the bucket (never uploaded).
ORIGIN_FILE = ".bucket"


def bucket_of(experiment_dir: Path) -> Bucket | None:
    """The bucket a cache mirrors, or None for a local experiment."""
    try:
        return Bucket((Path(experiment_dir) / ORIGIN_FILE).read_text().strip())
    except OSError:
        return None


def location_of(experiment_dir: Path) -> str:
    """Where the experiment is for a process on any node: its URI, or its folder."""
    bucket = bucket_of(experiment_dir)
    return bucket.uri if bucket is not None else str(experiment_dir)


def shown(experiment_dir: Path) -> str:
    """How to name an experiment to the user: its URI (credentials removed) for a bucket's cache."""
    bucket = bucket_of(experiment_dir)
    return redacted(bucket.uri) if bucket is not None else str(experiment_dir)


def mirror_cache(bucket: Bucket, role: str, *, fresh: bool) -> Path:
    """The cache of ``bucket`` for ``role`` ("driver", "read"), marked with its origin."""
    cache = bucket.cache(role)
    if fresh and cache.exists():
        shutil.rmtree(cache)
    cache.mkdir(parents=True, exist_ok=True)
    (cache / ORIGIN_FILE).write_text(bucket.uri + "\n")
    return cache


def experiments_under(uri: str) -> list[str]:
    """The experiments under a storage URI (``s3://b/prefix``), as URIs: the URI itself when it
    is one, else each folder directly under it that holds a ``spec.yaml``.

    Raises:
        StorageError: the URI cannot be listed (no such bucket, no access, no answer).
    """
    from pyarrow import fs

    filesystem, path = _filesystem(uri)
    try:
        if filesystem.get_file_info(path.split("/", 1)[0]).type == fs.FileType.NotFound:
            raise StorageError(f"storage {redacted(uri)}: no such bucket '{path.split('/', 1)[0]}'")
        if Bucket(uri).exists():
            return [uri]
        folders = filesystem.get_file_info(fs.FileSelector(path, allow_not_found=True))
        return [
            join_uri(uri, folder.base_name)
            for folder in sorted(folders, key=lambda info: info.base_name)
            if folder.type == fs.FileType.Directory and Bucket(join_uri(uri, folder.base_name)).exists()
        ]
    except OSError as error:
        raise StorageError(f"storage {redacted(uri)}: cannot list it ({error})") from None


def readable(location: str | os.PathLike[str], *, payloads: bool = False) -> Path:
    """An experiment to read: a local folder as it is, a bucket's files pulled into its read
    cache (the checkpoints' weights and models only with ``payloads``)."""
    from tunekit.errors import NotAnExperimentError

    if not is_uri(location):
        return local_path(location)
    bucket = Bucket(str(location))
    if not bucket.exists():
        raise NotAnExperimentError(redacted(bucket.uri), SPEC_FILE)
    cache = mirror_cache(bucket, "read", fresh=False)
    return bucket.pull(cache, payloads=payloads)


# Ray Tune's own files in an experiment: Ray writes them to the bucket itself; the driver's
# mirror never uploads its cache's copies (a resume pushes them once, after mending them).
RAY_STATE_PREFIXES = (
    "experiment_state-",
    "search_gen_state-",
    "searcher-state-",
    "callback-states-",
    "basic-variant-state-",
    "tuner.pkl",
)


def is_ray_state(name: str) -> bool:
    return name.startswith(RAY_STATE_PREFIXES)


def push_ray_state(experiment_dir: Path) -> None:
    """A resume's mended copies of Ray's saved state, back to the bucket before Ray reads them."""
    bucket = bucket_of(experiment_dir)
    if bucket is not None:
        bucket.push(experiment_dir, [p.name for p in experiment_dir.iterdir() if p.is_file() and is_ray_state(p.name)])


def model_of(experiment_dir: Path, trial_id: str) -> Path | None:
    """A trial's final model (``tunekit.tracking.artifacts.final_model_path``); for a bucket's
    read cache, the newest checkpoint's model is fetched from the bucket when first asked for."""
    from tunekit.tracking.artifacts import checkpoint_order, final_model_path

    bucket = bucket_of(experiment_dir)
    if bucket is None:
        return final_model_path(experiment_dir, trial_id)
    held: dict[str, set[str]] = {}  # checkpoint folder -> its model files
    for relative in bucket.listing():
        parts = relative.split("/")
        if len(parts) == 3 and parts[0] == trial_id and parts[2] in (FINAL_MODEL, FINAL_WEIGHTS):
            held.setdefault(parts[1], set()).add(parts[2])
    for checkpoint in sorted(held, key=lambda name: checkpoint_order(Path(name)), reverse=True):
        name = FINAL_MODEL if FINAL_MODEL in held[checkpoint] else FINAL_WEIGHTS
        return bucket.fetch(experiment_dir, f"{trial_id}/{checkpoint}/{name}")
    return None


def redacted(uri: str) -> str:
    from tunekit.environment import redact_uri

    return redact_uri(uri)


# ------------------------------------------------------------------ before anything starts

# One limit for the storage probe of `run`, `resume` and `tunekit doctor --storage`: the time
# their messages state is the time they take.
STORAGE_DEADLINE_S = 20.0
_CREDENTIAL_ENV = ("AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE", "GOOGLE_APPLICATION_CREDENTIALS")


def check_bucket(location: str, timeout_s: float = STORAGE_DEADLINE_S) -> None:
    """Refuses an unusable storage URI in one line naming it (credentials removed) and the fix:
    an unknown scheme, missing credentials, no such bucket, no permission, an endpoint that
    does not answer within ``timeout_s`` (``bucket_problem``)."""
    if problem := bucket_problem(location, timeout_s):
        raise StorageError(f"storage {redacted(location)}: {problem}")


def bucket_problem(location: str, timeout_s: float = STORAGE_DEADLINE_S) -> str:
    """What makes a storage URI unusable and the fix ("what; fix: how"), or "" when a probe object
    was written and deleted there within ``timeout_s``.

    The probe runs in a child process (``tunekit doctor``'s) that is killed at the deadline: in a
    thread of this process, a call hung on an endpoint that never answers held the command's
    exit for pyarrow's own timeouts and retries (100-200 s), while the message said 20 s.
    """
    from tunekit.doctor.child import probe

    error = str(probe("storage-uri", (location,), timeout_s).result().get("error") or "")
    return _refusal(location, error, timeout_s) if error else ""


def _refusal(location: str, error: str, timeout_s: float) -> str:
    scheme = location.partition("://")[0]
    bucket = urllib.parse.urlparse(location).netloc
    lowered = error.lower()
    if "unrecognized filesystem type" in lowered or "unknown filesystem" in lowered:
        return (
            f"unknown scheme '{scheme}://'; fix: a local folder, or a URI pyarrow's file systems open "
            "(s3://, gs://, hdfs://, abfs://)"
        )
    if "did not answer" in lowered or "timed out" in lowered or "timeout" in lowered:
        return (
            f"did not answer within {timeout_s:g} s; fix: check the endpoint (AWS_ENDPOINT_URL or the URI's "
            "endpoint_override) and that it is reachable from here"
        )
    if "network_connection" in lowered or "could not connect" in lowered or "connection refused" in lowered:
        return (
            "its endpoint refused the connection; fix: check the endpoint (AWS_ENDPOINT_URL or the URI's "
            "endpoint_override) and that the service runs"
        )
    if ("not found" in lowered and "bucket" in lowered) or "no_such_bucket" in lowered:
        return f"no such bucket '{bucket}'; fix: create it (tunekit does not create buckets)"
    if "access_denied" in lowered or "access denied" in lowered or "forbidden" in lowered or "403" in lowered:
        if not any(os.environ.get(name) for name in _CREDENTIAL_ENV):
            return (
                "access denied, and no credentials were found; fix: set AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE, a role, GOOGLE_APPLICATION_CREDENTIALS for gs://)"
            )
        return (
            "access denied: these credentials may not write there; fix: allow them to put, get, list and "
            "delete objects under it"
        )
    return f"not usable ({error}); fix: `tunekit doctor --storage {redacted(location)}` says more"
