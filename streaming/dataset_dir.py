"""A dataset directory, local or remote, read through its ``index.json`` (for tools).

The ``streaming`` commands (``inspect``, ``validate``, ``cp``, ``cost``, ``merge``) and the
planner look at datasets this way: find the directories under a URL that hold an index, fetch
the index and single files (remote ones into a scratch directory), and list a shard's files.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from streaming.errors import MissingIndexError
from streaming.format.index import INDEX_BASENAME, load_index
from streaming.storage.local import local_path
from streaming.storage.registry import get_backend, is_remote_url

__all__ = ['DatasetDir', 'find_datasets', 'join', 'remote', 'shard_files']

_FILE_KEYS = ('raw_data', 'zip_data', 'raw_meta', 'zip_meta')


def remote(url: str) -> bool:
    """Whether ``url`` needs a backend (``file://`` and plain paths do not)."""
    return is_remote_url(url) and not url.startswith('file://')


def join(base: str, name: str) -> str:
    return base.rstrip('/') + '/' + name if remote(base) else os.path.join(local_path(base), name)


def shard_files(entry: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(index key, file info) of every file of one shard entry."""
    return [(key, entry[key]) for key in _FILE_KEYS if entry.get(key)]


class DatasetDir:
    """One dataset directory (``url`` or ``url/split``): its index and its files."""

    def __init__(self, url: str, split: str | None = None, timeout: float = 60.0) -> None:
        self.url = join(url, split) if split else url
        self.timeout = timeout
        self._scratch: tempfile.TemporaryDirectory | None = None
        try:
            path = self.fetch(INDEX_BASENAME)
        except FileNotFoundError:
            raise MissingIndexError(f'No {INDEX_BASENAME} at {self.url}: not a dataset '
                                    f'directory (or split).') from None
        self.index = load_index(path)

    @property
    def remote(self) -> bool:
        return remote(self.url)

    @property
    def scratch(self) -> str:
        if self._scratch is None:
            self._scratch = tempfile.TemporaryDirectory(prefix='streaming-cli-')
        return self._scratch.name

    def fetch(self, basename: str, size: int | None = None) -> str:
        """A local path holding ``basename`` (downloaded to a scratch dir for remotes)."""
        if not self.remote:
            path = join(self.url, basename)
            if not os.path.exists(path):
                raise FileNotFoundError(f'No such file: {path}')
            return path
        from streaming.storage import download_file
        target = os.path.join(self.scratch, basename)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        return download_file(join(self.url, basename), target, timeout=self.timeout, size=size)

    def drop(self, path: str) -> None:
        """Forget a fetched copy (remote datasets only), to bound scratch space."""
        if self.remote and path.startswith(self.scratch):
            os.remove(path)

    def close(self) -> None:
        if self._scratch is not None:
            self._scratch.cleanup()
            self._scratch = None


def find_datasets(url: str, split: str | None = None) -> list[str]:
    """``url`` if it holds an index, else its subdirectories that do (one level down, sorted)."""
    base = join(url, split) if split else url
    if not remote(base):
        path = local_path(base)
        if not os.path.exists(path):
            raise FileNotFoundError(f'No such file or directory: {base}')
        if os.path.isfile(os.path.join(path, INDEX_BASENAME)) or not os.path.isdir(path):
            return [base]
        subs = sorted(name for name in os.listdir(path)
                      if os.path.isfile(os.path.join(path, name, INDEX_BASENAME)))
        return [os.path.join(path, name) for name in subs] or [base]
    urls = get_backend(base).list(base.rstrip('/') + '/')
    root = base.rstrip('/') + '/'
    if root + INDEX_BASENAME in urls:
        return [base]
    found = sorted(u[:-len('/' + INDEX_BASENAME)] for u in urls
                   if u.startswith(root) and u.endswith('/' + INDEX_BASENAME)
                   and u[len(root):].count('/') == 1)
    return found or [base]
