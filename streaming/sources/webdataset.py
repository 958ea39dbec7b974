"""WebDataset tar shards streamed as they are: one shard per tar file.

Members are grouped into samples as the ``webdataset`` package groups them: a member's key is
its path up to the first dot of its last component, the rest (lowercased) its field; consecutive
members with the same key make one sample, ``{'__key__': key, field: bytes, ...}``. Only regular
files count, and names like ``__meta__`` are skipped. Indexing walks the tar by its own headers
in one pass (``tar_walk``: every header's checksum and size, padding, the end-of-archive blocks
and what follows them), recording the walk; reading walks it again and compares. A truncated or
damaged tar raises ``SourceFileError`` naming the file, the member and the byte offset.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Iterator

from streaming.errors import SourceFileError
from streaming.format.registry import register_format
from streaming.sources.arrow_values import Decoded
from streaming.sources.reader import SOURCE_KEYS, SourceReader, check_ranges_entry
from streaming.sources.registry import SourceFormat, register_source
from streaming.sources.tar_walk import ByteCursor, TarLayout, walk_tar

__all__ = ['WebDatasetSource', 'WebDatasetReader', 'group_members']

_KEY = re.compile(r'^((?:.*/|)[^.]+)[.]([^/]*)$')
_META = re.compile(r'__[^/]*__($|/)')

Member = tuple[str, int, int]  # (name, offset of the data, size)
Sample = tuple[str, list[tuple[str, int, int]]]  # (key, [(field, offset, size)])


def group_members(where: str, members: Iterable[Member]) -> list[Sample]:
    """The samples of a tar's regular-file ``members``, grouped as ``webdataset`` does."""
    samples: list[Sample] = []
    for name, offset, size in members:
        if _META.match(name):
            continue
        match = _KEY.match(name)
        if not match:
            continue
        key, field = match.group(1), match.group(2).lower()
        if not samples or samples[-1][0] != key:
            samples.append((key, []))
        fields = samples[-1][1]
        if any(f == field for f, _, _ in fields):
            raise SourceFileError(f'{where}: sample {key!r} has two {field!r} members.')
        fields.append((field, offset, size))
    return samples


def _layout_entry(layout: TarLayout, samples: int) -> dict[str, int]:
    """What the index records of a tar's walk, checked again when the tar is read."""
    return {'members': len(layout.members), 'headers': layout.headers, 'end': layout.end,
            'samples': samples}


class WebDatasetSource(SourceFormat):
    """WebDataset tars: a unit is a whole tar file."""

    name = 'webdataset'
    extensions = ('.tar',)
    streamed = True
    record_version = 2  # 2: tars walked by their own headers, the walk recorded per unit.

    def index_chunks(self, where: str, size: int, chunks: Iterator[bytes],
                     options: dict[str, Any]) -> dict[str, Any]:
        cursor = ByteCursor(chunks)
        layout = walk_tar(where, cursor, size)
        if cursor.pos != size:
            raise SourceFileError(f'{where}: read {cursor.pos} bytes but the file has {size}: '
                                  f'it is truncated or changed while it was indexed.')
        samples = group_members(where, layout.members)
        return {'schema': None, 'units': [{'samples': len(samples), 'ranges': [[0, size]],
                                           'layout': _layout_entry(layout, len(samples))}]}

    def entry_extras(self, record: dict[str, Any], unit: dict[str, Any],
                     columns: list[str] | None) -> dict[str, Any]:
        return {'layout': unit['layout']}


class WebDatasetReader(SourceReader):
    """A whole tar file; sample ``i`` is its ``i``-th group of members.

    The tar is walked again, block by block, when first read; a walk that differs from the
    index's (members, headers, where the archive ends) is a ``SourceFileError``.
    """

    def decode(self) -> tuple[Decoded, int]:
        where = f'{self.source} ({self.where()})'
        data = self.data()
        layout = walk_tar(where, ByteCursor([data]), len(data))
        samples = group_members(where, layout.members)
        found = _layout_entry(layout, len(samples))
        expected = {**found, **(self.layout or {}), 'samples': self.samples}
        if found != expected:
            raise SourceFileError(f'{where}: walked, it has {found} but the index says '
                                  f'{expected}: the tar changed or the index is stale.')
        columns = self.columns

        def get(i: int) -> dict[str, Any]:
            key, fields = samples[i]
            sample: dict[str, Any] = {'__key__': key}
            for field, offset, size in fields:
                if columns is None or field in columns:
                    sample[field] = data[offset:offset + size]
            return sample

        return Decoded({'': get}, None), 64 * len(samples)

    def get_item(self, idx: int) -> dict[str, Any]:
        return self.getters()[''](idx)


register_source(WebDatasetSource())
register_format('webdataset', reader=WebDatasetReader, check_entry=check_ranges_entry,
                required_keys=SOURCE_KEYS)
