"""A history whose experiment lives in a bucket: moto's S3 API on 127.0.0.1 behind a loopback
proxy (``tunekit.testing``), the switch of the storage-outage kind.

The drivers reach the bucket through the proxy; the explorer reads it directly, so an outage
hides nothing from it, and pulls the experiment into a folder of its own for its invariants.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunekit.testing.servers import LoopbackProxy, S3Server

BUCKET = "chaos"
OUTAGE_S = 15  # the search's storage.outage_s in a bucket history: outages past it end the driver


@dataclass
class BucketStorage:
    s3: S3Server
    proxy: LoopbackProxy
    prefix: str  # "chaos/h<seed>": where the history's experiments go in the bucket

    @classmethod
    def serve(cls, root: Path, seed: int) -> BucketStorage:
        s3 = S3Server(root / "moto").start()
        try:
            s3.make_bucket(BUCKET)
            proxy = LoopbackProxy(s3.port).start()
        except BaseException:
            s3.stop()
            raise
        return cls(s3, proxy, f"{BUCKET}/h{seed}")

    @property
    def uri(self) -> str:
        return f"s3://{self.prefix}"

    def env(self, root: Path) -> dict[str, str]:
        """A driver's environment: the S3 API through the proxy, a tunekit cache of the history's own."""
        return {**self.s3.env, "AWS_ENDPOINT_URL": self.proxy.endpoint, "TUNEKIT_CACHE": str(root / "cache")}

    def read(self, relative: str) -> bytes | None:
        """An object of the history's prefix, read past the proxy; None when there is none (yet)."""
        try:
            with self._filesystem().open_input_stream(f"{self.prefix}/{relative}") as stream:
                return bytes(stream.read())
        except OSError:
            return None

    def pull(self, relative: str, local: Path) -> None:
        """A fresh copy of the folder ``relative`` (an experiment) in ``local``, read past the proxy."""
        from pyarrow import fs

        shutil.rmtree(local, ignore_errors=True)
        local.mkdir(parents=True)
        filesystem = self._filesystem()
        source = f"{self.prefix}/{relative}"
        if filesystem.get_file_info(source).type == fs.FileType.Directory:
            fs.copy_files(source, str(local), source_filesystem=filesystem, destination_filesystem=fs.LocalFileSystem())

    def stop(self) -> None:
        self.proxy.stop()
        self.s3.stop()

    def _filesystem(self) -> Any:
        from pyarrow import fs

        env = self.s3.env
        return fs.S3FileSystem(
            access_key=env["AWS_ACCESS_KEY_ID"],
            secret_key=env["AWS_SECRET_ACCESS_KEY"],
            endpoint_override=self.s3.endpoint,
            scheme="http",
            region="us-east-1",
        )
