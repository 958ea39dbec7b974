"""Data files streamed as they are (Parquet, JSON Lines, ...): how each kind is indexed.

A *source format* turns one data file into *units*, the pieces that can be fetched alone (a
Parquet row group, a range of JSONL lines), from metadata only: a Parquet footer, one pass over
a JSONL file's newlines. Each unit becomes an ordinary shard entry (``"format": "parquet"``...)
whose ``raw_data`` is the local file the unit's byte ``ranges`` of the source make, read by the
reader registered under the same name. This layer does no I/O: an indexer is handed a way to read
ranges (``read(start, end)``) or the file's chunks in order, by the dataset layer.

Register a source format with ``register_source``; see ``docs/sources/README.md``.
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable, Iterator

from streaming.errors import SchemaMismatchError

__all__ = ['ChunkFile', 'SourceFormat', 'register_source', 'get_source', 'get_sources',
           'source_for_name', 'unit_basename', 'check_schemas']

ReadRange = Callable[[int, int], bytes]


class SourceFormat:
    """How one kind of data file is indexed into units and turned into shard entries.

    ``extensions``: the file name endings of this kind. ``streamed``: whether indexing needs one
    pass over the whole file (``index_chunks``) rather than a few ranges (``index_ranges``).
    A file record is a JSON object: at least ``units``, a list of objects with ``samples`` and
    ``ranges``, and ``schema`` (column name -> type name, or None when there is none).
    """

    name: str = ''
    extensions: tuple[str, ...] = ()
    ignored_prefixes: tuple[str, ...] = ()  # File names (not paths) starting so are skipped.
    streamed: bool = False
    options: dict[str, Any] = {}  # Indexing options with defaults (part of the sidecar's key).
    # Bumped when the indexer records more or checks more: older sidecar records are redone.
    record_version: int = 1

    def index_ranges(self, where: str, size: int, read: ReadRange,
                     options: dict[str, Any]) -> dict[str, Any]:
        """The file record of a file of ``size`` bytes, from ranges read with ``read``."""
        raise NotImplementedError

    def index_chunks(self, where: str, size: int, chunks: Iterator[bytes],
                     options: dict[str, Any]) -> dict[str, Any]:
        """The file record of a file of ``size`` bytes, from one pass over its ``chunks``."""
        raise NotImplementedError

    def entries(self, record: dict[str, Any], path: str,
                columns: list[str] | None) -> list[dict[str, Any]]:
        """Shard entries of one file record (``path``: the file relative to the dataset)."""
        out = []
        for number, unit in enumerate(record['units']):
            if not unit['samples']:
                continue
            ranges = self.unit_ranges(record, unit, columns)
            entry = {'format': self.name, 'version': 2, 'samples': unit['samples'],
                     'compression': None, 'hashes': [], 'size_limit': None, 'zip_data': None,
                     'raw_data': {'basename': unit_basename(path, number, record, columns),
                                  'bytes': sum(length for _, length in ranges), 'hashes': {}},
                     'source': path, 'source_size': record['size'],
                     'source_etag': record.get('etag'), 'unit': number, 'ranges': ranges}
            if columns is not None:
                entry['columns'] = list(columns)
            entry.update(self.entry_extras(record, unit, columns))
            out.append(entry)
        return out

    def check_listing(self, root: str, names: list[str],
                      read: Callable[[str], bytes | None]) -> None:
        """Refuse (``SourceFileError``) a listing that lacks files the data's own metadata names.

        ``names``: the data files found, relative to ``root``; ``read(name)``: the bytes of a
        file there (relative to ``root``), None if there is none. By default nothing is checked.
        """

    def merged(self, record: dict[str, Any], limit: int,
               columns: list[str] | None) -> dict[str, Any]:
        """``record`` with runs of consecutive units of up to ``limit`` bytes made one.

        (Bytes of ``columns``; read in place, a unit is only what is decoded at once.) By
        default the record as it is.
        """
        return record

    def unit_ranges(self, record: dict[str, Any], unit: dict[str, Any],
                    columns: list[str] | None) -> list[list[int]]:
        """The ``[start, length]`` byte ranges of the source that make ``unit``'s local file."""
        return [list(r) for r in unit['ranges']]

    def entry_extras(self, record: dict[str, Any], unit: dict[str, Any],
                     columns: list[str] | None) -> dict[str, Any]:
        """Further keys of a unit's shard entry (what its reader needs)."""
        return {}


_sources: dict[str, SourceFormat] = {}


def register_source(source: SourceFormat, replace: bool = False) -> SourceFormat:
    """Make ``source`` (a ``SourceFormat``) usable by ``SourceStream`` and ``streaming index``."""
    if source.name in _sources and not replace:
        raise ValueError(f'register_source: source format {source.name!r} is already '
                         f'registered; pass replace=True to replace it.')
    _sources[source.name] = source
    return source


def get_sources() -> list[str]:
    """The names of the registered source formats, sorted."""
    return sorted(_sources)


def get_source(name: str) -> SourceFormat:
    """The source format ``name``; ``ValueError`` naming the known ones if there is none."""
    try:
        return _sources[name]
    except KeyError:
        raise ValueError(f'format={name!r} is not a source format; expected one of '
                         f'{get_sources()}.') from None


def source_for_name(name: str) -> SourceFormat | None:
    """The source format whose extensions end ``name``, if any."""
    for source in _sources.values():
        if name.endswith(source.extensions):
            return source
    return None


def unit_basename(path: str, number: int, record: dict[str, Any],
                  columns: list[str] | None) -> str:
    """The local file name of unit ``number`` of ``path``: unique per file version and columns."""
    key = f'{record["size"]}|{record.get("etag")}|{columns}'.encode()
    tag = hashlib.blake2s(key, digest_size=5).hexdigest()
    return f'{path}.u{number:05d}.{tag}'


def check_schemas(records: list[tuple[str, dict[str, Any]]],
                  columns: list[str] | None) -> list[str] | None:
    """The columns every file must have (``columns``, or all of the first file's), checked.

    ``records``: (path, file record) pairs. Files without a schema (JSONL) are skipped. Raises
    ``SchemaMismatchError`` naming the file and column that lacks or retypes a column.
    """
    typed = [(path, rec['schema']) for path, rec in records if rec.get('schema') is not None]
    if not typed:
        return columns
    first_path, first = typed[0]
    wanted = list(columns) if columns is not None else list(first)
    for path, schema in typed:
        for name in wanted:
            if name not in schema:
                raise SchemaMismatchError(f'{path} has no column {name!r} (its columns: '
                                          f'{sorted(schema)}); ' +
                                          (f'it is in {first_path}.' if name in first else
                                           'pass columns=[...] that every file has.'))
            if name in first and schema[name] != first[name]:
                raise SchemaMismatchError(f'{path}: column {name!r} is {schema[name]} but '
                                          f'{first[name]} in {first_path}; files streamed '
                                          f'together must agree on each column\'s type.')
    return wanted


class ChunkFile:
    """A read-only, forward-only file object over an iterator of chunks."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self.chunks, self.buffer, self.pos = chunks, bytearray(), 0

    def read(self, n: int = -1) -> bytes:
        while n < 0 or len(self.buffer) < n:
            chunk = next(self.chunks, None)
            if chunk is None:
                break
            self.buffer += chunk
        size = len(self.buffer) if n < 0 else min(n, len(self.buffer))
        out = bytes(self.buffer[:size])
        del self.buffer[:size]
        self.pos += size
        return out

    def unread(self, data: bytes) -> None:
        """Put ``data`` (just read) back in front."""
        self.buffer[:0] = data
        self.pos -= len(data)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    @property
    def closed(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def drain(self) -> None:
        """Skip to the end."""
        self.pos += len(self.buffer)
        self.buffer.clear()
        for chunk in self.chunks:
            self.pos += len(chunk)

    def tell(self) -> int:
        return self.pos
