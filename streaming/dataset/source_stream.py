"""``SourceStream``: a directory or bucket prefix of Parquet/JSONL/... files, streamed as it is.

The dataset's side of in-place sources (``streaming.sources``): from the sidecar index
(``streaming.sources.sidecar``) and the ``columns`` asked for, the stream writes an ordinary
``index.json`` in its cache directory, one shard entry per unit; from there every part of the
dataset (order, resumption, mixing, the node-wide cache and its eviction, ``ds[i]``) works as
for MDS shards. A unit's local file is fetched with ranged GETs pinned to the indexed size and
ETag, except for files already on a local disk, which formats that can (Parquet) read where they
are: nothing is copied into the cache, the reader maps the file itself (checked against the
indexed size and ETag) and such units take no cache space.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Sequence

from streaming.dataset.cache_dirs import setup_cache_dir
from streaming.dataset.stream import Stream, default_local, streams_registry
from streaming.errors import SourceFileError
from streaming.fileio import atomic_write
from streaming.format.index import INDEX_BASENAME, dump_index
from streaming.format.reader import Reader
from streaming.sources.registry import SourceFormat, get_source
from streaming.sources.remote import fetch_ranges
from streaming.sources.sidecar import (
    find_sidecar,
    index_files,
    read_optional,
    save_sidecar,
    shard_entries,
    sidecar_name,
)
from streaming.storage.objects import ObjectInfo
from streaming.storage.registry import join_url

logger = logging.getLogger(__name__)

__all__ = ['SourceStream']

class SourceStream(Stream):
    """A stream over data files as they are: Parquet, JSON Lines (and any ``register_source``).

    ``remote`` (or, without it, ``local``) is the directory or prefix holding the files;
    ``local`` is the cache directory (default: one derived from the source, the format and the
    columns). ``format``: the files' format (default: told by their extensions). ``columns``: the
    columns to read (Parquet: only their chunks are fetched); default all. ``refresh``: list the
    files at start and re-index those that changed (False trusts an existing sidecar index).
    ``options``: indexing options of the format (JSONL: ``unit_bytes``). ``in_place``: read
    files on a local disk where they are, not copied into the cache (default; only formats whose
    reader can, Parquet; False copies each unit's ranges into the cache as for remote files);
    such units are runs of indexed units of up to 64 MiB unless ``options`` sets ``unit_bytes``.
    The other parameters are ``Stream``'s.
    """

    def __init__(self, *, remote: str | None = None, local: str | None = None,
                 split: str | None = None, format: str | None = None,
                 columns: list[str] | None = None, refresh: bool = True,
                 options: dict[str, Any] | None = None, in_place: bool = True,
                 **kwargs: Any) -> None:
        if remote is None and local is None:
            raise ValueError('SourceStream needs remote (or local): where the files are.')
        if remote is None:
            remote, local = local, None
        self.source = get_source(format) if format is not None else None
        if columns is not None and (isinstance(columns, str) or not all(
                isinstance(c, str) for c in columns) or not columns):
            raise ValueError(f'columns must be a non-empty list of column names, got '
                             f'{columns!r}.')
        self.columns = list(columns) if columns is not None else None
        self.refresh = refresh
        self.in_place = bool(in_place)
        self.options_given = dict(options or {})
        if local is None:
            local = default_local(f'{remote}|{split}|{format}|{self.columns}')
        super().__init__(remote=remote, local=local, split=split, **kwargs)

    @property
    def root(self) -> str:
        """Where the data files are (``remote`` joined with ``split``)."""
        return join_url(self.remote, self.split)  # type: ignore[arg-type]

    def _cached_sidecar(self, source: SourceFormat) -> str:
        return os.path.join(setup_cache_dir(self.local_dir), sidecar_name(source))

    def refresh_sidecar(self) -> dict[str, Any]:
        """List the files, re-index the changed ones, save the sidecar; returns it."""
        source, sidecar, changed, previous = index_files(
            self.root, self.source, self.options_given, self._cached_sidecar,
            self.download_timeout, self.download_retry)
        self.source = source
        if changed or previous is None:
            where = save_sidecar(self.root, sidecar, self._cached_sidecar(source))
            logger.info('Indexed %d of %d %s files under %s (sidecar %s).', changed,
                        len(sidecar['files']), source.name, self.root, where)
        return sidecar

    def _stored_sidecar(self) -> dict[str, Any]:
        sidecar = find_sidecar(self.root, self.source, self._cached_sidecar,
                               self.download_timeout)
        if sidecar is None:
            return self.refresh_sidecar()
        self.source = get_source(sidecar['format'])
        return sidecar

    def get_index(self, fetch: bool) -> dict[str, Any]:
        """Write ``index.json`` (one entry per unit) in the cache from the sidecar, then load it.

        Only with ``fetch`` (the node's first rank); the others read what it wrote.
        """
        if fetch:
            sidecar = self.refresh_sidecar() if self.refresh else self._stored_sidecar()
            entries = shard_entries(self.root, sidecar, self.columns, self.in_place,
                                    'unit_bytes' in self.options_given)
            text = dump_index(entries).encode()
            path = os.path.join(self.local_dir, INDEX_BASENAME)
            os.makedirs(self.local_dir, exist_ok=True)
            if read_optional(path, self.download_timeout) != text:
                atomic_write(path, text)
        return super().get_index(fetch=False)

    def get_shards(self, index: dict[str, Any], allow_unsafe_types: bool) -> Sequence[Reader]:
        """``Stream.get_shards``, with the decoder of the files' format imported now."""
        shards = super().get_shards(index, allow_unsafe_types)
        if len(shards):
            warm_up = getattr(type(shards[0]), 'warm_up', None)
            if warm_up is not None:
                warm_up()
        return shards

    def prepare_shard(self, shard: Reader) -> int:
        """A unit read in place: its file checked against the index, nothing fetched (0 bytes)."""
        if getattr(shard, 'source_root', None) is None:
            return super().prepare_shard(shard)
        shard.check_source()  # type: ignore[attr-defined]
        return 0

    def _fetch_checked(self, shard: Reader, info: dict[str, Any]) -> None:
        """Fetch a unit: its byte ranges of the source, pinned to the indexed version."""
        ranges = getattr(shard, 'ranges', None)
        if ranges is None:
            raise SourceFileError(f'{shard!r} is not a unit of a source file.')
        expect = ObjectInfo(shard.source_size, shard.source_etag)  # type: ignore[attr-defined]
        fetch_ranges(join_url(self.root, shard.source), shard.path(info),  # type: ignore[attr-defined]
                     ranges, expect=expect, timeout=self.download_timeout,
                     retries=self.download_retry)

    @property
    def has_remote(self) -> bool:
        return True  # The files themselves: a unit can always be fetched again.


streams_registry.register('source', func=SourceStream)
