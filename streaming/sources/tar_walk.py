"""A tar walked by its own 512-byte headers, every block checked, never trusted to end early.

Python's ``tarfile`` (and so the ``webdataset`` package) stops at the first header it cannot
parse as if the archive had ended there: 512 garbage bytes over the header of member 51 of 100
read as a tar of 50 members. This walker reads the whole file and refuses, with a
``SourceFileError`` naming the file, the member and the byte offset: a header whose checksum or
size field is wrong, a member or extended header that runs past the end of the file, non-zero
padding after a member's data, a file that ends without the two zero blocks that close a tar,
and anything but zeros after them (a zeroed header followed by more members). Member names and
types are read as ``tarfile`` reads them (ustar prefix, pax ``path``/``size`` records, GNU long
names), so the members listed are the ones ``tarfile`` lists for an undamaged tar.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable

from streaming.errors import SourceFileError

__all__ = ['ByteCursor', 'TarLayout', 'walk_tar']

BLOCK = 512
_ZERO_BLOCK = bytes(BLOCK)
_OCTAL = re.compile(rb'^[0-7]*$')
# Types whose header is followed by no data (tarfile's view: links, devices, directories, fifos).
_NO_DATA = frozenset(b'123456')
_REGULAR = frozenset((b'0', b'\0', b'7'))
_PAX = (b'x', b'g', b'X')
_GNU_LONG = (b'L', b'K')
_GNU_TYPES = frozenset((b'L', b'K', b'S'))


class ByteCursor:
    """A forward-only position in a file given as chunks: reads small pieces, skips the rest.

    Skipping copies nothing, so a whole mapped file (one chunk) is walked without copying it.
    """

    def __init__(self, chunks: Iterable[bytes | memoryview]) -> None:
        self.chunks = iter(chunks)
        self.current = memoryview(b'')
        self.pos = 0

    def _advance(self, count: int, keep: bool) -> list[memoryview]:
        parts = []
        while count > 0:
            if not len(self.current):
                chunk = next(self.chunks, None)
                if chunk is None:
                    break
                self.current = memoryview(chunk).cast('B')
                continue
            part = self.current[:count]
            if keep:
                parts.append(part)
            self.current = self.current[len(part):]
            count -= len(part)
            self.pos += len(part)
        return parts

    def read(self, count: int) -> bytes:
        """The next ``count`` bytes (fewer at the end of the file)."""
        return b''.join(bytes(part) for part in self._advance(count, True))

    def skip(self, count: int) -> None:
        """Move ``count`` bytes on (fewer at the end of the file)."""
        self._advance(count, False)

    def first_non_zero(self) -> int | None:
        """Consume the rest of the file; the offset of its first non-zero byte, if any."""
        found = None
        while True:
            start = self.pos
            parts = self._advance(1 << 20, True)
            if not parts:
                return found
            for part in parts:
                rest = bytes(part).lstrip(b'\0') if found is None else b''
                if rest:
                    found = start + len(part) - len(rest)
                start += len(part)


@dataclass
class TarLayout:
    """What a walk found: the regular files as (name, data offset, size), in order."""

    members: list[tuple[str, int, int]] = field(default_factory=list)
    headers: int = 0  # Member headers seen (extended headers not counted).
    end: int = 0  # Offset of the first end-of-archive block.


def _text(raw: bytes) -> str:
    return raw.split(b'\0', 1)[0].decode('utf-8', 'surrogateescape')


def _number(where: str, raw: bytes, what: str) -> int:
    """A numeric header field: octal digits (space/NUL ended) or base-256 (first byte 0x80)."""
    if raw[:1] == b'\x80':
        return int.from_bytes(raw[1:], 'big')
    if raw[:1] == b'\xff':
        raise SourceFileError(f'{where}: negative {what} field.')
    digits = raw.split(b'\0', 1)[0].strip(b' ')
    if not _OCTAL.match(digits):
        raise SourceFileError(f'{where}: its {what} field {raw!r} is not an octal number: the '
                              f'header is damaged.')
    return int(digits or b'0', 8)


def _pax_records(where: str, data: bytes) -> dict[str, str]:
    """The ``<length> <key>=<value>`` records (each ending in a newline) of a pax header."""
    records, pos = {}, 0
    while pos < len(data) and any(data[pos:]):
        space = data.find(b' ', pos)
        digits = data[pos:space] if space > pos else b''
        length = int(digits) if digits.isdigit() else 0
        record = data[pos:pos + length]
        if not length or len(record) != length or not record.endswith(b'\n') or \
                b'=' not in record[len(digits) + 1:]:
            raise SourceFileError(f'{where}: malformed record at byte {pos} of its data.')
        key, value = record[len(digits) + 1:-1].split(b'=', 1)
        records[key.decode('utf-8', 'surrogateescape')] = value.decode('utf-8', 'surrogateescape')
        pos += length
    return records


def walk_tar(where: str, cursor: ByteCursor, size: int) -> TarLayout:
    """Walk the whole tar of ``size`` bytes under ``cursor``; ``SourceFileError`` if damaged.

    ``where`` names the file in every message.
    """
    layout = TarLayout()
    pending: dict[str, str] = {}  # pax records (or a GNU long name) for the next member.
    shared: dict[str, str] = {}  # pax global records.
    while True:
        at = cursor.pos
        member = f'{where}: member {layout.headers + 1}, header at byte {at}'
        header = cursor.read(BLOCK)
        if len(header) < BLOCK:
            raise SourceFileError(f'{member}: the file ends ({size} bytes) before the '
                                  f'end-of-archive blocks: it is truncated.')
        if header == _ZERO_BLOCK:
            second = cursor.read(BLOCK)
            if len(second) < BLOCK:
                raise SourceFileError(f'{where}: the file ends ({size} bytes) inside the '
                                      f'end-of-archive blocks at byte {at}: it is truncated.')
            if second != _ZERO_BLOCK:
                raise SourceFileError(f'{member}: a zero block where a member header should '
                                      f'be (followed by data): a header was overwritten.')
            if pending:
                raise SourceFileError(f'{member}: an extended header is followed by the end '
                                      f'of the archive.')
            stray = cursor.first_non_zero()
            if stray is not None:
                raise SourceFileError(f'{where}: non-zero byte at {stray} after the '
                                      f'end-of-archive blocks at byte {at}: a member header '
                                      f'was zeroed, or the file is damaged.')
            layout.end = at
            return layout
        stored = _number(member, header[148:156], 'checksum')
        unsigned = sum(header) - sum(header[148:156]) + 8 * 32
        signed = unsigned - 256 * sum(1 for byte in header[:148] + header[156:] if byte > 127)
        if stored not in (unsigned, signed):
            raise SourceFileError(f'{member}: bad header checksum (stored {stored}, computed '
                                  f'{unsigned}): the tar is damaged.')
        kind = header[156:157]
        length = _number(member, header[124:136], 'size')
        if kind in _PAX or kind in _GNU_LONG:
            data = _member_data(member, cursor, length, size)
            if kind in (b'x', b'X'):
                pending.update(_pax_records(member, data))
            elif kind == b'g':
                shared.update(_pax_records(member, data))
            else:
                pending['path' if kind == b'L' else 'linkpath'] = _text(data)
            continue
        if kind == b'S' or any(k.startswith('GNU.sparse') for k in {**shared, **pending}):
            raise SourceFileError(f'{member}: sparse members are not supported.')
        records = {**shared, **pending}
        pending = {}
        name = _text(header[:100])
        prefix = _text(header[345:500])
        if prefix and kind not in _GNU_TYPES:
            name = f'{prefix}/{name}'
        name = records.get('path', name)
        if 'size' in records:
            if not records['size'].isdigit():
                raise SourceFileError(f'{member}: pax size {records["size"]!r} is not a number.')
            length = int(records['size'])
        layout.headers += 1
        regular = kind in _REGULAR and not (kind == b'\0' and name.endswith('/'))
        if regular and (not name or name.endswith('/')):
            raise SourceFileError(f'{member}: a file named {name!r}: the header is damaged.')
        if regular or kind[0] not in _NO_DATA:
            offset = cursor.pos
            _member_data(f'{member} ({name!r})', cursor, length, size, keep=False)
            if regular:
                layout.members.append((name, offset, length))


def _member_data(member: str, cursor: ByteCursor, length: int, size: int,
                 keep: bool = True) -> bytes:
    """A member's data (or, ``keep`` False, skipped), then its padding, which must be zeros."""
    start = cursor.pos
    padded = length + (-length) % BLOCK
    if start + padded > size:
        raise SourceFileError(f'{member}: declares {length} bytes of data from byte {start} but '
                              f'the file has {size}: it is truncated or the header is damaged.')
    data = cursor.read(length) if keep else b''
    if not keep:
        cursor.skip(length)
    padding = cursor.read(padded - length)
    if any(padding):
        raise SourceFileError(f'{member}: non-zero padding at byte {start + length}: the tar is '
                              f'damaged.')
    return data
