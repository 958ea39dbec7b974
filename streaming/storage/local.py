"""Plain paths and ``file://`` URLs: a "remote" that is another local directory."""

from __future__ import annotations

import os
import shutil
from urllib.parse import unquote, urlparse

from streaming.fileio import atomic_open, file_etag
from streaming.storage.backend import Backend
from streaming.storage.chunks import handle_chunks
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
        info = self.stat(url, timeout=timeout)
        if etag is not None and etag != info.etag:
            raise FileNotFoundError(f'{url} changed during the download.')
        handle = open(local_path(url), 'rb')
        handle.seek(start)
        return Response(info, handle_chunks(handle, start, end, (), lambda error: error))

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
