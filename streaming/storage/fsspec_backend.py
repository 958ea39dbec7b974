"""Any other URL scheme that fsspec knows (``memory://``, ``ftp://``, ``webdav://``, ...).

Used as the fallback for a scheme with no built-in or registered backend, when fsspec is
installed (``pip install "shardflow[fsspec]"`` plus the scheme's own fsspec implementation).
Reads are ranged (seek then read), so downloads get the shared layer's parallel ranges, resume
and checksums; uploads go through a temporary name and a move where the filesystem supports it.
"""

from __future__ import annotations

import uuid
from typing import Any

import fsspec

from streaming.storage.backend import Backend
from streaming.storage.chunks import handle_chunks
from streaming.storage.errors import TransientError
from streaming.storage.objects import ObjectInfo, Response
from streaming.storage.secrets import redact

__all__ = ['FsspecBackend']

def _translate(url: str, error: BaseException) -> BaseException:
    if isinstance(error, (FileNotFoundError, PermissionError, IsADirectoryError)):
        return type(error)(f'{redact(url)}: {error}')
    return TransientError(f'{redact(url)}: {type(error).__name__}: {error}')


class FsspecBackend(Backend):
    """One fsspec filesystem, for the URLs of its protocol."""

    def __init__(self, protocol: str, **storage_options: Any) -> None:
        self.scheme = protocol
        self.fs = fsspec.filesystem(protocol, **storage_options)

    def _path(self, url: str) -> str:
        return self.fs._strip_protocol(url)

    def stat(self, url: str, *, timeout: float) -> ObjectInfo:
        try:
            info = self.fs.info(self._path(url))
        except Exception as error:
            raise _translate(url, error) from error
        if info.get('type') == 'directory':
            raise FileNotFoundError(f'{redact(url)} is a directory, not a file.')
        tag = info.get('ETag') or info.get('etag') or info.get('mtime') or info.get('created')
        return ObjectInfo(info.get('size'), None if tag is None else str(tag))

    def read(self, url: str, start: int = 0, end: int | None = None, *, timeout: float,
             etag: str | None = None) -> Response:
        info = self.stat(url, timeout=timeout)
        if etag is not None and info.etag is not None and etag != info.etag:
            raise FileNotFoundError(f'{redact(url)} changed during the download.')
        try:
            handle = self.fs.open(self._path(url), 'rb')
            handle.seek(start)
        except Exception as error:
            raise _translate(url, error) from error
        return Response(info, handle_chunks(handle, start, end, (Exception,),
                                            lambda error: _translate(url, error)))

    def upload(self, local_path: str, url: str) -> None:
        path = self._path(url)
        temp = f'{path}.{uuid.uuid4().hex[:8]}.tmp'
        try:
            parent = self.fs._parent(path)
            if parent:
                self.fs.makedirs(parent, exist_ok=True)
            self.fs.put_file(local_path, temp)
            self.fs.mv(temp, path)
        except Exception as error:
            try:
                if self.fs.exists(temp):
                    self.fs.rm(temp)
            except Exception:  # noqa: BLE001 - best effort; the original error matters
                pass
            raise _translate(url, error) from error

    def list(self, url: str) -> list[str]:
        root = self._path(url).rstrip('/')
        try:
            found = self.fs.find(root)
        except FileNotFoundError:
            return []
        except Exception as error:
            raise _translate(url, error) from error
        # In the caller's URL form (fsspec's own may drop the host or add slashes).
        base = url.rstrip('/')
        return sorted(base + path[len(root):] if path.startswith(root) else
                      self.fs.unstrip_protocol(path) for path in found)
