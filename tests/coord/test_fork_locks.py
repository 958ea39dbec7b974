"""A process forked while a lock is held (or being probed) never keeps it after the holder lets go.

An ``flock`` belongs to the open file, which a forked child shares: a child that kept its copy of
a locked descriptor would hold the lock for as long as it lives (a DataLoader worker: the whole
run). A CI rehearsal hung on exactly that: a lock probe took the lock, another thread forked a
worker, the probe closed its descriptor, and the worker held the lock for ever.

Each test forks a real child at a chosen moment (in the window between two syscalls, through a
hook on the lock module's ``try_lock``), lets the holder go, and asserts that a fresh descriptor
(which contends for an ``flock`` as another process's would) takes the lock at once: a
non-blocking attempt, so nothing here depends on timing. The children only wait on a pipe until
told to exit; they run no test code.
"""

from __future__ import annotations

import os
import select
import threading
from typing import Callable

import pytest

from streaming.coord import DirectoryLock, FileLock, Lease
from streaming.coord import lock as lock_module
from streaming.coord.lock import is_locked
from streaming.errors import OutputLockedError
from streaming.storage.objects import ObjectInfo
from streaming.storage.ranged import PartialDownload

pytestmark = pytest.mark.skipif(not hasattr(os, 'fork'), reason='fork only')

WAIT = 60.0  # Seconds: room for a loaded machine; only reached if something is broken.


def _wait_readable(fd: int, what: str) -> None:
    readable, _, _ = select.select([fd], [], [], WAIT)
    assert readable, f'{what} did not happen within {WAIT:.0f} s'


def _reap(pid: int) -> int:
    """The exit code of child ``pid``, waited for without polling (killed after ``WAIT``).

    Without ``pidfd_open`` (Linux 5.3), a plain wait: the children exit as soon as told.
    """
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = -1
    if pidfd >= 0:
        try:
            if not select.select([pidfd], [], [], WAIT)[0]:
                os.kill(pid, 9)
        finally:
            os.close(pidfd)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


class Child:
    """A process forked now that runs ``before`` (if any), says so, then waits until told.

    ``fork`` may run in the thread that holds a lock or, as a DataLoader worker is started by
    whichever thread iterates, in another thread (``from_another_thread``).
    """

    def __init__(self, before: Callable[[], object] | None = None) -> None:
        self.before = before
        self.pid = -1
        self._said, self._told = os.pipe(), os.pipe()

    def fork(self) -> None:
        pid = os.fork()
        if pid == 0:  # The child: never returns into the test.
            code = 0
            try:
                if self.before is not None:
                    try:
                        self.before()
                    except Exception:  # noqa: BLE001 (a careless child: nothing to report)
                        pass
                os.write(self._said[1], b'.')
                os.read(self._told[0], 1)
            except BaseException:  # noqa: BLE001
                code = 3
            os._exit(code)
        self.pid = pid

    def fork_from_another_thread(self) -> None:
        thread = threading.Thread(target=self.fork)
        thread.start()
        thread.join(WAIT)

    def wait_ready(self) -> None:
        _wait_readable(self._said[0], 'the forked child starting')

    def end(self) -> int:
        """Tell the child to exit; its exit code (0 unless it failed)."""
        os.write(self._told[1], b'.')
        code = _reap(self.pid) if self.pid > 0 else 0
        for fd in (*self._said, *self._told):
            os.close(fd)
        return code


def fork_after_locking(monkeypatch, fork: Callable[[], None]) -> None:
    """Run ``fork`` right after the lock module's next successful ``try_lock``, once."""
    real = lock_module.try_lock
    done = []

    def try_lock_then_fork(fd: int, blocking: bool = False) -> bool:
        taken = real(fd, blocking)
        if taken and not done:
            done.append(True)
            fork()
        return taken

    monkeypatch.setattr(lock_module, 'try_lock', try_lock_then_fork)


# ---- the lock kinds: take, let go, and whether a newcomer could take it now -------------------

class Kind:
    def __init__(self, tmp_path) -> None:
        self.tmp_path = tmp_path

    def take(self) -> None: ...

    def let_go(self) -> None: ...

    def free(self) -> bool: ...


class FileLockKind(Kind):
    def take(self) -> None:
        self.path = str(self.tmp_path / 'node.lock')
        self.lock = FileLock(self.path)
        assert self.lock.acquire(blocking=False)

    def let_go(self) -> None:
        self.lock.release()

    def free(self) -> bool:
        other = FileLock(self.path)
        if not other.acquire(blocking=False):
            return False
        other.release()
        return True


class LeaseKind(Kind):
    def take(self) -> None:
        self.lease = Lease(str(self.tmp_path / 'downloader.lease'))
        assert self.lease.try_take()

    def let_go(self) -> None:
        self.lease.give_up()

    def free(self) -> bool:
        other = Lease(self.lease.path)
        taken = other.try_take()
        other.give_up()
        return taken


class DirectoryKind(Kind):
    def take(self) -> None:
        self.directory = str(self.tmp_path / 'out')
        os.mkdir(self.directory)
        self.lock = DirectoryLock('out')
        self.lock.acquire(self.directory)

    def let_go(self) -> None:
        self.lock.release()

    def free(self) -> bool:
        other = DirectoryLock('out')
        try:
            other.acquire(self.directory)
        except OutputLockedError:
            return False
        other.release()
        return True


class PartialKind(Kind):
    def take(self) -> None:
        self.target = str(self.tmp_path / 'shard.mds')
        self.partial = PartialDownload(self.target, 'file:///shard.mds', ObjectInfo(64, 'v1'),
                                       part_size=16, resume=True)
        assert self.partial.resumable

    def let_go(self) -> None:
        self.partial.close(keep=True)

    def free(self) -> bool:
        return not is_locked(f'{self.target}.partial')


KINDS = {'file_lock': FileLockKind, 'lease': LeaseKind, 'directory': DirectoryKind,
         'partial_download': PartialKind}


@pytest.mark.parametrize('child_lets_go', [False, True], ids=['child_idle', 'child_lets_go'])
@pytest.mark.parametrize('forker', ['holder', 'another_thread'])
@pytest.mark.parametrize('kind', sorted(KINDS))
def test_a_child_forked_while_a_lock_is_held_neither_keeps_nor_frees_it(
        tmp_path, kind, forker, child_lets_go) -> None:
    """The child idles, or lets go too (as a careless child might): the parent still holds the
    lock. Then the parent lets go, and the lock is free at once although the child lives on."""
    lock = KINDS[kind](tmp_path)
    lock.take()
    child = Child(before=lock.let_go if child_lets_go else None)
    try:
        child.fork() if forker == 'holder' else child.fork_from_another_thread()
        child.wait_ready()
        assert not lock.free(), 'the forked child let go of its parent\'s lock'
        lock.let_go()
        assert lock.free(), 'the forked child kept the lock after its parent let go'
    finally:
        assert child.end() == 0


PROBES = {'held': lambda path: FileLock(path).held(),
          'wait_free': lambda path: FileLock(path).wait_free(),
          'is_locked': is_locked}


@pytest.mark.parametrize('probe', sorted(PROBES))
def test_a_child_forked_while_a_probe_holds_the_lock_does_not_keep_it(tmp_path, monkeypatch,
                                                                      probe) -> None:
    """The CI hang (fixed in d0a9c8c): the probe locks, another thread forks, the probe ends."""
    path = str(tmp_path / 'epoch.lock')
    open(path, 'w').close()
    child = Child()
    fork_after_locking(monkeypatch, child.fork_from_another_thread)
    try:
        PROBES[probe](path)
        monkeypatch.undo()
        assert child.pid > 0, 'the probe never took the lock'
        child.wait_ready()
        contender = FileLock(path)
        assert contender.acquire(blocking=False), 'the child forked during the probe kept it'
        contender.release()
    finally:
        assert child.end() == 0


TAKERS = {'file_lock': lambda path: FileLock(path).acquire(),
          'lease': lambda path: Lease(path).try_take()}


@pytest.mark.parametrize('taker', sorted(TAKERS))
def test_a_child_forked_as_the_lock_is_taken_does_not_keep_it_when_the_holder_dies(
        tmp_path, monkeypatch, taker) -> None:
    """Another thread forks right after the kernel granted the lock, before the taker recorded
    it; the taker's process then dies holding it. The kernel frees the lock of a dead process,
    unless a child of it still holds a copy: that child must have dropped it at its fork."""
    path = str(tmp_path / 'role.lock')
    grandchild = Child()
    fork_after_locking(monkeypatch, grandchild.fork_from_another_thread)
    holder = os.fork()
    if holder == 0:  # Takes the lock (forking the grandchild meanwhile), then dies with it.
        code = 4
        try:
            code = 0 if TAKERS[taker](path) and grandchild.pid > 0 else 5
        finally:
            os._exit(code)
    monkeypatch.undo()
    try:
        assert _reap(holder) == 0, 'the holder did not take the lock and fork'
        _wait_readable(grandchild._said[0], 'the grandchild starting')
        contender = FileLock(path)
        assert contender.acquire(blocking=False), 'the grandchild kept the dead holder\'s lock'
        contender.release()
    finally:
        os.write(grandchild._told[1], b'.')  # Not ours to reap: the holder was its parent.
        for fd in (*grandchild._said, *grandchild._told):
            os.close(fd)
