"""Requests run in threads under a stall watchdog, so ``timeout`` holds whatever the SDK.

Each request is a ``Task``: a callable run in its own thread that calls ``task.progress()``
whenever data arrives. A task that shows no progress for ``timeout`` seconds is cancelled and
fails with a TimeoutError; its thread is abandoned (it stops at its next read, which the SDK's
own socket timeout bounds) and, through ``task.writing()``, can never write again.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Iterator, TypeVar

from streaming.storage.retry import is_fatal

__all__ = ['Cancelled', 'Task', 'first_error', 'run_tasks', 'run_watched', 'stalled']

T = TypeVar('T')


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


def run_tasks(tasks: list[Task], timeout: float, concurrency: int,
              on_done: Callable[[Task], None] | None = None) -> list[Task]:
    """Run ``tasks`` in threads, ``concurrency`` at a time; returns the failed ones.

    ``on_done(task)`` is called, in the calling thread, for each task that succeeded. A stalled
    task fails with a TimeoutError; a fatal error (``retry.is_fatal``) cancels every task.
    """
    pending = deque(tasks)
    active: list[Task] = []
    failed: list[Task] = []
    wake = threading.Condition()

    def body(task: Task) -> None:
        result, failure = None, None
        try:
            result = task.run(task)
        except BaseException as error:  # noqa: BLE001 - reported to the coordinator.
            failure = error
            if 'Timeout' in type(error).__name__ and not isinstance(error, TimeoutError):
                # An SDK's socket timeout: say what it means, whatever the SDK calls it.
                failure = TimeoutError(f'{stalled(timeout)} ({type(error).__name__})')
        with wake:
            if not task.cancelled:  # An abandoned task's outcome is no longer anyone's.
                task.result, task.error = result, failure
                task.finished = True
            wake.notify_all()

    while pending or active:
        while pending and len(active) < concurrency:
            task = pending.popleft()
            task.progress()
            active.append(task)
            threading.Thread(target=body, args=(task,), daemon=True,
                             name=f'download:{task.label}').start()
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


def run_watched(run: Callable[[Task], T], label: str, timeout: float) -> T:
    """``run(task)`` in a watched thread; its result, or its error (TimeoutError if stalled)."""
    task = Task(run, label)
    try:
        failed = run_tasks([task], timeout, 1)
    finally:
        if not task.finished:
            task.cancel()
    if failed:
        raise failed[0].error  # type: ignore[misc]
    return task.result  # type: ignore[return-value]
