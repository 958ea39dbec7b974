"""Damaged Parquet files: clean files of every page layout pyarrow writes, and their damages.

A file's structure is found with the campaign's own Thrift walker (``damage.thrift_fields``),
not with the library's page reader: the magic, every page header, dictionary page and data page
body, the footer, its length. Each damage is ``(kind, region, bytes of the damaged file)``.
"""

from __future__ import annotations

import random
import struct
from typing import Any, Callable, Iterator

import numpy as np

from tests.sources.damage_columnar import (
    EXTREMES,
    pick,
    plain,
    read_zigzag,
    region_damages,
    set_field,
    thrift_fields,
)

ROWS, ROW_GROUP = 24, 8
# name -> (pyarrow.parquet.write_table options, whether the page reader reads binary columns)
VARIANTS: dict[str, tuple[dict[str, Any], bool]] = {
    'snappy-v1-dict': ({'compression': 'snappy', 'data_page_size': 256}, True),
    'none-v2-crc': ({'compression': 'none', 'data_page_version': '2.0',
                     'write_page_checksum': True, 'use_dictionary': ['text']}, True),
    'zstd-v1-plain-crc': ({'compression': 'zstd', 'use_dictionary': False,
                           'write_page_checksum': True, 'data_page_size': 256}, True),
    'none-v1': ({'compression': 'none'}, False),
    'gzip-v2': ({'compression': 'gzip', 'data_page_version': '2.0'}, False),
}


def clean_table() -> Any:
    import pyarrow as pa
    rng = np.random.RandomState(3)
    ids = np.arange(ROWS)
    return pa.table({
        'id': pa.array(ids, pa.int64()),
        'text': pa.array([f'word{i % 5}' for i in ids]),
        'blob': pa.array([rng.bytes(40 + int(i) % 30) for i in ids], pa.binary()),
        'maybe': pa.array([None if i % 3 == 0 else f'v{i}é' * 3 for i in ids]),
        'tokens': pa.array([list(range(int(i) % 6)) for i in ids], pa.list_(pa.int32())),
    })


def write_clean(path: str, variant: str) -> bytes:
    import pyarrow.parquet as pq
    options = dict(VARIANTS[variant][0])
    pq.write_table(clean_table(), path, row_group_size=ROW_GROUP, **options)
    with open(path, 'rb') as f:
        return f.read()


class Layout:
    """Where each structure of a clean Parquet file lies."""

    def __init__(self, data: bytes) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq
        self.size = len(data)
        footer_len = struct.unpack('<I', data[-8:-4])[0]
        self.footer = (self.size - 8 - footer_len, self.size - 8)
        self.footer_fields, _ = thrift_fields(data, self.footer[0])
        meta = pq.read_metadata(pa.BufferReader(data))
        # (header start, body start, body end, page type)
        self.pages: list[tuple[int, int, int, int]] = []
        self.chunks: list[tuple[int, int]] = []
        for g in range(meta.num_row_groups):
            for c in range(meta.num_columns):
                column = meta.row_group(g).column(c)
                pos = column.data_page_offset
                if column.has_dictionary_page and column.dictionary_page_offset:
                    pos = min(pos, column.dictionary_page_offset)
                end = pos + column.total_compressed_size
                self.chunks.append((pos, end))
                while pos < end:
                    fields, body = thrift_fields(data, pos)
                    values = {path: (kind, a, b) for path, kind, a, b in fields}
                    kind_field = values[(1,)]
                    page_type = read_zigzag(data, kind_field[1])
                    size = read_zigzag(data, values[(3,)][1])
                    self.pages.append((pos, body, body + size, page_type))
                    pos = body + size

    def regions(self) -> dict[str, list[tuple[int, int]]]:
        """Named byte ranges of the structures damages aim at."""
        headers = [(h, b) for h, b, _, _ in self.pages]
        dictionaries = [(b, e) for _, b, e, t in self.pages if t == 2 and e > b]
        bodies = [(b, e) for _, b, e, t in self.pages if t != 2 and e > b]
        return {'magic': [(0, 4), (self.size - 4, self.size)],
                'footer-length': [(self.size - 8, self.size - 4)],
                'footer': [self.footer], 'page-header': headers,
                'dictionary-page': dictionaries, 'data-page': bodies}

    def boundaries(self) -> list[int]:
        """Every offset where a structure starts or ends (truncation points)."""
        points = {0, 1, 4, self.footer[0], (self.footer[0] + self.footer[1]) // 2,
                  self.size - 8, self.size - 4, self.size - 1}
        for header, body, end, _ in self.pages:
            points.update((header, header + 1, body, (body + end) // 2, end - 1))
        return sorted(p for p in points if 0 <= p < self.size)


def _with_footer(data: bytes, layout: Layout, footer: bytes) -> bytes:
    """``data`` with its footer replaced (and the footer length made to match)."""
    return data[:layout.footer[0]] + footer + struct.pack('<I', len(footer)) + b'PAR1'


def damages(data: bytes, rng: random.Random, per_kind: int) -> Iterator[tuple[str, str, bytes]]:
    """Up to ``per_kind`` damages of each kind of the clean file ``data``: (kind, where, bytes)."""
    layout = Layout(data)
    regions = layout.regions()
    for point in pick(rng, layout.boundaries(), per_kind):
        yield 'truncate', f'at {point}', data[:point]
    spots = [(name, span) for name, spans in regions.items() for span in spans]
    yield from region_damages(data, spots, rng, per_kind)
    footer = data[layout.footer[0]:layout.footer[1]]
    base = layout.footer[0]
    shifted = [(path, kind, a - base, b - base) for path, kind, a, b in layout.footer_fields]
    for field in pick(rng, [f for f in shifted if f[1] == 'int'] * 2, per_kind):
        original = read_zigzag(footer, field[2])
        new = rng.choice(EXTREMES + [original + 1, original - 1, original * 2])
        yield 'footer-field', f'{field[0]} = {new}', _with_footer(
            data, layout, set_field(footer, field, new))
    binaries = [f for f in shifted if f[1] in ('binary', 'bool', 'byte')]
    for field in pick(rng, binaries * 2, per_kind // 2):
        new: Any = rng.choice([b'', b'\xff\xfe', b'x' * 9, rng.randbytes(12), True, False])
        if field[1] != 'binary':
            new = rng.randrange(256) if field[1] == 'byte' else bool(rng.getrandbits(1))
        elif not isinstance(new, bytes):
            new = b'id'
        yield 'footer-field', f'{field[0]} = {new!r}', _with_footer(
            data, layout, set_field(footer, field, new))
    for value in EXTREMES + [len(footer) + 1, len(footer) - 1, layout.size]:
        yield 'footer-length', str(value), data[:-8] + struct.pack('<I', value % 2**32) + b'PAR1'
    headers = []
    for header, _, _, _ in layout.pages:
        fields, _ = thrift_fields(data, header)
        headers.extend(f for f in fields if f[1] == 'int')
    for field in pick(rng, headers, per_kind):
        original = read_zigzag(data, field[2])
        new = rng.choice(EXTREMES + [original + 1, original - 1, original * 2])
        yield 'header-field', f'{field[0]} at {field[2]} = {new}', set_field(data, field, new)
    yield 'special', 'empty file', b''
    yield 'special', 'magic only', b'PAR1PAR1'
    yield 'special', 'footer of another file', data[:4] + data[layout.footer[0]:]


def invalid_utf8(data: bytes) -> Iterator[tuple[str, str, bytes]]:
    """A string value's bytes replaced by bytes that are not UTF-8, of the same length."""
    for value in (b'word3', b'v1\xc3\xa9'):
        at = data.find(value)
        if at >= 0:
            yield 'invalid-utf8', f'{value!r} at {at}', \
                data[:at] + b'\xff\xfe' + data[at + 2:]


def parquet_reference(path: str) -> Callable[[], list[dict] | None]:
    """pyarrow's reading of the file at ``path`` (with page checksums verified), or None."""
    def read() -> list[dict] | None:
        import pyarrow.parquet as pq
        try:
            return [plain(row) for row in
                    pq.read_table(path, page_checksum_verification=True).to_pylist()]
        except Exception:  # noqa: BLE001 - any refusal is a refusal.
            return None
    return read
