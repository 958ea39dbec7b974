"""``MDSReader``: random access into MDS shards."""

from __future__ import annotations

import functools
import struct
from typing import Any

from streaming.format.index import FileInfo
from streaming.format.mds.encodings import get_coder
from streaming.format.reader import SingleFileShardReader

__all__ = ['MDSReader']


@functools.lru_cache(maxsize=256)
def _decode_plan(names: tuple[str, ...], encodings: tuple[str, ...],
                 sizes: tuple[int | None, ...]) -> tuple[list, struct.Struct]:
    """The decode plan of a column layout: per column (name, decode function, fixed size).

    Also the struct of the variable-size columns' lengths. Shards of one dataset share it:
    building coders for each of 50k shards would cost seconds.
    """
    plan = [(name, get_coder(encoding).decode, size)
            for name, encoding, size in zip(names, encodings, sizes)]
    return plan, struct.Struct(f'<{sum(s is None for s in sizes)}I')


class MDSReader(SingleFileShardReader):
    """One MDS shard: a header (count, offsets, config JSON) followed by the samples."""

    header_keys = ('format', 'column_names', 'column_encodings', 'column_sizes')

    def __init__(self, dirname: str, split: str | None, column_encodings: list[str],
                 column_names: list[str], column_sizes: list[int | None],
                 compression: str | None, hashes: list[str], raw_data: FileInfo, samples: int,
                 size_limit: int | str | None, zip_data: FileInfo | None) -> None:
        super().__init__(dirname, split, compression, hashes, raw_data, samples, size_limit,
                         zip_data)
        self.column_encodings = column_encodings
        self.column_names = column_names
        self.column_sizes = column_sizes
        self._plan, self._sizes_struct = _decode_plan(tuple(column_names),
                                                      tuple(column_encodings),
                                                      tuple(column_sizes))

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state['_sizes_struct'] = self._sizes_struct.format  # Struct objects do not pickle.
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state['_sizes_struct'] = struct.Struct(state['_sizes_struct'])
        self.__dict__.update(state)

    def decode_sample(self, data: bytes) -> dict[str, Any]:
        sizes = iter(self._sizes_struct.unpack_from(data, 0))
        pos = self._sizes_struct.size
        sample = {}
        for name, decode, size in self._plan:
            if size is None:
                size = next(sizes)
            sample[name] = decode(data[pos:pos + size])
            pos += size
        if pos != len(data):
            # get_item turns this into a ShardFileError naming the shard.
            raise ValueError(f'sample of {len(data)} bytes has columns totalling {pos} bytes')
        return sample
