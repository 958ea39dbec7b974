"""Conversion sources on remote storage, fetched through the storage layer into a local directory.

A remote source (any scheme ``streaming.storage`` has a backend for: ``s3://``, ``gs://``,
``azure://``, ``hf://``, ``https://``...) is

- **one object**, e.g. ``s3://bucket/corpus/data.jsonl``: fetched as ``DIR/data.jsonl``;
- **every object under a prefix**, e.g. ``s3://bucket/photos`` or ``s3://bucket/photos/``:
  fetched into ``DIR`` keeping their paths below the prefix (so image labels, Hugging Face
  ``save_to_disk`` layouts and WebDataset tar sets survive);
- or **a glob in the last path parts**, e.g. ``s3://bucket/logs/*.jsonl``: the objects it matches
  (``*``, ``?`` and ``[...]`` match within one path part, as for local globs).

``fetch_source`` downloads them with ``download_file`` (retries, ranged parallel GETs for large
objects, atomic renames) on a thread pool, with one progress bar in bytes, and returns the local
path to convert. The caller owns ``DIR`` and removes it afterwards (``streaming convert`` uses a
temporary directory).
"""

from __future__ import annotations

import fnmatch
import os
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import Any
from urllib.parse import urlparse

from streaming.storage.registry import get_backend, is_remote_url
from streaming.storage.secrets import redact

__all__ = ['fetch_source', 'is_remote_source', 'list_source']

_WILDCARDS = '*?['


def is_remote_source(src: str) -> bool:
    """Whether ``src`` must be fetched (a URL other than ``file://``)."""
    return is_remote_url(src) and not src.startswith('file://')


def _relative(url: str, prefix: str) -> str:
    """The local path of ``url`` below ``prefix``; ValueError if it would leave the directory."""
    rel = url[len(prefix):]
    parts = rel.split('/')
    if not rel or any(part in ('', '.', '..') for part in parts):
        raise ValueError(f'Object {redact(url)} has no safe local name below {redact(prefix)} '
                         f'(empty, "." or ".." path parts).')
    return os.path.join(*parts)


def list_source(url: str, timeout: float = 60.0) -> tuple[str, list[tuple[str, str, int | None]]]:
    """The source's root URL and (object URL, local relative path, size if known) of each object.

    The root is the URL the local copy stands for: the object itself, the prefix, or the glob's
    fixed directory. Raises FileNotFoundError, naming ``url``, if nothing is there.
    """
    backend = get_backend(url)
    scheme = url.split('://', 1)[0]
    # http(s) URLs have no listing, and their '?' starts a query, not a glob.
    cut = -1 if scheme in ('http', 'https') else \
        min((url.find(c) for c in _WILDCARDS if c in url), default=-1)
    if cut >= 0:  # A glob: list its fixed directory, match within the same path depth.
        prefix = url[:url.rfind('/', 0, cut) + 1]
        found = [(u, _relative(u, prefix), None) for u in backend.list(prefix)
                 if u.count('/') == url.count('/') and fnmatch.fnmatchcase(u, url)]
    else:
        if not url.endswith('/'):
            try:
                info = backend.stat(url, timeout=timeout)
                name = os.path.basename(urlparse(url).path)
                return url, [(url, name if name not in ('', '.', '..') else 'object', info.size)]
            except FileNotFoundError:
                pass  # Not an object: a prefix, perhaps.
        prefix = url.rstrip('/') + '/'
        found = [(u, _relative(u, prefix), None) for u in backend.list(prefix)
                 if not u.endswith('/')]  # Skip "directory" marker objects.
    if not found:
        raise FileNotFoundError(f'No object, prefix or glob match at {redact(url)}')
    return prefix.rstrip('/'), sorted(found, key=lambda item: item[1])


def _partial_bytes(path: str) -> int:
    """Bytes written so far of a large (ranged) download in progress to ``path``."""
    try:
        st = os.stat(path + '.partial')  # Preallocated: count the blocks written, not the size.
    except OSError:
        return 0
    return min(st.st_size, st.st_blocks * 512)


def fetch_source(url: str, directory: str, *, workers: int = 8, timeout: float = 60.0,
                 progress_bar: bool = False) -> tuple[str, str]:
    """Download the source ``url`` into ``directory``; returns (local path, URL it stands for).

    The local path is ``directory/NAME`` for one object, else ``directory`` itself; the URL is
    the object, the prefix or the glob's fixed directory (to name files in messages).
    """
    from streaming.storage import DownloadConfig, download_file
    root, objects = list_source(url, timeout)
    single = root == url and len(objects) == 1 and objects[0][0] == url
    backend = get_backend(url)
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        if progress_bar and any(size is None for _, _, size in objects):
            sizes = list(pool.map(lambda o: backend.stat(o[0], timeout=timeout).size, objects))
            objects = [(u, rel, size) for (u, rel, _), size in zip(objects, sizes)]
        bar: Any = None
        if progress_bar:
            import sys

            from tqdm import tqdm
            total = sum(size or 0 for _, _, size in objects)
            bar = tqdm(total=total, unit='B', unit_scale=True, file=sys.stderr, leave=False,
                       desc=f'Downloading {len(objects)} object(s) from {redact(url)}')
        threshold = DownloadConfig.from_env().threshold
        futures = {pool.submit(download_file, u, os.path.join(directory, rel), timeout=timeout,
                               size=size): (os.path.join(directory, rel), size or 0)
                   for u, rel, size in objects}
        large = [path for path, size in futures.values() if size > threshold]
        pending, finished = set(futures), 0
        try:
            while pending:
                done, pending = wait(pending, timeout=0.25, return_when=FIRST_EXCEPTION)
                for future in done:
                    future.result()  # Raises the first failure, naming its URL.
                    finished += futures[future][1]
                if bar is not None:
                    bar.n = finished + sum(map(_partial_bytes, large))
                    bar.refresh()
        finally:
            for future in pending:
                future.cancel()
            if bar is not None:
                bar.close()
    return (os.path.join(directory, objects[0][1]) if single else directory), root
