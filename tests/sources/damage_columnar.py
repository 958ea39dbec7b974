"""The Parquet and Arrow damage campaign's machinery: damaged copies of real files, judged.

A *case* is a clean file written by the real producer (pyarrow), one damage (truncation at a
structural boundary, garbage over a structure, a flipped bit, a field of a Thrift struct set to
an extreme value...), and a moment: the damage is made before the file is indexed
(``index``) or after, keeping its size and mtime (``read``: as bit rot does, so the index still
matches it). Reading it must give one of:

* ``right``: every sample, equal to the clean file's;
* ``typed``: a ``StreamingError`` naming the file;
* ``valid``: other samples, where the damaged file is itself a valid file that the reference
  decoder (pyarrow, with every check it has) reads exactly as we do: no reader can tell (a
  changed value byte of a page without a checksum, a renamed column in a footer);

and never ``bare`` (another exception), ``hang`` (over ``SECONDS_PER_CASE``), ``wrong`` (other
samples than the reference decoder reads, or samples where it refuses the file) or ``short``
(fewer samples than the damaged file holds as pyarrow reads it, or than the clean file holds).
"""

from __future__ import annotations

import os
import random
import shutil
import struct
from collections import Counter
from typing import Any, Callable, Iterator

import numpy as np

from streaming.errors import StreamingError
from streaming.fileio import file_etag
from streaming.format import reader_from_json
from streaming.sources.parquet_pages import _varint  # A varint (clean files only here).
from streaming.sources.registry import get_source
from streaming.sources.remote import fetch_ranges
from streaming.storage.objects import ObjectInfo

try:  # Where the time limit of the fuzz tests lives (tests/unit_helpers once shared).
    from tests.unit_helpers import time_limit  # type: ignore[attr-defined]
except ImportError:
    from tests.format.test_fuzz import _time_limit as time_limit

SECONDS_PER_CASE = 20
BAD = ('bare', 'hang', 'wrong', 'short')
# Extreme values for integer fields: zero, negative, off by one, huge (a declared size that
# must never be allocated).
EXTREMES = [0, 1, -1, 7, 2**31 - 1, -2**31, 2**40, 2**62]


def plain(value: Any) -> Any:
    """Values as comparable Python objects (numpy arrays as lists)."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


# ---- Thrift compact protocol, with positions (the library's parser keeps none) --------------
def encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        if value < 0x80:
            out.append(value)
            return bytes(out)
        out.append((value & 0x7F) | 0x80)
        value >>= 7


def encode_zigzag(value: int) -> bytes:
    return encode_varint((value << 1) ^ (value >> 63) if value < 0 else value << 1)


def thrift_fields(buf: bytes, pos: int) -> tuple[list[tuple[tuple, str, int, int]], int]:
    """The scalar fields of the compact struct at ``pos``: (path, kind, start, end), and its end.

    ``kind``: ``int`` (a zigzag varint between start and end), ``binary`` (length and bytes),
    ``bool`` (a field header byte whose low nibble is the value), ``byte``, ``double``.
    """
    out: list[tuple[tuple, str, int, int]] = []

    def value(pos: int, kind: int, path: tuple, in_list: bool) -> int:
        if kind in (1, 2):
            if in_list:
                out.append((path, 'byte', pos, pos + 1))
                return pos + 1
            out.append((path, 'bool', pos - 1, pos))
            return pos
        if kind == 3:
            out.append((path, 'byte', pos, pos + 1))
            return pos + 1
        if kind in (4, 5, 6):
            _, end = _varint(buf, pos)
            out.append((path, 'int', pos, end))
            return end
        if kind == 7:
            out.append((path, 'double', pos, pos + 8))
            return pos + 8
        if kind == 8:
            length, body = _varint(buf, pos)
            out.append((path, 'binary', pos, body + length))
            return body + length
        if kind in (9, 10):
            head = buf[pos]
            pos += 1
            size, item = head >> 4, head & 0x0F
            if size == 15:
                size, pos = _varint(buf, pos)
            for i in range(size):
                pos = value(pos, item, path + (i,), True)
            return pos
        if kind == 11:
            size, pos = _varint(buf, pos)
            if size:
                types = buf[pos]
                pos += 1
                for i in range(size):
                    pos = value(pos, types >> 4, path + (i, 'k'), True)
                    pos = value(pos, types & 0x0F, path + (i, 'v'), True)
            return pos
        if kind == 12:
            return struct_at(pos, path)
        raise ValueError(f'thrift type {kind}')

    def struct_at(pos: int, path: tuple) -> int:
        last = 0
        while True:
            head = buf[pos]
            pos += 1
            if head == 0:
                return pos
            delta, kind = head >> 4, head & 0x0F
            if delta:
                last += delta
            else:
                start = pos
                _, pos = _varint(buf, pos)
                last = _zigzag_decode(buf[start:pos])
            pos = value(pos, kind, path + (last,), False)

    end = struct_at(pos, ())
    return out, end


def _zigzag_decode(data: bytes) -> int:
    return read_zigzag(data, 0)


def read_zigzag(buf: bytes, pos: int) -> int:
    """The zigzag varint (a Thrift int) at ``pos``."""
    raw, _ = _varint(buf, pos)
    return (raw >> 1) ^ -(raw & 1)


def region_damages(data: bytes, spots: list[tuple[str, tuple[int, int]]], rng: random.Random,
                   per_kind: int) -> Iterator[tuple[str, str, bytes]]:
    """Garbage over, and a flipped bit in, ``per_kind`` random places of the named ``spots``."""
    for name, (start, end) in pick(rng, spots * 3, per_kind):
        at = rng.randrange(start, end)
        garbage = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 48)))
        yield 'garbage', f'{name} at {at}', data[:at] + garbage + data[at + len(garbage):]
    for name, (start, end) in pick(rng, spots * 3, per_kind):
        at = rng.randrange(start, end)
        flipped = data[at] ^ (1 << rng.randrange(8))
        yield 'flip', f'{name} at {at}', data[:at] + bytes([flipped]) + data[at + 1:]


def set_field(buf: bytes, field: tuple[tuple, str, int, int], new: Any) -> bytes:
    """``buf`` with one scalar field replaced (an int, bytes for binary, a bool)."""
    _, kind, start, end = field
    if kind == 'int':
        return buf[:start] + encode_zigzag(int(new)) + buf[end:]
    if kind == 'binary':
        return buf[:start] + encode_varint(len(new)) + bytes(new) + buf[end:]
    if kind == 'bool':
        return buf[:start] + bytes([(buf[start] & 0xF0) | (1 if new else 2)]) + buf[end:]
    if kind == 'byte':
        return buf[:start] + bytes([int(new) & 0xFF]) + buf[end:]
    return buf[:start] + struct.pack('<d', float(new)) + buf[end:]


# ---- outcomes -----------------------------------------------------------------------------
class Tally:
    """Outcomes per (format, damage kind, moment), printed at the end of a campaign."""

    def __init__(self) -> None:
        self.counts: Counter = Counter()
        self.failures: list[str] = []

    def add(self, fmt: str, kind: str, moment: str, outcome: str, detail: str) -> None:
        self.counts[fmt, kind, moment, outcome] += 1
        if outcome in BAD:
            self.failures.append(f'{fmt} {kind} ({moment}): {outcome}: {detail}')

    def summary(self, fmt: str) -> dict[str, int]:
        """cases, right, typed, valid, bare, hang, wrong, short of one format."""
        out = {'cases': 0, **{name: 0 for name in ('right', 'typed', 'valid') + BAD}}
        for (f, _, _, outcome), n in self.counts.items():
            if f == fmt:
                out['cases'] += n
                out[outcome] += n
        return out

    def by_kind(self, fmt: str) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for (f, kind, moment, outcome), n in sorted(self.counts.items()):
            if f == fmt:
                row = out.setdefault(f'{kind}/{moment}', {})
                row[outcome] = row.get(outcome, 0) + n
        return out


def judge(read: Callable[[], list[dict]], clean: list[dict],
          reference: Callable[[], list[dict] | None], names: str) -> tuple[str, str]:
    """(outcome, detail) of one case: ``read()`` is ours, ``reference()`` the reference decoder's
    reading of the damaged file (None if it refuses it); ``names`` must appear in a typed error.
    """
    try:
        with time_limit(SECONDS_PER_CASE):
            got = [plain(sample) for sample in read()]
    except TimeoutError as error:
        return 'hang', str(error)
    except StreamingError as error:
        if names not in str(error):
            return 'bare', f'{type(error).__name__} does not name {names}: {error}'
        return 'typed', f'{type(error).__name__}: {error}'
    except Exception as error:  # noqa: BLE001 - what the campaign is here to find.
        return 'bare', f'{type(error).__name__}: {error}'
    if got == clean:
        return 'right', ''
    expected = reference()
    if expected is None:
        return ('short' if len(got) < len(clean) else 'wrong'), \
            f'{len(got)} samples where the reference refuses the file'
    if got == expected:
        if len(got) < len(clean):
            return 'short', f'{len(got)} of {len(clean)} samples, as the reference reads it'
        return 'valid', ''
    if len(got) < len(expected):
        return 'short', f'{len(got)} of {len(expected)} samples'
    first = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), None)
    return 'wrong', f'sample {first} differs from the reference'


def pick(rng: random.Random, items: list, count: int) -> list:
    """``count`` of ``items`` (all of them if fewer), in a seeded order."""
    if len(items) <= count:
        return list(items)
    return rng.sample(items, count)


# ---- reading ---------------------------------------------------------------------------------
def write_as(path: str, data: bytes, like: os.stat_result | None = None) -> None:
    """Write ``data`` to ``path``; with ``like``, keep that stat's mtime (bit rot in place)."""
    with open(path, 'r+b' if os.path.exists(path) else 'wb') as f:
        f.write(data)
        f.truncate(len(data))
    if like is not None:
        os.utime(path, ns=(like.st_atime_ns, like.st_mtime_ns))


def index_file(fmt: str, path: str, options: dict[str, Any]) -> dict[str, Any]:
    """The file record of ``path``, indexed as ``SourceStream`` does for a local file."""
    source = get_source(fmt)
    st = os.stat(path)
    options = {**source.options, **options}
    if source.streamed:
        def chunks() -> Iterator[bytes]:
            with open(path, 'rb') as f:
                while chunk := f.read(1 << 16):
                    yield chunk
        record = source.index_chunks(path, st.st_size, chunks(), options)
    else:
        def read(start: int, end: int) -> bytes:
            with open(path, 'rb') as f:
                f.seek(start)
                return f.read(end - start)
        record = source.index_ranges(path, st.st_size, read, options)
    return {**record, 'size': st.st_size, 'etag': file_etag(st)}


def read_units(fmt: str, root: str, rel: str, record: dict[str, Any], cache: str,
               in_place: bool) -> list[dict]:
    """Every sample of the file's units, read as the stream reads them (in place, or copied)."""
    source = get_source(fmt)
    out = []
    for entry in source.entries(record, rel, None):
        if in_place:
            entry['source_root'] = root
        else:
            local = os.path.join(cache, entry['raw_data']['basename'])
            fetch_ranges(os.path.join(root, rel), local, entry['ranges'],
                         expect=ObjectInfo(record['size'], record['etag']))
        reader = reader_from_json(cache, None, entry)
        try:
            out.extend(reader.get_item(i) for i in range(reader.samples))
        finally:
            reader.close()
    return out


def case_reader(fmt: str, root: str, rel: str, damaged: bytes, moment: str, in_place: bool,
                options: dict[str, Any]) -> Callable[[], list[dict]]:
    """``read()`` of one case: the file at ``root/rel`` is clean; damage it at ``moment``."""
    path = os.path.join(root, rel)
    cache = os.path.join(root, '.cache')

    def read() -> list[dict]:
        if moment == 'index':
            write_as(path, damaged)
            return read_units(fmt, root, rel, index_file(fmt, path, options), cache, in_place)
        record = index_file(fmt, path, options)
        write_as(path, damaged, like=os.stat(path))
        return read_units(fmt, root, rel, record, cache, in_place)

    return read


# ---- a campaign ---------------------------------------------------------------------------
# Damages of each kind per clean file (CI: 4; the bigger run: 40, each read in every mode).
CASES = int(os.environ.get('STREAMING_COLUMNAR_DAMAGES', '4'))
EVERY_MODE = 'STREAMING_COLUMNAR_DAMAGES' in os.environ  # CI: the modes taken in turn.
MOMENTS = ('index', 'read')


def campaign(fmt: str, clean_files: dict[str, tuple[bytes, list[dict]]],
             damages: Callable[[bytes, random.Random, int], Iterator[tuple[str, str, bytes]]],
             reference: Callable[[str], Callable[[], list[dict] | None]],
             modes: list[tuple[bool, dict[str, Any]]], tmp: str, tally: Tally,
             cases: int = CASES) -> list[tuple[str, str, str, str, str]]:
    """Every damage of every clean file, at each moment, judged into ``tally``.

    ``clean_files``: variant -> (its bytes, its rows); ``modes``: (read in place, indexing
    options), every one for each damage and moment with ``EVERY_MODE``, else one in turn.
    Returns (variant, kind, where, moment, outcome) of every case.
    """
    rel = 'data-00000-of-00001.' + ('arrow' if fmt == 'arrow' else 'parquet')
    out = []
    turn = 0
    for variant, (data, rows) in clean_files.items():
        for kind, where, damaged in damages(data, random.Random(f'{fmt}/{variant}'), cases):
            for moment in MOMENTS:
                turn += 1
                for in_place, options in modes if EVERY_MODE else [modes[turn % len(modes)]]:
                    root = os.path.join(tmp, 'case')
                    shutil.rmtree(root, ignore_errors=True)
                    os.makedirs(root)
                    with open(os.path.join(root, rel), 'wb') as f:
                        f.write(data)
                    outcome, detail = judge(
                        case_reader(fmt, root, rel, damaged, moment, in_place, options), rows,
                        reference(os.path.join(root, rel)), rel)
                    tally.add(fmt, kind, moment, outcome,
                              f'{variant}, {where}, in place {in_place}, {options}: {detail}')
                    out.append((variant, kind, where, moment, outcome))
    return out


def every_damage(module: Any) -> Callable[[bytes, random.Random, int],
                                          Iterator[tuple[str, str, bytes]]]:
    """The damages of a format's module (``damage_parquet``...): its ``damages`` of each
    kind, then its ``invalid_utf8`` ones.
    """
    def generate(data: bytes, rng: random.Random, cases: int) -> Iterator[tuple[str, str, bytes]]:
        yield from module.damages(data, rng, cases)
        yield from module.invalid_utf8(data)
    return generate


def clean_files(module: Any, variants: list[str], tmp: str) -> dict[str, tuple[bytes, list[dict]]]:
    """variant -> (the clean file the format's module writes, its rows)."""
    rows = plain(module.clean_table().to_pylist())
    return {variant: (module.write_clean(os.path.join(tmp, variant), variant), rows)
            for variant in variants}
