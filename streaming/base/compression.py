"""The reference's ``streaming.base.compression``: the functions, and one class per family.

The classes are views of ``streaming.format.compression``'s families: ``Zstandard(7)`` compresses
exactly as the algorithm string ``'zstd:7'`` does.
"""

from __future__ import annotations

from typing import Iterator

from streaming.format.compression import *  # noqa: F401,F403
from streaming.format.compression import (
    _FAMILIES,
    compress,
    decompress,
    get_compression_extension,
    get_compressions,
    is_compression,
)

__all__ = ['compress', 'decompress', 'get_compression_extension', 'get_compressions',
           'is_compression']


class Compression:
    """A compression family without levels (the family name is ``extension``)."""

    extension = ''

    def _algo(self) -> str:
        return self.extension

    @classmethod
    def each(cls) -> Iterator[tuple[str, Compression]]:
        """Every algorithm string of this family with an instance for it."""
        yield cls.extension, cls()

    def compress(self, data: bytes) -> bytes:
        """Compress ``data``."""
        return compress(self._algo(), data)

    def decompress(self, data: bytes) -> bytes:
        """Decompress ``data``."""
        return decompress(self._algo(), data)


class LevelledCompression(Compression):
    """A compression family that takes a level (``None``: the family's default)."""

    levels: list[int] = []

    def __init__(self, level: int | None = None) -> None:
        family = _FAMILIES[self.extension]
        if level is None:
            level = family.default_level
        if level not in self.levels:
            raise ValueError(f'{type(self).__name__}: level must be one of {self.levels}, '
                             f'got {level!r}.')
        self.level = level

    def _algo(self) -> str:
        return f'{self.extension}:{self.level}'

    @classmethod
    def each(cls) -> Iterator[tuple[str, Compression]]:
        yield cls.extension, cls()
        for level in cls.levels:
            yield f'{cls.extension}:{level}', cls(level)


def _levels(name: str) -> list[int]:
    return list(_FAMILIES[name].levels or [])


class Brotli(LevelledCompression):
    """Brotli, levels 0-11 (default 11)."""

    extension = 'br'
    levels = _levels('br')

    def __init__(self, level: int = 11) -> None:
        super().__init__(level)


class Bzip2(LevelledCompression):
    """bzip2, levels 1-9 (default 9)."""

    extension = 'bz2'
    levels = _levels('bz2')

    def __init__(self, level: int = 9) -> None:
        super().__init__(level)


class Gzip(LevelledCompression):
    """gzip, levels 0-9 (default 9)."""

    extension = 'gz'
    levels = _levels('gz')

    def __init__(self, level: int = 9) -> None:
        super().__init__(level)


class Snappy(Compression):
    """Snappy (no levels)."""

    extension = 'snappy'


class Zstandard(LevelledCompression):
    """Zstandard, levels 1-22 (default 3)."""

    extension = 'zstd'
    levels = _levels('zstd')

    def __init__(self, level: int = 3) -> None:
        super().__init__(level)
