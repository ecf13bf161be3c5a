"""The exceptions services raise; app/errors.py maps each to one HTTP status."""

from __future__ import annotations


class ChunkwiseError(Exception):
    """Base of every business-rule failure; `code` is the stable machine-readable name."""

    code = "error"

    def __init__(self, message: str, *, code: str | None = None, details: dict | None = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.details = details or {}


class Unauthenticated(ChunkwiseError):
    """No valid bearer token."""

    code = "unauthenticated"


class Forbidden(ChunkwiseError):
    """The principal may not call this operation."""

    code = "forbidden"


class NotFound(ChunkwiseError):
    """The thing does not exist, or the caller may not know that it does."""

    code = "not_found"


class InvalidInput(ChunkwiseError):
    """Request values break a rule; `details["fields"]` names each bad field."""

    code = "invalid_input"

    @classmethod
    def field(cls, name: str, message: str) -> InvalidInput:
        """One bad field."""
        return cls(f"{name}: {message}", details={"fields": {name: [message]}})


class Conflict(ChunkwiseError):
    """The request contradicts the current state (idempotency_conflict, not_failed, ...)."""

    code = "conflict"


class LeaseLost(Conflict):
    """The caller's lease is gone: lease_lost, stale_attempt, task_cancelled or timed_out."""

    code = "lease_lost"


class PayloadTooLarge(ChunkwiseError):
    """The upload is larger than the configured limit."""

    code = "payload_too_large"


class QueueFull(ChunkwiseError):
    """Admitting the job would exceed the queued-chunk limit."""

    code = "queue_full"

    def __init__(self, message: str, *, retry_after: int, details: dict | None = None):
        super().__init__(message, details=details)
        self.retry_after = retry_after


class QuotaExceeded(QueueFull):
    """Admitting the job would exceed its owner's share of the workload (sql/0028)."""

    code = "user_quota_exceeded"


class Unavailable(ChunkwiseError):
    """The database is unreachable or too slow to answer in time."""

    code = "unavailable"


class ArchiveUnavailable(Unavailable):
    """This coordinator cannot reach an archived input now (input_not_here, storage_unavailable);
    a later try, or another coordinator, may."""

    code = "storage_unavailable"


class RangeNotSatisfiable(ChunkwiseError):
    """A Range header starts at or past the end of the input; `details["length"]` is its size."""

    code = "range_not_satisfiable"


class StorageFull(ChunkwiseError):
    """A storage directory has no space (or quota) left; `details` names its role, not its path."""

    code = "insufficient_storage"


class StorageUnavailable(ChunkwiseError):
    """A storage directory cannot be written: missing, read-only, refused, or not a directory."""

    code = "storage_unavailable"


class WaitRefused(Exception):
    """Every waiting place of the process is taken: answer now, and say when to ask again.

    Not a ChunkwiseError: the request is answered, only its wait is not. `answer` is what one
    immediate try found (a job watch's unchanged JobView; None for a claim that found nothing).
    """

    def __init__(self, retry_after: int, answer: object = None):
        super().__init__(f"no waiting place free; ask again in {retry_after} s")
        self.retry_after = retry_after
        self.answer = answer
