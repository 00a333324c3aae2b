"""The micro-batcher: requests that arrive within a few milliseconds of each other are computed
in one call.

Each job has a ``key`` (only jobs with equal keys can share a call: same timesteps, same kind of
mask) and a row count. A collector task takes the oldest waiting job and gathers more until
``max_wait_s`` after that job's arrival or until ``max_rows`` rows are gathered (a job that
would overfill the batch starts the next one), groups them by key and hands each group to
``run_group`` on the one worker thread, where every kernel call of the server happens (one at
a time, so a batch never competes with another for the cores).
While the worker computes, new jobs queue; they are collected at once when it is free, the
oldest having already waited. With batching off (``max_rows == 1``) every job is its own call.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from rnnkit.serve._errors import RequestError
from rnnkit.serve._metrics import Metrics


@dataclass
class Job:
    """One request's work: ``payload`` for ``run_group``; ``future`` gets its result."""

    key: Hashable
    rows: int
    payload: Any
    future: asyncio.Future[Any]
    arrived: float = field(default_factory=time.perf_counter)


Finish = Callable[[list[Any], list[Any]], Awaitable[list[Any]]]


class Batcher:
    """Gathers :class:`Job` s of one kind (``name``, for the metrics) into calls of
    ``run_group(list of payloads) -> list of results`` (a result may be an exception, which is
    raised to that job's caller alone).

    ``inline``: call ``run_group`` on the event loop's thread instead of the worker (for short
    calls whose kernels release the GIL: no hand-over between threads). ``finish(payloads,
    results) -> results``, when given, runs as its own task after each call (e.g. a commit on the
    worker thread) while the next batch is gathered and computed; the jobs are answered after it.
    """

    def __init__(self, name: str, run_group: Callable[[list[Any]], list[Any]], executor: ThreadPoolExecutor,
                 metrics: Metrics, *, max_wait_s: float, max_rows: int, max_queue_rows: int,
                 inline: bool = False, finish: Finish | None = None) -> None:
        self.name = name
        self.run_group = run_group
        self.executor = executor
        self.metrics = metrics
        self.max_wait_s = float(max_wait_s)
        self.max_rows = int(max_rows)
        self.max_queue_rows = int(max_queue_rows)
        self.queue: asyncio.Queue[Job] = asyncio.Queue()
        self.queued_rows = 0
        self._task: asyncio.Task[None] | None = None
        self._held: Job | None = None  # a job that would have overfilled the last batch
        self.inline = inline
        self.finish = finish
        self._finishing: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        """Start the collector on the running event loop."""
        self._task = asyncio.get_running_loop().create_task(self._collect())

    async def stop(self) -> None:
        """Stop the collector; jobs still queued are answered with a 503."""
        for t in list(self._finishing):
            await asyncio.gather(t, return_exceptions=True)
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        left = [] if self._held is None else [self._held]
        while not self.queue.empty():
            left.append(self.queue.get_nowait())
        for job in left:
            if not job.future.done():
                job.future.set_exception(RequestError(503, "shutting_down", "the server is stopping"))

    async def submit(self, key: Hashable, rows: int, payload: Any) -> Any:
        """Queue a job and wait for its result. A 429 when the queue already holds
        ``max_queue_rows`` rows."""
        if self.queued_rows + rows > self.max_queue_rows and self.queued_rows > 0:
            raise RequestError(429, "busy", f"the server's {self.name} queue is full ({self.queued_rows} "
                                            f"rows waiting, at most {self.max_queue_rows}); retry later")
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.queued_rows += rows
        self.queue.put_nowait(Job(key, rows, payload, fut))
        return await fut

    async def _collect(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if self._held is not None:
                first, self._held = self._held, None
            else:
                first = await self.queue.get()
            jobs = [first]
            rows = first.rows
            deadline = first.arrived + self.max_wait_s
            while self._held is None:
                while rows < self.max_rows and not self.queue.empty():
                    job = self.queue.get_nowait()
                    if rows + job.rows > self.max_rows:  # the next batch starts with it
                        self._held = job
                        break
                    jobs.append(job)
                    rows += job.rows
                left = deadline - time.perf_counter()
                if rows >= self.max_rows or left <= 0 or self._held is not None:
                    break
                await asyncio.sleep(left)
            self.queued_rows -= rows
            groups: dict[Hashable, list[Job]] = {}
            for job in jobs:
                groups.setdefault(job.key, []).append(job)
            for group in groups.values():
                live = [j for j in group if not j.future.cancelled()]
                if not live:
                    continue
                start = time.perf_counter()
                for j in live:
                    self.metrics.observe("rnnkit_serve_batch_wait_seconds", start - j.arrived, kind=self.name)
                payloads = [j.payload for j in live]
                try:
                    if self.inline:
                        results = self.run_group(payloads)
                    else:
                        results = await loop.run_in_executor(self.executor, self.run_group, payloads)
                except Exception as e:  # noqa: BLE001 - one failed call fails its own jobs only
                    results = [e] * len(live)
                self.metrics.observe("rnnkit_serve_batch_rows", sum(j.rows for j in live), kind=self.name)
                self.metrics.observe("rnnkit_serve_batch_requests", len(live), kind=self.name)
                self.metrics.observe("rnnkit_serve_compute_seconds", time.perf_counter() - start,
                                     kind=self.name)
                if self.finish is None:
                    _answer(live, results)
                else:
                    task = loop.create_task(self._finish(live, payloads, results))
                    self._finishing.add(task)
                    task.add_done_callback(self._finishing.discard)

    async def _finish(self, live: list[Job], payloads: list[Any], results: list[Any]) -> None:
        assert self.finish is not None
        try:
            results = await self.finish(payloads, results)
        except Exception as e:  # noqa: BLE001 - a failed commit fails the jobs of its batch only
            results = [e] * len(live)
        _answer(live, results)


def _answer(jobs: list[Job], results: list[Any]) -> None:
    for j, r in zip(jobs, results, strict=True):
        if j.future.done():
            continue
        if isinstance(r, BaseException):
            j.future.set_exception(r)
        else:
            j.future.set_result(r)


__all__ = ["Batcher", "Job"]
