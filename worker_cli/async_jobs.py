"""The SDK's AsyncClient: the Client's calls for asyncio code, each run on a worker thread."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from worker_cli.jobs import Client


class AsyncClient:
    """Client's submit, job, wait and results as coroutines; the protocol stays in Client."""

    def __init__(self, url: str | None = None, token: str | None = None, **options):
        self.client = Client(url, token, **options)

    async def submit(self, workload: str, args_list: Iterable[object], **options) -> dict:
        """Client.submit, without blocking the event loop."""
        # Made a list here: a generator must not be drained on another thread.
        return await asyncio.to_thread(self.client.submit, workload, list(args_list), **options)

    async def job(self, job_id: str) -> dict:
        """Client.job, without blocking the event loop."""
        return await asyncio.to_thread(self.client.job, job_id)

    async def wait(self, job_id: str, timeout: float | None = None) -> dict:
        """Client.wait, without blocking the event loop (a long poll holds one thread)."""
        return await asyncio.to_thread(self.client.wait, job_id, timeout)

    async def results(self, job_id: str) -> list:
        """Client.results, without blocking the event loop."""
        return await asyncio.to_thread(self.client.results, job_id)

    async def close(self) -> None:
        """Close the pooled connections."""
        self.client.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
