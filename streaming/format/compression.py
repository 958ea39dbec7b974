"""Whole-file compression codecs, one row per family in ``_FAMILIES``.

A compression is named ``family`` or ``family:level`` (``'zstd'``, ``'zstd:7'``). The compressed
file is the raw basename plus ``.family`` whatever the level. Codec modules are imported on first
use so that importing the library stays cheap.
"""

from __future__ import annotations

import bz2
import gzip
from dataclasses import dataclass
from typing import Callable

from streaming.errors import ShardFileError
from streaming.fileio import atomic_write

__all__ = ['compress', 'decompress', 'decompress_file', 'get_compression_extension',
           'get_compressions', 'import_installed_codecs',
           'is_compression', 'parse_compression']

# The modules of the codecs that are imported on first use, by family.
_CODEC_MODULES = {'br': 'brotli', 'snappy': 'snappy', 'zstd': 'zstandard'}


def import_installed_codecs() -> None:
    """Import every codec module that is installed, now (cheap: docs/benchmark-history.md).

    For threads that must not import (see ``streaming.cache.preload``). All of them rather
    than the ones a dataset's shards use: finding those would build every shard's reader (slow
    at tens of thousands of shards), where the index summary builds them only when first used.
    """
    for module in _CODEC_MODULES.values():
        try:
            __import__(module)
        except ImportError:
            pass  # Not installed: a shard that needs it says so when it is read.


def _brotli():  # noqa: ANN202
    import brotli
    return brotli


def _snappy():  # noqa: ANN202
    import snappy
    return snappy


def _zstd_compress(data: bytes, level: int) -> bytes:
    import zstandard
    # One frame, content size recorded, no checksum: the same frame the reference writes.
    return zstandard.ZstdCompressor(level=level, write_content_size=True,
                                    write_checksum=False).compress(data)


def _zstd_decompress(data: bytes) -> bytes:
    import zstandard
    return zstandard.ZstdDecompressor().decompress(data, max_output_size=1 << 40)


@dataclass(frozen=True)
class Family:
    """One compression family: its level range, default level and codec functions."""

    name: str
    levels: range | None  # None: the family takes no level.
    default_level: int | None
    compress: Callable[[bytes, int | None], bytes]
    decompress: Callable[[bytes], bytes]


_FAMILIES: dict[str, Family] = {
    f.name: f for f in [
        Family('br', range(0, 12), 11, lambda d, lv: _brotli().compress(d, quality=lv),
               lambda d: _brotli().decompress(d)),
        Family('bz2', range(1, 10), 9, lambda d, lv: bz2.compress(d, lv), bz2.decompress),
        Family('gz', range(0, 10), 9, lambda d, lv: gzip.compress(d, lv), gzip.decompress),
        Family('snappy', None, None, lambda d, lv: _snappy().compress(d),
               lambda d: _snappy().decompress(d)),
        Family('zstd', range(1, 23), 3, _zstd_compress, _zstd_decompress),
    ]
}


def get_compressions() -> set[str]:
    """Every accepted compression string: each family bare and with each of its levels."""
    names = set(_FAMILIES)
    for family in _FAMILIES.values():
        names.update(f'{family.name}:{level}' for level in family.levels or ())
    return names


def parse_compression(algo: str | None) -> tuple[Family, int | None] | None:
    """Split ``'family[:level]'`` into its family and level; None for no compression.

    Raises:
        ValueError: the family is unknown or the level out of the family's range.

    """
    if algo in (None, ''):
        return None
    if not isinstance(algo, str):
        raise ValueError(f'compression must be a string such as "zstd" or "zstd:7", got {algo!r}.')
    name, sep, level_text = algo.partition(':')
    family = _FAMILIES.get(name)
    if family is None:
        raise ValueError(f'Unknown compression {algo!r}: the family must be one of '
                         f'{sorted(_FAMILIES)}, optionally with a level as in "zstd:7".')
    if not sep:
        return family, family.default_level
    if family.levels is None:
        raise ValueError(f'Unknown compression {algo!r}: {name} takes no level.')
    if not level_text.isdigit() or int(level_text) not in family.levels:
        raise ValueError(f'Unknown compression {algo!r}: the level of {name} must be an integer '
                         f'from {family.levels.start} to {family.levels.stop - 1}.')
    return family, int(level_text)


def is_compression(algo: str | None) -> bool:
    """Whether ``algo`` names a supported compression (None means none, which is valid)."""
    try:
        parse_compression(algo)
    except ValueError:
        return False
    return True


def get_compression_extension(algo: str) -> str:
    """The filename extension of a compression's output, without the dot."""
    parsed = parse_compression(algo)
    if parsed is None:
        raise ValueError('No compression given, so there is no compressed file extension.')
    return parsed[0].name


def compress(algo: str, data: bytes) -> bytes:
    """Compress ``data`` with ``algo`` (``'family[:level]'``)."""
    parsed = parse_compression(algo)
    if parsed is None:
        return data
    family, level = parsed
    return family.compress(data, level)


def decompress(algo: str, data: bytes) -> bytes:
    """Decompress ``data`` that was compressed with ``algo``."""
    parsed = parse_compression(algo)
    if parsed is None:
        return data
    return parsed[0].decompress(data)


def decompress_file(zip_path: str, raw_path: str, algo: str, expected_bytes: int) -> None:
    """Decompress ``zip_path`` into ``raw_path``, atomically, checking the decompressed size.

    The one decompress-and-verify path of the package: readers of local datasets and the shard
    cache both call it. Any codec failure or size mismatch is a ``ShardFileError`` naming the
    file, and nothing is left under ``raw_path``.
    """
    with open(zip_path, 'rb') as file:
        data = file.read()
    try:
        data = decompress(algo, data)
    except Exception as error:
        raise ShardFileError(f'Cannot decompress {zip_path} with {algo!r}: {error}') from error
    if len(data) != expected_bytes:
        raise ShardFileError(f'{zip_path} decompresses to {len(data)} bytes but the index says '
                             f'{expected_bytes}.')
    atomic_write(raw_path, data)
