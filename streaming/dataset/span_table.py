"""One gather per batch over all its MDS shards, instead of one per shard.

A shuffled batch of small samples draws on nearly as many shards as it has samples (32 samples
of 2 KiB on ~31 shards of 500 KB): read shard by shard, each shard costs a few Python calls and
numpy operations, most of a batch's CPU. ``SpanTable`` keeps, by each sample's id in the
dataset, where its column values lie in its shard's map (or the value, for ``int`` columns),
filled one shard at a time from that shard's whole layout (``MDSReader.layout_of``) the first
time a batch draws on it with that map. A batch then costs one check per shard (is its map
the one its rows came from?) and a few numpy operations over all its samples.

The values are those the per-shard gather gives (``MDSReader.gather_columns``): the same
``int`` arrays, ``str`` and ``bytes`` values, ``bytes`` columns as a ``Scattered`` when asked.
A shard whose whole layout is not read yet (its first batch on a map) has its samples' layout
read for just them and written in the batch, not in the table, as ``gather_columns`` does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from streaming.dataset.handoff import Scattered
from streaming.errors import ShardFileError
from streaming.format.mds.reader import MDSReader

__all__ = ['SpanTable', 'ShardOpenFailed', 'MAX_ROWS']

# Datasets of more samples keep the per-shard gather. The table is zeroed memory that only the
# rows filled (and grown past) touch: 8 bytes a sample per ``bytes``/``str``/``int`` column,
# as much again as the shards' own layout tables (``MDSReader._layout_table``) hold, in each
# worker: at most 128 MiB a column at this size.
MAX_ROWS = 1 << 24


class ShardOpenFailed(Exception):
    """Opening shard ``shard_id`` for a gather raised ``error`` (missing or bad files)."""

    def __init__(self, shard_id: int, error: Exception) -> None:
        super().__init__(shard_id, error)
        self.shard_id = shard_id
        self.error = error


class SpanTable:
    """Per sample of a dataset of MDS shards: where its values lie in its shard's map.

    ``shard_starts``: the dataset id of each shard's first sample. Holds one column layout
    (names, encodings, sizes): the first shard's; a shard of another layout is not for it
    (``accepts`` is False: its batches keep the per-shard gather).
    """

    def __init__(self, shard_starts: np.ndarray) -> None:
        self.shard_starts = np.asarray(shard_starts, np.int64)
        self.layout: tuple | None = None  # (names, encodings, sizes) of the columns held.
        self.encodings: list[tuple[str, str]] = []  # (name, encoding) of each column.
        self.columns: list[list[np.ndarray]] = []  # int: [values]; str, bytes: [starts, stops]
        self.rows = 1  # Never empty: rows not filled yet may be read, then overwritten.
        # Shard id: the maps (``MDSReader._maps``, one list per opening) its rows came from.
        self.filled: dict[int, list[Any]] = {}

    def accepts(self, reader: Any) -> bool:
        """Whether ``reader``'s samples can be gathered here."""
        if type(reader) is not MDSReader or not reader.gatherable:
            return False
        layout = (tuple(reader.column_names), tuple(reader.column_encodings),
                  tuple(reader.column_sizes))
        if self.layout is None:
            self.layout = layout
            self.encodings = list(zip(reader.column_names, reader.column_encodings))
            self.columns = [[np.zeros(1, np.int64)] if encoding == 'int' else
                            [np.zeros(1, np.uint32), np.zeros(1, np.uint32)]
                            for _, encoding in self.encodings]
        return layout == self.layout

    def _grow(self, rows: int) -> None:
        size = min(max(rows, 2 * self.rows), MAX_ROWS)
        for column in self.columns:
            for k, old in enumerate(column):
                new = np.zeros(size, old.dtype)
                new[:len(old)] = old
                column[k] = new
        self.rows = size

    def _fill(self, shard_id: int, maps: list[Any], layout: dict[str, Any],
              samples: int) -> bool:
        """Rows of shard ``shard_id`` (of ``samples``) from its whole ``layout`` in ``maps``.

        False if they would make the table too large.
        """
        begin = int(self.shard_starts[shard_id])
        end = begin + samples
        if end > MAX_ROWS:
            return False
        if end > self.rows:
            self._grow(end)
        for (name, encoding), column in zip(self.encodings, self.columns):
            value = layout[name]
            if encoding == 'int':
                column[0][begin:end] = value
            else:
                column[0][begin:end] = value[1]
                column[1][begin:end] = value[2]
        self.filled[shard_id] = maps
        return True

    def gather(self, readers: list[MDSReader], ids: list[int], shards: np.ndarray,
               indices: np.ndarray, spans: bool) -> dict[str, Any] | None:
        """The columns of samples (``shards``, ``indices``), in their order; None if not here.

        ``ids``: the distinct shards of ``shards`` in ascending order, ``readers`` theirs (ready,
        each ``accepts``-ed). None also when a sample's layout does not add up (the per-sample
        path then reads, and reports, it). ``ShardOpenFailed`` if opening a shard raised
        ``FileNotFoundError`` or ``ShardFileError``.
        """
        samples = self.shard_starts[shards] + indices
        part = np.searchsorted(np.asarray(ids), shards) if len(ids) > 1 else \
            np.zeros(len(shards), np.intp)
        filled = self.filled
        maps: list[Any] = []
        for shard_id, reader in zip(ids, readers):  # Most batches: every shard in the table.
            held = reader._maps
            if held is None or filled.get(shard_id) is not held:
                break
            maps.append(held[0])
        else:
            return self._columns(samples, part, maps, [], spans)
        maps = []
        direct: list[tuple[np.ndarray, dict[str, Any]]] = []  # (batch positions, their layout)
        for k, (shard_id, reader) in enumerate(zip(ids, readers)):
            held = reader._maps
            if held is not None and filled.get(shard_id) is held:
                maps.append(held[0])
                continue
            positions = np.flatnonzero(part == k)
            try:
                data, layout, whole = reader.layout_of(indices[positions])
            except (FileNotFoundError, ShardFileError) as error:
                raise ShardOpenFailed(shard_id, error) from error
            if layout is None:
                return None
            maps.append(data)
            if not (whole and self._fill(shard_id, reader._maps, layout, reader.samples)):
                if whole:  # Too many rows for the table: this shard's samples come from here.
                    layout = _pick(layout, indices[positions])
                direct.append((positions, layout))
        return self._columns(samples, part, maps, direct, spans)

    def _columns(self, samples: np.ndarray, part: np.ndarray, maps: list[Any],
                 direct: list[tuple[np.ndarray, dict[str, Any]]],
                 spans: bool) -> dict[str, Any] | None:
        columns: dict[str, Any] = {}
        if direct:  # Their rows may be past the table's end: read any row, then overwrite.
            samples = np.minimum(samples, self.rows - 1)
        for (name, encoding), column in zip(self.encodings, self.columns):
            if encoding == 'int':
                values = column[0][samples]
                for positions, layout in direct:
                    values[positions] = layout[name]
                columns[name] = values
                continue
            starts = column[0][samples].astype(np.int64)
            stops = column[1][samples].astype(np.int64)
            for positions, layout in direct:
                starts[positions] = layout[name][1]
                stops[positions] = layout[name][2]
            if encoding == 'str':
                try:
                    columns[name] = [str(maps[p][a:b], 'utf-8') for p, a, b in
                                     zip(part.tolist(), starts.tolist(), stops.tolist())]
                except UnicodeDecodeError:  # Reported by the per-sample path.
                    return None
                continue
            scattered = Scattered.in_order(maps, part, starts, stops)
            columns[name] = scattered if spans else scattered.values()
        return columns


def _pick(layout: dict[str, Any], indices: np.ndarray) -> dict[str, Any]:
    """A whole shard's ``layout`` narrowed to samples ``indices``."""
    return {name: value[indices] if isinstance(value, np.ndarray) else
            (value[0], value[1][indices], value[2][indices]) for name, value in layout.items()}
