"""Parquet files streamed as they are: shards of whole row groups, only the columns asked for.

Indexing reads each file's footer (its last 64 KiB, one more range if the footer is longer)
and records, per row group, its row count and each column chunk's byte range. A unit is a run
of consecutive row groups of one file of about ``unit_bytes`` (default 8 MiB; a larger row
group is a unit alone). Its shard is the local file made of the chunks of the projected columns
followed by the footer; ``ParquetReader`` copies those ranges to their offsets in an anonymous,
lazily backed map of the source's size and decodes it with ``pyarrow.parquet`` as if it were the
whole file, natively and on one thread (bytes outside the ranges read as zeros; only the footer's
tail is ever read there). Where such a map cannot be made, a Python file object over the local
file (``RangeFile``) does the same, slower. A file on a local disk is read in place instead
(``SourceStream(in_place=True)``, the default): the file itself is mapped and decoded, nothing is
copied into the cache.

pyarrow is imported when a Parquet file is first indexed or read, never at ``import streaming``.
"""

from __future__ import annotations

import bisect
import mmap
import struct
import sys
from typing import Any

from streaming.errors import SourceFileError
from streaming.format.registry import register_format
from streaming.sources.arrow_values import Decoded, arrow_failures, column_getters, type_name
from streaming.sources.parquet_footer import RowGroupMeta, read_row_groups
from streaming.sources.parquet_pages import (
    WIDE_VALUE_BYTES,
    PageSpans,
    binary_spans,
    parts_accessors,
)
from streaming.sources.reader import SOURCE_KEYS, SourceReader, check_ranges_entry
from streaming.sources.registry import SourceFormat, register_source
from streaming.sources.unit_file import Sections, SinkError, UnitColumns, write_unit

__all__ = ['ParquetSource', 'ParquetReader', 'RangeFile']

MAGIC = b'PAR1'
TAIL = 64 << 10  # Bytes read from the end of a file to find its footer in one request.
# Linux's MAP_NORESERVE (not in Python 3.11's mmap): a map of the source's size reserves no
# memory; only the pages the unit's ranges are copied to are ever touched.
_NORESERVE = 0x4000 if sys.platform.startswith('linux') else 0


def _pq() -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ImportError('Streaming Parquet files needs pyarrow: pip install pyarrow') from None
    return pq


def _coalesce(ranges: list[list[int]]) -> list[list[int]]:
    """Sorted ranges with touching or overlapping ones merged."""
    out: list[list[int]] = []
    for start, length in sorted(ranges):
        if out and start <= out[-1][0] + out[-1][1]:
            out[-1][1] = max(out[-1][1], start + length - out[-1][0])
        else:
            out.append([start, length])
    return out


class ParquetSource(SourceFormat):
    """Parquet files: units are row groups; their ranges are column chunks plus the footer."""

    name = 'parquet'
    extensions = ('.parquet', '.parq', '.pq')
    options = {'unit_bytes': 8 << 20}  # Consecutive row groups up to this many bytes a unit.
    record_version = 2  # Indexing checks more (issue 32): older sidecar records are redone.

    def index_ranges(self, where: str, size: int, read: Any,
                     options: dict[str, Any]) -> dict[str, Any]:
        if size < 12:
            raise SourceFileError(f'{where}: {size} bytes is too short for a Parquet file.')
        tail_start = max(0, size - TAIL)
        tail = read(tail_start, size)
        if tail[-4:] != MAGIC:
            raise SourceFileError(f'{where}: no Parquet footer (the file does not end with '
                                  f'"PAR1"): it is truncated or not a Parquet file.')
        footer_len = struct.unpack('<I', tail[-8:-4])[0]
        footer_start = size - 8 - footer_len
        if footer_start < 4:
            raise SourceFileError(f'{where}: the footer length {footer_len} does not fit in the '
                                  f'file ({size} bytes): the file is truncated or corrupt.')
        if footer_start < tail_start:
            tail = read(footer_start, tail_start) + tail
            tail_start = footer_start
        footer = tail[footer_start - tail_start:]
        meta, schema, groups = _footer(where, footer[:-8], footer_start)
        tops = [meta.schema.column(c).path.split('.')[0] for c in range(meta.num_columns)]
        units: list[dict[str, Any]] = []
        limit, unit_size = int(options['unit_bytes']), 0
        for number, group in enumerate(groups):
            if not units or unit_size >= limit:
                units.append({'samples': 0, 'row_groups': [number, number], 'columns': {}})
                unit_size = 0
            unit = units[-1]
            chunks: dict[str, list[list[int]]] = unit['columns']
            for top, column in zip(tops, group.columns):
                chunks.setdefault(top, []).append([column.start, column.total_compressed_size])
                unit_size += column.total_compressed_size
            unit['samples'] += group.num_rows
            unit['row_groups'][1] = number + 1
        return {'schema': {field.name: type_name(field.type) for field in schema},
                'footer': [footer_start, footer_len + 8], 'units': units}

    def merged(self, record: dict[str, Any], limit: int,
               columns: list[str] | None) -> dict[str, Any]:
        units: list[dict[str, Any]] = []
        size = 0
        for unit in record['units']:
            length = sum(n for _, n in _projected(unit, columns))
            if not units or size + length > limit:
                units.append({'samples': unit['samples'], 'row_groups': list(unit['row_groups']),
                              'columns': {k: list(v) for k, v in unit['columns'].items()}})
                size = length
                continue
            last = units[-1]
            last['samples'] += unit['samples']
            last['row_groups'][1] = unit['row_groups'][1]
            for name, ranges in unit['columns'].items():
                last['columns'].setdefault(name, []).extend(ranges)
            size += length
        return {**record, 'units': units}

    def unit_ranges(self, record: dict[str, Any], unit: dict[str, Any],
                    columns: list[str] | None) -> list[list[int]]:
        return _coalesce(_projected(unit, columns)) + [list(record['footer'])]

    def entry_extras(self, record: dict[str, Any], unit: dict[str, Any],
                     columns: list[str] | None) -> dict[str, Any]:
        return {'columns': list(columns) if columns is not None else list(record['schema']),
                'row_groups': list(unit['row_groups'])}


def _footer(where: str, footer: Any, data_end: int) -> tuple[Any, Any, list[RowGroupMeta]]:
    """(pyarrow's ``FileMetaData``, the Arrow schema, the row groups checked) of a footer.

    ``footer``: its Thrift bytes, without the length and magic after it. pyarrow parses the
    schema; the row groups are read by ``parquet_footer`` (pyarrow's accessors of column
    chunks abort the process on some damaged footers).
    """
    pq = _pq()
    import pyarrow as pa
    try:
        meta = pq.read_metadata(pa.BufferReader(MAGIC + bytes(footer) +
                                                struct.pack('<I', len(footer)) + MAGIC))
        schema = meta.schema.to_arrow_schema()
        leaves = [(meta.schema.column(c).max_definition_level,
                   meta.schema.column(c).max_repetition_level) for c in range(meta.num_columns)]
    except Exception as error:  # noqa: BLE001 - pyarrow raises several kinds here.
        raise SourceFileError(f'{where}: the Parquet footer cannot be read ({error}); the '
                              f'file is corrupt.') from None
    return meta, schema, read_row_groups(where, footer, data_end, leaves)


def _projected(unit: dict[str, Any], columns: list[str] | None) -> list[list[int]]:
    """The ``[start, length]`` chunks of ``unit`` that hold ``columns`` (all if None)."""
    names = columns if columns is not None else list(unit['columns'])
    return [r for name in names for r in unit['columns'].get(name, [])]


class RangeFile:
    """A read-only file object over byte ranges of a source, laid end to end in ``data``.

    It has the source's size; bytes outside the ranges read as zeros.
    """

    def __init__(self, data: Any, ranges: list[list[int]], size: int) -> None:
        self.data, self.size, self.pos, self.closed = data, size, 0, False
        self.starts = [start for start, _ in ranges]
        self.spans = []
        local = 0
        for start, length in ranges:
            self.spans.append((start, length, local))
            local += length

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = offset if whence == 0 else self.pos + offset if whence == 1 else \
            self.size + offset
        return self.pos

    def read(self, n: int = -1) -> bytes:
        begin = self.pos
        end = self.size if n is None or n < 0 else min(self.size, begin + n)
        if end <= begin:
            return b''
        self.pos = end
        i = max(bisect.bisect_right(self.starts, begin) - 1, 0)
        start, length, local = self.spans[i] if self.spans else (0, 0, 0)
        if start <= begin and end <= start + length:  # Within one range: a plain slice.
            return self.data[local + begin - start:local + end - start]
        out = bytearray(end - begin)
        for start, length, local in self.spans[i:]:
            if start >= end:
                break
            lo, hi = max(start, begin), min(start + length, end)
            if lo < hi:
                out[lo - begin:hi - begin] = self.data[local + lo - start:local + hi - start]
        return bytes(out)

    def close(self) -> None:
        self.closed = True


def placed(data: Any, ranges: list[list[int]], size: int) -> Any:
    """``data`` (the ``ranges`` end to end) copied to their offsets in a map of ``size`` bytes.

    The map is anonymous and lazily backed: pages outside the ranges are never touched and read
    as zeros. pyarrow decodes from it natively (no Python file object, no GIL per read).
    """
    flags = getattr(mmap, 'MAP_PRIVATE', 0) | getattr(mmap, 'MAP_ANONYMOUS', 0) | _NORESERVE
    out = mmap.mmap(-1, size, flags=flags) if flags else mmap.mmap(-1, size)
    with memoryview(data) as view:
        local = 0
        for start, length in ranges:
            out[start:start + length] = view[local:local + length]
            local += length
    return out


def _wide_columns(file: Any, source: Any, groups: list[RowGroupMeta], names: list[str],
                  sink: Any = None) -> dict[str, tuple[list[PageSpans], bool]]:
    """Columns of ``names`` read from their pages (``parquet_pages``): wide binary ones.

    ``{name: (spans of each row group of groups, values are str)}``. A column is wide when its
    values are ``WIDE_VALUE_BYTES`` or more on average (decoded); one whose pages cannot be read
    there is left out (pyarrow decodes it). ``sink``: see ``parquet_pages.binary_spans``.
    """
    import pyarrow as pa
    types = pa.types
    meta, schema = file.metadata, file.schema_arrow
    leaves = {}
    for number in range(meta.num_columns):
        leaf = meta.schema.column(number)
        leaves.setdefault(leaf.path.split('.')[0], []).append((number, leaf))
    pool = pa.system_memory_pool()
    out: dict[str, tuple[list[PageSpans], bool]] = {}
    for name in names:
        found = leaves.get(name, [])
        if len(found) != 1 or name not in schema.names:
            continue
        number, leaf = found[0]
        kind = schema.field(name).type
        if types.is_dictionary(kind):
            kind = kind.value_type
        text = types.is_string(kind) or types.is_large_string(kind)
        if leaf.path != name or leaf.physical_type != 'BYTE_ARRAY' or \
                leaf.max_repetition_level != 0 or leaf.max_definition_level > 1 or \
                not (text or types.is_binary(kind) or types.is_large_binary(kind)):
            continue
        chunks = [group.columns[number] for group in groups]
        values = sum(chunk.num_values for chunk in chunks)
        if sum(chunk.total_uncompressed_size for chunk in chunks) < \
                WIDE_VALUE_BYTES * max(values, 1):
            continue
        parts = [binary_spans(source, chunk, leaf.max_definition_level, pool, sink)
                 for chunk in chunks]
        if all(part is not None for part in parts):
            out[name] = (parts, text)  # type: ignore[assignment]
    return out


def _open_file(pq: Any, pa: Any, handle: Any) -> Any:
    """A ``pq.ParquetFile`` of ``handle`` whose decoded buffers come from the system allocator.

    pyarrow's default pool (mimalloc) takes fresh memory at a higher cost than the system
    allocator in a process that has imported torch (measured: docs/sources/parquet.md, "Local
    reads", and docs/benchmark-history.md); a decoded unit is all fresh memory. Pages whose
    writer recorded a CRC-32 are checked against it.
    """
    file = pq.ParquetFile(handle, pre_buffer=False, page_checksum_verification=True)
    try:
        reader = type(file.reader)(memory_pool=pa.system_memory_pool())
        reader.open(handle, pre_buffer=False, metadata=file.metadata,
                    page_checksum_verification=True)
    except (TypeError, AttributeError):  # Another pyarrow's reader: its default pool.
        return file
    file.reader = reader
    return file


class ParquetReader(SourceReader):
    """One row group of a Parquet file: its projected column chunks and the footer, local.

    Or, read in place (``source_root``), the source file itself, mapped: no copy at all.
    """

    reads_in_place = True

    @classmethod
    def warm_up(cls) -> None:
        _pq()

    def _unit_name(self, what: str) -> str:
        """``what`` (row groups) of this file, and where it is read from."""
        return f'{what} of {self.source} ({self.where()})'

    def _row_groups(self, file: Any, source: Any) -> list[RowGroupMeta]:
        """The file's row groups, read from its footer (in ``source``) once per process."""
        key = (self.source_root or self.dirname, self.source, self.source_size,
               self.source_etag)
        groups = _footers.get(key)
        if groups is None:
            start, length = self.ranges[-1]
            meta = file.metadata.schema
            leaves = [(meta.column(c).max_definition_level, meta.column(c).max_repetition_level)
                      for c in range(len(meta))]
            groups = read_row_groups(f'{self.source} ({self.where()})',
                                     memoryview(source)[start:start + length - 8], start, leaves)
            while len(_footers) >= 16:
                _footers.pop(next(iter(_footers)))
            _footers[key] = groups
        return groups

    def _what(self) -> str:
        """The unit's row groups, named for errors (``row group 3``, ``row groups 3-4``)."""
        first, stop = self.row_groups or (self.unit, self.unit + 1)
        return f'row group {first}' if stop == first + 1 else f'row groups {first}-{stop - 1}'

    def write_decoded(self, file: Any) -> tuple[UnitColumns | None, int | None]:
        """Decode the unit into ``file`` for the node, its wide columns' pages as they come.

        The columns are returned only when not shared (size None: pages stored uncompressed);
        otherwise None: they are in the file alone (size 0 if it could not be written).
        """
        sections = Sections(file)
        try:
            columns = self.decode_columns(sink=sections.sink)
        except SinkError:
            return None, 0
        if self.source_root is not None:
            self.check_source()
        if not columns.shared:
            return columns, None
        try:
            return None, write_unit(file, columns, sections)
        except OSError:
            return None, 0

    def decode_columns(self, sink: Any = None) -> UnitColumns:
        """The unit's columns decoded: by pyarrow, and wide binary ones from their pages.

        ``sink``: where the wide columns' pages go when the unit is compressed (its spans
        then hold offsets there, see ``write_decoded``); an uncompressed unit ignores it.
        """
        pq = _pq()
        import pyarrow as pa
        source: Any = None  # The file's bytes at their offsets, for the pages of wide columns.
        if self.source_root is not None:
            source = self.data()
            handle = pa.BufferReader(pa.py_buffer(source))
        else:
            try:
                source = placed(self.data(), self.ranges, self.source_size)
                handle = pa.BufferReader(pa.py_buffer(source))
            except (OSError, ValueError, OverflowError):  # No room for the map: a file object.
                handle = RangeFile(self.data(), self.ranges, self.source_size)
        first, stop = self.row_groups or (self.unit, self.unit + 1)
        what = self._what()
        file = self.decoding(arrow_failures(lambda: _open_file(pq, pa, handle)), what)
        names = self.columns if self.columns is not None else file.schema_arrow.names
        groups = None if source is None else self._row_groups(file, source)[first:stop]
        # Pages stored uncompressed decode at the cost of a copy: not worth sharing.
        compressed = groups is None or any(chunk.compression != 'UNCOMPRESSED'
                                           for group in groups for chunk in group.columns)
        wide = {} if groups is None else \
            _wide_columns(file, source, groups, names, sink if compressed else None)
        rest = [name for name in names if name not in wide]

        # One thread, no pre-buffering: the ranges are in memory already, and pyarrow's pools
        # only add hand-offs (and threads in every DataLoader worker). Row group by row group:
        # ``read_row_groups`` appends them into one growing buffer per column (reallocated and
        # copied as it doubles: 2.5x slower for a unit of 50 MB); separate row groups are
        # chunks of the table, read as they are (``column_getters``).
        def read() -> Any:
            tables = [file.read_row_group(group, columns=rest, use_threads=False)
                      for group in range(first, stop)]
            return tables[0] if len(tables) == 1 else pa.concat_tables(tables)

        table = self.read_table(arrow_failures(read), what) if rest or not wide else None
        return UnitColumns(table, wide, list(names), compressed)

    def accessors(self, columns: UnitColumns) -> tuple[Decoded, int]:
        what = self._what()
        decoded, nbytes = Decoded({}, {}), 0
        table = columns.table
        if table is not None:
            decoded = self.decoding(
                arrow_failures(lambda: column_getters(table, self._unit_name(what),
                                                      columns.base)), what)
            nbytes = table.nbytes
        getters, gatherers = decoded.getters, decoded.gatherers
        for name, (parts, text) in columns.spans.items():
            self.check_rows(sum(len(part.chunk) for part in parts), what)
            getters[name], gather = parts_accessors(parts, text,
                                                    f'column {name!r} of {self._unit_name(what)}',
                                                    columns.base)
            nbytes += sum(part.held for part in parts)
            if gather is None:
                gatherers = None
            elif gatherers is not None:
                gatherers[name] = gather
        names = columns.names
        order = {name: getters[name] for name in names}
        return Decoded(order, None if gatherers is None else
                       {name: gatherers[name] for name in names}), nbytes


# (root, source, size, etag) -> its row groups, for the page reader: a few files' footers, parsed
# once.
_footers: dict[tuple[str, str, int, str | None], list[RowGroupMeta]] = {}

register_source(ParquetSource())
register_format('parquet', reader=ParquetReader, check_entry=check_ranges_entry,
                required_keys={**SOURCE_KEYS, 'columns': list, 'row_groups': list})
