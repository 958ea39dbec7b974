"""Reading files that were not written as shards: listing with sizes, ranges, one streamed pass.

Parquet, JSON Lines, WebDataset tars and Arrow files are streamed where they lie. Indexing them
needs each file's size and version tag (to notice a change), a few byte ranges (a Parquet footer)
or one pass over the bytes (JSONL newlines); reading a unit of one (a Parquet row group's column
chunks) fetches a handful of ranges into one local file. Every request goes through the
backend's ``read``/``stat``/``list``, with this package's retries and stall watchdog, and every
response is checked against the size and ETag the index recorded: a file that changed since it
was indexed raises ``StaleSourceError`` naming it, instead of mixing old and new bytes.
"""

from __future__ import annotations

import os
from typing import Iterator, Sequence

from streaming.errors import StaleSourceError
from streaming.fileio import create_temp, publish, remove_quietly
from streaming.storage.errors import ChangedWhileReadError, DownloadError
from streaming.storage.objects import ObjectInfo, ObjectStore
from streaming.storage.pacing import PACER
from streaming.storage.registry import get_backend
from streaming.storage.retry import RetriesExhausted, RetryPolicy, call_with_retries, describe
from streaming.storage.secrets import redact
from streaming.storage.watchdog import run_watched

__all__ = ['list_objects', 'read_range', 'read_chunks', 'fetch_ranges']


def list_objects(url: str, *, timeout: float = 60.0, retries: int = 2,
                 backend: ObjectStore | None = None) -> list[tuple[str, ObjectInfo]]:
    """(URL, size and ETag) of every object under ``url``, sorted by URL.

    One listing when the backend reports sizes with it (``list_info``: S3, local paths), else a
    listing and a ``stat`` per object.
    """
    backend = backend or get_backend(url)
    list_info = getattr(backend, 'list_info', None)

    def attempt() -> list[tuple[str, ObjectInfo]]:
        if list_info is not None:
            return sorted(list_info(url))
        return [(found, backend.stat(found, timeout=timeout)) for found in backend.list(url)]

    return _retried(attempt, retries, timeout, f'Listing {url}')


def _retried(operation, retries: int, timeout: float, what: str):  # noqa: ANN001, ANN202
    """``operation()`` with retries.

    A throttling store's refusals take turns from the node's pacer and use up no attempt (until
    the store has refused for ``timeout`` seconds), as the shard downloads' refusals do.
    """
    try:
        return call_with_retries(operation, retries=retries, policy=RetryPolicy.from_env(),
                                 what=what, pacer=PACER, throttle_limit=timeout)
    except RetriesExhausted as failed:
        if isinstance(failed.last, ChangedWhileReadError):  # Changing on every attempt.
            raise StaleSourceError(f'{redact(what)}: {failed.last}') from None
        why = '' if failed.throttled_for is None else \
            f' (the store refused every request for {failed.throttled_for:.1f}s)'
        raise DownloadError(f'{redact(what)} failed after {failed.attempts} attempt(s){why}: '
                            f'{describe(failed.last)}') from failed.last


def _check_version(url: str, info: ObjectInfo, expect: ObjectInfo | None) -> None:
    if expect is None:
        return
    if (info.size is not None and expect.size is not None and info.size != expect.size) or \
            (info.etag and expect.etag and info.etag != expect.etag):
        raise StaleSourceError(f'{redact(url)} changed since it was indexed (now {info.size} '
                               f'bytes, ETag {info.etag}; the index says {expect.size} bytes, '
                               f'ETag {expect.etag}): rebuild the index (streaming index URL) '
                               f'or let the stream re-list its files.')


def read_range(url: str, start: int, end: int, *, expect: ObjectInfo | None = None,
               timeout: float = 60.0, retries: int = 2,
               backend: ObjectStore | None = None) -> bytes:
    """Bytes ``[start, end)`` of ``url``, retried; ``expect`` is the version indexed."""
    backend = backend or get_backend(url)

    def attempt() -> bytes:
        def run(task) -> bytes:  # noqa: ANN001
            parts = []
            with backend.read(url, start, end, timeout=timeout) as response:
                _check_version(url, response.info, expect)
                for chunk in response.chunks:
                    task.progress()
                    parts.append(chunk)
            data = b''.join(parts)
            if len(data) != end - start:
                raise ConnectionError(f'{redact(url)}: asked for {end - start} bytes at '
                                      f'{start}, got {len(data)}')
            return data
        return run_watched(run, 'get', timeout)

    return _retried(attempt, retries, timeout, f'Reading bytes {start}-{end} of {url}')


def read_chunks(url: str, *, expect: ObjectInfo | None = None, timeout: float = 60.0,
                backend: ObjectStore | None = None) -> Iterator[bytes]:
    """The whole of ``url`` as a stream of chunks (one GET: for one pass over a file).

    A local file that changes while it is read raises ``StaleSourceError`` after its last chunk
    (one pass is not retried: the caller indexes the file again on its next start).
    """
    backend = backend or get_backend(url)
    try:
        with backend.read(url, 0, None, timeout=timeout) as response:
            _check_version(url, response.info, expect)
            yield from response.chunks
    except ChangedWhileReadError as error:
        raise StaleSourceError(f'{redact(url)}: {error}; its content read may mix two '
                               f'versions, so it is not used.') from None


def fetch_ranges(url: str, path: str, ranges: Sequence[Sequence[int]], *,
                 expect: ObjectInfo | None = None, timeout: float = 60.0, retries: int = 2,
                 backend: ObjectStore | None = None) -> str:
    """Write the byte ``ranges`` ``[(start, length), ...]`` of ``url`` end to end into ``path``.

    Atomic (a temporary file, then a rename) and verified: every response must come from the
    version ``expect`` (else ``StaleSourceError``) and hold exactly the bytes asked for.
    """
    backend = backend or get_backend(url)
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    total = sum(length for _, length in ranges)

    def attempt() -> str:
        fd, temp = create_temp(path)
        try:
            offset = 0
            for start, length in ranges:
                def run(task, start=start, length=length, base=offset) -> None:  # noqa: ANN001
                    with backend.read(url, start, start + length, timeout=timeout) as response:
                        _check_version(url, response.info, expect)
                        at = base
                        for chunk in response.chunks:
                            task.progress()
                            view = memoryview(chunk)
                            if at + len(view) > base + length:
                                raise ConnectionError(f'{redact(url)}: more bytes than asked '
                                                      f'for')
                            while view:
                                written = os.pwrite(fd, view, at)
                                view, at = view[written:], at + written
                    if at != base + length:
                        raise ConnectionError(f'{redact(url)}: truncated body ({at - base} of '
                                              f'{length} bytes at {start})')
                run_watched(run, 'get', timeout)
                offset += length
            os.close(fd)
            fd = -1
            if os.path.getsize(temp) != total:
                raise ConnectionError(f'{temp}: {os.path.getsize(temp)} bytes, expected {total}')
            publish(temp, path)
        finally:
            if fd >= 0:
                os.close(fd)
            remove_quietly(temp)
        return path

    return _retried(attempt, retries, timeout, f'Fetching {len(ranges)} range(s) of {url}')
