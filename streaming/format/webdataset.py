"""WebDataset tar shards streamed as they are: one shard per tar file.

Members are grouped into samples as the ``webdataset`` package groups them: a member's key is
its path up to the first dot of its last component, the rest (lowercased) its field; consecutive
members with the same key make one sample, ``{'__key__': key, field: bytes, ...}``. Only regular
files count, and names like ``__meta__`` are skipped. Indexing walks the tar headers in one pass
(``tarfile`` in stream mode, skipping the data); a truncated or damaged tar raises
``SourceFileError`` naming the file.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Iterator

from streaming.errors import SourceFileError
from streaming.format.arrow_values import Decoded
from streaming.format.registry import register_format
from streaming.format.source_reader import SOURCE_KEYS, SourceReader, check_ranges_entry
from streaming.format.sources import ChunkFile, SourceFormat, register_source

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


def _tar_errors() -> tuple[type[BaseException], ...]:
    import tarfile
    return (tarfile.TarError, EOFError, OSError)


def _open_tar(where: str, **kwargs: Any) -> Any:
    """``tarfile.open(**kwargs)``; a file that is no tar is a ``SourceFileError``."""
    import tarfile
    try:
        return tarfile.open(**kwargs)
    except _tar_errors() as error:
        raise SourceFileError(f'{where}: not a tar file ({error}).') from None


def _members(where: str, archive: Any) -> Iterator[Member]:
    try:
        for info in archive:
            if info.isreg():
                yield info.name, info.offset_data, info.size
    except _tar_errors() as error:
        raise SourceFileError(f'{where}: not a readable tar file ({error}); it is truncated or '
                              f'corrupt.') from None


class WebDatasetSource(SourceFormat):
    """WebDataset tars: a unit is a whole tar file."""

    name = 'webdataset'
    extensions = ('.tar',)
    streamed = True

    def index_chunks(self, where: str, size: int, chunks: Iterator[bytes],
                     options: dict[str, Any]) -> dict[str, Any]:
        stream = ChunkFile(chunks)
        archive = _open_tar(where, fileobj=stream, mode='r|')
        members = list(_members(where, archive))
        for _, offset, length in members:
            if offset + length > size:
                raise SourceFileError(f'{where}: a member ends at byte {offset + length} but '
                                      f'the file has {size}: it is truncated.')
        stream.drain()  # The rest of the file (end-of-archive blocks, padding).
        if stream.pos != size:
            raise SourceFileError(f'{where}: read {stream.pos} bytes but the file has {size}: '
                                  f'it is truncated or changed while it was indexed.')
        samples = group_members(where, members)
        return {'schema': None, 'units': [{'samples': len(samples), 'ranges': [[0, size]]}]}


class WebDatasetReader(SourceReader):
    """A whole tar file; sample ``i`` is its ``i``-th group of members."""

    @classmethod
    def warm_up(cls) -> None:
        import tarfile  # noqa: F401 - decode's; imported now (see SourceReader.warm_up).

    def decode(self) -> tuple[Decoded, int]:
        where = self.source
        with open(self.path(self.raw_data), 'rb') as handle:
            archive = _open_tar(where, fileobj=handle, mode='r:')
            samples = group_members(where, _members(where, archive))
        if len(samples) != self.samples:
            raise SourceFileError(f'{where} has {len(samples)} samples but the index says '
                                  f'{self.samples}: the index is stale.')
        data = self.data()
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
