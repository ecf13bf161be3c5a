"""The archive in an S3-compatible bucket (CHUNKWISE_ARCHIVE_URL): one object per SHA-256.

boto3 reads its own standard settings (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_REGION); Chunkwise only names the bucket and the key prefix.
"""

from __future__ import annotations

import errno
import io
import logging
import uuid
from collections.abc import Iterator
from typing import BinaryIO

import boto3
from boto3.exceptions import S3UploadFailedError
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from services.archive import Upload, input_not_here
from services.errors import ArchiveUnavailable

logger = logging.getLogger(__name__)

SETTING = "CHUNKWISE_ARCHIVE_URL"
# Short enough that /readyz and a worker's input read answer within their own timeouts when
# the store is down, rather than after botocore's default minute.
CLIENT_CONFIG = Config(
    connect_timeout=3, read_timeout=30, retries={"max_attempts": 2, "mode": "standard"}
)
# /readyz asks on every call, and a probe that outlasts its caller's timeout says nothing.
PROBE_CONFIG = Config(connect_timeout=2, read_timeout=3, retries={"max_attempts": 1})
# Multipart above 16 MiB, at most 4 parts in flight: an upload holds at most 64 MiB in memory.
TRANSFER = TransferConfig(
    multipart_threshold=16 * 1024 * 1024, multipart_chunksize=16 * 1024 * 1024, max_concurrency=4
)
MISSING = frozenset({"404", "NoSuchKey", "NotFound"})
PROBE_PREFIX = ".probe-"


class ObjectArchive:
    """Archived inputs as objects in one bucket under one prefix, shared by every coordinator."""

    setting = SETTING

    def __init__(self, bucket: str, prefix: str):
        self.bucket = bucket
        self.prefix = prefix
        session = boto3.session.Session()
        self.client = session.client("s3", config=CLIENT_CONFIG)
        self._probe_client = session.client("s3", config=PROBE_CONFIG)

    def key(self, sha256: str) -> str:
        """The object key of the bytes with this digest."""
        return f"{self.prefix}sha256/{sha256[:2]}/{sha256}"

    def stage(self, upload: Upload) -> Upload:
        """Upload the spool unless the bucket has these bytes already: durable before the job
        commits, and never inside admission's transaction (a large upload takes a while)."""
        key = self.key(upload.sha256)
        try:
            if self._exists(key):
                self._touch(key)
            else:
                self.client.upload_file(str(upload.path), self.bucket, key, Config=TRANSFER)
        # upload_file wraps a refusal (a full bucket, say) in S3UploadFailedError.
        except (BotoCoreError, ClientError, S3UploadFailedError) as exc:
            raise self._unavailable("written", exc) from exc
        return upload

    def store(self, staged: Upload) -> bool:
        """Nothing left to do: stage() made the object durable (a failed admission leaves it for
        the retention pass, and a retried upload of the same bytes finds it there)."""
        return False

    def open_range(self, sha256: str, offset: int, length: int) -> BinaryIO:
        """A ranged GET of the object, its answer in hand before any byte is served."""
        try:
            if length == 0:
                # An empty range cannot be asked for; the object must still be there.
                self.client.head_object(Bucket=self.bucket, Key=self.key(sha256))
                return io.BytesIO(b"")
            answer = self.client.get_object(
                Bucket=self.bucket,
                Key=self.key(sha256),
                Range=f"bytes={offset}-{offset + length - 1}",
            )
        except ClientError as exc:
            if _code(exc) in MISSING:
                raise input_not_here(SETTING) from exc
            raise self._unavailable("read", exc) from exc
        except BotoCoreError as exc:
            raise self._unavailable("read", exc) from exc
        return ObjectReader(answer["Body"])

    def problem(self) -> str | None:
        """Why the bucket cannot take an upload (a small object put and deleted), or None."""
        key = f"{self.prefix}{PROBE_PREFIX}{uuid.uuid4().hex}"
        try:
            self._probe_client.put_object(Bucket=self.bucket, Key=key, Body=b"ok")
            self._probe_client.delete_object(Bucket=self.bucket, Key=key)
        except (BotoCoreError, ClientError) as exc:
            return (
                f"cannot be written ({describe(exc)}); check the bucket, and boto3's "
                "AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION"
            )
        return None

    def stored_before(self, cutoff: float) -> Iterator[str]:
        """Objects under the prefix last written (stored, or touched when reused) before cutoff."""
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=f"{self.prefix}sha256/"
        )
        for page in pages:
            for item in page.get("Contents", []):
                if item["LastModified"].timestamp() < cutoff:
                    yield item["Key"].rsplit("/", 1)[-1]

    def remove_if_before(self, sha256: str, cutoff: float) -> bool:
        """Delete the object unless an upload touched it since the sweep listed it."""
        key = self.key(sha256)
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if _code(exc) in MISSING:
                return False
            raise
        if head["LastModified"].timestamp() >= cutoff:
            return False
        self.client.delete_object(Bucket=self.bucket, Key=key)
        return True

    def _touch(self, key: str) -> None:
        # A copy onto itself renews LastModified: the retention sweep then leaves the object
        # to the job about to refer to it.
        self.client.copy_object(
            Bucket=self.bucket,
            Key=key,
            CopySource={"Bucket": self.bucket, "Key": key},
            MetadataDirective="REPLACE",
        )

    def _exists(self, key: str) -> bool:
        try:
            self.client.head_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if _code(exc) in MISSING:
                return False
            raise
        return True

    def _unavailable(self, done: str, exc: Exception) -> ArchiveUnavailable:
        reason = describe(exc)
        logger.error(
            "object store failed",
            extra={"event": "storage_error", "bucket": self.bucket, "error": str(exc)[:500]},
        )
        return ArchiveUnavailable(
            f"the object store cannot be {done} ({reason}); retry shortly, or an operator must "
            f"fix {SETTING} or the AWS_* settings",
            details={"setting": SETTING, "reason": reason},
        )


class ObjectReader(io.RawIOBase):
    """A ranged GET's body; a read that breaks is an OSError (EIO), as a failing disk's is."""

    def __init__(self, body):
        super().__init__()
        self._body = body

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        try:
            return self._body.read(None if size < 0 else size)
        except BotoCoreError as exc:
            raise OSError(errno.EIO, f"the object store's answer broke: {exc}") from exc

    def close(self) -> None:
        self._body.close()
        super().close()


def describe(exc: Exception) -> str:
    """A short, safe name for a storage error: the S3 error code or botocore's class."""
    if isinstance(exc, S3UploadFailedError) and isinstance(exc.__context__, ClientError):
        exc = exc.__context__  # boto3 raises it while handling the store's own answer
    if isinstance(exc, ClientError):
        return _code(exc) or "ClientError"
    return type(exc).__name__


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))
