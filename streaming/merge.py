"""``merge_index``: combine the indexes of dataset partitions written in parallel into one."""

from __future__ import annotations

import os
import tempfile
from typing import Sequence, Union

from streaming.errors import IndexFileError, MissingPartitionIndexError
from streaming.format.index import INDEX_BASENAME, load_index, write_index
from streaming.format.registry import get_format
from streaming.storage.local import local_path
from streaming.storage.registry import get_backend, is_remote_url
from streaming.storage.upload import Uploader

__all__ = ['merge_index']

Location = Union[str, Sequence[str]]  # A path or URL, or a (local, remote) pair.


def merge_index(*args: object, **kwargs: object) -> None:
    """Write ``out/index.json`` listing the shards of every partition below ``out``.

    Two call forms, as in the reference:

    - ``merge_index(index_file_urls, out, keep_local=True, download_timeout=60)``: the given
      partition index files (paths, URLs or ``(local, remote)`` pairs), in the given order;
    - ``merge_index(out, keep_local=True, download_timeout=60)``: every ``*/index.json`` one
      level below ``out``, in sorted order of the subdirectory names.

    Each shard's file names are prefixed with its partition's directory, relative to ``out``.
    """
    if args and isinstance(args[0], list):
        return _merge_index_from_list(*args, **kwargs)  # type: ignore[arg-type]
    if 'index_file_urls' in kwargs:
        return _merge_index_from_list(**kwargs)  # type: ignore[arg-type]
    return _merge_index_from_root(*args, **kwargs)  # type: ignore[arg-type]


def _source(location: Location) -> str:
    """The path or URL a partition index is read from.

    Of a ``(local, remote)`` pair, the local file if it is there, else the remote.
    """
    if isinstance(location, str):
        return location
    local, remote = location
    return local if os.path.exists(local) or not remote else remote


def _fetch(source: str, download_timeout: float, scratch: str, i: int) -> str:
    """A local path holding the partition index at ``source``."""
    if not is_remote_url(source) or source.startswith('file://'):
        path = local_path(source)
        if not os.path.isfile(path):
            raise MissingPartitionIndexError(f'merge_index: partition index {path} does not '
                                             f'exist.')
        return path
    target = os.path.join(scratch, f'{i}.json')
    try:
        get_backend(source).download(source, target, download_timeout)
    except FileNotFoundError as error:
        raise MissingPartitionIndexError(f'merge_index: partition index {source} does not '
                                         f'exist: {error}') from error
    return target


def _partition_dir(source: str) -> str:
    """The folder naming a partition's shards: that of the index file read (as the reference)."""
    return os.path.basename(os.path.dirname(source.rstrip('/')))


def _merge_index_from_list(index_file_urls: list[Location], out: Location, keep_local: bool = True,
                           download_timeout: float = 60) -> None:
    if not index_file_urls:
        raise ValueError('merge_index: index_file_urls is empty; nothing to merge.')
    shards = []
    with tempfile.TemporaryDirectory(prefix='merge-index-') as scratch:
        for i, location in enumerate(index_file_urls):
            source = _source(location)
            path = _fetch(source, download_timeout, scratch, i)
            prefix = _partition_dir(source)
            for entry in load_index(path)['shards']:
                for key in get_format(entry['format']).file_keys:
                    info = entry.get(key)
                    if info is not None:
                        info['basename'] = f'{prefix}/{info["basename"]}'
                shards.append(entry)
    uploader = Uploader(out, keep_local=keep_local, exist_ok=True, keep_contents=True)
    write_index(os.path.join(uploader.local, INDEX_BASENAME), shards, sort_keys=False)
    uploader.upload_file(INDEX_BASENAME)
    if isinstance(out, str) and is_remote_url(out):
        uploader.finish()  # The local side was a temporary staging directory: remove it.


def _merge_index_from_root(out: Location, keep_local: bool = True,
                           download_timeout: float = 60) -> None:
    if isinstance(out, str):
        root = out
        found = _partition_indexes(root)
    else:
        # The local side when it holds partitions; otherwise the remote (a staging directory
        # that exists, even with other files in it, does not hide the remote's partitions).
        root = out[0]
        found = _partition_indexes(root) if os.path.isdir(local_path(root)) else []
        if not found and out[1]:
            root = out[1]
            found = _partition_indexes(root)
    if not found:
        raise IndexFileError(f'merge_index: no partition index ({"*/" + INDEX_BASENAME}) found '
                             f'under {root}.')
    found.sort(key=lambda u: os.path.basename(os.path.dirname(u)))
    _merge_index_from_list(found, out, keep_local, download_timeout)


def _partition_indexes(root: str) -> list[str]:
    """Paths or URLs of the ``*/index.json`` files one level below ``root``."""
    if is_remote_url(root) and not root.startswith('file://'):
        urls = get_backend(root).list(root)
        return [u for u in urls if u.endswith('/' + INDEX_BASENAME)
                and u[len(root.rstrip('/')) + 1:].count('/') == 1]
    base = local_path(root)
    if not os.path.isdir(base):
        raise IndexFileError(f'merge_index: {root} is not a directory.')
    return [os.path.join(base, name, INDEX_BASENAME) for name in os.listdir(base)
            if os.path.isfile(os.path.join(base, name, INDEX_BASENAME))]
