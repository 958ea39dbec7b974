"""The sidecar index of a directory or bucket prefix of data files streamed as they are.

The files are indexed from their metadata (see ``streaming.sources.registry``) into a *sidecar
index*, ``_shardflow_index.<format>.json``: per file its size, ETag and units. It is written
beside the data when that is a writable local directory (``streaming index URL`` also uploads it
beside remote data), else in the stream's cache, and reused by every rank and node. Each start
lists the files (one listing per 1,000 objects on S3) and re-indexes only those whose size or
ETag changed. ``SourceStream`` (``streaming.dataset.source_stream``) turns a sidecar into an
ordinary ``index.json``; the CLI's ``index``, ``inspect`` and ``validate`` read and write it
through the functions here.
"""

from __future__ import annotations

import json
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from streaming.errors import IndexFileError
from streaming.fileio import atomic_write
from streaming.format.registry import get_format
from streaming.sources.registry import (
    SourceFormat,
    check_schemas,
    get_source,
    get_sources,
    source_for_name,
)
from streaming.sources.remote import list_objects, read_chunks, read_range
from streaming.storage.local import local_path
from streaming.storage.objects import ObjectInfo
from streaming.storage.registry import is_remote_url, join_url

logger = logging.getLogger(__name__)

__all__ = ['build_sidecar', 'find_sidecar', 'index_file', 'index_files', 'list_sources',
           'load_sidecar', 'read_optional', 'save_sidecar', 'shard_entries', 'sidecar_name',
           'source_options', 'stale_files', 'stored_sidecar']

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


def index_file(root: str, source: SourceFormat, rel: str, info: ObjectInfo,
               options: dict[str, Any], timeout: float, retries: int) -> dict[str, Any]:
    """The sidecar record of one file: its units read from its metadata, its size and ETag."""
    url = join_url(root, rel)
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
            done = pool.map(lambda item: index_file(root, source, item[0], item[1], options,
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


def read_optional(url: str, timeout: float) -> bytes | None:
    """The bytes of the file at ``url`` (a path or a URL), or None if there is none."""
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
                         lambda rel: read_optional(join_url(root, rel), timeout))
    previous = None
    for where in ([cached(source)] if cached else []) + [join_url(root, sidecar_name(source))]:
        previous = load_sidecar(read_optional(where, timeout), where)
        if previous is not None:
            break
    sidecar, changed = build_sidecar(root, source, files, previous,
                                     source_options(source, options), timeout, retries)
    return source, sidecar, changed, previous


def stored_sidecar(root: str) -> tuple[SourceFormat, list[tuple[str, ObjectInfo]],
                                       dict[str, Any] | None]:
    """(format, the files listed, the sidecar stored beside them or None) under ``root``."""
    source, files = list_sources(root, None)
    where = join_url(root, sidecar_name(source))
    return source, files, load_sidecar(read_optional(where, 60.0), where)


def stale_files(files: list[tuple[str, ObjectInfo]], sidecar: dict[str, Any] | None) -> list[str]:
    """The listed files the sidecar has no record of, or a record of another size or ETag."""
    records = (sidecar or {}).get('files', {})
    return [rel for rel, info in files if rel not in records or
            (records[rel].get('size'), records[rel].get('etag')) != (info.size, info.etag)]


def save_sidecar(root: str, sidecar: dict[str, Any], cached: str) -> str:
    """Write ``sidecar`` at ``cached``, and beside the data if ``root`` is a writable directory.

    Returns where the data's readers will find it first: beside the data, else ``cached``.
    """
    text = json.dumps(sidecar, separators=(',', ':'))
    beside = join_url(root, sidecar_name(get_source(sidecar['format'])))
    written = False
    if not is_remote_url(root):
        try:
            atomic_write(beside, text)
            written = True
        except OSError:
            pass
    os.makedirs(os.path.dirname(cached), exist_ok=True)
    atomic_write(cached, text)
    return beside if written else cached


def find_sidecar(root: str, source: SourceFormat | None, cached: Callable[[SourceFormat], str],
                 timeout: float) -> dict[str, Any] | None:
    """The sidecar stored for the files under ``root``, or None if there is none.

    Looked for at ``cached(format)``, then beside the files, for ``source``'s format or (None)
    each registered one.
    """
    candidates = [source] if source is not None else \
        [get_source(name) for name in get_sources()]
    for candidate in candidates:
        for where in (cached(candidate), join_url(root, sidecar_name(candidate))):
            sidecar = load_sidecar(read_optional(where, timeout), where)
            if sidecar is not None:
                return sidecar
    return None


def _in_place_root(root: str, source: SourceFormat) -> str | None:
    """The local directory whose ``source`` files can be read where they are, if they can."""
    if (is_remote_url(root) and not root.startswith('file://')) or \
            not getattr(get_format(source.name).reader, 'reads_in_place', False):
        return None
    return os.path.abspath(local_path(root))


def shard_entries(root: str, sidecar: dict[str, Any], columns: list[str] | None,
                  in_place: bool, unit_bytes_given: bool) -> list[dict[str, Any]]:
    """The ``index.json`` shard entries of the files under ``root``: one per unit of ``sidecar``.

    ``in_place``: units of files on a local disk are read where they are, if their format's
    reader can (they then take no cache space and, unless ``unit_bytes_given``, are runs of
    units of up to ``IN_PLACE_UNIT_BYTES``). Raises ``IndexFileError`` if no unit holds a sample.
    """
    source = get_source(sidecar['format'])
    records = list(sidecar['files'].items())
    columns = check_schemas(records, columns)
    in_place_root = _in_place_root(root, source) if in_place else None
    if in_place_root is not None and not unit_bytes_given:
        # Larger units unless asked otherwise: nothing is fetched, fewer to visit.
        records = [(rel, source.merged(record, IN_PLACE_UNIT_BYTES, columns))
                   for rel, record in records]
    entries = [entry for rel, record in records
               for entry in source.entries(record, rel, columns)]
    if in_place_root is not None:  # Nothing of it in the cache: it takes no cache space.
        for entry in entries:
            entry['source_root'] = in_place_root
            entry['raw_data']['bytes'] = 0
    if not entries:
        raise IndexFileError(f'{root}: its {len(records)} {source.name} files hold no samples.')
    return entries
