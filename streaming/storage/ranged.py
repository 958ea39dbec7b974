"""Byte-range GETs into a file: one stream, or many parts in parallel with a resume journal.

A large object is fetched as parallel ranged GETs, all pinned to the ETag seen first, into
``NAME.partial``; a journal ``NAME.partial.json`` records the finished parts, so a failed
attempt (or a later run) fetches only the missing ones while the object is unchanged.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import time
from typing import TYPE_CHECKING, Callable

from streaming.fileio import atomic_write, create_temp, preallocate, remove_quietly
from streaming.storage.errors import DiskFullError
from streaming.storage.meter import METER
from streaming.storage.objects import ObjectInfo, ObjectStore
from streaming.storage.retry import is_fatal
from streaming.storage.secrets import redact
from streaming.storage.verify import Check, WrongBytes, publish_verified
from streaming.storage.watchdog import Task, first_error, run_tasks

if TYPE_CHECKING:
    from streaming.coord.lock import LockFile

__all__ = ['PartialDownload', 'download_in_parts', 'read_range_into']


def _write_all(fd: int, data: bytes | memoryview, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def read_range_into(backend: ObjectStore, url: str, fd: int, start: int, end: int | None,
                    timeout: float, etag: str | None) -> Callable[[Task], ObjectInfo]:
    """A task body that writes bytes ``[start, end)`` of ``url`` at the same offsets of ``fd``.

    ``end`` None reads to the end of the object. The task reports progress on every chunk and
    stops writing once the watchdog cancels it; a body longer or shorter than asked for raises
    ``WrongBytes``. Returns what the GET said of the object.
    """

    def run(task: Task) -> ObjectInfo:
        sent = time.monotonic()
        response = backend.read(url, start, end, timeout=timeout, etag=etag)
        task.progress()
        offset = start
        METER.opened(sent)
        try:
            for chunk in response.chunks:
                task.progress()
                METER.received(len(chunk))
                with task.writing():
                    _write_all(fd, chunk, offset)
                offset += len(chunk)
                if end is not None and offset > end:
                    raise WrongBytes(f'the server sent more than the {end - start} bytes asked '
                                     f'for')
        finally:
            METER.closed()
            response.close()
        info = response.info
        expected = end if end is not None else info.size
        if expected is not None and offset != expected:
            raise WrongBytes(f'truncated body: got {offset - start} of {expected - start} bytes')
        return ObjectInfo(offset if end is None else info.size, info.etag)

    return run


class PartialDownload:
    """A large download in progress: ``path.partial`` plus a journal of its finished parts.

    The partial file is locked (``flock``, a ``coord.lock.LockFile``) while in use; a second
    process downloading the same file meanwhile gets a private temporary file instead and cannot
    resume.
    """

    def __init__(self, path: str, url: str, info: ObjectInfo, part_size: int,
                 resume: bool) -> None:
        self.url, self.info, self.part_size = url, info, part_size
        self.data = f'{path}.partial'
        self.fd, self._lock = self._open_locked(path)
        if self._lock is None:  # Another process is resuming it, or no flock here.
            resume = False
        self.resumable = resume
        self.journal = f'{self.data}.json'
        self.done: set[int] = set()
        try:
            if resume and info.etag and os.fstat(self.fd).st_size == info.size:
                self._load()
            if not self.done and os.fstat(self.fd).st_size:
                # Drop stale bytes of an unusable partial file. Skipped when the file is empty:
                # on ext4, closing a file truncated to zero flushes all its dirty pages at once.
                os.ftruncate(self.fd, 0)
            os.ftruncate(self.fd, info.size or 0)
            preallocate(self.fd, info.size)  # The holes the parts will fill.
        except BaseException:  # A full disk: not left open (and locked) until the process ends.
            self.close(keep=self.resumable)
            raise

    def _open_locked(self, path: str) -> tuple[int, LockFile | None]:
        """The partial file's descriptor and its lock.

        Without the lock (another process is resuming the file, or no flock on this platform),
        the descriptor of a private temporary file for an unresumable download, and None.
        """
        flags = os.O_RDWR | os.O_CREAT | getattr(os, 'O_NOFOLLOW', 0)
        try:
            from streaming.coord.lock import LockFile
        except ImportError:  # No flock on this platform: never share a partial file.
            return os.open(self.data, flags | getattr(os, 'O_CLOEXEC', 0), 0o644), None
        lock = LockFile(self.data, flags, 0o644)
        if lock.lock():
            return lock.fd, lock
        lock.close()
        fd, self.data = create_temp(path)
        return fd, None

    def _key(self) -> dict[str, object]:
        return {'url': redact(self.url), 'size': self.info.size, 'etag': self.info.etag,
                'part_size': self.part_size}

    def _load(self) -> None:
        try:
            with open(self.journal) as f:
                saved = json.load(f)
        except (OSError, ValueError):
            return
        if saved.get('key') == self._key():
            self.done = {int(i) for i in saved.get('done', [])}

    def save(self) -> None:
        """Record the finished parts (atomically: a crash leaves the old journal or the new)."""
        atomic_write(self.journal, json.dumps({'key': self._key(), 'done': sorted(self.done)}))

    def parts(self) -> list[tuple[int, int, int]]:
        """(index, start, end) of each part still to fetch."""
        size = self.info.size or 0
        count = (size + self.part_size - 1) // self.part_size
        return [(i, i * self.part_size, min(size, (i + 1) * self.part_size))
                for i in range(count) if i not in self.done]

    def close(self, keep: bool) -> None:
        """Close the file; unless ``keep``, remove it and its journal."""
        if self._lock is not None:
            self._lock.close()  # Unlocked first: a DataLoader worker forked meanwhile has a copy.
        elif self.fd >= 0:
            os.close(self.fd)
        self.fd, self._lock = -1, None
        if not keep:
            remove_quietly(self.data)
            remove_quietly(self.journal)


def _agrees(partial: PartialDownload, seen: ObjectInfo) -> None:
    """Check a part's answer against the object; the first ETag seen pins an unpinned one.

    Parts fetched without an ETag (no HEAD first) must all name the same one and the size
    expected, or the object changed (or is not what was expected) during the download.
    """
    info = partial.info
    if seen.size is not None and info.size is not None and seen.size != info.size:
        raise WrongBytes(f'the remote object has {seen.size} bytes, expected {info.size}')
    if seen.etag is None:
        return
    if info.etag is None:
        partial.info = ObjectInfo(info.size, seen.etag)
    elif seen.etag != info.etag:
        raise WrongBytes(f'the object changed during the download (ETag {info.etag} then '
                         f'{seen.etag})')


def download_in_parts(backend: ObjectStore, url: str, path: str, info: ObjectInfo,
                      timeout: float, check: Check | None, *, part_size: int, concurrency: int,
                      resume: bool) -> None:
    """Fetch ``url`` (described by ``info``) to ``path`` as parallel ranged GETs.

    Finished parts survive a failed attempt when ``resume``; wrong bytes, a vanished object or
    a fatal error discard them.
    """
    partial = PartialDownload(path, url, info, part_size, resume)
    keep = partial.resumable
    tasks: list[Task] = []
    try:
        have = len(partial.done) * part_size
        free = shutil.disk_usage(os.path.dirname(path) or '.').free
        if info.size is not None and free < info.size - have:
            raise DiskFullError(errno.ENOSPC, f'No space left to download {info.size} bytes to '
                                              f'{path} ({free} bytes free).')
        tasks = [Task(read_range_into(backend, url, partial.fd, start, end, timeout, info.etag),
                      f'part{i}') for i, start, end in partial.parts()]

        def done(task: Task) -> None:
            seen = task.result if isinstance(task.result, ObjectInfo) else ObjectInfo(None)
            _agrees(partial, seen)
            partial.done.add(int(task.label[4:]))
            if keep and partial.info.etag:  # A journal only for parts pinned to an ETag.
                partial.save()

        failed = run_tasks(tasks, timeout, max(1, concurrency), done)
        if failed:
            raise first_error(failed)
        for task in tasks:
            if isinstance(task.result, ObjectInfo):
                _agrees(partial, task.result)
        partial.close(keep=True)
        publish_verified(partial.data, path, info.size, check)
    except BaseException as error:
        if isinstance(error, (WrongBytes, FileNotFoundError)) or is_fatal(error):
            keep = False  # Wrong bytes, a vanished object or a full disk: start over.
        raise
    finally:
        for task in tasks:
            task.cancel()
        partial.close(keep=keep and os.path.exists(partial.data))
