"""Trustworthy downloads, shared by every backend.

``download_file`` turns a backend's raw, single-attempt ``read``/``stat`` into a download that

- is atomic: bytes go to a temporary name in the destination directory and are renamed into
  place only once complete and checked, so the final path never holds a partial file;
- retries ``retries`` times with exponential backoff and jitter, honouring Retry-After on
  429/503, and re-downloads when the size or the checksum (``check``) is wrong;
- enforces ``timeout`` on every backend: a watchdog fails any request that receives no data for
  ``timeout`` seconds (connecting, waiting for headers, or a stalled body), whatever the SDK;
- fetches large objects as parallel ranged GETs (``part_size``, ``concurrency``) pinned to one
  ETag, and resumes a partially downloaded large file from a journal of finished parts;
- fails with one clear error naming the URL, the attempts and the last cause, and maps a full
  disk to ``DiskFullError`` without leaving anything partial behind.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import random
import shutil
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Iterator

from streaming.storage.errors import (
    CorruptDownloadError,
    DiskFullError,
    DownloadError,
    MissingDependencyError,
    TransientError,
)
from streaming.storage.registry import Backend, ObjectInfo, get_backend
from streaming.storage.secrets import redact

__all__ = ['DownloadConfig', 'download_file', 'fetch_bytes', 'hash_check']

logger = logging.getLogger(__name__)

_DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


def _env_bytes(name: str, default: int) -> int:
    value = os.environ.get(name)
    if not value:
        return default
    from streaming.util import bytes_to_int
    parsed = bytes_to_int(value)
    if parsed <= 0:
        raise ValueError(f'{name} must be a positive byte count, got {value!r}.')
    return parsed


def _env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    return float(value) if value else default


@dataclass(frozen=True)
class DownloadConfig:
    """Tuning of the download layer; ``from_env`` reads the ``STREAMING_DOWNLOAD_*`` variables.

    ``part_size`` / ``concurrency``: ranged GETs for objects above ``ranged_threshold`` (default
    twice the part size). ``backoff`` is the first retry delay in seconds; later ones double up to
    ``backoff_max``, each scaled by a random factor in [0.5, 1]. ``chunk_size`` is the read size
    and so the granularity of the progress watchdog.
    """

    part_size: int = 16 << 20
    concurrency: int = 8
    ranged_threshold: int | None = None
    backoff: float = 0.5
    backoff_max: float = 20.0
    chunk_size: int = 256 << 10
    resume: bool = True

    @property
    def threshold(self) -> int:
        return self.ranged_threshold if self.ranged_threshold is not None else 2 * self.part_size

    @classmethod
    def from_env(cls) -> DownloadConfig:
        default = cls()
        threshold = os.environ.get('STREAMING_DOWNLOAD_RANGED_THRESHOLD')
        return cls(
            part_size=_env_bytes('STREAMING_DOWNLOAD_PART_SIZE', default.part_size),
            concurrency=int(_env_float('STREAMING_DOWNLOAD_CONCURRENCY', default.concurrency)),
            ranged_threshold=_env_bytes('STREAMING_DOWNLOAD_RANGED_THRESHOLD', 0)
            if threshold else None,
            backoff=_env_float('STREAMING_DOWNLOAD_BACKOFF', default.backoff),
            backoff_max=_env_float('STREAMING_DOWNLOAD_BACKOFF_MAX', default.backoff_max),
            resume=os.environ.get('STREAMING_DOWNLOAD_RESUME', '1') not in ('0', 'false'),
        )


class _Corrupt(Exception):
    """The bytes arrived but are wrong (size or checksum): retry, then CorruptDownloadError."""


class _Cancelled(Exception):
    """The watchdog gave up on this request; its thread must stop writing."""


def _is_fatal(error: BaseException) -> bool:
    """Errors that another attempt cannot fix."""
    if isinstance(error, TransientError):
        return False
    if isinstance(error, (FileNotFoundError, PermissionError, DiskFullError, NotImplementedError,
                          MissingDependencyError, ImportError, ValueError, TypeError)):
        return True
    return isinstance(error, OSError) and error.errno in _DISK_ERRNOS


def _disk_error(error: OSError, path: str) -> DiskFullError:
    free = shutil.disk_usage(os.path.dirname(path) or '.').free
    return DiskFullError(error.errno or errno.ENOSPC,
                         f'No space left to download to {path} ({free} bytes free): '
                         f'{os.strerror(error.errno or errno.ENOSPC)}')


def _describe(error: BaseException) -> str:
    text = str(error) or repr(error)
    return redact(f'{type(error).__name__}: {text}' if not isinstance(error, _Corrupt) else text)


# ---- the watchdog ---------------------------------------------------------------------------
@dataclass(eq=False)
class _Task:
    """One request run in its own thread, watched for progress."""

    run: Callable[[_Task], object]
    label: str
    lock: threading.Lock = field(default_factory=threading.Lock)
    cancelled: bool = False
    finished: bool = False
    last: float = 0.0
    result: object = None
    error: BaseException | None = None

    def progress(self) -> None:
        self.last = time.monotonic()

    def check(self) -> None:
        if self.cancelled:
            raise _Cancelled(self.label)

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """Hold while writing: once cancelled, a task never writes again."""
        with self.lock:
            self.check()
            yield

    def cancel(self) -> None:
        with self.lock:
            self.cancelled = True


def _stalled(timeout: float) -> str:
    return f'no data received for {timeout:g}s (download_timeout)'


def _run_tasks(tasks: list[_Task], timeout: float, concurrency: int,
               on_done: Callable[[_Task], None] | None = None) -> list[_Task]:
    """Run ``tasks`` in threads, ``concurrency`` at a time; returns the failed ones.

    A task that shows no progress for ``timeout`` seconds is cancelled and fails with a
    TimeoutError; its thread is abandoned (it stops at its next read, which the SDK's own socket
    timeout bounds) and can no longer write. A fatal error cancels every task.
    """
    pending = deque(tasks)
    active: list[_Task] = []
    failed: list[_Task] = []
    wake = threading.Condition()

    def body(task: _Task) -> None:
        result, failure = None, None
        try:
            result = task.run(task)
        except BaseException as error:  # noqa: BLE001 - reported to the coordinator.
            failure = error
            if 'Timeout' in type(error).__name__ and not isinstance(error, TimeoutError):
                # An SDK's socket timeout: say what it means, whatever the SDK calls it.
                failure = TimeoutError(f'{_stalled(timeout)} ({type(error).__name__})')
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
                elif not isinstance(task.error, _Cancelled):
                    failed.append(task)
                    if _is_fatal(task.error):
                        fatal = task.error
            elif now - task.last > timeout:
                task.cancel()
                active.remove(task)
                task.error = TimeoutError(_stalled(timeout))
                failed.append(task)
        if fatal is not None:
            for task in active + list(pending):
                task.cancel()
            break
    return failed


def _first_error(failed: list[_Task]) -> BaseException:
    for task in failed:
        if task.error is not None and _is_fatal(task.error):
            return task.error
    return failed[0].error  # type: ignore[return-value]


# ---- one attempt ----------------------------------------------------------------------------
def _stat(backend: Backend, url: str, timeout: float) -> ObjectInfo:
    task = _Task(lambda t: backend.stat(url, timeout=timeout), 'stat')
    failed = _run_tasks([task], timeout, 1)
    if failed:
        raise failed[0].error  # type: ignore[misc]
    return task.result  # type: ignore[return-value]


def _write_all(fd: int, data: bytes | memoryview, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def _get_range(backend: Backend, url: str, fd: int, start: int, end: int | None,
               timeout: float, etag: str | None) -> Callable[[_Task], ObjectInfo]:
    """A task body that writes bytes ``[start, end)`` of ``url`` at the same offsets of ``fd``."""

    def run(task: _Task) -> ObjectInfo:
        response = backend.read(url, start, end, timeout=timeout, etag=etag)
        task.progress()
        offset = start
        try:
            for chunk in response.chunks:
                task.progress()
                with task.writing():
                    _write_all(fd, chunk, offset)
                offset += len(chunk)
                if end is not None and offset > end:
                    raise _Corrupt(f'the server sent more than the {end - start} bytes asked for')
        finally:
            close = getattr(response.chunks, 'close', None)
            if close is not None:
                close()
        info = response.info
        expected = (end if end is not None else info.size)
        if expected is not None and offset != expected:
            raise _Corrupt(f'truncated body: got {offset - start} of {expected - start} bytes')
        return ObjectInfo(offset if end is None else info.size, info.etag)

    return run


def _finish(tmp: str, path: str, size: int | None, check: Callable[[str], str | None] | None,
            ) -> None:
    got = os.path.getsize(tmp)
    if size is not None and got != size:
        raise _Corrupt(f'got {got} bytes, expected {size}')
    problem = check(tmp) if check is not None else None
    if problem:
        raise _Corrupt(problem)
    os.replace(tmp, path)


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)


def _single(backend: Backend, url: str, path: str, size: int | None, timeout: float,
            check: Callable[[str], str | None] | None) -> None:
    """One streamed GET into a unique temporary file, then check and rename."""
    tmp = f'{path}.{uuid.uuid4().hex[:12]}.tmp'
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        task = _Task(_get_range(backend, url, fd, 0, None, timeout, None), 'get')
        failed = _run_tasks([task], timeout, 1)
        if failed:
            raise failed[0].error  # type: ignore[misc]
        os.close(fd)
        fd = -1
        _finish(tmp, path, size, check)
    finally:
        if fd >= 0:
            task.cancel()
            os.close(fd)
        _remove(tmp)


def _whole(backend: Backend, url: str, path: str, size: int | None, timeout: float,
           check: Callable[[str], str | None] | None) -> None:
    """A backend that only downloads whole files: its ``download`` into a temporary file."""
    tmp = f'{path}.{uuid.uuid4().hex[:12]}.tmp'
    try:
        task = _Task(lambda t: backend.download(url, tmp, timeout), 'download')
        failed = _run_tasks([task], timeout if timeout else 60.0, 1)
        if failed:
            raise failed[0].error  # type: ignore[misc]
        _finish(tmp, path, size, check)
    finally:
        _remove(tmp)


class _Partial:
    """A large download in progress: ``path.partial`` plus a journal of finished parts."""

    def __init__(self, path: str, url: str, info: ObjectInfo, part_size: int,
                 resume: bool) -> None:
        self.url, self.info, self.part_size = url, info, part_size
        self.data = f'{path}.partial'
        self.fd = os.open(self.data, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            import fcntl
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            # Another process is resuming this file: do our own, unresumable download.
            os.close(self.fd)
            self.data = f'{path}.{uuid.uuid4().hex[:12]}.partial'
            self.fd = os.open(self.data, os.O_RDWR | os.O_CREAT, 0o644)
            resume = False
        except ImportError:  # No flock on this platform: never share a partial file.
            resume = False
        self.resumable = resume
        self.journal = f'{self.data}.json'
        self.done: set[int] = set()
        if resume and info.etag and os.fstat(self.fd).st_size == info.size:
            self._load()
        if not self.done:
            os.ftruncate(self.fd, 0)
        os.ftruncate(self.fd, info.size or 0)

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
        tmp = f'{self.journal}.{uuid.uuid4().hex[:8]}'
        with open(tmp, 'w') as f:
            json.dump({'key': self._key(), 'done': sorted(self.done)}, f)
        os.replace(tmp, self.journal)

    def parts(self) -> list[tuple[int, int, int]]:
        size = self.info.size or 0
        count = (size + self.part_size - 1) // self.part_size
        return [(i, i * self.part_size, min(size, (i + 1) * self.part_size))
                for i in range(count) if i not in self.done]

    def close(self, keep: bool) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if not keep:
            _remove(self.data)
            _remove(self.journal)


def _ranged(backend: Backend, url: str, path: str, info: ObjectInfo, timeout: float,
            check: Callable[[str], str | None] | None, config: DownloadConfig,
            ) -> None:
    """Parallel ranged GETs into ``path.partial``; finished parts survive a failed attempt."""
    partial = _Partial(path, url, info, config.part_size, config.resume)
    keep = partial.resumable
    tasks: list[_Task] = []
    try:
        have = len(partial.done) * config.part_size
        free = shutil.disk_usage(os.path.dirname(path) or '.').free
        if info.size is not None and free < info.size - have:
            raise DiskFullError(errno.ENOSPC, f'No space left to download {info.size} bytes to '
                                              f'{path} ({free} bytes free).')
        tasks = [_Task(_get_range(backend, url, partial.fd, start, end, timeout, info.etag),
                       f'part{i}') for i, start, end in partial.parts()]

        def done(task: _Task) -> None:
            partial.done.add(int(task.label[4:]))
            if keep:
                partial.save()

        failed = _run_tasks(tasks, timeout, max(1, config.concurrency), done)
        if failed:
            raise _first_error(failed)
        partial.close(keep=True)
        _finish(partial.data, path, info.size, check)
    except BaseException as error:
        if isinstance(error, (_Corrupt, FileNotFoundError)) or _is_fatal(error):
            keep = False  # Wrong bytes, a vanished object or a full disk: start over.
        raise
    finally:
        for task in tasks:
            task.cancel()
        partial.close(keep=keep and os.path.exists(partial.data))


def _attempt(backend: Backend, url: str, path: str, size: int | None, timeout: float,
             check: Callable[[str], str | None] | None, config: DownloadConfig,
             whole: bool) -> None:
    if whole:
        _whole(backend, url, path, size, timeout, check)
        return
    if size is not None and size <= config.threshold:
        _single(backend, url, path, size, timeout, check)
        return
    info = _stat(backend, url, timeout)
    if size is not None and info.size is not None and info.size != size:
        raise _Corrupt(f'the remote object has {info.size} bytes, expected {size}')
    if info.size is None or info.size <= config.threshold:
        _single(backend, url, path, info.size, timeout, check)
    else:
        _ranged(backend, url, path, info, timeout, check, config)


def _delay(config: DownloadConfig, attempt: int, error: BaseException | None) -> float:
    delay = min(config.backoff_max, config.backoff * 2**attempt) * random.uniform(0.5, 1.0)
    if isinstance(error, TransientError):
        if error.throttled:
            delay = min(config.backoff_max, 2 * delay)
        if error.retry_after is not None:
            delay = max(delay, min(error.retry_after, max(config.backoff_max, 60.0)))
    return delay


def download_file(url: str, local_path: str, *, retries: int = 2, timeout: float = 60.0,
                  size: int | None = None, check: Callable[[str], str | None] | None = None,
                  config: DownloadConfig | None = None, backend: Backend | None = None) -> str:
    """Download ``url`` to ``local_path`` (atomically, verified); returns ``local_path``.

    ``retries`` extra attempts follow a failed one; ``timeout`` is the longest any request may go
    without receiving data; ``size``, when known, is the expected byte count; ``check(path)``
    returns a description of what is wrong with a downloaded temporary file (e.g. a checksum
    mismatch), or None, and a wrong file is downloaded again.

    Raises FileNotFoundError (no such object), PermissionError (access denied), DiskFullError,
    or, once every attempt has failed, DownloadError (CorruptDownloadError if the bytes kept
    arriving wrong), each naming the URL and the cause.
    """
    if retries < 0:
        raise ValueError(f'retries must be >= 0, got {retries}.')
    if timeout is None or timeout <= 0:
        raise ValueError(f'timeout must be > 0 seconds, got {timeout}.')
    backend = backend or get_backend(url)
    return _download(backend, url, local_path, retries, timeout, size, check, config,
                     not backend.streams)


def download_streamed(backend: Backend, url: str, local_path: str, timeout: float,
                      retries: int = 2) -> str:
    """``download_file`` through ``backend.read`` even if the backend overrides ``download``."""
    if type(backend).read is Backend.read:
        raise NotImplementedError(f'{type(backend).__name__} implements neither read() nor '
                                  f'download().')
    return _download(backend, url, local_path, retries, timeout, None, None, None, False)


def _download(backend: Backend, url: str, local_path: str, retries: int, timeout: float,
              size: int | None, check: Callable[[str], str | None] | None,
              config: DownloadConfig | None, whole: bool) -> str:
    config = config or DownloadConfig.from_env()
    directory = os.path.dirname(local_path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    attempts = retries + 1
    error: BaseException | None = None
    started = time.monotonic()
    for attempt in range(attempts):
        if attempt:
            time.sleep(_delay(config, attempt - 1, error))
        try:
            _attempt(backend, url, local_path, size, timeout, check, config, whole)
            if attempt:
                logger.info('Downloaded %s on attempt %d of %d.', redact(url), attempt + 1,
                            attempts)
            return local_path
        except OSError as caught:
            if caught.errno in _DISK_ERRNOS and not isinstance(caught, DiskFullError):
                raise _disk_error(caught, local_path) from None
            if _is_fatal(caught):
                raise _with_url(caught, url) from None
            error = caught
        except _Corrupt as caught:
            error = caught
        except Exception as caught:
            if _is_fatal(caught):
                raise
            error = caught
        logger.warning('Download attempt %d of %d of %s failed: %s', attempt + 1, attempts,
                       redact(url), _describe(error))
    elapsed = time.monotonic() - started
    kind = CorruptDownloadError if isinstance(error, _Corrupt) else DownloadError
    raise kind(f'Downloading {redact(url)} to {local_path} failed after {attempts} attempt(s) '
               f'in {elapsed:.1f}s; last error: {_describe(error)}') from error


def _with_url(error: OSError, url: str) -> OSError:
    """``error`` with the URL in its message, keeping its type."""
    text = str(error.strerror or error)
    if redact(url) in text:
        return error
    return type(error)(error.errno, f'{redact(url)}: {redact(text)}') if error.errno else \
        type(error)(f'{redact(url)}: {redact(text)}')


def hash_check(algo: str, expected: str) -> Callable[[str], str | None]:
    """A ``check`` for ``download_file``: the file's ``algo`` digest must equal ``expected``."""

    def check(path: str) -> str | None:
        if algo.startswith('xxh'):
            import xxhash
            digest = getattr(xxhash, algo)()
        else:
            import hashlib
            digest = hashlib.new(algo)
        with open(path, 'rb') as f:
            while True:
                block = f.read(4 << 20)
                if not block:
                    break
                digest.update(block)
        got = digest.hexdigest()
        return None if got == expected else f'{algo} checksum mismatch (got {got}, expected ' \
                                             f'{expected})'

    return check


def fetch_bytes(url: str, *, retries: int = 2, timeout: float = 60.0) -> bytes:
    """The content of a small object, downloaded through a temporary file."""
    import tempfile
    with tempfile.TemporaryDirectory(prefix='streaming-fetch-') as scratch:
        path = download_file(url, os.path.join(scratch, 'object'), retries=retries,
                             timeout=timeout)
        with open(path, 'rb') as f:
            return f.read()
