"""Plain paths and ``file://`` URLs: a "remote" that is another local directory."""

from __future__ import annotations

import os
import shutil
import uuid
from urllib.parse import unquote, urlparse

from streaming.storage.registry import Backend

__all__ = ['LocalBackend', 'local_path']


def local_path(url: str) -> str:
    """The filesystem path of a plain path or a ``file://`` URL."""
    if url.startswith('file://'):
        parsed = urlparse(url)
        return unquote(parsed.netloc + parsed.path)
    return url


def _copy_atomic(src: str, dst: str) -> None:
    os.makedirs(os.path.dirname(dst) or '.', exist_ok=True)
    tmp = f'{dst}.{uuid.uuid4().hex[:8]}.tmp'
    try:
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


class LocalBackend(Backend):
    """Copies files between local paths, through a temporary name and a rename."""

    scheme = 'file'

    def upload(self, local_path_: str, url: str) -> None:
        _copy_atomic(local_path_, local_path(url))

    def download(self, url: str, local_path_: str, timeout: float | None = None) -> None:
        _copy_atomic(local_path(url), local_path_)

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
