"""Chunkwise's Python SDK: a Client submits jobs and reads results, a Worker runs task functions."""

from worker_cli.async_jobs import AsyncClient
from worker_cli.client import CoordinatorError
from worker_cli.handlers import RetryLater
from worker_cli.jobs import Client, JobFailed, WaitTimedOut
from worker_cli.settings import InvalidSetting, MissingSetting
from worker_cli.tasks import Worker

__all__ = [
    "AsyncClient",
    "Client",
    "CoordinatorError",
    "InvalidSetting",
    "JobFailed",
    "MissingSetting",
    "RetryLater",
    "WaitTimedOut",
    "Worker",
]
