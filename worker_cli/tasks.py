"""Your functions as tasks: the SDK's Worker registers them and runs them in the lease loop."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import os
import re
import sys
from collections.abc import Callable, Iterable

from worker_cli.handlers import ClaimedTask, Handler, TaskContext, load_handlers
from worker_cli.settings import WORKER_TOKEN_VARIABLE, coordinator_settings
from worker_cli.worker import LeaseLoop, serve
from worker_cli.worker_config import WorkerConfig, default_worker_id

# What the coordinator takes as a workload name: a copy of services/workloads.py's NAME and
# NAME_RULE, as worker_cli talks HTTP only (tests/unit/test_sdk_worker.py pins them equal).
TASK_NAME = re.compile(r"[a-z][a-z0-9_-]{0,62}")
TASK_NAME_RULE = "a slug: a-z, then up to 62 of a-z 0-9 _ -"
DEFAULT_APP_ATTRIBUTE = "worker"

TaskFunction = Callable[[object, TaskContext], object]


class AppNotFound(LookupError):
    """An --app that does not import, or names no Worker."""


class Worker:
    """Runs your functions as Chunkwise tasks: `@worker.task("name")`, then `worker.run()`."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        capacity: int | None = None,
        worker_id: str | None = None,
        wait_seconds: float | None = None,
        grace_seconds: float | None = None,
    ):
        # Read from the environment only when run: `chunkwise-worker --app` imports the module
        # holding this Worker first, and may bring the URL itself.
        self.url = url
        self.token = token
        self._settings = {
            "capacity": capacity,
            "worker_id": worker_id,
            "wait_seconds": wait_seconds,
            "grace_seconds": grace_seconds,
        }
        self._tasks: dict[str, Handler] = {}
        self._loop: LeaseLoop | None = None

    def task(self, name: str) -> Callable[[TaskFunction], TaskFunction]:
        """Register `fn(args, ctx)` (or an `async def`) as the function of workload `name`."""
        if not isinstance(name, str) or not TASK_NAME.fullmatch(name):
            raise ValueError(f"a task name is {TASK_NAME_RULE}, not {name!r}")
        if name in self._tasks:
            raise ValueError(f"a task named {name!r} is already registered")

        def register(fn: TaskFunction) -> TaskFunction:
            if not callable(fn):
                raise TypeError(f"@worker.task({name!r}) decorates a function, not {fn!r}")
            self._tasks[name] = _handler_of(fn)
            return fn

        return register

    @property
    def workloads(self) -> tuple[str, ...]:
        """The names of the registered tasks, in the order they were registered."""
        return tuple(self._tasks)

    def settings(self) -> dict:
        """The WorkerConfig fields this Worker sets: its tasks, and the options it was given."""
        given = {k: v for k, v in self._settings.items() if v is not None}
        return {"workloads": self.workloads, **given} if self._tasks else given

    def handlers_for(self, workloads: Iterable[str]) -> dict[str, Handler]:
        """The handler of each workload: this Worker's task, else a built-in or entry point."""
        others = [w for w in workloads if w not in self._tasks]
        return {**load_handlers(others), **{w: h for w, h in self._tasks.items() if w in workloads}}

    def run(self, *, burst: bool = False, max_tasks: int | None = None) -> int:
        """Claim and run this Worker's tasks as chunkwise-worker does; return its exit status."""
        # Until stopped, or with burst=True until none is left to claim (or max_tasks ran). The
        # exit status is 0, or 1 if the coordinator refused the worker.
        if not self._tasks:
            raise ValueError("no task registered: decorate a function with @worker.task(name)")
        url, token = coordinator_settings(self.url, self.token, WORKER_TOKEN_VARIABLE)
        settings = self.settings()
        settings.setdefault("worker_id", default_worker_id())
        config = WorkerConfig(**settings, burst=burst, max_tasks=max_tasks)
        return serve(url, token, config, dict(self._tasks), on_start=self._started)

    def stop(self) -> None:
        """Ask a running `run()` for a warm stop: no more claims, finish what is in flight."""
        if self._loop is not None:
            self._loop.request_stop("Worker.stop")

    def _started(self, loop: LeaseLoop) -> None:
        self._loop = loop


def _handler_of(fn: TaskFunction) -> Handler:
    """The lease loop's handler for a task function: called with the task's args and context."""
    if inspect.iscoroutinefunction(fn):
        # Each chunk runs on its own thread, so each gets its own event loop.
        def run_coroutine(task: ClaimedTask, context: TaskContext):
            return asyncio.run(fn(context.args, context))

        return run_coroutine

    def run_function(task: ClaimedTask, context: TaskContext):
        return fn(context.args, context)

    return run_function


def load_app(spec: str) -> Worker:
    """Import `module:attr` (attr defaults to `worker`) and return the Worker it names."""
    module_name, _, attribute = spec.partition(":")
    attribute = attribute or DEFAULT_APP_ATTRIBUTE
    if not module_name:
        raise AppNotFound(f"--app {spec!r}: give MODULE:ATTR, as in mymodule:worker")
    # As `python -m` and celery -A do: the module may sit in the directory the command runs in.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise AppNotFound(
            f"--app {spec!r}: cannot import {module_name}: {type(exc).__name__}: {exc}"
        ) from exc
    found = getattr(module, attribute, None)
    if found is None:
        raise AppNotFound(f"--app {spec!r}: module {module_name} has no attribute {attribute!r}")
    if not isinstance(found, Worker):
        raise AppNotFound(
            f"--app {spec!r}: {module_name}.{attribute} is a {type(found).__name__}, "
            "not a worker_cli.Worker"
        )
    if not found.workloads:
        raise AppNotFound(f"--app {spec!r}: {module_name}.{attribute} has no task registered")
    return found
