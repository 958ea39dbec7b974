"""Wide binary Parquet columns read from their pages: each value a span, no Arrow builder.

pyarrow decodes a ``BYTE_ARRAY`` column by appending every value to one growing buffer, copied
at each doubling and once more to shrink it: for 100 KB images that is most of the decode. A
column chunk of such wide values is read here instead: each page decompressed once into a
buffer of its exact size (an uncompressed page is not even copied), and each value recorded as
a span of that buffer, cut to ``bytes`` only when a sample asks for it.

Only what is simple is read so: a top-level column that is not repeated, its pages PLAIN or
dictionary-encoded (v1 or v2 data pages), a codec pyarrow has. ``binary_spans`` returns None
for anything else, or for anything it cannot parse, and pyarrow decodes that column as before.

Page headers are Thrift compact-protocol structs (the Parquet format's ``PageHeader``); the
definition levels and dictionary indices are the format's RLE/bit-packed hybrid. Nothing a
header says is trusted: the parse is bounded (nesting, varint length, list sizes against the
bytes left), sizes and counts must fit the column chunk, and a page whose CRC-32 (where the
writer recorded one) does not match goes to pyarrow, which refuses it.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any, Callable, NamedTuple

import numpy as np

from streaming.sources.arrow_values import Gatherer, Getter, span_accessors

__all__ = ['WIDE_VALUE_BYTES', 'PageSpans', 'binary_spans', 'parts_accessors', 'read_struct',
           'ThriftError']

# A column chunk whose values are this large on average is read from its pages here.
WIDE_VALUE_BYTES = 16 << 10
# pyarrow's names of the chunks' codecs (it says LZ4 for the format's LZ4_RAW, and LZ4_HADOOP
# for the format's deprecated LZ4, not read here) -> ``pyarrow.Codec`` names.
_CODECS = {'UNCOMPRESSED': None, 'SNAPPY': 'snappy', 'GZIP': 'gzip', 'ZSTD': 'zstd',
           'BROTLI': 'brotli', 'LZ4': 'lz4_raw', 'LZ4_RAW': 'lz4_raw'}
_DATA_PAGE, _INDEX_PAGE, _DICTIONARY_PAGE, _DATA_PAGE_V2 = 0, 1, 2, 3
_PLAIN, _PLAIN_DICTIONARY, _RLE, _RLE_DICTIONARY = 0, 2, 3, 8


class _Unsupported(Exception):
    """Not read here: pyarrow decodes the column."""


ThriftError = _Unsupported  # What ``read_struct`` raises for bytes it cannot parse.


def read_struct(buf: Any, pos: int) -> tuple[dict[int, Any], int]:
    """The Thrift compact struct at ``pos`` of ``buf`` (``{field id: value}``) and its end.

    Strings and doubles are None, lists are lists. Raises ``ThriftError`` (or ``IndexError``
    where it runs past ``buf``) for bytes that are not such a struct; never recurses deeper
    than a few dozen levels nor loops over more items than ``buf`` could hold.
    """
    return _struct(buf, pos)


# ---- Thrift compact protocol -----------------------------------------------------------------
# A struct nested deeper than this, or a varint longer than 10 bytes, is not Parquet's: refused
# (as ``_Unsupported``) rather than recursed into or grown without bound.
_MAX_DEPTH = 32


def _varint(buf: Any, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise _Unsupported('varint longer than 10 bytes')


def _zigzag(buf: Any, pos: int) -> tuple[int, int]:
    value, pos = _varint(buf, pos)
    return (value >> 1) ^ -(value & 1), pos


def _count(buf: Any, pos: int, size: int, each: int) -> None:
    """A list or map of ``size`` items of at least ``each`` bytes must fit in ``buf``."""
    if size * each > len(buf) - pos:
        raise _Unsupported(f'{size} items do not fit in the bytes left')


def _value(buf: Any, pos: int, kind: int, depth: int = 0,
           item: bool = False) -> tuple[Any, int]:
    """A value of compact type ``kind`` at ``pos``: (value, position after it).

    Lists are Python lists; strings and doubles are None (nothing here reads them). ``item``: an
    element of a list or map, where a boolean takes a byte of its own.
    """
    if kind in (1, 2):
        if item:  # 1 is true in a list; false is 0 or 2.
            return buf[pos] == 1, pos + 1
        return kind == 1, pos  # A boolean field: its value is its type.
    if kind == 3:
        return buf[pos], pos + 1
    if kind in (4, 5, 6):
        return _zigzag(buf, pos)
    if kind == 7:
        return None, pos + 8
    if kind == 8:
        length, pos = _varint(buf, pos)
        _count(buf, pos, length, 1)
        return None, pos + length
    if depth >= _MAX_DEPTH:
        raise _Unsupported('Thrift values nested too deep')
    if kind in (9, 10):
        head = buf[pos]
        pos += 1
        size, element = head >> 4, head & 0x0F
        if size == 15:
            size, pos = _varint(buf, pos)
        _count(buf, pos, size, 1)
        items = []
        for _ in range(size):
            value, pos = _value(buf, pos, element, depth + 1, True)
            items.append(value)
        return items, pos
    if kind == 11:
        size, pos = _varint(buf, pos)
        if size:
            _count(buf, pos, size, 2)
            types = buf[pos]
            pos += 1
            for _ in range(size):
                _, pos = _value(buf, pos, types >> 4, depth + 1, True)
                _, pos = _value(buf, pos, types & 0x0F, depth + 1, True)
        return None, pos
    if kind == 12:
        return _struct(buf, pos, depth + 1)
    raise _Unsupported(f'Thrift type {kind}')


def _struct(buf: Any, pos: int, depth: int = 0) -> tuple[dict[int, Any], int]:
    """A compact-protocol struct at ``pos`` as ``{field id: value}`` (strings as None)."""
    if depth >= _MAX_DEPTH:
        raise _Unsupported('Thrift structs nested too deep')
    fields: dict[int, Any] = {}
    last = 0
    while True:
        head = buf[pos]
        pos += 1
        if head == 0:
            return fields, pos
        delta, kind = head >> 4, head & 0x0F
        if delta:
            last += delta
        else:
            last, pos = _zigzag(buf, pos)
        fields[last], pos = _value(buf, pos, kind, depth)


# ---- the RLE / bit-packed hybrid ---------------------------------------------------------------
def _hybrid(buf: Any, pos: int, end: int, width: int, count: int) -> np.ndarray:
    """``count`` values of ``width`` bits in the hybrid encoding between ``pos`` and ``end``."""
    if width > 32:
        raise _Unsupported(f'a bit width of {width}')
    out = np.zeros(count, np.int64)
    done = 0
    size = (width + 7) // 8
    weights = (1 << np.arange(width, dtype=np.int64)) if width else None
    while done < count and pos < end:
        head, pos = _varint(buf, pos)
        if head & 1:  # Bit-packed groups of 8 values.
            groups = head >> 1
            nbytes = groups * width
            if width:
                bits = np.unpackbits(np.frombuffer(buf[pos:pos + nbytes], np.uint8),
                                     bitorder='little').reshape(-1, width)
                values = bits.astype(np.int64) @ weights
            else:
                values = np.zeros(groups * 8, np.int64)
            take = min(len(values), count - done)
            out[done:done + take] = values[:take]
            done += take
            pos += nbytes
        else:  # A run of one value.
            run = head >> 1
            value = int.from_bytes(bytes(buf[pos:pos + size]), 'little')
            pos += size
            out[done:done + run] = value
            done += run
    if done < count:
        raise _Unsupported('levels end early')
    return out


# ---- pages ------------------------------------------------------------------------------------
def _plain_spans(page: Any, pos: int, end: int, count: int) -> tuple[list[int], list[int]]:
    """The (starts, ends) of ``count`` PLAIN byte arrays (4-byte length, then the bytes)."""
    starts, ends = [], []
    unpack = struct.Struct('<I').unpack_from
    if count > (end - pos) // 4:
        raise _Unsupported(f'{count} values do not fit in the page')
    for _ in range(count):
        length, = unpack(page, pos)
        starts.append(pos + 4)
        pos += 4 + length
        ends.append(pos)
    if pos > end:
        raise _Unsupported('values run past the page')
    return starts, ends


class PageSpans(NamedTuple):
    """Values as spans: value ``i`` is ``buffers[chunk[i]][start[i]:end[i]]``, or a null."""

    buffers: list[Any]
    chunk: np.ndarray
    start: np.ndarray
    end: np.ndarray
    null: np.ndarray
    held: int  # Bytes of decompressed pages among ``buffers``.


def parts_accessors(parts: list[PageSpans], text: bool, where: str = 'a column',
                    base: Any = None) -> tuple[Getter, Gatherer | None]:
    """The getter and gatherer of the values of consecutive ``parts`` (row groups).

    ``base``: the map the parts' buffers lie in, if any (``arrow_values.span_accessors``).
    """
    buffers: list[Any] = []
    chunks = []
    for part in parts:
        chunks.append(part.chunk + len(buffers))
        buffers.extend(part.buffers)
    null = np.concatenate([part.null for part in parts])
    return span_accessors(buffers, np.concatenate(chunks),
                          np.concatenate([part.start for part in parts]),
                          np.concatenate([part.end for part in parts]),
                          null.tolist() if null.any() else None, text, where, base)


def binary_spans(data: Any, column: Any, max_definition: int, pool: Any,
                 sink: Callable[[Any], int] | None = None) -> PageSpans | None:
    """The values of one column chunk read from its pages, or None: let pyarrow decode it.

    ``data``: the file's bytes at their offsets (a map); ``column``: the chunk's
    ``ColumnChunkMetaData`` (or a ``parquet_footer.ChunkMeta``); ``max_definition``: 0 for a
    required column, 1 for an optional one; ``pool``: pyarrow's memory pool for decompressed
    pages. A page whose checksum (where the writer recorded one) does not match is left to
    pyarrow too, which then reports it. ``sink``: where each page goes once its values are
    found (a unit file being written: ``sink(page)`` writes it and gives its offset there); the
    spans' ``buffers`` are then those offsets, and no page is kept in memory.
    """
    import pyarrow as pa
    codec_name = _CODECS.get(column.compression)
    if column.compression not in _CODECS or max_definition > 1 or \
            (codec_name is not None and not pa.Codec.is_available(codec_name)):
        return None
    codec = pa.Codec(codec_name) if codec_name is not None else None
    view = memoryview(data).cast('B')  # Bytes as unsigned ints (pyarrow's buffers say 'b').
    pos = column.data_page_offset
    if column.has_dictionary_page and column.dictionary_page_offset:
        pos = min(pos, column.dictionary_page_offset)
    end = pos + column.total_compressed_size
    try:
        return _read_pages(view, pos, end, column.num_values, max_definition, codec, pool,
                           column.total_uncompressed_size, sink)
    except (_Unsupported, IndexError, ValueError, TypeError, AttributeError, struct.error,
            OSError, OverflowError):  # Damaged: pyarrow decodes it, or says what is wrong.
        return None


def _page_header(view: memoryview, pos: int, end: int,
                 limit: int) -> tuple[dict[int, Any], int, int, int]:
    """(the page header at ``pos``, where its body starts, its size, its size decompressed).

    The sizes must fit in the chunk (``end``; ``limit`` bytes decompressed) and the body must
    match its CRC-32 where the header records one: else ``_Unsupported``.
    """
    header, body = _struct(view, pos)
    raw_size, size, crc = header.get(2), header.get(3), header.get(4)
    if not isinstance(raw_size, int) or not isinstance(size, int) or not \
            0 <= size <= end - body or not 0 <= raw_size <= limit:
        raise _Unsupported('bad page header')
    if isinstance(crc, int) and zlib.crc32(view[body:body + size]) != crc & 0xFFFFFFFF:
        raise _Unsupported('page checksum mismatch')
    return header, body, size, raw_size


def _itself(page: Any) -> Any:
    return page


def _read_pages(view: memoryview, pos: int, end: int, values: int, max_definition: int,
                codec: Any, pool: Any, limit: int,
                sink: Callable[[Any], int] | None = None) -> PageSpans:
    # Decompressed pages (or views of the map), kept by the spans; or their offsets in sink.
    buffers: list[Any] = []
    keep: Callable[[Any], Any] = sink if sink is not None else _itself
    chunk_ids: list[np.ndarray] = []
    starts: list[np.ndarray] = []
    ends: list[np.ndarray] = []
    nulls: list[np.ndarray] = []
    dictionary: tuple[int, np.ndarray, np.ndarray] | None = None
    held = rows = 0
    while rows < values:
        header, body, size, raw_size = _page_header(view, pos, end, limit)
        kind = header.get(1)
        pos = body + size
        if kind == _INDEX_PAGE:
            continue  # Nothing of the values.
        if kind not in (_DATA_PAGE, _DICTIONARY_PAGE, _DATA_PAGE_V2):
            raise _Unsupported(f'page type {kind}')
        v2 = header.get(8) if kind == _DATA_PAGE_V2 else None
        levels_size = 0
        if v2 is not None:
            levels_size = v2.get(5, 0) + v2.get(6, 0)
            if v2.get(6, 0):
                raise _Unsupported('repetition levels')
            if not 0 <= levels_size <= min(size, raw_size):
                raise _Unsupported('levels larger than the page')
        compressed = codec is not None and (v2 is None or v2.get(7, True))
        head = view[body:body + levels_size]
        if compressed:
            page = memoryview(codec.decompress(view[body + levels_size:body + size],
                                               decompressed_size=raw_size - levels_size,
                                               memory_pool=pool)).cast('B')
            held += raw_size - levels_size
        else:
            page = view[body + levels_size:body + size]
        if kind == _DICTIONARY_PAGE:
            fields = header.get(7) or {}
            if fields.get(2) not in (_PLAIN, _PLAIN_DICTIONARY):
                raise _Unsupported('dictionary encoding')
            count = fields.get(1, 0)
            first, last = _plain_spans(page, 0, len(page), count)
            buffers.append(keep(page))
            dictionary = (len(buffers) - 1, np.array(first, np.int64), np.array(last, np.int64))
            continue
        fields = v2 if v2 is not None else (header.get(5) or {})
        count, encoding = fields.get(1, 0), fields.get(4 if v2 is not None else 2)
        if not isinstance(count, int) or not 0 <= count <= values - rows:
            raise _Unsupported(f'a page of {count} values')
        offset = 0
        present = np.ones(count, bool)
        if max_definition:
            if v2 is not None:
                levels, level_end = head, len(head)
            else:
                if fields.get(3) != _RLE:
                    raise _Unsupported('definition level encoding')
                length, = struct.unpack_from('<I', page, 0)
                levels, offset, level_end = page, 4, 4 + length
            present = _hybrid(levels, offset, level_end, 1, count) == 1
            offset = 0 if v2 is not None else level_end
        real = int(present.sum())
        if encoding == _PLAIN:
            first_list, last_list = _plain_spans(page, offset, len(page), real)
            buffers.append(keep(page))
            chunk = np.full(real, len(buffers) - 1, np.int32)
            first_arr, last_arr = np.array(first_list, np.int64), np.array(last_list, np.int64)
        elif encoding in (_PLAIN_DICTIONARY, _RLE_DICTIONARY) and dictionary is not None:
            width = page[offset]
            index = _hybrid(page, offset + 1, len(page), width, real)
            number, dict_first, dict_last = dictionary
            if real and (index.min() < 0 or index.max() >= len(dict_first)):
                raise _Unsupported('dictionary index out of range')
            chunk = np.full(real, number, np.int32)
            first_arr, last_arr = dict_first[index], dict_last[index]
        else:
            raise _Unsupported(f'encoding {encoding}')
        # Null rows get an empty span (their value is None).
        full_chunk = np.zeros(count, np.int32)
        full_first = np.zeros(count, np.int64)
        full_last = np.zeros(count, np.int64)
        full_chunk[present], full_first[present], full_last[present] = chunk, first_arr, last_arr
        chunk_ids.append(full_chunk)
        starts.append(full_first)
        ends.append(full_last)
        nulls.append(~present)
        rows += count
    if rows != values or not chunk_ids:
        raise _Unsupported('more values than the chunk says')
    return PageSpans(buffers, np.concatenate(chunk_ids), np.concatenate(starts),
                 np.concatenate(ends), np.concatenate(nulls), held)
