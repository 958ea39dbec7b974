"""The stall watchdog's kept threads (``storage.watchdog``): reused, never shared, never waited for.

Requests run on pooled threads instead of one new thread each. What must hold: a task never
waits for a thread (a stalled, abandoned task keeps its own and the others go on), a stalled
task still times out, a fatal error still cancels the rest, calls one after another reuse one
thread, idle threads exit, and a forked child starts with a pool of its own.
"""

from __future__ import annotations

import multiprocessing
import threading
import time

import pytest

from streaming.storage import watchdog
from streaming.storage.watchdog import Task, run_tasks, run_watched


def _wait_for(condition, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


def test_calls_one_after_another_reuse_one_thread() -> None:
    threads = {run_watched(lambda task: threading.get_ident(), 'get', 60.0) for _ in range(20)}
    # The thread is idle again before its caller learns the outcome, so the next call finds it.
    assert len(threads) == 1
    assert threading.get_ident() not in threads  # Never the caller's own thread.


def test_a_stalled_task_times_out_and_does_not_hold_up_other_downloads() -> None:
    release = threading.Event()
    stalled_thread: list[int] = []

    def stall(task: Task) -> None:
        stalled_thread.append(threading.get_ident())
        release.wait(60)

    outcome: dict[str, BaseException] = {}

    def stalled_download() -> None:
        try:
            run_watched(stall, 'get', 0.5)
        except BaseException as error:  # noqa: BLE001 - examined below.
            outcome['error'] = error

    caller = threading.Thread(target=stalled_download)
    caller.start()
    try:
        assert _wait_for(lambda: bool(stalled_thread))
        # While the stalled task holds its thread, other downloads run and finish.
        others = [run_watched(lambda task: threading.get_ident(), 'get', 60.0) for _ in range(5)]
        assert stalled_thread[0] not in others
        caller.join(60)
        assert not caller.is_alive()
        assert isinstance(outcome.get('error'), TimeoutError)
        assert 'no data received for 0.5s' in str(outcome['error'])
        # The abandoned thread is still stuck in its read: new tasks never go to it.
        assert stalled_thread[0] not in {run_watched(lambda task: threading.get_ident(), 'get',
                                                     60.0) for _ in range(5)}
    finally:
        release.set()


def test_a_fatal_error_cancels_the_tasks_in_flight() -> None:
    started = threading.Barrier(3, timeout=60)
    writes: list[str] = []
    release = threading.Event()

    def fails(task: Task) -> None:
        started.wait()
        raise PermissionError('denied')

    def slow(task: Task) -> None:
        started.wait()
        release.wait(60)
        try:
            with task.writing():
                writes.append(task.label)
        except watchdog.Cancelled:
            pass

    tasks = [Task(fails, 'a'), Task(slow, 'b'), Task(slow, 'c')]
    try:
        failed = run_tasks(tasks, 60.0, 3)
    finally:
        release.set()
    assert [t.label for t in failed] == ['a'] and isinstance(failed[0].error, PermissionError)
    assert all(t.cancelled for t in tasks[1:])
    assert _wait_for(lambda: watchdog.idle_threads() >= 2)
    assert writes == []  # Cancelled tasks never write, though their threads went on.


def test_idle_threads_exit(monkeypatch) -> None:
    monkeypatch.setattr(watchdog, 'IDLE_SECONDS', 0.05)
    # Wake every idle thread so that it waits with the short limit.
    tasks = [Task(lambda task: time.sleep(0.2), str(i)) for i in range(4)]
    assert run_tasks(tasks, 60.0, 4) == []
    assert _wait_for(lambda: watchdog.idle_threads() == 0)
    assert run_watched(lambda task: 42, 'get', 60.0) == 42  # A new thread when none is kept.


def _child_runs_a_task(queue) -> None:
    queue.put(run_watched(lambda task: 'child', 'get', 60.0))


@pytest.mark.skipif('fork' not in multiprocessing.get_all_start_methods(), reason='no fork')
def test_a_forked_child_starts_its_own_pool() -> None:
    assert run_watched(lambda task: 1, 'get', 60.0) == 1  # The parent has an idle thread now.
    assert watchdog.idle_threads() >= 1
    context = multiprocessing.get_context('fork')
    queue = context.Queue()
    child = context.Process(target=_child_runs_a_task, args=(queue,))
    child.start()
    try:
        # The parent's idle threads do not exist in the child: handed a task, it would hang.
        assert queue.get(timeout=60) == 'child'
    finally:
        child.join(60)
    assert child.exitcode == 0


_KILLED_CHILD = '''
import sys, threading
from streaming.storage import Backend, ObjectInfo, Response, download_file, register_backend

class Half(Backend):
    scheme = 'half'

    def stat(self, url, *, timeout):
        return ObjectInfo(2000, 'v1')

    def read(self, url, start=0, end=None, *, timeout, etag=None):
        def chunks():
            yield b'x' * 1000
            threading.Event().wait()  # Stalls with half the body written, until killed.
        return Response(ObjectInfo(2000, 'v1'), chunks())

register_backend('half', Half)
download_file('half://x', sys.argv[1], size=2000, retries=0, timeout=600)
'''


def test_a_killed_download_leaves_nothing_that_reads_as_the_file(tmp_path) -> None:
    import os
    import signal
    import subprocess
    import sys

    import streaming
    from streaming.fileio import TEMP_SUFFIX

    tree = os.path.dirname(os.path.dirname(os.path.abspath(streaming.__file__)))

    target = tmp_path / 'shard.mds'
    child = subprocess.Popen([sys.executable, '-c', _KILLED_CHILD, str(target)],
                             env={**os.environ, 'PYTHONPATH': tree})
    try:
        def half_written() -> bool:
            return any(os.path.getsize(tmp_path / name) >= 1000 for name in os.listdir(tmp_path))
        assert _wait_for(half_written, 120)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(60)
    assert not target.exists()
    leftovers = os.listdir(tmp_path)
    assert leftovers and all(name.endswith(TEMP_SUFFIX) and name.startswith('.shard.mds.')
                             for name in leftovers)


def test_an_inline_request_runs_in_the_callers_thread_with_the_same_errors() -> None:
    """``inline``: for requests whose sockets carry the timeout themselves. No pooled thread is
    used; an SDK's own timeout still becomes the TimeoutError a stall raises; other errors pass
    through unchanged."""

    class ReadTimeoutError(Exception):  # As an SDK names its socket timeout.
        pass

    def times_out(task: Task) -> None:
        raise ReadTimeoutError('Read timed out')

    def denied(task: Task) -> None:
        raise PermissionError('denied')

    assert run_watched(lambda task: threading.get_ident(), 'get', 60.0,
                       inline=True) == threading.get_ident()
    with pytest.raises(TimeoutError, match=r'no data received for 0.5s.*ReadTimeoutError'):
        run_watched(times_out, 'get', 0.5, inline=True)
    with pytest.raises(PermissionError, match='denied'):
        run_watched(denied, 'get', 0.5, inline=True)
