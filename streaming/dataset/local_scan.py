"""Which shards of a stream are already complete in its local directory, and their size."""

from __future__ import annotations

import os
from collections.abc import Sequence
from stat import S_ISREG

import numpy as np

from streaming.dataset.index_cache import LazyShards
from streaming.errors import ShardFileError
from streaming.format import Reader
from streaming.format.hashing import get_hash

__all__ = ['local_shard_usage']


def local_shard_usage(shards: Sequence[Reader], validate_hash: str | None, has_remote: bool,
                      keep_zip: bool) -> list[int]:
    """Bytes each of ``shards`` takes on disk if complete (and trusted), else 0.

    With ``validate_hash`` and a remote, a shard counts only if its checksum matches. Shards
    whose readers are not built yet (``LazyShards``) are checked from their index summary.
    """
    if isinstance(shards, LazyShards) and not validate_hash:
        return _usage_from_summary(shards, keep_zip)
    sizes = _FileSizes()
    usage = []
    for shard in shards:
        complete = all(sizes.get(shard.path(raw)) == raw['bytes'] for raw, _ in shard.file_pairs)
        if complete and _trusted(shard, validate_hash, has_remote):
            usage.append(shard.get_persistent_size(keep_zip))
        else:
            usage.append(0)
    return usage


def _usage_from_summary(shards: LazyShards, keep_zip: bool) -> list[int]:
    summary = shards.summary
    directory = os.path.join(shards.local, shards.split)
    sizes = _FileSizes()
    listing = sizes.listing(directory)
    lines = summary.files.decode().split('\n') if summary.files else []
    if b'/' not in summary.files and len(lines) == summary.file_offsets[-1]:
        # Compared as the summary's 'name<TAB>bytes' lines: no parsing of 50k lines.
        have = set(map('{}\t{}'.format, listing.keys(), listing.values()))
        present = np.ones(len(lines), bool) if have.issuperset(lines) else \
            np.fromiter(map(have.__contains__, lines), bool, len(lines))
    else:
        names, expected = summary.raw_files()
        present = np.array([(listing.get(name) if '/' not in name else
                             sizes.get(os.path.join(directory, name))) == size
                            for name, size in zip(names, expected)], bool)
    missing = np.concatenate([[0], np.cumsum(~present)])
    complete = missing[summary.file_offsets[1:]] == missing[summary.file_offsets[:-1]]
    usage = summary.max_size if keep_zip else summary.raw_size
    return np.where(complete, usage, 0).tolist()


class _FileSizes:
    """File sizes looked up through one ``scandir`` per directory, not one ``stat`` per file.

    With 50k shards that is the difference between a second and a few milliseconds.
    """

    def __init__(self) -> None:
        self._dirs: dict[str, dict[str, int]] = {}

    def get(self, path: str) -> int | None:
        directory, name = os.path.split(path)
        return self.listing(directory).get(name)

    def listing(self, directory: str) -> dict[str, int]:
        """{name: size} of the regular files in ``directory`` (empty if it does not exist)."""
        listing = self._dirs.get(directory)
        if listing is None:
            listing = self._dirs[directory] = _regular_file_sizes(directory)
        return listing


def _regular_file_sizes(directory: str) -> dict[str, int]:
    """{name: size} of the regular files (never a planted link) in ``directory``.

    The names are listed, then each is ``lstat``-ed through a descriptor of the directory, so
    each stat is one name's lookup in it, not a walk of the whole path; ``os.listdir`` and
    ``os.stat`` make no ``DirEntry`` object per name (both measured: docs/benchmark-history.md).
    A name removed meanwhile is left out.
    """
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, 'O_DIRECTORY', 0)) \
            if os.stat in os.supports_dir_fd and os.listdir in os.supports_fd else None
    except FileNotFoundError:
        return {}
    sizes: dict[str, int] = {}
    try:
        names = os.listdir(directory if fd is None else fd)
        stat, regular = os.stat, S_ISREG
        for name in names:
            try:
                info = stat(name if fd is not None else os.path.join(directory, name),
                            dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if regular(info.st_mode):
                sizes[name] = info.st_size
    except FileNotFoundError:
        return {}
    finally:
        if fd is not None:
            os.close(fd)
    return sizes


def _trusted(shard: Reader, algo: str | None, has_remote: bool) -> bool:
    """Whether a cached shard may be used as is.

    With ``validate_hash`` and a remote, a cached shard counts only if its checksum matches;
    one that does not is deleted, to be downloaded afresh when needed. Without a remote, a
    mismatch is a ``ShardFileError``: the only copy is corrupt.
    """
    if not algo:
        return True
    for raw, zipped in shard.file_pairs:
        expected = raw.get('hashes', {}).get(algo)
        if expected is None:
            continue
        with open(shard.path(raw), 'rb') as f:
            if get_hash(algo, f.read()) == expected:
                continue
        if not has_remote:
            raise ShardFileError(f'Shard file {shard.path(raw)} does not match its {algo} '
                                 f'checksum in the index: it is corrupt.')
        for info in (raw, zipped):
            if info is not None and os.path.exists(shard.path(info)):
                os.remove(shard.path(info))
        return False
    return True
