"""``SourceStream``: a directory or bucket prefix of Parquet/JSONL/... files, streamed as it is.

The files are indexed from their metadata (see ``streaming.format.sources``) into a *sidecar
index*, ``_shardflow_index.<format>.json``: per file its size, ETag and units. It is written
beside the data when that is a writable local directory (``streaming index URL`` also uploads it
beside remote data), else in the stream's cache, and reused by every rank and node. Each start
lists the files (one listing per 1,000 objects on S3) and re-indexes only those whose size or
ETag changed. From the sidecar and the ``columns`` asked for, the stream writes an ordinary
``index.json`` in its cache directory, one shard entry per unit; from there every part of the
dataset (order, resumption, mixing, the node-wide cache and its eviction, ``ds[i]``) works as
for MDS shards. A unit's local file is fetched with ranged GETs pinned to the indexed size and
ETag, except for files already on a local disk, which formats that can (Parquet) read where they
are: nothing is copied into the cache, the reader maps the file itself (checked against the
indexed size and ETag) and such units take no cache space.
"""

from __future__ import annotations

import json
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence

from streaming.dataset.cache_dirs import setup_cache_dir
from streaming.dataset.stream import Stream, _join, default_local, streams_registry
from streaming.errors import IndexFileError, SourceFileError
from streaming.fileio import atomic_write
from streaming.format.index import INDEX_BASENAME, dump_index
from streaming.format.reader import Reader
from streaming.format.registry import get_format
from streaming.format.sources import (
    SourceFormat,
    check_schemas,
    get_source,
    get_sources,
    source_for_name,
)
from streaming.storage.local import local_path
from streaming.storage.objects import ObjectInfo
from streaming.storage.registry import is_remote_url
from streaming.storage.sources import fetch_ranges, list_objects, read_chunks, read_range

logger = logging.getLogger(__name__)

__all__ = ['SourceStream', 'build_sidecar', 'index_files', 'list_sources', 'load_sidecar',
           'sidecar_name', 'source_options']

SIDECAR_VERSION = 1
INDEX_THREADS = 16
# Units read in place are runs of the indexed units of up to this many bytes (as an MDS shard):
# a shuffled batch then visits a few large units rather than many small ones.
IN_PLACE_UNIT_BYTES = 64 << 20


def sidecar_name(source: SourceFormat) -> str:
    """The sidecar index's file name for files of ``source``'s format."""
    return f'_shardflow_index.{source.name}.json'


def list_sources(root: str, source: SourceFormat | None, timeout: float = 60.0,
                 retries: int = 2) -> tuple[SourceFormat, list[tuple[str, ObjectInfo]]]:
    """(format, [(path relative to ``root``, size and ETag)]) of the data files under ``root``.

    ``source`` None: the format is the one whose extensions the files have (exactly one must
    match). Names starting with ``_`` or ``.`` (sidecars, ``_SUCCESS``, hidden files) are skipped.
    """
    prefix = root.rstrip('/') + '/'
    found = []
    for url, info in list_objects(prefix, timeout=timeout, retries=retries):
        rel = url[len(prefix):] if url.startswith(prefix) else os.path.relpath(url, root)
        if any(part.startswith(('_', '.')) for part in rel.split('/')):
            continue
        found.append((rel, info))
    if source is None:
        kinds = {s.name for rel, _ in found if (s := source_for_name(rel)) is not None}
        if len(kinds) != 1:
            raise IndexFileError(f'{root}: cannot tell the format of its files (found formats '
                                 f'{sorted(kinds)} among {len(found)} files); pass format= one '
                                 f'of {get_sources()}.')
        source = get_source(kinds.pop())
    files = [(rel, info) for rel, info in found if rel.endswith(source.extensions) and
             not rel.rsplit('/', 1)[-1].startswith(source.ignored_prefixes)]
    if not files:
        raise IndexFileError(f'{root}: no {source.name} files (ending {source.extensions}) '
                             f'found.')
    return source, files


def _index_one(root: str, source: SourceFormat, rel: str, info: ObjectInfo,
               options: dict[str, Any], timeout: float, retries: int) -> dict[str, Any]:
    url = _join(root, rel)
    size = int(info.size or 0)
    if source.streamed:
        record = source.index_chunks(url, size, read_chunks(url, expect=info, timeout=timeout),
                                     options)
    else:
        def read(start: int, end: int) -> bytes:
            return read_range(url, start, end, expect=info, timeout=timeout, retries=retries)
        record = source.index_ranges(url, size, read, options)
    return {**record, 'size': size, 'etag': info.etag}


def build_sidecar(root: str, source: SourceFormat, files: list[tuple[str, ObjectInfo]],
                  previous: dict[str, Any] | None, options: dict[str, Any],
                  timeout: float = 60.0, retries: int = 2) -> tuple[dict[str, Any], int]:
    """(the sidecar index of ``files``, how many files were (re)indexed).

    Records of ``previous`` whose file has the same size and ETag are kept as they are (if
    ``previous`` was built with the same options and the format's ``record_version``).
    """
    old = {}
    if previous and previous.get('format') == source.name and \
            previous.get('options') == options and previous.get('version') == SIDECAR_VERSION \
            and previous.get('record_version', 1) == source.record_version:
        old = previous.get('files', {})
    records: dict[str, Any] = {}
    todo = []
    for rel, info in files:
        record = old.get(rel)
        if record is not None and record.get('size') == info.size and \
                record.get('etag') == info.etag:
            records[rel] = record
        else:
            todo.append((rel, info))
    if todo:
        with ThreadPoolExecutor(min(INDEX_THREADS, len(todo))) as pool:
            done = pool.map(lambda item: _index_one(root, source, item[0], item[1], options,
                                                    timeout, retries), todo)
            for (rel, _), record in zip(todo, done):
                records[rel] = record
    ordered = {rel: records[rel] for rel, _ in files}
    return ({'version': SIDECAR_VERSION, 'format': source.name, 'options': options,
             'record_version': source.record_version, 'files': ordered}, len(todo))


def load_sidecar(text: bytes | None, where: str) -> dict[str, Any] | None:
    """A sidecar's content, or None if there is none or it is not one (then it is rebuilt)."""
    if text is None:
        return None
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nested too deep to be a sidecar.
        logger.warning('%s is not valid JSON: rebuilding it.', where)
        return None
    return obj if isinstance(obj, dict) and isinstance(obj.get('files'), dict) else None


def _read_optional(url: str, timeout: float) -> bytes | None:
    try:
        if not is_remote_url(url):
            with open(url, 'rb') as f:
                return f.read()
        from streaming.storage import fetch_bytes
        return fetch_bytes(url, retries=1, timeout=timeout)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None


def source_options(source: SourceFormat, given: dict[str, Any]) -> dict[str, Any]:
    """The format's indexing options with ``given`` applied; unknown ones are refused."""
    unknown = set(given) - set(source.options)
    if unknown:
        raise ValueError(f'options {sorted(unknown)} are not options of format '
                         f'{source.name!r} (it has {sorted(source.options)}).')
    return {**source.options, **given}


def index_files(root: str, source: SourceFormat | None, options: dict[str, Any],
                cached: Callable[[SourceFormat], str] | None = None, timeout: float = 60.0,
                retries: int = 2) -> tuple[SourceFormat, dict[str, Any], int,
                                           dict[str, Any] | None]:
    """List the files under ``root`` and index those the stored sidecar does not cover.

    The stored sidecar is the one at ``cached(format)`` (a cache), else the one beside the
    data. Returns (format, the sidecar, how many files were (re)indexed, the stored sidecar).
    """
    source, files = list_sources(root, source, timeout, retries)
    source.check_listing(root, [rel for rel, _ in files],
                         lambda rel: _read_optional(_join(root, rel), timeout))
    previous = None
    for where in ([cached(source)] if cached else []) + [_join(root, sidecar_name(source))]:
        previous = load_sidecar(_read_optional(where, timeout), where)
        if previous is not None:
            break
    sidecar, changed = build_sidecar(root, source, files, previous,
                                     source_options(source, options), timeout, retries)
    return source, sidecar, changed, previous


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
        return _join(self.remote, self.split)  # type: ignore[arg-type]

    def in_place_root(self, source: SourceFormat) -> str | None:
        """The local directory whose ``source`` files are read in place, if they are."""
        root = self.root
        if not self.in_place or (is_remote_url(root) and not root.startswith('file://')) or \
                not getattr(get_format(source.name).reader, 'reads_in_place', False):
            return None
        return os.path.abspath(local_path(root))

    def _cached_sidecar(self, source: SourceFormat) -> str:
        return os.path.join(setup_cache_dir(self.local_dir), sidecar_name(source))

    def refresh_sidecar(self) -> dict[str, Any]:
        """List the files, re-index the changed ones, save the sidecar; returns it."""
        source, sidecar, changed, previous = index_files(
            self.root, self.source, self.options_given, self._cached_sidecar,
            self.download_timeout, self.download_retry)
        self.source = source
        if changed or previous is None:
            text = json.dumps(sidecar, separators=(',', ':'))
            beside = _join(self.root, sidecar_name(source))
            written = False
            if not is_remote_url(self.root):
                try:
                    atomic_write(beside, text)
                    written = True
                except OSError:
                    pass
            cached = self._cached_sidecar(source)
            os.makedirs(os.path.dirname(cached), exist_ok=True)
            atomic_write(cached, text)
            logger.info('Indexed %d of %d %s files under %s (sidecar %s).', changed,
                        len(sidecar['files']), source.name, self.root,
                        beside if written else cached)
        return sidecar

    def _stored_sidecar(self) -> dict[str, Any]:
        names = [self.source] if self.source is not None else \
            [get_source(name) for name in get_sources()]
        for source in names:
            for where in (self._cached_sidecar(source), _join(self.root, sidecar_name(source))):
                sidecar = load_sidecar(_read_optional(where, self.download_timeout), where)
                if sidecar is not None:
                    self.source = get_source(sidecar['format'])
                    return sidecar
        return self.refresh_sidecar()

    def get_index(self, fetch: bool) -> dict[str, Any]:
        """Write ``index.json`` (one entry per unit) in the cache from the sidecar, then load it.

        Only with ``fetch`` (the node's first rank); the others read what it wrote.
        """
        if fetch:
            sidecar = self.refresh_sidecar() if self.refresh else self._stored_sidecar()
            source = get_source(sidecar['format'])
            records = list(sidecar['files'].items())
            columns = check_schemas(records, self.columns)
            in_place = self.in_place_root(source)
            if in_place is not None and 'unit_bytes' not in self.options_given:
                # Larger units unless asked otherwise: nothing is fetched, fewer to visit.
                records = [(rel, source.merged(record, IN_PLACE_UNIT_BYTES, columns))
                           for rel, record in records]
            entries = [entry for rel, record in records
                       for entry in source.entries(record, rel, columns)]
            if in_place is not None:  # Nothing of it in the cache: it takes no cache space.
                for entry in entries:
                    entry['source_root'] = in_place
                    entry['raw_data']['bytes'] = 0
            if not entries:
                raise IndexFileError(f'{self.root}: its {len(records)} {source.name} files '
                                     f'hold no samples.')
            text = dump_index(entries).encode()
            path = os.path.join(self.local_dir, INDEX_BASENAME)
            os.makedirs(self.local_dir, exist_ok=True)
            if _read_optional(path, self.download_timeout) != text:
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
        fetch_ranges(_join(self.root, shard.source), shard.path(info),  # type: ignore[attr-defined]
                     ranges, expect=expect, timeout=self.download_timeout,
                     retries=self.download_retry)

    @property
    def has_remote(self) -> bool:
        return True  # The files themselves: a unit can always be fetched again.


streams_registry.register('source', func=SourceStream)
