"""The Idempotency-Keys submit and enqueue derive from what they ask, so a re-run finds its job."""

from __future__ import annotations

import hashlib
import json

KEY_PREFIX = "cli-sha256-"
HASH_BLOCK_SIZE = 1024 * 1024


def default_idempotency_key(
    file_sha256: str,
    *,
    column: str,
    delimiter: str,
    chunks: int,
    priority: int,
    labels: dict[str, str],
    not_before: str | None = None,
) -> str:
    """A key naming the file's bytes and every parameter, so re-running a submit finds its job."""
    request = {
        "file_sha256": file_sha256,
        "column": column,
        "delimiter": delimiter,
        "chunks": chunks,
        "priority": priority,
        "labels": dict(sorted(labels.items())),
    }
    if not_before is not None:  # absent otherwise, so keys from before it stay the same
        request["not_before"] = not_before
    return key_naming(request)


def key_naming(request: dict) -> str:
    """An Idempotency-Key naming a request by the SHA-256 of its canonical JSON."""
    canonical = json.dumps(request, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return KEY_PREFIX + hashlib.sha256(canonical.encode()).hexdigest()


def file_sha256(path: str) -> str:
    """The SHA-256 of a file, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while block := file.read(HASH_BLOCK_SIZE):
            digest.update(block)
    return digest.hexdigest()
