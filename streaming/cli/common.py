"""What the subcommands share: dataset locations (local or any remote), output, progress."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import Any, Iterable

from streaming.format.index import INDEX_BASENAME, load_index
from streaming.storage.local import local_path
from streaming.storage.registry import get_backend, is_remote_url

__all__ = ['CLIError', 'Dataset', 'emit', 'find_datasets', 'has_source_files', 'human_bytes',
           'join', 'progress', 'shard_files']

_FILE_KEYS = ('raw_data', 'zip_data', 'raw_meta', 'zip_meta')


class CLIError(Exception):
    """A problem the command reports as one line (exit code 1)."""


def remote(url: str) -> bool:
    """Whether ``url`` needs a backend (``file://`` and plain paths do not)."""
    return is_remote_url(url) and not url.startswith('file://')


def join(base: str, name: str) -> str:
    return base.rstrip('/') + '/' + name if remote(base) else os.path.join(local_path(base), name)


def shard_files(entry: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(index key, file info) of every file of one shard entry."""
    return [(key, entry[key]) for key in _FILE_KEYS if entry.get(key)]


class Dataset:
    """One dataset directory (``url`` or ``url/split``): its index and its files."""

    def __init__(self, url: str, split: str | None = None, timeout: float = 60.0) -> None:
        self.url = join(url, split) if split else url
        self.timeout = timeout
        self._scratch: tempfile.TemporaryDirectory | None = None
        try:
            path = self.fetch(INDEX_BASENAME)
        except FileNotFoundError:
            raise CLIError(f'No {INDEX_BASENAME} at {self.url}: not a dataset directory (or '
                           f'split).') from None
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


def has_source_files(url: str) -> bool:
    """Whether ``url`` holds data files of a source format (Parquet, JSONL, ...)."""
    from streaming.sources.sidecar import list_sources
    try:
        list_sources(url, None)
    except (ValueError, FileNotFoundError):
        return False
    return True


def show_progress(args: Any) -> bool:
    """Whether to draw bars: stderr is a terminal (or STREAMING_PROGRESS=1), no --no-progress."""
    wanted = sys.stderr.isatty() or os.environ.get('STREAMING_PROGRESS') == '1'
    return wanted and not getattr(args, 'no_progress', False)


def progress(args: Any, iterable: Iterable | None = None, total: int | None = None,
             desc: str = '', unit: str = 'it') -> Any:
    """A tqdm bar on stderr when ``show_progress(args)``."""
    from tqdm import tqdm
    return tqdm(iterable, total=total, desc=desc, unit=unit, file=sys.stderr,
                disable=not show_progress(args), leave=False)


def emit(args: Any, data: Any, text: str) -> None:
    """Print ``data`` as JSON with ``--json``, else the human-readable ``text``."""
    if getattr(args, 'json', False):
        print(json.dumps(data, indent=2, sort_keys=False, default=str))
    else:
        print(text)


def human_bytes(n: float) -> str:
    for unit in ('B', 'KiB', 'MiB', 'GiB', 'TiB'):
        if abs(n) < 1024 or unit == 'TiB':
            return f'{n:.0f} {unit}' if unit == 'B' else f'{n:.1f} {unit}'
        n /= 1024
    return f'{n} B'  # pragma: no cover
