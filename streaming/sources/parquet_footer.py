"""A Parquet footer's row groups and column chunks, read from its Thrift, every count checked.

pyarrow's ``RowGroupMetaData.column(i)`` aborts the whole process (an uncaught C++ exception,
no Python error) for some damaged footers, such as a level histogram of the wrong length. So
the column chunks' byte ranges and sizes, which indexing and the page reader need, are read
here with the page reader's Thrift parser; pyarrow still parses the schema (and raises its
errors as exceptions). The counts are checked against each other, so that a footer damaged in
one number is refused rather than read as fewer rows: a non-repeated column holds one value per
row, a repeated one at least one; the file's row count is the sum of its row groups'; every
chunk lies between the magic and the footer.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from streaming.errors import SourceFileError
from streaming.sources.parquet_pages import ThriftError, read_struct

__all__ = ['ChunkMeta', 'RowGroupMeta', 'read_row_groups']

# The format's CompressionCodec values, named as pyarrow names them.
_CODECS = {0: 'UNCOMPRESSED', 1: 'SNAPPY', 2: 'GZIP', 3: 'LZO', 4: 'BROTLI', 5: 'LZ4_HADOOP',
           6: 'ZSTD', 7: 'LZ4_RAW'}


class ChunkMeta(NamedTuple):
    """One column chunk, with the attribute names of pyarrow's ``ColumnChunkMetaData``."""

    compression: str
    num_values: int
    total_uncompressed_size: int
    total_compressed_size: int
    data_page_offset: int
    dictionary_page_offset: int | None

    @property
    def has_dictionary_page(self) -> bool:
        return self.dictionary_page_offset is not None

    @property
    def start(self) -> int:
        """Where the chunk's first page (its dictionary page, if any) starts."""
        if self.dictionary_page_offset:
            return min(self.data_page_offset, self.dictionary_page_offset)
        return self.data_page_offset


class RowGroupMeta(NamedTuple):
    num_rows: int
    columns: list[ChunkMeta]


def _int(fields: Any, number: int, low: int = 0) -> int | None:
    value = fields.get(number) if isinstance(fields, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= low \
        else None


def _histogram_ok(size_statistics: Any, levels: tuple[int, int]) -> bool:
    """Level histograms (SizeStatistics 2 and 3), where present, of one entry per level."""
    if not isinstance(size_statistics, dict):
        return size_statistics is None
    for number, level in ((2, levels[1]), (3, levels[0])):
        histogram = size_statistics.get(number)
        if histogram is not None and (not isinstance(histogram, list) or
                                      histogram and len(histogram) != level + 1):
            return False
    return True


def _chunk(where: str, column: Any, levels: tuple[int, int], rows: int,
           data_end: int) -> ChunkMeta:
    """The ``ColumnChunk`` struct ``column`` checked (``where`` names it; see the module)."""
    meta = column.get(3) if isinstance(column, dict) else None
    codec = _int(meta, 4)
    values, raw, size = _int(meta, 5), _int(meta, 6), _int(meta, 7)
    data_offset, dict_offset = _int(meta, 9, 4), _int(meta, 11)
    if codec not in _CODECS or values is None or raw is None or size is None or \
            data_offset is None or (isinstance(meta, dict) and meta.get(11) is not None and
                                    dict_offset is None):
        raise SourceFileError(f'{where} has no valid metadata: the footer is corrupt.')
    chunk = ChunkMeta(_CODECS[codec], values, raw, size, data_offset, dict_offset or None)
    if chunk.start < 4 or chunk.start + size > data_end:
        raise SourceFileError(f'{where} lies outside the data (bytes {chunk.start}-'
                              f'{chunk.start + size}, the data ends at {data_end}): the footer '
                              f'is corrupt.')
    max_definition, max_repetition = levels
    if (values != rows if max_repetition == 0 else values < rows) or \
            not _histogram_ok(meta.get(16), levels):  # type: ignore[union-attr]
        raise SourceFileError(f'{where} holds {values} values for {rows} rows: the footer is '
                              f'corrupt.')
    return chunk


def read_row_groups(where: str, footer: Any, data_end: int,
                    leaves: list[tuple[int, int]]) -> list[RowGroupMeta]:
    """The row groups of the Thrift ``FileMetaData`` ``footer``, checked.

    ``where``: the file, for messages; ``data_end``: where the footer starts in the file;
    ``leaves``: (max definition level, max repetition level) of each leaf column, from the
    schema. Raises ``SourceFileError`` naming the file (and row group) for a corrupt footer.
    """
    try:
        fields, _ = read_struct(memoryview(footer).cast('B'), 0)
    except (ThriftError, IndexError) as error:
        raise SourceFileError(f'{where}: the Parquet footer cannot be read ({error}); the file '
                              f'is corrupt.') from None
    groups = fields.get(4)
    total = _int(fields, 3)
    if not isinstance(groups, list) or total is None:
        raise SourceFileError(f'{where}: the Parquet footer has no valid row groups or row '
                              f'count: the file is corrupt.')
    out = []
    for number, group in enumerate(groups):
        rows = _int(group, 3)
        columns = group.get(1) if isinstance(group, dict) else None
        if rows is None or not isinstance(columns, list) or len(columns) != len(leaves):
            raise SourceFileError(f'{where}: row group {number} has no valid row count or '
                                  f'columns ({len(leaves)} expected): the footer is corrupt.')
        out.append(RowGroupMeta(rows, [
            _chunk(f'{where}: row group {number} column {c}', column, leaves[c], rows, data_end)
            for c, column in enumerate(columns)]))
    if sum(group.num_rows for group in out) != total:
        raise SourceFileError(f'{where}: the footer says {total} rows but its row groups hold '
                              f'{sum(group.num_rows for group in out)}: the file is corrupt.')
    return out
