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
import mmap
import struct
from typing import Any, BinaryIO, NamedTuple

import numpy as np

from streaming.sources.parquet_pages import PageSpans

__all__ = ['MAGIC', 'Sections', 'SinkError', 'UnitColumns', 'map_unit', 'write_unit']

MAGIC = b'SFUNIT01'
_ALIGN = 64


class UnitColumns(NamedTuple):
    """A unit's columns as decoded, before they are made accessors (``Decoded``).

    ``table``: the columns pyarrow decoded (a ``pyarrow.Table``, or None); ``spans``: the wide
    binary columns, ``{name: (PageSpans of each row group, values are str)}``; ``names``: the
    columns in their order; ``shared``: whether decoding it cost enough to be worth sharing
    (False: its pages were stored uncompressed, so every process reads it as cheaply itself);
    ``base``: the map of the unit file they were read from (None: decoded here), which holds
    all their buffers, so that a batch's ``bytes`` values can be copied straight out of it.
    """

    table: Any | None
    spans: dict[str, tuple[list[PageSpans], bool]]
    names: list[str]
    shared: bool = True
    base: Any = None


class Sections:
    """Writes aligned sections to ``file``, recording ``[offset, length]`` of each.

    Also the ``sink`` of a page reader (``parquet_pages.binary_spans``): each decompressed
    page goes to the file as soon as its values are found, so a unit decoded for the node is
    never held whole in private memory (fresh pages of the process: slower than reusing the
    few a page at a time takes; docs/sources/parquet.md).
    """

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

    def sink(self, page: Any) -> int:
        """Write ``page`` as a section; its offset in the file."""
        try:
            return self.add(page)[0]
        except OSError as error:
            raise SinkError(error) from error


class SinkError(Exception):
    """A page could not be written to the unit file (not a damaged page: not caught there)."""


def write_unit(file: BinaryIO, columns: UnitColumns, out: Sections | None = None) -> int:
    """Write ``columns`` to ``file`` (open for writing, at its start); returns the file's size.

    ``out``: the ``Sections`` the span columns' pages were already written to (their
    ``buffers`` are then offsets in the file).
    """
    out = out if out is not None else Sections(file)
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


def _write_spans(out: Sections, parts: list[PageSpans], text: bool) -> dict[str, Any]:
    """One span column: its pages (unless written already: offsets), each value's span."""
    starts, ends = [], []
    for part in parts:
        base = np.asarray([buffer if isinstance(buffer, int) else out.add(buffer)[0]
                           for buffer in part.buffers] or [0], np.int64)
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
    with open(path, 'rb') as file:
        base = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)  # ValueError if empty.
    buffer = pa.py_buffer(base)
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
    return UnitColumns(table, spans, list(header['names']), base=base), size
