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
from streaming.sources.registry import SourceFormat, get_source, get_sources, source_for_name
from streaming.sources.remote import list_objects, read_chunks, read_range
from streaming.storage.objects import ObjectInfo
from streaming.storage.registry import is_remote_url, join_url

logger = logging.getLogger(__name__)

__all__ = ['build_sidecar', 'index_file', 'index_files', 'list_sources', 'load_sidecar',
           'read_optional', 'sidecar_name', 'source_options', 'stale_files', 'stored_sidecar']

SIDECAR_VERSION = 1
INDEX_THREADS = 16


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
