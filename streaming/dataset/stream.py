"""``Stream``: one source of shards (a remote and/or local directory) and its weight in the mix."""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from typing import Any

from streaming.errors import OutputError, ShardFileError
from streaming.format import Reader, reader_from_json
from streaming.format.compression import decompress_file
from streaming.format.index import INDEX_BASENAME, load_index
from streaming.format.registry import check_safe_encodings
from streaming.format.writer import make_output_dir
from streaming.registry import TypedRegistry
from streaming.storage.download import download_file, hash_check
from streaming.storage.registry import is_remote_url

__all__ = ['Stream', 'check_download_settings', 'streams_registry']

_DEFAULTS = {'download_retry': 2, 'download_timeout': 60.0, 'validate_hash': None,
             'keep_zip': False}


def check_download_settings(download_retry: int | None, download_timeout: float | None) -> None:
    """Refuse a negative retry count or a non-positive timeout (None means unset)."""
    if download_retry is not None and download_retry < 0:
        raise ValueError(f'download_retry must be >= 0, got {download_retry}.')
    if download_timeout is not None and download_timeout <= 0:
        raise ValueError(f'download_timeout must be > 0, got {download_timeout}.')


def private_cache_root() -> str:
    """The default cache parent: ``<tmp>/streaming-cache-<uid>``, mode 0700, ours alone.

    On a shared machine another user could otherwise plant files or symlinks in a predictable
    cache path. A directory there that someone else owns, or that others may write to, is
    refused (``OutputError`` naming ``local``): pass ``local=`` to use another place.
    """
    uid = os.getuid() if hasattr(os, 'getuid') else 0
    root = os.path.join(tempfile.gettempdir(), f'streaming-cache-{uid}')
    try:
        os.mkdir(root, 0o700)
    except FileExistsError:
        pass
    except OSError as error:
        raise OutputError(f'local: the default cache directory {root} cannot be created '
                          f'({error.strerror}); pass local=...', error.errno) from None
    st = os.lstat(root)
    if not stat.S_ISDIR(st.st_mode) or (hasattr(os, 'getuid') and st.st_uid != uid) or \
            st.st_mode & 0o022:
        kind = 'a symlink' if stat.S_ISLNK(st.st_mode) else f'mode {stat.S_IMODE(st.st_mode):o}'
        raise OutputError(f'local: the default cache directory {root} is not a private '
                          f'directory of this user (owner uid {st.st_uid}, {kind}): refusing to '
                          f'cache there; remove it or pass local=...')
    return root


def _join(root: str, *parts: str) -> str:
    parts = tuple(p for p in parts if p)
    if is_remote_url(root):
        return '/'.join([root.rstrip('/'), *parts])
    return os.path.join(root, *parts)


class Stream:
    """A dataset directory to stream from, with how much of it each epoch takes.

    ``remote`` is where shards live (a URL or a path; None when ``local`` already holds them);
    ``local`` is where they are cached (default: a directory under the temp dir derived from the
    remote). At most one of ``proportion``, ``repeat`` and ``choose`` sets its weight. The
    download settings left as None take the dataset's values.
    """

    def __init__(self, *, remote: str | None = None, local: str | None = None,
                 split: str | None = None, proportion: float | None = None,
                 repeat: float | None = None, choose: int | None = None,
                 download_retry: int | None = None, download_timeout: float | None = None,
                 validate_hash: str | None = None, keep_zip: bool | None = None) -> None:
        if remote is None and local is None:
            raise ValueError('Stream needs remote or local (or both).')
        weights = {k: v for k, v in
                   [('proportion', proportion), ('repeat', repeat), ('choose', choose)]
                   if v is not None}
        if len(weights) > 1:
            raise ValueError(f'Stream takes at most one of proportion, repeat and choose; got '
                             f'{sorted(weights)}.')
        for name, value in weights.items():
            if value < 0:
                raise ValueError(f'Stream {name} must be non-negative, got {value}.')
        check_download_settings(download_retry, download_timeout)
        self.remote = remote
        self.split = split or ''
        if local is None:
            digest = hashlib.blake2s(str(remote).encode(), digest_size=16).hexdigest()
            local = os.path.join(private_cache_root(), digest)
        self.local = local
        self.proportion, self.repeat, self.choose = proportion, repeat, choose
        self._given = {'download_retry': download_retry, 'download_timeout': download_timeout,
                       'validate_hash': validate_hash, 'keep_zip': keep_zip}
        self.inherit_download_settings({})

    def inherit_download_settings(self, defaults: dict[str, Any]) -> None:
        """Fill the download settings this stream left unset from ``defaults`` (the dataset's)."""
        for name, default in _DEFAULTS.items():
            value = self._given[name]
            if value is None:
                value = defaults.get(name, default)
            setattr(self, name, value)
        # A compressed copy is kept when the remote is the local dir itself or there is none.
        self.safe_keep_zip = self.keep_zip or self.remote in (None, self.local)

    def apply_default(self, default: dict[str, Any]) -> None:
        """The reference's name for ``inherit_download_settings`` (other keys are ignored)."""
        self.inherit_download_settings(default)

    @property
    def has_remote(self) -> bool:
        """Whether shards can be fetched again after eviction."""
        return self.remote not in (None, self.local)

    @property
    def local_dir(self) -> str:
        return os.path.join(self.local, self.split)

    # ---- files -----------------------------------------------------------------------------
    def download_file(self, basename: str) -> str:
        """Fetch ``basename`` from the remote to the local dir: atomic, retried, time-bounded."""
        if not self.has_remote:
            path = os.path.join(self.local_dir, basename)
            if not os.path.exists(path):
                raise FileNotFoundError(f'{path} does not exist and the stream has no remote '
                                        f'to download it from.')
            return path
        url = _join(self.remote, self.split, basename)  # type: ignore[arg-type]
        return download_file(url, os.path.join(self.local_dir, basename),
                             retries=self.download_retry, timeout=self.download_timeout)

    def get_index(self, fetch: bool) -> dict[str, Any]:
        """This stream's index; ``fetch`` re-downloads it from the remote first."""
        path = os.path.join(self.local_dir, INDEX_BASENAME)
        if fetch and self.has_remote:
            make_output_dir(os.path.normpath(self.local_dir), 'local')
            self.download_file(INDEX_BASENAME)
        return load_index(path)

    def get_shards(self, index: dict[str, Any], allow_unsafe_types: bool) -> list[Reader]:
        """A reader per shard of ``index``; pickled columns need ``allow_unsafe_types``."""
        path = os.path.join(self.local_dir, INDEX_BASENAME)
        shards = []
        for i, entry in enumerate(index['shards']):
            check_safe_encodings(f'{path}, shard {i}', entry, allow_unsafe_types)
            shards.append(reader_from_json(self.local, self.split, entry, validate=False))
        return shards

    def check_inside(self, path: str) -> None:
        """Refuse a shard path whose directory resolves outside ``local`` (a planted symlink)."""
        local = os.path.realpath(self.local)
        where = os.path.realpath(os.path.dirname(path))
        if where != local and not where.startswith(local + os.sep):
            raise ShardFileError(f'{path} resolves to {where}, outside the cache directory '
                                 f'local={self.local!r} (a symlinked directory?): refusing to '
                                 f'read or write there.')

    def prepare_shard(self, shard: Reader) -> int:
        """Make ``shard``'s raw files present locally; returns the bytes it now takes on disk."""
        for raw, zipped in shard.file_pairs:
            raw_path = shard.path(raw)
            self.check_inside(raw_path)
            if _has_size(raw_path, raw['bytes']):
                continue
            if zipped is None:
                self._fetch_checked(shard, raw)
                continue
            zip_path = shard.path(zipped)
            if not _has_size(zip_path, zipped['bytes']):
                self._fetch_checked(shard, zipped)
            try:
                decompress_file(zip_path, raw_path, shard.compression,  # type: ignore[arg-type]
                                raw['bytes'])
            except ShardFileError:
                if not self.has_remote:
                    raise
                os.remove(zip_path)  # A damaged cached copy: fetch it once more.
                self._fetch_checked(shard, zipped)
                decompress_file(zip_path, raw_path, shard.compression,  # type: ignore[arg-type]
                                raw['bytes'])
            if not self.safe_keep_zip:
                os.remove(zip_path)
        return shard.get_persistent_size(self.safe_keep_zip)

    def _fetch_checked(self, shard: Reader, info: dict[str, Any]) -> None:
        """Download one shard file, verified against its index entry.

        Its size, and its checksum when ``validate_hash`` is set, must match; a wrong download is
        fetched again and never reaches its final path.
        """
        algo = self.validate_hash
        expected = info.get('hashes', {}).get(algo) if algo else None
        if algo and expected is None:
            raise ValueError(f'validate_hash={algo!r}, but the index entry of '
                             f'{info["basename"]} holds only {sorted(info.get("hashes", {}))}.')
        check = hash_check(algo, expected) if algo else None
        if not self.has_remote:
            path = self.download_file(info['basename'])
            problem = None if _has_size(path, info['bytes']) else \
                f'has {os.path.getsize(path)} bytes, expected {info["bytes"]}'
            problem = problem or (check(path) if check else None)
            if problem:
                raise ShardFileError(f'{path} {problem}.')
            return
        url = _join(self.remote, self.split, info['basename'])  # type: ignore[arg-type]
        download_file(url, os.path.join(self.local_dir, info['basename']),
                      retries=self.download_retry, timeout=self.download_timeout,
                      size=info['bytes'], check=check)


def _has_size(path: str, size: int) -> bool:
    """Whether ``path`` is a regular file (not a symlink) of ``size`` bytes."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size == size


# Stream classes by name, for StreamingDataset(stream_name=..., stream_config=...).
streams_registry: TypedRegistry[type[Stream]] = TypedRegistry(
    ('streaming', 'streams_registry'), entry_points=True, items={'stream': Stream})
