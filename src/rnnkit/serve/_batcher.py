"""The micro-batcher: requests that arrive within a few milliseconds of each other are computed
in one call.

Each job has a ``key`` (only jobs with equal keys can share a call: same timesteps, same kind of
mask) and a row count. A collector task takes the oldest waiting job and gathers more until
``max_wait_s`` after that job's arrival or until ``max_rows`` rows are gathered (a job that
would overfill the batch starts the next one), groups them by key and hands each group to
``run_group``. While a call runs, new jobs queue; they are collected at once when it is done,
the oldest having already waited. With batching off (``max_rows == 1``) every job is its own
call.

A job still waiting in the queue ``timeout_s`` after its arrival is answered with a 503 and never
computed; a job that has reached a call always runs to its end (so a stream step is either
applied and answered, or not applied at all, when its caller is told it timed out).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from rnnkit.serve._errors import RequestError
from rnnkit.serve._metrics import Metrics

Finish = Callable[[list[Any], list[Any]], Awaitable[list[Any]]]


@dataclass
class Job:
    """One request's work: ``payload`` for ``run_group``; ``future`` gets its result."""

    key: Hashable
    rows: int
    payload: Any
    future: asyncio.Future[Any]
    arrived: float = field(default_factory=time.perf_counter)


class Batcher:
    """Gathers :class:`Job` s of one kind (``name``, for the metrics) into calls of
    ``run_group(list of payloads) -> list of results`` (a result may be an exception, which is
    raised to that job's caller alone).

    ``inline``: call ``run_group`` on the event loop's thread instead of the worker thread of
    ``executor`` (for short calls whose kernels release the GIL: no hand-over between threads).
    ``finish(payloads, results) -> results``, when given, runs as its own task after each call
    (e.g. a commit on the worker thread) while the next batch is gathered and computed; the jobs
    are answered after it, in the order of their calls.
    """

    def __init__(self, name: str, run_group: Callable[[list[Any]], list[Any]], executor: ThreadPoolExecutor,
                 metrics: Metrics, *, max_wait_s: float, max_rows: int, max_queue_rows: int,
                 timeout_s: float = 30.0, inline: bool = False, finish: Finish | None = None) -> None:
        self.name = name
        self.run_group = run_group
        self.executor = executor
        self.metrics = metrics
        self.max_wait_s = float(max_wait_s)
        self.max_rows = int(max_rows)
        self.max_queue_rows = int(max_queue_rows)
        self.timeout_s = float(timeout_s)
        self.inline = inline
        self.finish = finish
        self.pending: deque[Job] = deque()
        self.queued_rows = 0
        self._wake: asyncio.Event | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._finishing: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        """Start the collector (and the timeout sweeper) on the running event loop."""
        loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._tasks = [loop.create_task(self._collect()), loop.create_task(self._sweep())]

    async def stop(self) -> None:
        """Stop collecting; calls under way finish, jobs still queued are answered with a 503."""
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.gather(*list(self._finishing), return_exceptions=True)
        while self.pending:
            job = self.pending.popleft()
            if not job.future.done():
                job.future.set_exception(RequestError(503, "shutting_down", "the server is stopping"))

    def submit(self, key: Hashable, rows: int, payload: Any) -> asyncio.Future[Any]:
        """Queue a job; its future gets the result. A 429 when the queue already holds
        ``max_queue_rows`` rows."""
        if self.queued_rows + rows > self.max_queue_rows and self.queued_rows > 0:
            raise RequestError(429, "busy", f"the server's {self.name} queue is full ({self.queued_rows} "
                                            f"rows waiting, at most {self.max_queue_rows}); retry later")
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending.append(Job(key, rows, payload, fut))
        self.queued_rows += rows
        assert self._wake is not None, "Batcher.start() was not called"
        self._wake.set()
        return fut

    async def _sweep(self) -> None:
        period = min(max(self.timeout_s / 4.0, 0.01), 0.25)
        while True:
            await asyncio.sleep(period)
            limit = time.perf_counter() - self.timeout_s
            for job in self.pending:  # oldest first
                if job.arrived > limit:
                    break
                self._expire(job)

    def _expire(self, job: Job) -> None:
        if not job.future.done():
            job.future.set_exception(RequestError(
                503, "timeout", f"not computed within {self.timeout_s} s (the server is overloaded); "
                                f"nothing was applied, retry later"))

    def _take(self) -> Job | None:
        """The oldest job still to compute; one past its time is answered 503 here (with calls on
        the event loop's thread, the sweeper may not have run since it expired)."""
        limit = time.perf_counter() - self.timeout_s
        while self.pending:
            job = self.pending.popleft()
            self.queued_rows -= job.rows
            if job.arrived <= limit:
                self._expire(job)
            if not job.future.done():
                return job
        return None

    async def _collect(self) -> None:
        assert self._wake is not None
        while True:
            first = self._take()
            if first is None:
                self._wake.clear()
                await self._wake.wait()
                continue
            jobs, rows = [first], first.rows
            deadline = first.arrived + self.max_wait_s
            while rows < self.max_rows:
                while self.pending and rows < self.max_rows:
                    if rows + self.pending[0].rows > self.max_rows:  # it starts the next batch
                        break
                    job = self._take()
                    if job is not None:
                        jobs.append(job)
                        rows += job.rows
                left = deadline - time.perf_counter()
                if left <= 0 or (self.pending and rows + self.pending[0].rows > self.max_rows):
                    break
                await asyncio.sleep(left)
            groups: dict[Hashable, list[Job]] = {}
            for job in jobs:
                groups.setdefault(job.key, []).append(job)
            for group in groups.values():
                await self._call([j for j in group if not j.future.done()])

    async def _call(self, live: list[Job]) -> None:
        if not live:
            return
        start = time.perf_counter()
        self.metrics.observe_many("rnnkit_serve_batch_wait_seconds", [start - j.arrived for j in live],
                                  kind=self.name)
        payloads = [j.payload for j in live]
        try:
            if self.inline:
                results = self.run_group(payloads)
            else:
                results = await asyncio.get_running_loop().run_in_executor(self.executor, self.run_group,
                                                                           payloads)
        except Exception as e:  # noqa: BLE001 - one failed call fails its own jobs only
            results = [e] * len(live)
        self.metrics.observe("rnnkit_serve_batch_rows", sum(j.rows for j in live), kind=self.name)
        self.metrics.observe("rnnkit_serve_batch_requests", len(live), kind=self.name)
        self.metrics.observe("rnnkit_serve_compute_seconds", time.perf_counter() - start, kind=self.name)
        if self.finish is None:
            _answer(live, results)
            return
        task = asyncio.get_running_loop().create_task(self._finish(live, payloads, results))
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
