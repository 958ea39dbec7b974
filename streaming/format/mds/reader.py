"""``MDSReader``: random access into MDS shards."""

from __future__ import annotations

import functools
import struct
from typing import Any, NamedTuple

import numpy as np

from streaming.format.index import FileInfo
from streaming.format.mds.encodings import NDArray, get_coder
from streaming.format.reader import SingleFileShardReader

__all__ = ['MDSReader', 'Spans']


class Spans(NamedTuple):
    """The values of a ``bytes`` column as byte ranges of a shard's map, not yet copied.

    Valid only until the shard's reader is closed; ``values()`` copies them out.
    """

    data: Any  # The shard's mmap.
    starts: np.ndarray  # int64
    stops: np.ndarray  # int64

    def values(self) -> list[bytes]:
        data = self.data
        return [data[a:b] for a, b in zip(self.starts.tolist(), self.stops.tolist())]


@functools.lru_cache(maxsize=256)
def _decode_plan(names: tuple[str, ...], encodings: tuple[str, ...],
                 sizes: tuple[int | None, ...]) -> tuple[list, struct.Struct]:
    """The decode plan of a column layout: per column (name, decode, fixed size, writable).

    Also the struct of the variable-size columns' lengths. Shards of one dataset share it:
    building coders for each of 50k shards would cost seconds. ``writable``: an ``ndarray``
    column is decoded from a ``bytearray`` (the copy of its bytes made anyway), so its array is
    writable, as torch asks of an array it makes a tensor of (``default_collate``).
    """
    coders = [get_coder(encoding) for encoding in encodings]
    plan = [(name, coder.decode, size, isinstance(coder, NDArray))
            for name, coder, size in zip(names, coders, sizes)]
    return plan, struct.Struct(f'<{sum(s is None for s in sizes)}I')


# Encodings a batch gather decodes itself, exactly as their ``decode`` would.
_GATHERED = {'int', 'str', 'bytes'}


def _gather_u32(buf: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Little-endian uint32 at each byte offset of ``starts`` (any alignment), as int64."""
    return buf[starts[:, None] + np.arange(4)].view('<u4')[:, 0].astype(np.int64)


_FIRST_CALL: Any = object()  # ``_layout_table``'s layout after one gather from a map.
# Shards of up to this many samples read their whole layout at the first gather: it costs
# about what the batch's own does (a shuffled epoch visits such a shard batch after batch).
WHOLE_AT_ONCE = 1024


def _columns(data: Any, layout: dict[str, Any] | None, indices: np.ndarray | None,
             spans: bool) -> dict[str, Any] | None:
    """``gather_columns``' result from a ``_layout`` (of the samples ``indices`` of it)."""
    if layout is None:
        return None
    columns: dict[str, Any] = {}
    try:
        for name, value in layout.items():
            if isinstance(value, np.ndarray):
                columns[name] = value if indices is None else value[indices]
                continue
            encoding, starts, stops = value
            if indices is not None:
                starts, stops = starts[indices], stops[indices]
            if encoding == 'str':
                columns[name] = [str(data[a:b], 'utf-8')
                                 for a, b in zip(starts.tolist(), stops.tolist())]
            else:
                column = Spans(data, starts, stops)
                columns[name] = column if spans else column.values()
    except (UnicodeDecodeError, IndexError):  # Reported by the per-sample path.
        return None
    return columns


def _narrow(layout: dict[str, Any] | None) -> dict[str, Any] | None:
    """A whole shard's layout with its positions as uint32 (shard offsets are u32 anyway).

    Half the memory that the table of a shard of a million samples keeps.
    """
    if layout is None:
        return None
    return {name: value if isinstance(value, np.ndarray) else
            (value[0], value[1].astype(np.uint32), value[2].astype(np.uint32))
            for name, value in layout.items()}


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
        # Whether gather_columns can read these columns at once, and (the map it was read
        # from, the layout of every sample) for it.
        self._gatherable = set(column_encodings) <= _GATHERED
        self._layout_table: tuple[Any, Any] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state['_sizes_struct'] = self._sizes_struct.format  # Struct objects do not pickle.
        state['_layout_table'] = None
        return state

    def close(self) -> None:
        self._layout_table = None
        super().close()

    def __setstate__(self, state: dict[str, Any]) -> None:
        state['_sizes_struct'] = struct.Struct(state['_sizes_struct'])
        self.__dict__.update(state)

    def decode_sample(self, data: bytes) -> dict[str, Any]:
        sizes = iter(self._sizes_struct.unpack_from(data, 0))
        pos = self._sizes_struct.size
        sample = {}
        for name, decode, size, writable in self._plan:
            if size is None:
                size = next(sizes)
            sample[name] = decode(bytearray(memoryview(data)[pos:pos + size]) if writable else
                                  data[pos:pos + size])
            pos += size
        if pos != len(data):
            # get_item turns this into a ShardFileError naming the shard.
            raise ValueError(f'sample of {len(data)} bytes has columns totalling {pos} bytes')
        return sample

    def gather_columns(self, indices: np.ndarray, spans: bool = False) -> dict[str, Any] | None:
        """Columns of samples ``indices`` of this shard, read at once (a batch fast path).

        ``int`` columns come back as one int64 array, ``str`` and ``bytes`` columns as lists,
        the values ``decode_sample`` gives; with ``spans``, ``bytes`` columns as ``Spans`` (to
        be copied straight out of the map). None if a column has another encoding or a sample's
        layout does not add up (the per-sample path then reads, and reports, it).

        The first call on a map reads the layout of just these samples; the second reads it
        for every sample of the shard, once (``_layout_table``), so that a shard that a
        shuffled epoch visits batch after batch costs a few indexing operations per batch.
        A shard of up to ``WHOLE_AT_ONCE`` samples has it read at the first call.
        """
        if not self._gatherable or not len(indices):
            return None
        data, layout, whole = self.layout_of(indices)
        return _columns(data, layout, indices if whole else None, spans)

    def layout_of(self, indices: np.ndarray) -> tuple[Any, dict[str, Any] | None, bool]:
        """(the map, a layout covering samples ``indices``, whether it covers every sample).

        The layout is ``_layout``'s (None if a sample's layout does not add up): of just
        ``indices`` at the first call on a map, of the whole shard (kept) from the second on
        (from the first, for shards of up to ``WHOLE_AT_ONCE`` samples). Only for
        ``gatherable`` columns.
        """
        data = (self._maps or self._open())[0]
        table = self._layout_table
        if (table is None or table[0] is not data) and self.samples > WHOLE_AT_ONCE:
            self._layout_table = (data, _FIRST_CALL)
            return data, self._layout(data, indices), False
        if table is None or table[0] is not data or table[1] is _FIRST_CALL:
            table = self._layout_table = (data, _narrow(self._layout(data,
                                                                     np.arange(self.samples))))
        return data, table[1], True

    @property
    def gatherable(self) -> bool:
        """Whether every column is one ``gather_columns`` reads (``int``, ``str``, ``bytes``)."""
        return self._gatherable

    def _layout(self, data: Any, indices: np.ndarray) -> dict[str, Any] | None:
        """The layout of samples ``indices`` in ``data``, read from their own size fields.

        Per column: int64 values (``int``), or (encoding, starts, stops) of the values; None if
        a sample's layout does not add up.
        """
        buf = np.frombuffer(data, np.uint8)
        try:
            offsets = np.frombuffer(data, '<u4', self.samples + 1, 4)
            begins = offsets[indices].astype(np.int64)
            ends = offsets[indices + 1].astype(np.int64)
            del offsets
            num_var = sum(size is None for size in self.column_sizes)
            pos = begins + 4 * num_var
            var = 0
            layout: dict[str, Any] = {}
            for name, encoding, size in zip(self.column_names, self.column_encodings,
                                            self.column_sizes):
                if size is None:
                    sizes = _gather_u32(buf, begins + 4 * var)
                    var += 1
                else:
                    sizes = size
                if encoding == 'int':
                    if size != 8:
                        return None
                    layout[name] = buf[pos[:, None] + np.arange(8)].view('<i8')[:, 0].copy()
                else:
                    layout[name] = (encoding, pos, pos + sizes)
                pos = pos + sizes
            return layout if np.array_equal(pos, ends) else None
        except (IndexError, ValueError):
            return None
        finally:
            del buf  # No numpy view may outlive the call: close() must be able to unmap.
