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
  into a slot of this worker's ring: a few ``memfd`` segments it reuses (never files in
  ``/dev/shm``). The pickle holds only offsets and lengths. A slot's file descriptor travels
  once (``DupFd``, as torch sends its own segments); the main process maps it and keeps the map.
* smaller batches, or when no slot is free (a slot stays busy until the main process has
  unpickled its batch; the ring grows to ``MAX_SLOTS``), travel inside the pickle, their integer
  columns as raw bytes rather than as tensors in segments of their own.

Unpickling in the main process (in torch's pin-memory thread if ``pin_memory``) rebuilds the
plain ``dict`` ``default_collate`` gives: int64 tensors (ordinary, resizable memory), lists of
``bytes`` and ``str``, all copied out of the slot, which is then marked free: nothing handed to
the user points into the ring. The last batch of a worker's pass tells the main process to drop
its maps of that worker's ring (the next pass sends them again); maps of workers that died are
dropped at the next new map, or by ``release_dead_workers()``. ``STREAMING_BATCH_SHM=0`` turns
all this off (batches are then plain dicts, pickled by torch).
"""

from __future__ import annotations

import mmap
import os
import secrets
import threading
from multiprocessing import reduction
from typing import Any

import numpy as np

from streaming.format.mds.reader import Spans

__all__ = ['PackedBatch', 'Scattered', 'enabled', 'pack', 'release_dead_workers',
           'RING_MIN_BYTES']

RING_MIN_BYTES = 64 << 10  # Smaller payloads are cheaper inside the pickle.
MAX_SLOTS = 8  # Batches of one worker in flight through the ring at once.
MAX_RING_BYTES = 2 << 30  # Per worker; a batch that does not fit travels in the pickle.
_MIN_SLOT = 1 << 20
_HEADER = 64  # Slot header: state (byte 0), the sequence number of its batch (u64 at 8).
_FREE, _BUSY = 0, 1
_INT, _SPANS, _BYTES, _STR, _OTHER = 'i', 'p', 'b', 's', 'o'


def enabled() -> bool:
    return os.environ.get('STREAMING_BATCH_SHM', '1') != '0' and hasattr(os, 'memfd_create')


# ---- the worker's side ---------------------------------------------------------------------
class Scattered:
    """A ``bytes`` column of a batch, still in the shards' maps.

    Per shard, the ``Spans`` of its samples and their positions in the batch.
    """

    def __init__(self, parts: list[tuple[Spans, np.ndarray]], count: int) -> None:
        self.parts = parts
        self.count = count

    def sizes(self) -> np.ndarray:
        sizes = np.empty(self.count, np.int64)
        for spans, positions in self.parts:
            sizes[positions] = spans.stops - spans.starts
        return sizes

    def values(self) -> list[bytes]:
        values: list[Any] = [None] * self.count
        for spans, positions in self.parts:
            for position, value in zip(positions.tolist(), spans.values()):
                values[position] = value
        return values

    def copy_into(self, view: memoryview, offsets: np.ndarray) -> None:
        """Copy value ``i`` to ``view[offsets[i]:offsets[i + 1]]``."""
        for spans, positions in self.parts:
            source = memoryview(spans.data)
            try:
                for start, stop, at in zip(spans.starts.tolist(), spans.stops.tolist(),
                                           offsets[positions].tolist()):
                    view[at:at + stop - start] = source[start:stop]
            finally:
                source.release()


class _Slot:
    def __init__(self, index: int, size: int, generation: int) -> None:
        self.index = index
        self.size = size
        self.generation = generation
        self.fd = os.memfd_create(f'shardflow-batch-{index}', os.MFD_CLOEXEC)
        try:
            os.ftruncate(self.fd, size)
            self.map = mmap.mmap(self.fd, size)
        except BaseException:
            os.close(self.fd)
            raise
        self.announced = False  # Whether the main process has been sent the descriptor.

    def is_free(self) -> bool:
        return self.map[0] == _FREE

    def close(self) -> None:
        self.map.close()
        os.close(self.fd)


class _Ring:
    """This process's slots; ``token`` tells it apart from an earlier process of the same pid."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.token = secrets.token_hex(8)
        self.slots: list[_Slot] = []
        self.seq = 0

    def acquire(self, nbytes: int) -> _Slot | None:
        """A free slot of at least ``nbytes`` (grown or added if needed), marked busy."""
        need = nbytes + _HEADER
        free = [slot for slot in self.slots if slot.is_free()]
        fits = [slot for slot in free if slot.size >= need]
        if fits:
            slot = min(fits, key=lambda s: s.size)
        else:
            size = max(_MIN_SLOT, 1 << (need - 1).bit_length())
            replaced = free[0] if free else None
            total = sum(s.size for s in self.slots) + size - (replaced.size if replaced else 0)
            if total > MAX_RING_BYTES or (replaced is None and len(self.slots) >= MAX_SLOTS):
                return None
            if replaced is not None:  # Too small: a bigger one, which the main process maps.
                slot = _Slot(replaced.index, size, replaced.generation + 1)
                self.slots[replaced.index] = slot
                replaced.close()
            else:
                slot = _Slot(len(self.slots), size, 0)
                self.slots.append(slot)
        self.seq += 1
        slot.map[8:16] = self.seq.to_bytes(8, 'little')
        slot.map[0] = _BUSY
        return slot

    def retire(self) -> None:
        """The main process drops its maps at a pass's final batch: send them again next."""
        for slot in self.slots:
            slot.announced = False

    def close(self) -> None:
        for slot in self.slots:
            slot.close()
        self.slots = []


_ring: _Ring | None = None


def _my_ring(create: bool) -> _Ring | None:
    global _ring
    if _ring is None or _ring.pid != os.getpid():
        _ring = _Ring() if create else None
    return _ring


class PackedBatch:
    """A batch ready to cross to the main process; unpickles as the default-collated dict.

    Made only for torch's worker loop, which does nothing with it but put it in its queue.
    If it is dropped without being pickled, its slot is freed.
    """

    __slots__ = ('reduced', 'slot')

    def __init__(self, reduced: tuple, slot: _Slot | None) -> None:
        self.reduced = reduced
        self.slot = slot

    def __reduce__(self) -> tuple:
        self.slot = None  # Sent: the main process frees the slot.
        return self.reduced

    def __del__(self) -> None:
        slot = self.slot
        if slot is not None and not slot.map.closed:
            slot.map[0] = _FREE


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


def pack(runs: list[dict[str, Any]], final: bool) -> PackedBatch:
    """The batch of ``runs`` (gathered columns, ``bytes`` ones possibly ``Scattered``).

    ``final``: the last batch of this worker's pass.
    """
    columns = _columns(runs)
    total = sum(_payload(kind, value) for _, kind, value in columns)
    ring = _my_ring(create=total >= RING_MIN_BYTES)
    retire = (ring.pid, ring.token) if ring is not None and final else None
    slot = None
    if ring is not None and total >= RING_MIN_BYTES:
        slot = ring.acquire(total + 8 * len(columns))  # With room to align each column.
    if slot is None:
        inline = [(name, _BYTES, [v for part in value for v in part.values()]) if kind == _SPANS
                  else (name, kind, value.tobytes() if kind == _INT else value)
                  for name, kind, value in columns]
        reduced: tuple = (_rebuild_inline, (inline, retire))
    else:
        layout = _write(slot, columns)
        announce = None
        if not slot.announced:
            announce = reduction.DupFd(slot.fd)
            slot.announced = True
        ref = (ring.pid, ring.token, slot.index, slot.generation, ring.seq, slot.size)
        reduced = (_rebuild_from_ring, (ref, announce, layout, retire))
    if retire is not None:
        ring.retire()
    return PackedBatch(reduced, slot)


def _write(slot: _Slot, columns: list) -> list:
    """Copy the payload of ``columns`` into ``slot``; their layout, for the main process."""
    view = memoryview(slot.map)
    try:
        pos, layout = _HEADER, []
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
        return layout
    finally:
        view.release()


# ---- the main process's side ---------------------------------------------------------------
class _Maps:
    """Maps of workers' slots: (pid, token, slot index) -> (generation, mmap)."""

    def __init__(self) -> None:
        self.maps: dict[tuple, tuple[int, mmap.mmap]] = {}
        self.lock = threading.Lock()

    def get(self, ref: tuple, announce: Any) -> mmap.mmap:
        pid, token, index, generation, _, size = ref
        key = (pid, token, index)
        with self.lock:
            if announce is not None:
                try:
                    fd = announce.detach()
                except (OSError, EOFError) as error:
                    raise RuntimeError(f'DataLoader worker process {pid} exited before this '
                                       f'process received the shared memory of its batch '
                                       f'({error!r}).') from error
                try:
                    new = mmap.mmap(fd, size)
                finally:
                    os.close(fd)
                old = self.maps.pop(key, None)
                if old is not None:
                    old[1].close()
                self.maps[key] = (generation, new)
                self.drop_dead(alive=pid)
            entry = self.maps.get(key)
        if entry is None or entry[0] != generation:
            raise RuntimeError(f'A batch from DataLoader worker process {pid} refers to shared '
                               f'memory this process never received (slot {index}, generation '
                               f'{generation}). Set STREAMING_BATCH_SHM=0 to send batches by '
                               f'pickling instead, and please report this.')
        return entry[1]

    def drop(self, pid: int, token: str) -> None:
        with self.lock:
            for key in [k for k in self.maps if k[:2] == (pid, token)]:
                self.maps.pop(key)[1].close()

    def drop_dead(self, alive: int) -> None:
        """Unmap the slots of exited processes (call with the lock held)."""
        for pid in {key[0] for key in self.maps} - {alive}:
            if not _is_alive(pid):
                for key in [k for k in self.maps if k[0] == pid]:
                    self.maps.pop(key)[1].close()


def _is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_maps = _Maps()


def release_dead_workers() -> None:
    """Unmap the slots of DataLoader worker processes that have exited."""
    with _maps.lock:
        _maps.drop_dead(alive=os.getpid())


def mapped_slots() -> int:
    """How many workers' slots this process maps (for tests and diagnostics)."""
    return len(_maps.maps)


def _rebuild_from_ring(ref: tuple, announce: Any, layout: list,
                       retire: tuple | None) -> dict[str, Any]:
    pid, token, index, _, seq, _ = ref
    if pid == os.getpid():  # Unpickled by the worker itself (a copy): its own slot.
        if announce is not None:
            os.close(announce.detach())
        ring = _my_ring(create=False)
        if ring is None or ring.token != token:
            raise RuntimeError('A batch packed by a DataLoader worker was unpickled in another '
                               'process than the one it was sent to; set STREAMING_BATCH_SHM=0.')
        slot_map = ring.slots[index].map
    else:
        slot_map = _maps.get(ref, announce)
    if slot_map[0] != _BUSY or int.from_bytes(slot_map[8:16], 'little') != seq:
        raise RuntimeError(f'Shared-memory slot {index} of DataLoader worker process {pid} no '
                           f'longer holds the batch sent (released or reused early).')
    view = memoryview(slot_map)
    try:
        batch = _columns_from(view, layout)
    finally:
        view.release()
    slot_map[0] = _FREE
    _retire(retire)
    return batch


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
            batch[name] = [bytes(view[a:b]) for a, b in zip(offsets, offsets[1:])]
        elif kind == _STR:
            offsets = np.frombuffer(info, np.int64).tolist()
            batch[name] = [str(view[a:b], 'utf-8') for a, b in zip(offsets, offsets[1:])]
        else:
            batch[name] = info
    return batch


def _rebuild_inline(columns: list, retire: tuple | None) -> dict[str, Any]:
    batch = {name: _int_tensor(value, len(value) // 8) if kind == _INT else value
             for name, kind, value in columns}
    _retire(retire)
    return batch


def _after_fork_in_child() -> None:
    """A forked process keeps neither its parent's maps nor its ring (only its own copies)."""
    global _ring
    for _, mapped in _maps.maps.values():
        try:
            mapped.close()
        except BufferError:  # A view another thread of the parent held: freed with it.
            pass
    _maps.maps = {}
    _maps.lock = threading.Lock()
    if _ring is not None:
        _ring.close()
    _ring = None


if hasattr(os, 'register_at_fork'):
    os.register_at_fork(after_in_child=_after_fork_in_child)
