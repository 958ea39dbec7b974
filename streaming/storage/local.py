"""Plain paths and ``file://`` URLs: a "remote" that is another local directory."""

from __future__ import annotations

import os
import shutil
from typing import Any, Generator
from urllib.parse import unquote, urlparse

from streaming.fileio import atomic_open, file_etag
from streaming.storage.backend import Backend
from streaming.storage.chunks import handle_chunks
from streaming.storage.errors import ChangedWhileReadError
from streaming.storage.objects import ObjectInfo, Response

__all__ = ['LocalBackend', 'local_path']


def local_path(url: str) -> str:
    """The filesystem path of a plain path or a ``file://`` URL."""
    if url.startswith('file://'):
        parsed = urlparse(url)
        return unquote(parsed.netloc + parsed.path)
    return url


def _copy_atomic(src: str, dst: str) -> None:
    os.makedirs(os.path.dirname(dst) or '.', exist_ok=True)
    with open(src, 'rb') as source, atomic_open(dst) as target:
        shutil.copyfileobj(source, target, 1 << 20)


def _unchanged_chunks(url: str, handle: Any, opened: os.stat_result, start: int,
                      end: int | None) -> Generator[bytes, None, None]:
    """The chunks of ``handle``; the file must still be as ``opened`` once they are read."""
    fileno = os.dup(handle.fileno())  # Stays open after handle_chunks closes the handle.
    try:
        yield from handle_chunks(handle, start, end, (), lambda error: error)
        now = os.fstat(fileno)
    finally:
        os.close(fileno)
    if (now.st_size, now.st_mtime_ns) != (opened.st_size, opened.st_mtime_ns):
        raise ChangedWhileReadError(f'{url} changed while it was read (it was '
                                    f'{file_etag(opened)} when opened, {file_etag(now)} after).')


class _FileChunks:
    """The chunks of an open file, owning it from the start.

    ``close`` closes the file whether or not reading began: a generator not yet started cannot,
    so a caller that checks the version and gives up before reading would leave the file to the
    garbage collector (a ``ResourceWarning``).
    """

    def __init__(self, url: str, handle: Any, opened: os.stat_result, start: int,
                 end: int | None) -> None:
        self._handle = handle
        self._chunks = _unchanged_chunks(url, handle, opened, start, end)

    def __iter__(self) -> _FileChunks:
        return self

    def __next__(self) -> bytes:
        return next(self._chunks)

    def close(self) -> None:
        self._chunks.close()
        self._handle.close()


class LocalBackend(Backend):
    """Copies files between local paths, through a temporary name and a rename."""

    scheme = 'file'

    def upload(self, local_path_: str, url: str) -> None:
        _copy_atomic(local_path_, local_path(url))

    def stat(self, url: str, *, timeout: float) -> ObjectInfo:
        path = local_path(url)
        if not os.path.isfile(path):
            raise FileNotFoundError(f'{url}: no such file.')
        st = os.stat(path)
        return ObjectInfo(st.st_size, file_etag(st))

    def read(self, url: str, start: int = 0, end: int | None = None, *, timeout: float,
             etag: str | None = None) -> Response:
        """Bytes ``[start, end)`` of the file, with the size and version tag of the file opened.

        A change of either before the last chunk is read is a ``ChangedWhileReadError``. The
        file is open until the last chunk is read or the response is closed.
        """
        path = local_path(url)
        if not os.path.isfile(path):
            raise FileNotFoundError(f'{url}: no such file.')
        handle = open(path, 'rb')
        opened = os.fstat(handle.fileno())
        info = ObjectInfo(opened.st_size, file_etag(opened))
        if etag is not None and etag != info.etag:
            handle.close()
            raise FileNotFoundError(f'{url} changed during the download.')
        handle.seek(start)
        return Response(info, _FileChunks(url, handle, opened, start, end))

    def list_info(self, url: str) -> list[tuple[str, ObjectInfo]]:
        """Every file under ``url`` with its size and version tag (mtime and size)."""
        found = []
        for path in self.list(url):
            st = os.stat(local_path(path))
            found.append((path, ObjectInfo(st.st_size, file_etag(st))))
        return found

    def list(self, url: str) -> list[str]:
        root = local_path(url)
        if os.path.isfile(root):
            return [url]
        found = []
        for dirpath, _, files in os.walk(root):
            for name in files:
                found.append(os.path.join(dirpath, name))
        prefix = 'file://' if url.startswith('file://') else ''
        return sorted(prefix + path for path in found)
