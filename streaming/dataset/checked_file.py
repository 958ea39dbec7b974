"""Cache files that are used only when provably current and whole.

A cache file is a 64-byte header and a payload. The header holds a magic string, the SHA-256
``key`` of everything the payload was computed from, a short payload ``kind`` (a numpy dtype,
say), the payload's length and its xxh3-64 checksum. A file is written atomically
(``fileio``); a reader accepts it only if the magic, key, kind, length and checksum all match,
so a stale, truncated, or damaged file is never used: the caller recomputes and writes it
again.
"""

from __future__ import annotations

import hashlib
import os
import struct
from typing import Any, BinaryIO

import numpy as np
import xxhash

from streaming.fileio import atomic_open

__all__ = ['HEADER_BYTES', 'body_checksum', 'digest', 'pack_header', 'read_checked',
           'verify_checked', 'write_checked']

MAGIC = b'SFCACHE1'
HEADER_BYTES = 64
_HEADER = struct.Struct('<8s32s8sQQ')  # magic, key, kind, payload bytes, xxh3-64 (64 bytes)
_BLOCK = 1 << 24


def digest(inputs: dict[str, Any]) -> bytes:
    """SHA-256 of ``inputs`` (numbers, strings, None, bytes and numpy arrays), by name."""
    hasher = hashlib.sha256()
    for name in sorted(inputs):
        value = inputs[name]
        if isinstance(value, np.ndarray):
            value = (value.dtype.str, value.shape, np.ascontiguousarray(value).tobytes())
        hasher.update(repr((name, value)).encode())
    return hasher.digest()


def _checksum(chunks: Any) -> int:
    hasher = xxhash.xxh3_64()
    for chunk in chunks:
        hasher.update(chunk)
    return hasher.intdigest()


def pack_header(key: bytes, kind: str, length: int, checksum: int) -> bytes:
    """The header of a payload of ``length`` bytes with xxh3-64 ``checksum``."""
    return _HEADER.pack(MAGIC, key, kind.encode().ljust(8, b'\0'), length, checksum)


def write_checked(path: str, key: bytes, kind: str,
                  payload: np.ndarray | list[np.ndarray]) -> None:
    """Write ``payload`` (a contiguous array, or arrays end to end) under ``key`` to ``path``.

    Atomically; a list of arrays is written as their concatenation, without making it.
    """
    parts = payload if isinstance(payload, list) else [payload]
    views = [memoryview(np.ascontiguousarray(part)).cast('B') for part in parts]
    checksum = _checksum(view[i:i + _BLOCK] for view in views
                         for i in range(0, len(view), _BLOCK))
    with atomic_open(path) as file:
        file.write(pack_header(key, kind, sum(len(view) for view in views), checksum))
        for view in views:
            file.write(view)


def _header(file: BinaryIO, key: bytes, kind: str) -> tuple[int, int] | None:
    """(payload length, checksum) if the header is ours, for ``key`` and ``kind``; else None."""
    raw = file.read(HEADER_BYTES)
    if len(raw) < HEADER_BYTES:
        return None
    magic, stored_key, stored_kind, length, checksum = _HEADER.unpack_from(raw)
    if magic != MAGIC or stored_key != key or stored_kind.rstrip(b'\0') != kind.encode():
        return None
    return length, checksum


def verify_checked(path: str, key: bytes, kind: str) -> int | None:
    """The payload length of ``path`` if it is a whole, undamaged file for ``key``; else None.

    Reads the file in blocks (nothing file-sized is held in memory).
    """
    try:
        with open(path, 'rb') as file:
            header = _header(file, key, kind)
            if header is None or os.fstat(file.fileno()).st_size != HEADER_BYTES + header[0]:
                return None
            length, checksum = header
            return length if body_checksum(file, length) == checksum else None
    except OSError:
        return None


def body_checksum(file: BinaryIO, length: int) -> int | None:
    """The checksum of the ``length`` bytes after the header (None if the file is shorter).

    Reads in blocks from the file's current position: nothing file-sized is held in memory.
    """
    file.seek(HEADER_BYTES)
    buffer = bytearray(min(_BLOCK, max(length, 1)))
    view, seen = memoryview(buffer), 0
    hasher = xxhash.xxh3_64()
    while seen < length:
        got = file.readinto(view[:min(len(buffer), length - seen)])
        if not got:
            return None
        hasher.update(view[:got])
        seen += got
    return hasher.intdigest()


def read_checked(path: str, key: bytes, kind: str) -> bytes | None:
    """The payload of ``path`` if it is a whole, undamaged file for ``key``; else None."""
    try:
        with open(path, 'rb') as file:
            header = _header(file, key, kind)
            if header is None:
                return None
            length, checksum = header
            payload = file.read(length + 1)
    except OSError:
        return None
    if len(payload) != length or xxhash.xxh3_64_intdigest(payload) != checksum:
        return None
    return payload
