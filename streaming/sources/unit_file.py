"""A decoded unit as one file that the node's other processes map instead of decoding it again.

What a reader decoded of a unit (``UnitColumns``: the columns pyarrow decoded, as a table, and
the wide binary columns read from their pages, as spans of decompressed pages) is written by
``write_unit`` as::

    [Arrow IPC stream of the table] [per span column: its decompressed pages, starts, ends,
    nulls] [JSON header: where each section lies] [header length, 8 bytes] [MAGIC]

each section 64-byte aligned (a span's start and end are offsets of the file). Pages are
decompressed into private memory and written with ``write``: decompressing them straight into
a map of the file was slower here (tmpfs pages faulted in one by one; docs/sources/parquet.md).
``map_unit`` maps the file and gives the same ``UnitColumns``, every buffer a view of the map
(no copy): the table's columns through pyarrow's IPC reader, a span column as one
``PageSpans`` over the file. The caller writes the file under a temporary name and renames it
(``fileio.create_temp``, ``publish``), so a file under its final name is whole; ``map_unit``
still checks the trailer and that every section lies in the file, and raises ``ValueError``
for one that does not (the caller decodes the unit again).
"""

from __future__ import annotations

import json
import struct
from typing import Any, BinaryIO, NamedTuple

import numpy as np

from streaming.sources.parquet_pages import PageSpans

__all__ = ['MAGIC', 'UnitColumns', 'map_unit', 'write_unit']

MAGIC = b'SFUNIT01'
_ALIGN = 64


class UnitColumns(NamedTuple):
    """A unit's columns as decoded, before they are made accessors (``Decoded``).

    ``table``: the columns pyarrow decoded (a ``pyarrow.Table``, or None); ``spans``: the wide
    binary columns, ``{name: (PageSpans of each row group, values are str)}``; ``names``: the
    columns in their order; ``shared``: whether decoding it cost enough to be worth sharing
    (False: its pages were stored uncompressed, so every process reads it as cheaply itself).
    """

    table: Any | None
    spans: dict[str, tuple[list[PageSpans], bool]]
    names: list[str]
    shared: bool = True


class _Sections:
    """Writes aligned sections to ``file``, recording ``[offset, length]`` of each."""

    def __init__(self, file: BinaryIO) -> None:
        self.file, self.pos = file, 0

    def pad(self) -> None:
        extra = -self.pos % _ALIGN
        if extra:
            self.file.write(b'\0' * extra)
            self.pos += extra

    def add(self, data: Any) -> list[int]:
        """Write ``data`` (any buffer), aligned."""
        self.pad()
        start = self.pos
        with memoryview(data) as view:
            self.file.write(view.cast('B'))
            self.pos += view.nbytes
        return [start, self.pos - start]


def write_unit(file: BinaryIO, columns: UnitColumns) -> int:
    """Write ``columns`` to ``file`` (open for writing, at its start); returns the file's size."""
    out = _Sections(file)
    header: dict[str, Any] = {'names': list(columns.names), 'table': None, 'spans': {}}
    if columns.table is not None:
        import pyarrow as pa
        out.pad()
        start = out.pos
        stream = pa.PythonFile(file, mode='w')  # Straight to the file: no copy in between.
        with pa.ipc.new_stream(stream, columns.table.schema) as writer:
            writer.write_table(columns.table)
        out.pos = file.tell()
        header['table'] = [start, out.pos - start]
    for name, (parts, text) in columns.spans.items():
        header['spans'][name] = _write_spans(out, parts, text)
    out.pad()
    blob = json.dumps(header).encode()
    file.write(blob + struct.pack('<Q', len(blob)) + MAGIC)
    return out.pos + len(blob) + 8 + len(MAGIC)


def _write_spans(out: _Sections, parts: list[PageSpans], text: bool) -> dict[str, Any]:
    """One span column: its pages, and each value's span of the file."""
    starts, ends = [], []
    for part in parts:
        base = np.asarray([out.add(buffer)[0] for buffer in part.buffers] or [0], np.int64)
        starts.append(base[part.chunk] + part.start)
        ends.append(base[part.chunk] + part.end)
    null = np.concatenate([part.null for part in parts]).astype(np.uint8)
    return {'text': text, 'start': out.add(np.concatenate(starts).astype('<i8')),
            'end': out.add(np.concatenate(ends).astype('<i8')), 'null': out.add(null)}


def map_unit(path: str) -> tuple[UnitColumns, int]:
    """(the columns of the unit file at ``path``, its size), every buffer a view of its map.

    ``FileNotFoundError`` if there is none; ``ValueError`` if it is not a whole unit file.
    """
    import pyarrow as pa
    buffer = pa.memory_map(path, 'r').read_buffer()
    size = buffer.size
    if size < 16 or buffer[size - len(MAGIC):].to_pybytes() != MAGIC:
        raise ValueError(f'{path} is not a decoded unit (no trailer)')
    length, = struct.unpack('<Q', buffer[size - 16:size - 8].to_pybytes())
    if length > size - 16:
        raise ValueError(f'{path}: the header does not fit in the file')
    header = json.loads(buffer[size - 16 - length:size - 16].to_pybytes())
    end = size - 16 - length

    def section(where: list[int]) -> Any:
        start, count = where
        if not 0 <= start <= start + count <= end:
            raise ValueError(f'{path}: a section lies outside the file')
        return buffer.slice(start, count)

    table = None
    if header['table'] is not None:
        table = pa.ipc.open_stream(section(header['table'])).read_all()
    spans = {}
    data = memoryview(buffer.slice(0, end)).cast('B')  # Spans are offsets of the file.
    for name, where in header['spans'].items():
        start = np.frombuffer(section(where['start']), '<i8')
        stop = np.frombuffer(section(where['end']), '<i8')
        null = np.frombuffer(section(where['null']), np.uint8).astype(bool)
        if not len(start) == len(stop) == len(null) or \
                (len(start) and (start.min() < 0 or stop.max() > len(data))):
            raise ValueError(f'{path}: the spans of column {name!r} do not fit its data')
        held = int((stop - start).sum())  # This column's bytes of the map.
        spans[name] = ([PageSpans([data], np.zeros(len(start), np.int32), start, stop, null,
                                  held)], bool(where['text']))
    return UnitColumns(table, spans, list(header['names'])), size
