"""Requests run in threads under a stall watchdog, so ``timeout`` holds whatever the SDK.

Each request is a ``Task``: a callable run in a thread of its own that calls
``task.progress()`` whenever data arrives. A task that shows no progress for ``timeout``
seconds is cancelled and fails with a TimeoutError; its thread is abandoned (it stops at its
next read, which the SDK's own socket timeout bounds) and, through ``task.writing()``, can never
write again.

The threads are kept: a task goes to an idle thread of the process's pool (``_Worker``), or to
a new one when none is idle, so a task never waits for a thread and an abandoned one holds
only its own. Starting and joining a thread per request cost ~0.4 ms of CPU per GET, a large
part of a small shard's download (docs/benchmarks.md, issue 31). A thread idle for
``IDLE_SECONDS`` exits; a forked child starts with no pool.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Iterator, TypeVar

from streaming.storage.retry import is_fatal

__all__ = ['IDLE_SECONDS', 'Cancelled', 'Task', 'first_error', 'idle_threads', 'run_tasks',
           'run_watched', 'stalled']

T = TypeVar('T')
IDLE_SECONDS = 30.0  # A pooled thread with nothing to run for this long exits.


class _Worker:
    """A kept thread: runs the jobs handed to it, one at a time, then waits idle for more."""

    def __init__(self) -> None:
        self.job: Callable[[], Callable[[], None]] | None = None
        self.wake = threading.Lock()  # Released by whoever hands this worker a job.
        self.wake.acquire()
        self.generation = _POOL_GENERATION
        self.thread = threading.Thread(target=self.loop, daemon=True,
                                       name=f'streaming-download-{next(_NAMES)}')

    def loop(self) -> None:
        while True:
            if not self.wake.acquire(timeout=IDLE_SECONDS):
                with _IDLE_LOCK:
                    if self in _IDLE:  # Nobody took it meanwhile: retire.
                        _IDLE.remove(self)
                        return
                self.wake.acquire()  # Taken just as it timed out: its job is coming.
            job, self.job = self.job, None
            report = job()  # type: ignore[misc]
            with _IDLE_LOCK:
                stale = self.generation != _POOL_GENERATION  # A forked parent's: not reused.
                if not stale:
                    _IDLE.append(self)
            # Idle before the outcome is known: a caller's next task finds this thread free.
            report()
            if stale:
                return


_IDLE: list[_Worker] = []  # Most recently idle last: the warmest thread is reused first.
_IDLE_LOCK = threading.Lock()
_POOL_GENERATION = 0
_NAMES = iter(range(1, 1 << 62))


def _submit(job: Callable[[], Callable[[], None]]) -> None:
    """Run ``job`` on an idle pooled thread, or on a new one if none is idle.

    ``job`` must not raise; it returns what to call once the thread is idle again (its report).
    """
    with _IDLE_LOCK:
        worker = _IDLE.pop() if _IDLE else None
    if worker is None:
        worker = _Worker()
        worker.job = job
        worker.wake.release()
        worker.thread.start()
        return
    worker.job = job
    worker.wake.release()


def idle_threads() -> int:
    """How many pooled threads are idle now (for tests and diagnostics)."""
    with _IDLE_LOCK:
        return len(_IDLE)


def _forget_pool_in_child() -> None:
    """A forked child has none of its parent's threads: start a new, empty pool."""
    global _IDLE_LOCK, _POOL_GENERATION
    _IDLE_LOCK = threading.Lock()
    _IDLE.clear()
    _POOL_GENERATION += 1


if hasattr(os, 'register_at_fork'):
    os.register_at_fork(after_in_child=_forget_pool_in_child)


class Cancelled(Exception):
    """The watchdog gave up on this request; its thread must stop writing."""


@dataclass(eq=False)
class Task:
    """One request run in its own thread, watched for progress."""

    run: Callable[[Task], object]
    label: str
    lock: threading.Lock = field(default_factory=threading.Lock)
    cancelled: bool = False
    finished: bool = False
    last: float = 0.0
    result: object = None
    error: BaseException | None = None

    def progress(self) -> None:
        """Data arrived: the stall clock starts again."""
        self.last = time.monotonic()

    def check(self) -> None:
        """Raise ``Cancelled`` if the watchdog gave up on this task."""
        if self.cancelled:
            raise Cancelled(self.label)

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """Hold while writing: once cancelled, a task never writes again."""
        with self.lock:
            self.check()
            yield

    def cancel(self) -> None:
        with self.lock:
            self.cancelled = True


def stalled(timeout: float) -> str:
    """The message of a request that received nothing for ``timeout`` seconds."""
    return f'no data received for {timeout:g}s (download_timeout)'


def _as_stall(error: BaseException, timeout: float) -> BaseException:
    """``error``, or, for an SDK's socket timeout, a TimeoutError that says what it means."""
    if 'Timeout' in type(error).__name__ and not isinstance(error, TimeoutError):
        return TimeoutError(f'{stalled(timeout)} ({type(error).__name__})')
    return error


def run_tasks(tasks: list[Task], timeout: float, concurrency: int,
              on_done: Callable[[Task], None] | None = None) -> list[Task]:
    """Run ``tasks`` on pooled threads, ``concurrency`` at a time; returns the failed ones.

    ``on_done(task)`` is called, in the calling thread, for each task that succeeded. A stalled
    task fails with a TimeoutError; a fatal error (``retry.is_fatal``) cancels every task.
    """
    pending = deque(tasks)
    active: list[Task] = []
    failed: list[Task] = []
    wake = threading.Condition()

    def body(task: Task) -> Callable[[], None]:
        result, failure = None, None
        try:
            result = task.run(task)
        except BaseException as error:  # noqa: BLE001 - reported to the coordinator.
            failure = _as_stall(error, timeout)

        def report() -> None:
            with wake:
                if not task.cancelled:  # An abandoned task's outcome is no longer anyone's.
                    task.result, task.error = result, failure
                    task.finished = True
                wake.notify_all()

        return report

    while pending or active:
        while pending and len(active) < concurrency:
            task = pending.popleft()
            task.progress()
            active.append(task)
            _submit(lambda task=task: body(task))
        with wake:
            if not any(t.finished for t in active):
                deadline = min(t.last for t in active) + timeout
                wake.wait(max(0.0, deadline - time.monotonic()) + 0.01)
        now = time.monotonic()
        fatal = None
        for task in list(active):
            if task.finished:
                active.remove(task)
                if task.error is None:
                    if on_done is not None:
                        on_done(task)
                elif not isinstance(task.error, Cancelled):
                    failed.append(task)
                    if is_fatal(task.error):
                        fatal = task.error
            elif now - task.last > timeout:
                task.cancel()
                active.remove(task)
                task.error = TimeoutError(stalled(timeout))
                failed.append(task)
        if fatal is not None:
            for task in active + list(pending):
                task.cancel()
            break
    return failed


def first_error(failed: list[Task]) -> BaseException:
    """The error to report for ``failed`` tasks: a fatal one if any, else the first."""
    for task in failed:
        if task.error is not None and is_fatal(task.error):
            return task.error
    return failed[0].error  # type: ignore[return-value]


def run_watched(run: Callable[[Task], T], label: str, timeout: float,
                inline: bool = False) -> T:
    """``run(task)`` in a watched thread; its result, or its error (TimeoutError if stalled).

    ``inline``: the request enforces ``timeout`` itself, on every operation of its socket (a
    backend's ``stalls_time_out``), so it runs in the calling thread with no watchdog: two
    thread hand-offs saved a request (docs/benchmarks.md, "tokens"). Its errors are the same
    (a socket timeout is the TimeoutError a stall raises); the stall clock is per socket read
    instead of per chunk.
    """
    task = Task(run, label)
    if inline:
        task.progress()
        try:
            return run(task)
        except BaseException as error:
            failure = _as_stall(error, timeout)
            if failure is error:
                raise
            raise failure from error
    try:
        failed = run_tasks([task], timeout, 1)
    finally:
        if not task.finished:
            task.cancel()
    if failed:
        raise failed[0].error  # type: ignore[misc]
    return task.result  # type: ignore[return-value]
