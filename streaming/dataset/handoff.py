"""Collated batches from a DataLoader worker to the main process through reused shared memory.

torch sends a worker's batch to the main process by pickling it into the worker's result queue:
every ``bytes``/``str`` value is copied into the pickle, written through a pipe 64 KiB at a
time and copied again when unpickled, and every tensor gets a shared-memory segment of its own,
sent as a file descriptor over a socket. With large samples that is most of the main process's
time (docs/dataset.md, "Where DataLoader-worker throughput goes").

When torch's own worker loop fetches a batch that the dataset collates itself
(``streaming.dataset.batches``: default collate, MDS ``int``/``str``/``bytes`` columns),
``pack`` makes it a ``PackedBatch``, which that loop only puts in its result queue:

* a batch of at least ``RING_MIN_BYTES`` of payload is copied straight from the shards' maps
  into a slot of this worker's ring (``streaming.coord.ring``: one ``memfd`` the worker
  reuses, never a file in ``/dev/shm``, whose file descriptor the main process receives once
  per pass and maps); the pickle holds only offsets and lengths.
* smaller batches, or when all ``ring.SLOTS`` slots are busy (a slot stays busy until the main
  process has unpickled its batch), travel inside the pickle, their integer columns as raw
  bytes rather than as tensors in segments of their own.

Unpickling in the main process (in torch's pin-memory thread if ``pin_memory``) rebuilds the
plain ``dict`` ``default_collate`` gives: int64 tensors (ordinary, resizable memory), lists of
``bytes`` and ``str``, all copied out of the slot, which is then marked free: nothing handed to
the user points into the ring. The last batch of a worker's pass tells the main process to drop
its map of that worker's ring (the next pass sends it again); maps of workers that died are
dropped at the next new map, or by ``release_dead_workers()`` (``StreamingDataLoader`` calls it
when an iteration ends, however it ends). ``STREAMING_BATCH_SHM=0`` turns
all this off (batches are then plain dicts, pickled by torch).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from streaming.coord.ring import BUSY, FREE, HEADER, Maps, Ring
from streaming.dataset.heap import keep_freed
from streaming.format.mds.reader import Spans

try:  # The optional C copy (setup.py); without it, memoryview slices: the same bytes.
    from streaming.dataset import _copy_spans
except ImportError:
    _copy_spans = None

__all__ = ['Collated', 'PackedBatch', 'Scattered', 'detached', 'enabled', 'pack', 'pack_group',
           'release_dead_workers', 'mapped_rings', 'RING_MIN_BYTES']

RING_MIN_BYTES = 64 << 10  # Smaller payloads are cheaper inside the pickle.
_INT, _SPANS, _BYTES, _STR, _OTHER = 'i', 'p', 'b', 's', 'o'
_GATHERED = 'g'  # A batch of a group given as gathered columns (others: _OTHER, collated).


def enabled() -> bool:
    return os.environ.get('STREAMING_BATCH_SHM', '1') != '0' and hasattr(os, 'memfd_create')


# ---- the worker's side ---------------------------------------------------------------------
class Scattered:
    """A ``bytes`` column of a batch, still in the shards' maps.

    Per shard, the ``Spans`` of its samples and their positions in the batch. A shuffled batch
    of small samples draws on nearly as many shards as it has samples: the parts are joined
    into flat arrays once, so sizing and copying cost a few numpy calls per batch, not per shard.
    ``in_order`` makes one from such flat arrays directly.
    """

    def __init__(self, parts: list[tuple[Spans, np.ndarray]], count: int) -> None:
        self.parts = parts
        self.count = count
        self._sizes: np.ndarray | None = None
        self._flat: tuple[np.ndarray | None, ...] | None = None
        self._sources: list[Any] = [spans.data for spans, _ in parts]

    @classmethod
    def in_order(cls, sources: list[Any], part_of: np.ndarray, starts: np.ndarray,
                 stops: np.ndarray) -> Scattered:
        """Value ``i`` is ``sources[part_of[i]][starts[i]:stops[i]]`` (int64 positions)."""
        scattered = cls([], len(starts))
        scattered._sources = sources
        scattered._flat = (None, starts, stops, part_of)
        return scattered

    def _joined(self) -> tuple[np.ndarray | None, ...]:
        """(positions, starts, stops, part of each value), over all parts, part after part.

        Positions None: the values are in batch order.
        """
        if self._flat is None:
            parts = self.parts
            if len(parts) == 1:
                spans, positions = parts[0]
                self._flat = (positions, spans.starts, spans.stops,
                              np.zeros(len(positions), np.intp))
            else:
                self._flat = (np.concatenate([positions for _, positions in parts]),
                              np.concatenate([spans.starts for spans, _ in parts]),
                              np.concatenate([spans.stops for spans, _ in parts]),
                              np.repeat(np.arange(len(parts)),
                                        [len(positions) for _, positions in parts]))
        return self._flat

    def sizes(self) -> np.ndarray:
        """Each value's length, in batch order (computed once: ``pack`` asks twice)."""
        if self._sizes is None:
            positions, starts, stops, _ = self._joined()
            assert starts is not None and stops is not None
            lengths = stops.astype(np.int64) - starts
            if positions is None:
                self._sizes = lengths
            else:
                self._sizes = np.empty(self.count, np.int64)
                self._sizes[positions] = lengths
        return self._sizes

    def values(self) -> list[bytes]:
        positions, starts, stops, part_of = self._joined()
        assert starts is not None and stops is not None and part_of is not None
        sources = self._sources
        found = [sources[p][a:b] for p, a, b in zip(part_of.tolist(), starts.tolist(),
                                                    stops.tolist())]
        if any(isinstance(source, bytearray) for source in sources):  # A detached copy's.
            found = [bytes(value) for value in found]
        if positions is None:
            return found
        values: list[Any] = [None] * self.count
        for position, value in zip(positions.tolist(), found):
            values[position] = value
        return values

    def detached(self) -> Scattered:
        """The same values, copied out of the shards' maps into one ``bytes`` of their own.

        For a batch kept while its worker reads the next ones (a group, ``pack_group``):
        preparing another shard may close the map a ``Spans`` points into.
        """
        sizes = self.sizes()
        offsets = np.zeros(len(sizes) + 1, np.int64)
        np.cumsum(sizes, out=offsets[1:])
        buffer = bytearray(int(offsets[-1]))
        view = memoryview(buffer)
        try:
            self.copy_into(view, offsets)
        finally:
            view.release()
        # The bytearray itself, not a ``bytes`` copy of it: it is copied once more, into the
        # ring (``values`` turns its slices into ``bytes``).
        return Scattered.in_order([buffer], np.zeros(self.count, np.int64), offsets[:-1],
                                  offsets[1:])

    def copy_into(self, view: memoryview, offsets: np.ndarray) -> None:
        """Copy value ``i`` to ``view[offsets[i]:offsets[i + 1]]``."""
        positions, starts, stops, part_of = self._joined()
        assert starts is not None and stops is not None and part_of is not None
        at = offsets[:-1] if positions is None else offsets[positions]
        if _copy_spans is not None:
            _copy_spans.copy_spans(view, np.ascontiguousarray(at, np.int64), self._sources,
                                   part_of.astype(np.int64), starts.astype(np.int64),
                                   stops.astype(np.int64))
            return
        sources = [memoryview(source) for source in self._sources]
        try:
            for part, start, stop, begin in zip(part_of.tolist(), starts.tolist(),
                                                stops.tolist(), at.tolist()):
                view[begin:begin + stop - start] = sources[part][start:stop]
        finally:
            for source in sources:
                source.release()


_ring: Ring | None = None


def _my_ring(create: bool) -> Ring | None:
    global _ring
    if _ring is None or _ring.pid != os.getpid():
        _ring = Ring() if create else None
    return _ring


class PackedBatch:
    """A batch ready to cross to the main process; unpickles as the default-collated dict.

    Made only for torch's worker loop, which does nothing with it but put it in its queue.
    If it is dropped without being pickled, its slot is freed.
    """

    __slots__ = ('reduced', 'slot')

    def __init__(self, reduced: tuple, slot: tuple[Any, int] | None) -> None:
        self.reduced = reduced
        self.slot = slot  # (the ring's map, the slot's offset) until sent.

    def __reduce__(self) -> tuple:
        self.slot = None  # Sent: the main process frees the slot.
        return self.reduced

    def __del__(self) -> None:
        if self.slot is not None:
            data, offset = self.slot
            if not data.closed:
                data[offset] = FREE


def _columns(runs: list[dict[str, Any]]) -> list[tuple[str, str, Any]]:
    """The batch's columns across ``runs`` (one per shard): (name, kind, value)."""
    columns = []
    for name, first in runs[0].items():
        values = [run[name] for run in runs]
        if isinstance(first, np.ndarray):
            columns.append((name, _INT, np.ascontiguousarray(
                np.concatenate(values) if len(values) > 1 else first, np.int64)))
        elif isinstance(first, Scattered):
            columns.append((name, _SPANS, values))
        else:
            flat = first if len(values) == 1 else [v for value in values for v in value]
            kind = _BYTES if all(type(v) is bytes for v in flat) else \
                _STR if all(type(v) is str for v in flat) else _OTHER
            columns.append((name, kind, flat))
    return columns


def _payload(kind: str, value: Any) -> int:
    if kind == _INT:
        return value.nbytes
    if kind == _SPANS:
        return sum(int(part.sizes().sum()) for part in value)
    if kind == _BYTES:
        return sum(map(len, value))
    if kind == _STR:  # isascii() is O(1): only other strings are measured by encoding them.
        return sum(len(v) if v.isascii() else len(v.encode('utf-8')) for v in value)
    return 0


class Collated:
    """A batch of a group (``pack_group``) that is already collated: pickled as it is."""

    __slots__ = ('batch',)

    def __init__(self, batch: Any) -> None:
        self.batch = batch


def detached(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``runs`` with their ``Scattered`` columns copied out of the shards' maps."""
    return [{name: value.detached() if isinstance(value, Scattered) else value
             for name, value in run.items()} for run in runs]


def pack(runs: list[dict[str, Any]], final: bool) -> PackedBatch:
    """The batch of ``runs`` (gathered columns, ``bytes`` ones possibly ``Scattered``).

    ``final``: the last batch of this worker's pass.
    """
    return _pack([runs], final, True)


def pack_group(batches: list[Any], final: bool) -> PackedBatch:
    """Consecutive batches of this worker in one pickle (and one slot): unpickles as their list.

    Each of ``batches`` is either gathered ``runs`` (as for ``pack``) or ``Collated``.
    """
    return _pack(batches, final, False)


def _pack(batches: list[Any], final: bool, single: bool) -> PackedBatch:
    entries = [(_OTHER, batch.batch) if isinstance(batch, Collated) else
               (_GATHERED, _columns(batch)) for batch in batches]
    packable = [columns for kind, columns in entries if kind != _OTHER]
    total = sum(_payload(kind, value) for columns in packable for _, kind, value in columns)
    ring = _my_ring(create=total >= RING_MIN_BYTES)
    retire = (ring.pid, ring.token) if ring is not None and final else None
    offset = None
    if ring is not None and total >= RING_MIN_BYTES:
        # With room to align each column.
        offset = ring.acquire(total + 8 * sum(map(len, packable)))
    if offset is None:
        inline = [(kind, _inline(value) if kind != _OTHER else value) for kind, value in entries]
        packed = PackedBatch((_rebuild_inline, (inline, retire, single)), None)
    else:
        assert ring is not None and ring.map is not None
        layouts, pos = [], HEADER
        for kind, value in entries:
            if kind != _OTHER:
                value, pos = _write(ring.map, offset, value, pos)
            layouts.append((kind, value))
        ref, announce = ring.reference()
        packed = PackedBatch((_rebuild_from_ring, (ref, announce, offset, ring.seq, layouts,
                                                   retire, single)), (ring.map, offset))
    if retire is not None:
        assert ring is not None
        ring.announced = False  # The main process lets its map go at this batch.
    return packed


def _inline(columns: list) -> list:
    """``columns`` as they travel inside the pickle: plain values, integers as raw bytes."""
    return [(name, _BYTES, [v for part in value for v in part.values()]) if kind == _SPANS
            else (name, kind, value.tobytes() if kind == _INT else value)
            for name, kind, value in columns]


def _write(data: Any, offset: int, columns: list, start: int = HEADER) -> tuple[list, int]:
    """Copy the payload of ``columns`` into the slot at ``offset`` of ``data``; their layout.

    The payload starts ``start`` bytes into the slot; also returned: the (aligned) position
    after it. Positions in the layout are from the start of the slot.
    """
    base = memoryview(data)
    view = base[offset:]
    try:
        pos, layout = start, []
        for name, kind, value in columns:
            if kind == _INT:
                np.frombuffer(view, np.int64, len(value), pos)[:] = value
                layout.append((name, kind, (pos, len(value))))
                pos += value.nbytes
                continue
            if kind == _OTHER:
                layout.append((name, kind, value))
                continue
            if kind == _SPANS:
                sizes = np.concatenate([part.sizes() for part in value])
            else:
                if kind == _STR:
                    value = [v.encode('utf-8') for v in value]
                sizes = np.fromiter(map(len, value), np.int64, len(value))
            offsets = np.empty(len(sizes) + 1, np.int64)
            offsets[0] = 0
            np.cumsum(sizes, out=offsets[1:])
            offsets += pos
            if kind == _SPANS:
                begin = 0
                for part in value:
                    part.copy_into(view, offsets[begin:begin + part.count + 1])
                    begin += part.count
            else:
                for at, item in zip(offsets.tolist(), value):
                    view[at:at + len(item)] = item
            layout.append((name, _BYTES if kind == _SPANS else kind, offsets.tobytes()))
            pos = -(-int(offsets[-1]) // 8) * 8  # Keeps integer columns aligned.
        return layout, pos
    finally:
        view.release()
        base.release()


# ---- the main process's side ---------------------------------------------------------------
# Batches of up to a slot are copied out of a ring into new objects: the heap keeps a ring's
# worth of freed memory for them (``streaming.dataset.heap``).
_maps = Maps(on_map=keep_freed)


def release_dead_workers() -> None:
    """Unmap the rings of DataLoader worker processes that have exited."""
    maps = _maps
    if maps is None:  # At interpreter exit, once module globals are cleared: nothing to do.
        return
    with maps.lock:
        maps.drop_dead()


def mapped_rings() -> int:
    """How many workers' rings this process maps (for tests and diagnostics)."""
    return len(_maps.maps)


def _rebuild_from_ring(ref: tuple, announce: Any, offset: int, seq: int, layouts: list,
                       retire: tuple | None, single: bool) -> Any:
    pid, token = ref[:2]
    if pid == os.getpid():  # Unpickled by the worker itself (a copy): its own ring.
        if announce is not None:
            os.close(announce.detach())
        ring = _my_ring(create=False)
        if ring is None or ring.token != token or ring.generation != ref[2]:
            raise RuntimeError('A batch packed by a DataLoader worker was unpickled in another '
                               'process than the one it was sent to; set STREAMING_BATCH_SHM=0.')
        data = ring.map
    else:
        data = _maps.get(ref, announce)
    if data[offset] != BUSY or int.from_bytes(data[offset + 8:offset + 16], 'little') != seq:
        raise RuntimeError(f'A shared-memory slot of DataLoader worker process {pid} no longer '
                           f'holds the batch sent (released or reused early).')
    base = memoryview(data)
    view = base[offset:]
    try:
        batches = [value if kind == _OTHER else _columns_from(view, value)
                   for kind, value in layouts]
    finally:
        view.release()
        base.release()
    data[offset] = FREE
    _retire(retire)
    return batches[0] if single else batches


def _retire(retire: tuple | None) -> None:
    """The worker's pass ended: drop the maps of its ring (unless it is this process's)."""
    if retire is not None and retire[0] != os.getpid():
        _maps.drop(*retire)


def _int_tensor(data: Any, count: int) -> Any:
    import torch
    tensor = torch.empty(count, dtype=torch.int64)
    tensor.numpy()[:] = np.frombuffer(data, '<i8', count)
    return tensor


def _columns_from(view: memoryview, layout: list) -> dict[str, Any]:
    batch: dict[str, Any] = {}
    for name, kind, info in layout:
        if kind == _INT:
            pos, count = info
            batch[name] = _int_tensor(view[pos:pos + 8 * count], count)
        elif kind == _BYTES:
            offsets = np.frombuffer(info, np.int64).tolist()
            # tobytes() rather than bytes(slice): one call less per value (small ones count).
            batch[name] = [view[a:b].tobytes() for a, b in zip(offsets, offsets[1:])]
        elif kind == _STR:
            offsets = np.frombuffer(info, np.int64).tolist()
            batch[name] = [str(view[a:b], 'utf-8') for a, b in zip(offsets, offsets[1:])]
        else:
            batch[name] = info
    return batch


def _rebuild_inline(entries: list, retire: tuple | None, single: bool) -> Any:
    batches = [value if kind == _OTHER else
               {name: _int_tensor(column, len(column) // 8) if column_kind == _INT else column
                for name, column_kind, column in value}
               for kind, value in entries]
    _retire(retire)
    return batches[0] if single else batches


def _after_fork_in_child() -> None:
    """A forked process keeps neither its parent's maps nor its ring (only its own copies)."""
    global _ring
    _maps.forget_after_fork()
    if _ring is not None:
        _ring.close()
    _ring = None


if hasattr(os, 'register_at_fork'):
    os.register_at_fork(after_in_child=_after_fork_in_child)
