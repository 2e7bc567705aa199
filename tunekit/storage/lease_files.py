"""Where a driver's lease lives, and the few atomic operations the lease rests on.

``tunekit.storage.lease`` holds the protocol (who may write, for how long, who takes over); this
module holds one backend per kind of storage, each giving the same operations:

* ``create(text)``: make the lease if there is none; of two creators exactly one wins;
* ``read()``: the lease's text (None: no lease), remembering which version was read;
* ``renew(text)``: replace the lease, only if it is still the version last read or written
  (False: another driver replaced it meanwhile);
* ``take_over(stale, text)``: replace a dead holder's lease, only if it is still that one;
* ``remove()``: delete it; ``storage_age()``: seconds since it was last written, measured
  on the *storage's* clock (a probe written now against the lease's time, both stamped by
  the storage), never by comparing this host's wall clock with another host's.

How each storage gives the atomicity:

* a local or shared folder: ``O_EXCL`` to create, a rename aside to take over (of two takers
  one renames it); a renewal is a read, a token check and an atomic replace, so its only
  window is the microseconds between the check and the replace;
* S3 (AWS, MinIO, moto, any S3 API with conditional writes): ``If-None-Match: *`` to create,
  ``If-Match: <ETag>`` to renew and take over, so no window at all;
* other object stores (``gs://`` and what pyarrow opens): no conditional write reachable
  here, so a creation writes, waits ``SETTLE_S`` and reads back (of two creators the one whose
  lease is read back wins), and a renewal checks the token first, as a folder's does.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import time
import urllib.parse
import uuid
from pathlib import Path
from typing import Any, Protocol

from tunekit.layout import LEASE_FILE
from tunekit.storage.store import replace_whole


class LeaseFile(Protocol):
    key: str  # one per experiment, whatever form its location was given in
    where: str  # the experiment, as the user names it

    def create(self, text: str) -> bool: ...
    def read(self) -> str | None: ...
    def renew(self, text: str) -> bool: ...
    def take_over(self, stale_token: str, text: str) -> bool: ...
    def remove(self) -> None: ...
    def storage_age(self) -> float | None: ...


def token_of(text: str | None) -> str | None:
    try:
        token = json.loads(text or "").get("token")
    except (ValueError, AttributeError):
        return None
    return token if isinstance(token, str) else None


class LocalLeaseFile:
    """``driver.lease`` in a local or shared folder."""

    def __init__(self, experiment_dir: Path) -> None:
        self.path = Path(experiment_dir) / LEASE_FILE
        self.key = str(self.path)
        self.where = str(experiment_dir)

    def create(self, text: str) -> bool:
        try:
            descriptor = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(descriptor, "w") as handle:
            handle.write(text)
        return True

    def read(self) -> str | None:
        try:
            return self.path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return None

    def renew(self, text: str) -> bool:
        replace_whole(self.path, text.encode("utf-8"))
        return True

    def take_over(self, stale_token: str, text: str) -> bool:
        aside = self.path.with_name(f"{self.path.name}.{uuid.uuid4().hex[:8]}.stale")
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return False  # another driver took it first
        moved = token_of(aside.read_text(encoding="utf-8", errors="replace"))
        if moved is not None and moved != stale_token:
            # Between our read and the rename another driver renewed or took it: give it back.
            with contextlib.suppress(OSError):
                os.link(aside, self.path)
            aside.unlink(missing_ok=True)
            return False
        aside.unlink(missing_ok=True)
        return self.create(text)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)

    def storage_age(self) -> float | None:
        probe = self.path.with_name(f"{self.path.name}.{uuid.uuid4().hex[:8]}.clock")
        try:
            probe.write_bytes(b"")
            return max(0.0, probe.stat().st_mtime - self.path.stat().st_mtime)
        except OSError:  # no lease, or a read-only folder: the age is not known
            return None
        finally:
            with contextlib.suppress(OSError):
                probe.unlink()


class S3LeaseObject:
    """``driver.lease`` as an object of an S3 bucket, on S3's conditional writes (boto3)."""

    def __init__(self, bucket: Any) -> None:
        self.key = f"{bucket.uri}#{LEASE_FILE}"
        self.where = bucket.uri
        self._client, self._bucket, prefix = _s3_client(bucket.uri)
        self._object = f"{prefix}/{LEASE_FILE}" if prefix else LEASE_FILE
        self._etag: str | None = None  # the version last read or written

    def create(self, text: str) -> bool:
        try:
            sent = self._client.put_object(Bucket=self._bucket, Key=self._object, Body=text.encode(), IfNoneMatch="*")
        except Exception as error:
            if _precondition_failed(error):
                return False
            raise
        self._etag = sent["ETag"]
        # A store whose check and write are not one step (moto's server, say) could let two
        # creators through: the one whose lease is there now wins.
        return token_of(self.read()) == token_of(text)

    def read(self) -> str | None:
        try:
            got = self._client.get_object(Bucket=self._bucket, Key=self._object)
        except Exception as error:
            if _not_found(error):
                self._etag = None
                return None
            raise
        self._etag = got["ETag"]
        return str(got["Body"].read().decode("utf-8", "replace"))

    def renew(self, text: str) -> bool:
        return self._replace_if_unchanged(text)

    def take_over(self, stale_token: str, text: str) -> bool:
        if token_of(self.read()) != stale_token:
            return False
        return self._replace_if_unchanged(text) and token_of(self.read()) == token_of(text)

    def _replace_if_unchanged(self, text: str) -> bool:
        if self._etag is None:
            return False
        try:
            sent = self._client.put_object(
                Bucket=self._bucket, Key=self._object, Body=text.encode(), IfMatch=self._etag
            )
        except Exception as error:
            if _precondition_failed(error) or _not_found(error):
                return False
            raise
        self._etag = sent["ETag"]
        return True

    def remove(self) -> None:
        with contextlib.suppress(Exception):
            self._client.delete_object(Bucket=self._bucket, Key=self._object)

    def storage_age(self) -> float | None:
        probe = f"{self._object}.{uuid.uuid4().hex[:8]}.clock"
        try:
            self._client.put_object(Bucket=self._bucket, Key=probe, Body=b"")
            now = self._client.head_object(Bucket=self._bucket, Key=probe)["LastModified"]
            then = self._client.head_object(Bucket=self._bucket, Key=self._object)["LastModified"]
        except Exception:
            return None
        finally:
            with contextlib.suppress(Exception):
                self._client.delete_object(Bucket=self._bucket, Key=probe)
        return max(0.0, (now - then).total_seconds())


class SettledLeaseObject:
    """``driver.lease`` in an object store with no conditional write reachable here (``gs://``, ...)."""

    SETTLE_S = 0.5

    def __init__(self, bucket: Any) -> None:
        self.bucket = bucket
        self.key = f"{bucket.uri}#{LEASE_FILE}"
        self.where = bucket.uri

    def create(self, text: str) -> bool:
        if self.read() is not None:
            return False
        self._write(text)
        time.sleep(self.SETTLE_S)
        return self.read() == text

    def read(self) -> str | None:
        from pyarrow import fs

        filesystem, path = self.bucket.filesystem()
        if filesystem.get_file_info(f"{path}/{LEASE_FILE}").type != fs.FileType.File:
            return None
        try:
            with filesystem.open_input_stream(f"{path}/{LEASE_FILE}") as stream:
                return str(stream.read().decode("utf-8", "replace"))
        except FileNotFoundError:
            return None

    def renew(self, text: str) -> bool:
        self._write(text)
        return True

    def take_over(self, stale_token: str, text: str) -> bool:
        if token_of(self.read()) != stale_token:
            return False
        self.remove()
        return self.create(text)

    def _write(self, text: str) -> None:
        filesystem, path = self.bucket.filesystem()
        with filesystem.open_output_stream(f"{path}/{LEASE_FILE}") as stream:
            stream.write(text.encode("utf-8"))

    def remove(self) -> None:
        self.bucket.delete(LEASE_FILE)

    def storage_age(self) -> float | None:
        filesystem, path = self.bucket.filesystem()
        probe = f"{path}/{LEASE_FILE}.{uuid.uuid4().hex[:8]}.clock"
        try:
            with filesystem.open_output_stream(probe) as stream:
                stream.write(b"")
            now, then = filesystem.get_file_info([probe, f"{path}/{LEASE_FILE}"])
            if now.mtime is None or then.mtime is None:
                return None
            return max(0.0, (now.mtime - then.mtime).total_seconds())
        except OSError:
            return None
        finally:
            with contextlib.suppress(OSError):
                filesystem.delete_file(probe)


def _s3_client(uri: str) -> tuple[Any, str, str]:
    """A boto3 client for an ``s3://bucket/prefix?query`` URI, with the endpoint and credentials
    pyarrow would use: the URI's query (``endpoint_override``, ``scheme``, ``region``,
    ``access_key``, ``secret_key``, ``session_token``), else the usual environment."""
    parsed = urllib.parse.urlparse(uri)
    query = dict(urllib.parse.parse_qsl(parsed.query))
    env = os.environ
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if override := query.get("endpoint_override"):
        endpoint = override if "://" in override else f"{query.get('scheme', 'https')}://{override}"
    # Read here, not left to boto3: they are the cache's key, so a changed environment (another
    # endpoint, other credentials) gets a client of its own.
    client = _client(
        endpoint,
        query.get("region") or env.get("AWS_DEFAULT_REGION") or env.get("AWS_REGION"),
        query.get("access_key") or env.get("AWS_ACCESS_KEY_ID"),
        query.get("secret_key") or env.get("AWS_SECRET_ACCESS_KEY"),
        query.get("session_token") or env.get("AWS_SESSION_TOKEN"),
    )
    return client, parsed.netloc, parsed.path.strip("/")


@functools.lru_cache(maxsize=8)
def _client(endpoint: str | None, region: str | None, key: str | None, secret: str | None, token: str | None) -> Any:
    """One client per endpoint and credentials in a process (a client costs 0.1-0.3 s to make)."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=region,
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        aws_session_token=token,
        config=Config(connect_timeout=5, read_timeout=10, retries={"max_attempts": 2}),
    )


def _code(error: Exception) -> str:
    response = getattr(error, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


def _precondition_failed(error: Exception) -> bool:
    # 409 ConditionalRequestConflict: another conditional write to the key was in flight.
    return _code(error) in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409")


def _not_found(error: Exception) -> bool:
    return _code(error) in ("NoSuchKey", "404", "NotFound")


def lease_file(experiment: Path | str) -> LeaseFile:
    """Where an experiment's lease lives: beside a local one, in the bucket of a bucket's
    (given as its URI, or as this machine's cache of it)."""
    from tunekit.storage.buckets import Bucket, bucket_of, is_uri

    if is_uri(str(experiment)):
        bucket: Any = Bucket(str(experiment))
    elif (bucket := bucket_of(Path(experiment))) is None:
        return LocalLeaseFile(Path(experiment))
    if bucket.uri.startswith("s3://"):
        return S3LeaseObject(bucket)
    return SettledLeaseObject(bucket)
