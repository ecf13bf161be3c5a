"""What a handler's return value becomes: a result manifest, a chunk summary, or a value the
coordinator stores (issue 39's rule)."""

from __future__ import annotations

import json
import re

# A dict of exactly these keys names a result stored elsewhere; metrics may come with it.
MANIFEST_KEYS = frozenset({"result_uri", "result_sha256"})
# A NUL the JSON text escapes (an escaped backslash before "u0000" is no NUL): the coordinator
# stores no NUL in text, so such a value could never be accepted.
_ESCAPED_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


class ResultRefused(Exception):
    """A return value no coordinator would store: retrying the task cannot change that."""

    def __init__(self, code: str, message: str, *, details: dict | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details or {}


def result_body(returned: object, max_bytes: int | None) -> dict:
    """The result fields to send for a handler's return value, or ResultRefused."""
    # A manifest ({result_uri, result_sha256[, metrics]}) and a chunk summary ({summary, ...})
    # go as they are; anything else is a value for the coordinator to store, checked here to
    # be JSON within `max_bytes` (the claim's max_result_bytes; None: the coordinator checks).
    if isinstance(returned, dict) and ("summary" in returned or _is_manifest(returned)):
        return returned
    try:
        # Compact and unescaped, as the coordinator stores it: the size it will count, whatever
        # order the keys come in (the coordinator sorts them; the digest is its business).
        text = json.dumps(returned, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        size = len(text.encode())
    except (TypeError, ValueError, RecursionError) as exc:
        # UnicodeEncodeError, a lone surrogate, is a ValueError.
        raise ResultRefused(
            "result_not_json",
            f"the return value is not JSON: {type(exc).__name__}: {exc}"[:1000],
            details={"type": type(returned).__name__},
        ) from exc
    if _ESCAPED_NUL.search(text):
        raise ResultRefused("result_not_json", "the return value holds a NUL (\\u0000) in a string")
    if max_bytes is not None and size > max_bytes:
        raise ResultRefused(
            "result_too_large",
            f"the return value is {size} bytes of JSON; the coordinator stores at most "
            f"{max_bytes} (CHUNKWISE_MAX_RESULT_BYTES): store it elsewhere and return "
            "{result_uri, result_sha256}",
            details={"size": size, "limit": max_bytes},
        )
    return {"value": returned}


def _is_manifest(returned: dict) -> bool:
    return MANIFEST_KEYS <= returned.keys() <= MANIFEST_KEYS | {"metrics"}
