"""A DataLoader worker's ring of batch slots in shared memory (for ``streaming.dataset.handoff``).

A worker's ring is one ``memfd`` (anonymous shared memory: never a file in ``/dev/shm``, freed
by the kernel once no process maps it or holds it open) of ``SLOTS`` slots of equal size. Each
slot starts with a small header: its state (free or busy, byte 0) and the sequence number of
the batch in it (u64 at 8). The worker marks a slot busy and fills it; the main process copies
the batch out, then marks it free. A batch bigger than a slot makes the worker replace its ring
with a bigger one (a new generation): the main process keeps its map of the old one until the
new one is announced, which comes after every batch sent through the old one.

The ring's file descriptor reaches the main process once per generation and pass
(``multiprocessing.reduction.DupFd``, a Unix socket, as torch sends its own segments); the main
process maps it and keeps the map in ``Maps`` until the worker's pass ends or it exits.
``Maps`` calls its ``on_map(ring bytes, slot bytes)`` hook at each new map (the handoff keeps
that much freed heap memory for the batches it copies out).
"""

from __future__ import annotations

import mmap
import os
import secrets
import threading
from multiprocessing import reduction
from typing import Any, Callable

from streaming.coord.shared_dir import start_time

__all__ = ['Ring', 'Maps', 'HEADER', 'SLOTS', 'FREE', 'BUSY']

SLOTS = 8  # Batches of one worker in flight through the ring at once.
MAX_RING_BYTES = 4 << 30  # Address space per worker (pages are only used once written).
MIN_SLOT = 1 << 20
HEADER = 64
FREE, BUSY = 0, 1


class Ring:
    """This process's ring; ``token`` tells it apart from an earlier process of the same pid."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.token = secrets.token_hex(8)
        self.seq = 0
        self.generation = 0
        self.slot_size = 0
        self.fd = -1
        self.map: mmap.mmap | None = None
        self.announced = False  # Whether the main process was sent this generation's fd.

    def acquire(self, nbytes: int) -> int | None:
        """The offset of a free slot for ``nbytes`` of payload (after ``HEADER``), now busy.

        None if every slot is busy or the ring would grow past ``MAX_RING_BYTES``.
        """
        need = nbytes + HEADER
        if need > self.slot_size:
            size = max(MIN_SLOT, 1 << (need - 1).bit_length())
            if size * SLOTS > MAX_RING_BYTES:
                return None
            self._replace(size)
        data = self.map
        assert data is not None
        for offset in range(0, SLOTS * self.slot_size, self.slot_size):
            if data[offset] == FREE:
                self.seq += 1
                data[offset + 8:offset + 16] = self.seq.to_bytes(8, 'little')
                data[offset] = BUSY
                return offset
        return None

    def _replace(self, slot_size: int) -> None:
        fd = os.memfd_create('shardflow-batches', os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, slot_size * SLOTS)
            data = mmap.mmap(fd, slot_size * SLOTS)
        except BaseException:
            os.close(fd)
            raise
        self.close()  # Batches in flight in the old one: the main process still maps it.
        self.fd, self.map, self.slot_size = fd, data, slot_size
        self.generation += 1
        self.announced = False

    def reference(self) -> tuple[tuple, Any]:
        """(what names this generation, its fd if the main process has not had it yet)."""
        announce = None
        if not self.announced:
            announce = reduction.DupFd(self.fd)
            self.announced = True
        return (self.pid, self.token, self.generation, self.slot_size * SLOTS), announce

    def close(self) -> None:
        # Forgotten before closed, as coord.Lease.give_up does: a child forked in between must
        # not close (as this ring's) a descriptor number another thread has just reused.
        ring_map, fd = self.map, self.fd
        self.map, self.fd = None, -1
        if ring_map is not None:
            ring_map.close()
            os.close(fd)


class Maps:
    """The main process's maps of workers' rings: (pid, token) -> (generation, mmap)."""

    def __init__(self, on_map: Callable[[int, int], None] | None = None) -> None:
        self.maps: dict[tuple[int, str], tuple[int, mmap.mmap]] = {}
        self.lock = threading.Lock()
        self.on_map = on_map

    def get(self, ref: tuple, announce: Any) -> mmap.mmap:
        """The map of the ring ``ref`` names, mapping it first if ``announce`` brings its fd."""
        pid, token, generation, size = ref
        key = (pid, token)
        with self.lock:
            if announce is not None:
                try:
                    fd = announce.detach()
                except (OSError, EOFError) as error:
                    raise RuntimeError(f'DataLoader worker process {pid} exited before this '
                                       f'process received the shared memory of its batches '
                                       f'({error!r}).') from error
                try:
                    data = mmap.mmap(fd, size)
                finally:
                    os.close(fd)
                old = self.maps.pop(key, None)
                if old is not None:
                    _unmap(old[1])
                self.maps[key] = (generation, data)
                self.drop_dead()
                if self.on_map is not None:
                    self.on_map(size, size // SLOTS)
            entry = self.maps.get(key)
        if entry is None or entry[0] != generation:
            raise RuntimeError(f'A batch from DataLoader worker process {pid} refers to shared '
                               f'memory this process never received (generation {generation}). '
                               f'Set STREAMING_BATCH_SHM=0 to send batches by pickling instead, '
                               f'and please report this.')
        return entry[1]

    def drop(self, pid: int, token: str) -> None:
        with self.lock:
            entry = self.maps.pop((pid, token), None)
            if entry is not None:
                _unmap(entry[1])

    def drop_dead(self) -> None:
        """Unmap the rings of processes that have exited (call with the lock held)."""
        for key in [key for key in self.maps if not _is_alive(key[0])]:
            _unmap(self.maps.pop(key)[1])

    def forget_after_fork(self) -> None:
        """In a forked child: unmap the copies of the parent's maps."""
        for _, data in self.maps.values():
            _unmap(data)  # A view another thread of the parent held: freed with it.
        self.maps = {}
        self.lock = threading.Lock()


def _unmap(data: mmap.mmap) -> None:
    """Unmap ``data`` now, or when the last view into it goes if one is still alive.

    A view may outlive the batch it was made for in a traceback: torch's SIGCHLD handler raises
    "worker ... killed" wherever the main thread is, also while it copies a batch out of a ring.
    """
    try:
        data.close()
    except BufferError:
        pass  # Forgotten here; the mmap object unmaps itself when its last view is released.


def _is_alive(pid: int) -> bool:
    """Whether process ``pid`` runs (an exited worker not yet reaped does not)."""
    return start_time(pid) is not None
