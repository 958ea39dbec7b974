"""``Stream``: one source of shards (a remote and/or local directory) and its weight in the mix."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Sequence
from typing import Any

import numpy as np

from streaming.dataset.cache_dirs import default_local
from streaming.dataset.index_cache import (
    IndexDict,
    IndexSummary,
    LazyShards,
    index_key,
    load_summary,
    save_summary,
)
from streaming.dataset.index_scan import scan_index
from streaming.dataset.local_scan import local_shard_usage
from streaming.errors import MissingLocalIndexError, ShardFileError
from streaming.format import Reader, reader_from_json
from streaming.format.compression import decompress_file
from streaming.format.index import INDEX_BASENAME, load_index, read_index_bytes
from streaming.format.registry import check_safe_encodings
from streaming.format.writer import make_output_dir
from streaming.registry import TypedRegistry
from streaming.storage.download import download_file, hash_check
from streaming.storage.registry import join_url

logger = logging.getLogger(__name__)

__all__ = ['Stream', 'check_download_settings', 'default_local', 'streams_registry']

_DEFAULTS = {'download_retry': 2, 'download_timeout': 60.0, 'validate_hash': None,
             'keep_zip': False}


def check_download_settings(download_retry: int | None, download_timeout: float | None) -> None:
    """Refuse a negative retry count or a non-positive timeout (None means unset)."""
    if download_retry is not None and download_retry < 0:
        raise ValueError(f'download_retry must be >= 0, got {download_retry}.')
    if download_timeout is not None and download_timeout <= 0:
        raise ValueError(f'download_timeout must be > 0, got {download_timeout}.')


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
            local = default_local(remote, split)
            logger.info('Stream %s caches in %s (local=None).', remote, local)
        self.local = local
        # The weights as given; ``apply_weights`` fills in all three once stream sizes are known.
        self.weights_given = {'proportion': proportion, 'repeat': repeat, 'choose': choose}
        self.proportion, self.repeat, self.choose = proportion, repeat, choose
        self._given = {'download_retry': download_retry, 'download_timeout': download_timeout,
                       'validate_hash': validate_hash, 'keep_zip': keep_zip}
        self.inherit_download_settings({})

    # Whether get_shards may write a binary summary of the index beside it (see index_cache).
    write_index_summary = True

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
        """Take the dataset's ``split`` if this stream has none, and its download settings.

        The dataset calls this (the reference's name, so subclasses overriding it still work).
        """
        if not self.split:
            self.split = default.get('split') or ''
        self.inherit_download_settings(default)

    # ---- weights (classmethods, so a Stream subclass may override them) ----------------------
    @classmethod
    def validate_weights(cls, streams: Sequence[Stream]) -> tuple[bool, bool]:
        """(whether the weights are relative (``proportion``), whether none is given at all).

        Raises ValueError if a stream gives more than one weight or the kinds are mixed.
        """
        given = [getattr(s, 'weights_given', None) or
                 {k: getattr(s, k, None) for k in ('proportion', 'repeat', 'choose')}
                 for s in streams]
        for stream_id, weights in enumerate(given):
            if sum(v is not None for v in weights.values()) > 1:
                raise ValueError(f'Stream {stream_id} gives more than one of proportion, repeat '
                                 f'and choose.')
        relative = [w['proportion'] is not None for w in given]
        if any(relative) and not all(relative):
            raise ValueError(f'Relative (proportion) and absolute (repeat, choose, none) stream '
                             f'weights cannot be mixed: streams '
                             f'{[i for i, r in enumerate(relative) if not r]} lack proportion.')
        unspecified = not any(v is not None for w in given for v in w.values())
        return bool(relative and all(relative)), unspecified

    @classmethod
    def apply_weights(cls, streams: Sequence[Stream], samples_per_stream: np.ndarray,
                      choose_per_epoch: int | None, seed: int) -> int:
        """Derive every stream's ``proportion``, ``repeat`` and ``choose``; return the epoch size.

        The dataset calls this on its first stream's class and reads each stream's ``choose``
        afterwards, so an override decides how many samples each stream gives per epoch.
        """
        # The order package owns the arithmetic.
        from streaming.order import apply_weights, stream_proportions
        cls.validate_weights(streams)
        given = [getattr(s, 'weights_given', None) or
                 {k: getattr(s, k, None) for k in ('proportion', 'repeat', 'choose')}
                 for s in streams]
        sizes = np.asarray(samples_per_stream, np.int64)
        choose = apply_weights(
            stream_sizes=sizes, proportion=[w['proportion'] for w in given],
            repeat=[w['repeat'] for w in given], choose=[w['choose'] for w in given],
            epoch_size=choose_per_epoch, seed=seed)
        total = int(choose.sum())
        proportion = stream_proportions(sizes, choose, epoch_size=choose_per_epoch,
                                        proportion=[w['proportion'] for w in given])
        with np.errstate(divide='ignore', invalid='ignore'):
            repeat = np.where(sizes > 0, choose / np.maximum(sizes, 1), 0.0)
        for stream, p, r, c in zip(streams, proportion.tolist(), repeat.tolist(),
                                   choose.tolist()):
            stream.proportion, stream.repeat, stream.choose = p, r, int(c)
        return total

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
        url = join_url(self.remote, self.split, basename)  # type: ignore[arg-type]
        # The index is small: one GET, no HEAD for its size first (a round trip saved).
        return download_file(url, os.path.join(self.local_dir, basename),
                             retries=self.download_retry, timeout=self.download_timeout,
                             one_get=basename == INDEX_BASENAME)

    def get_index(self, fetch: bool) -> dict[str, Any]:
        """This stream's index; ``fetch`` re-downloads it from the remote first.

        If that download fails but a local copy exists (a warm cache), the local copy is used
        with a warning, so a restart does not depend on the remote being up. Without a remote, a
        missing local index raises ``MissingLocalIndexError`` (also the reference's RuntimeError).
        The index is parsed only if no current binary summary of it is there (see
        ``index_cache``); its ``"shards"`` are then parsed when first looked up.
        """
        path = os.path.join(self.local_dir, INDEX_BASENAME)
        if fetch and self.has_remote:
            make_output_dir(os.path.normpath(self.local_dir), 'local')
            try:
                self.download_file(INDEX_BASENAME)
            except Exception as error:
                if not os.path.exists(path):
                    raise
                logger.warning('Could not fetch %s from %s (%s); using the local copy %s.',
                               INDEX_BASENAME, self.remote, error, path)
        elif not self.has_remote and not os.path.exists(path):
            raise MissingLocalIndexError(f'No index file at {path}, and the stream has no remote '
                                         f'to download it from.')
        text = read_index_bytes(path)
        key = index_key(path, text)
        summary = load_summary(self.local_dir, key)
        if summary is not None:
            return IndexDict(path, key, summary)
        summary = scan_index(path, text)  # None if not a plain, valid index: then load it.
        if summary is not None:
            return IndexDict(path, key, summary, unsaved=True)
        return IndexDict(path, key, None, load_index(path, text))

    def get_shards(self, index: dict[str, Any], allow_unsafe_types: bool) -> Sequence[Reader]:
        """A reader per shard of ``index``; pickled columns need ``allow_unsafe_types``.

        With a binary summary of the index, each reader is built when its shard is first used.
        """
        path = os.path.join(self.local_dir, INDEX_BASENAME)
        summary = getattr(index, 'summary', None)
        key = getattr(index, 'key', None)
        if summary is None and key is not None:  # Parsed just now: summarise it.
            summary = IndexSummary.build(index['shards'])
            if summary is not None and self.write_index_summary:
                save_summary(self.local_dir, key, summary)
        elif getattr(index, 'unsaved', False) and self.write_index_summary:
            save_summary(self.local_dir, key, summary)  # type: ignore[arg-type]
        if summary is not None:
            if not allow_unsafe_types and summary.unsafe.any():
                first = int(np.flatnonzero(summary.unsafe)[0])
                check_safe_encodings(f'{path}, shard {first}', summary.entry(first), False)
            return LazyShards(summary, self.local, self.split, allow_unsafe_types, path)
        shards = []
        for i, entry in enumerate(index['shards']):
            check_safe_encodings(f'{path}, shard {i}', entry, allow_unsafe_types)
            shards.append(reader_from_json(self.local, self.split, entry, validate=False))
        return shards

    def check_inside(self, path: str) -> None:
        """Refuse a shard path whose directory resolves outside ``local`` (a planted symlink)."""
        directory = os.path.dirname(path)
        if directory == self.local or directory + os.sep == self.local:
            return  # ``local`` itself: it resolves to where ``local`` does, whatever links.
        local = os.path.realpath(self.local)
        where = os.path.realpath(directory)
        if where != local and not where.startswith(local + os.sep):
            raise ShardFileError(f'{path} resolves to {where}, outside the cache directory '
                                 f'local={self.local!r} (a symlinked directory?): refusing to '
                                 f'read or write there.')

    def get_index_size(self) -> int:
        """Bytes of the local ``index.json`` (the cache counts it against ``cache_limit``)."""
        return os.stat(os.path.join(self.local_dir, INDEX_BASENAME)).st_size

    def set_up_local(self, shards: Sequence[Reader], cache_usage_per_shard: np.ndarray) -> None:
        """Fill ``cache_usage_per_shard`` with the bytes each of ``shards`` takes in the cache.

        0 means the shard is not (completely, or trustworthily) local. The dataset's first rank
        on each node calls this once per stream; a subclass may override it.
        """
        cache_usage_per_shard[:] = local_shard_usage(shards, self.validate_hash, self.has_remote,
                                                     self.safe_keep_zip)

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
        url = join_url(self.remote, self.split, info['basename'])  # type: ignore[arg-type]
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
