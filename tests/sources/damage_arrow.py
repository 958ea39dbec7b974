"""Damaged Arrow IPC files: clean ones written by ``datasets`` and ``pyarrow.ipc``, and damages.

A file's structure is walked message by message (continuation marker, metadata length,
flatbuffer metadata, body), the body lengths read with ``pyarrow.ipc.read_message``; the IPC
file format's magic, footer and its length are regions of their own.
"""

from __future__ import annotations

import os
import random
import struct
from typing import Any, Callable, Iterator

from tests.sources.damage_columnar import EXTREMES, pick, plain, region_damages

FILE_MAGIC = b'ARROW1\0\0'
ROWS = 40


def clean_table() -> Any:
    import pyarrow as pa
    return pa.table({
        'id': pa.array(range(ROWS), pa.int64()),
        'text': pa.array([None if i % 7 == 3 else f'row {i}é' for i in range(ROWS)]),
        'tokens': pa.array([list(range(i % 5)) for i in range(ROWS)], pa.list_(pa.int64())),
        'image': pa.array([bytes([i % 256]) * (i % 17) for i in range(ROWS)], pa.binary()),
    })


def write_clean(path: str, variant: str) -> bytes:
    """One Arrow file: ``datasets`` (save_to_disk's only data file), ``stream`` or ``file``."""
    import pyarrow as pa
    table = clean_table()
    if variant == 'datasets':
        import datasets
        folder = path + '.saved'
        datasets.Dataset(table).save_to_disk(folder)
        names = [n for n in os.listdir(folder) if n.endswith('.arrow')]
        with open(os.path.join(folder, names[0]), 'rb') as f:
            data = f.read()
    else:
        sink = pa.BufferOutputStream()
        new = pa.ipc.new_stream if variant == 'stream' else pa.ipc.new_file
        with new(sink, table.schema) as writer:
            for batch in table.to_batches(max_chunksize=8):
                writer.write_batch(batch)
        data = sink.getvalue().to_pybytes()
    with open(path, 'wb') as f:
        f.write(data)
    return data


class Layout:
    """Where each message (and the file format's magic and footer) of a clean file lies."""

    def __init__(self, data: bytes) -> None:
        import pyarrow as pa
        self.size = len(data)
        pos = len(FILE_MAGIC) if data.startswith(FILE_MAGIC) else 0
        self.messages: list[tuple[int, int, int, int]] = []  # (start, metadata, body, end)
        while pos + 8 <= len(data):
            marker, length = struct.unpack_from('<Ii', data, pos)
            if marker != 0xFFFFFFFF or length == 0:
                break
            message = pa.ipc.read_message(pa.py_buffer(data[pos:]))
            body = pos + 8 + length
            end = body + (message.body.size if message.body is not None else 0)
            self.messages.append((pos, pos + 8, body, end))
            pos = end
        self.eos = (pos, pos + 8)
        self.footer = (pos + 8, self.size - 10) if data.startswith(FILE_MAGIC) else None

    def regions(self) -> dict[str, list[tuple[int, int]]]:
        out = {'marker-and-length': [(s, m) for s, m, _, _ in self.messages],
               'metadata': [(m, b) for _, m, b, _ in self.messages],
               'body': [(b, e) for _, _, b, e in self.messages if e > b],
               'end-of-stream': [self.eos]}
        if self.footer is not None:
            out['file-footer'] = [self.footer, (self.size - 10, self.size)]
            out['file-magic'] = [(0, len(FILE_MAGIC))]
        return out

    def boundaries(self) -> list[int]:
        points = {0, 1, self.eos[0], self.eos[0] + 4, self.size - 1}
        for start, metadata, body, end in self.messages:
            points.update((start, start + 4, metadata, (metadata + body) // 2, body,
                           (body + end) // 2, end - 1))
        if self.footer is not None:
            points.update((self.footer[0], self.footer[1], self.size - 6))
        return sorted(p for p in points if 0 <= p < self.size)


def damages(data: bytes, rng: random.Random, per_kind: int) -> Iterator[tuple[str, str, bytes]]:
    """Up to ``per_kind`` damages of each kind of the clean file ``data``: (kind, where, bytes)."""
    layout = Layout(data)
    for point in pick(rng, layout.boundaries(), per_kind):
        yield 'truncate', f'at {point}', data[:point]
    spots = [(name, span) for name, spans in layout.regions().items() for span in spans]
    yield from region_damages(data, spots, rng, per_kind)
    lengths = [(start + 4, body - metadata) for start, metadata, body, _ in layout.messages]
    for at, original in pick(rng, lengths * 4, per_kind):
        new = rng.choice(EXTREMES + [original + 8, original - 8, original * 2])
        yield 'metadata-length', f'at {at} = {new}', \
            data[:at] + struct.pack('<I', new % 2**32) + data[at + 4:]
    yield 'special', 'empty file', b''
    yield 'special', 'end of stream only', b'\xff\xff\xff\xff\0\0\0\0'
    yield 'special', 'schema only', data[:layout.messages[0][3]]
    yield 'special', 'two copies', data + data


def invalid_utf8(data: bytes) -> Iterator[tuple[str, str, bytes]]:
    """A string value's bytes replaced by bytes that are not UTF-8, of the same length."""
    for value in (b'row 3\xc3\xa9', b'row 12'):
        at = data.find(value)
        if at >= 0:
            yield 'invalid-utf8', f'{value!r} at {at}', data[:at] + b'\xff\xfe' + data[at + 2:]


def arrow_reference(path: str) -> Callable[[], list[dict] | None]:
    """pyarrow's reading of the IPC stream in ``path`` (fully validated), or None."""
    def read() -> list[dict] | None:
        import pyarrow as pa
        try:
            with open(path, 'rb') as f:
                data = f.read()
            start = len(FILE_MAGIC) if data.startswith(FILE_MAGIC) else 0
            table = pa.ipc.open_stream(pa.py_buffer(data[start:])).read_all()
            table.validate(full=True)
            return [plain(row) for row in table.to_pylist()]
        except Exception:  # noqa: BLE001 - any refusal is a refusal.
            return None
    return read
