"""The node's decoded units: a unit of a data file is decoded by one process, mapped by the rest.

A compressed Parquet row group read by two DataLoader workers (or two ranks of a node) would be
decompressed and decoded by each. Instead the first process to need it takes the unit's lock
(``decode-<shard>``, a kernel ``flock`` of the dataset's ``SharedDir``), decodes it, writes what
it decoded as one file in the shared directory (``decoded/unit-<shard>``, written under a
temporary name and renamed: a file under its final name is always whole) and maps it; a process
that wanted it meanwhile waits on the lock, then maps the file. A batch that draws on several
units first takes those nobody is decoding (``wait=False``), then waits for the rest: two
workers starting on the same units split them instead of one idling while the other decodes.
A decoder killed mid-write leaves only its temporary file (removed by the next decoder of that
unit) and releases the lock: the next process decodes the unit again.

A unit whose decoding is only a copy (Parquet pages stored uncompressed, read in place) gets a
marker (``unit-<shard>.local``) instead: each process reads it itself, without waiting.

Bounded: the files take at most ``budget`` bytes (``STREAMING_SHARED_DECODED_BYTES``, default
1 GiB, at most half the free space of the shared directory's file system); publishing one past
it removes the least recently mapped others. A process that still maps a removed file keeps its
pages until it drops them (its own ``DecodedCache`` budget). The shard cache removes a unit's
file when it evicts the shard, and the whole directory goes with the ``SharedDir``.

``decodes()`` counts, per shard, the decodes made on the node, shared or not (the test and the
benchmark check "each unit decoded once"). ``STREAMING_SHARED_DECODE=0`` turns the sharing off
(each process decodes what it reads, as before; still counted), for comparison.
"""

from __future__ import annotations

import glob
import os
import time
from typing import Any, Protocol

import numpy as np

from streaming.coord import SharedDir
from streaming.fileio import atomic_open, remove_quietly

__all__ = ['DecodedUnits', 'SharedUnit', 'decoded_arrays']

DEFAULT_BUDGET = 1 << 30


class SharedUnit(Protocol):
    """What the store asks of a unit's reader (``sources.reader.SourceReader``)."""

    def columns_checked(self) -> Any: ...  # Has ``shared``: whether worth publishing.

    def write_columns(self, file: Any, columns: Any) -> int: ...

    def map_columns(self, path: str) -> tuple[Any, int]: ...


def decoded_arrays(num_shards: int) -> dict[str, tuple[str, tuple]]:
    """The shared arrays the store needs, for the ``SharedDir`` to create."""
    return {'unit_decodes': ('int64', (num_shards,)),  # Decodes made on the node, per shard.
            'unit_file_bytes': ('int64', (num_shards,)),  # Size of each published unit file.
            'unit_file_access': ('int64', (num_shards,)),  # When each was last mapped (ns).
            'unit_files_total': ('int64', (1,))}


def _budget(directory: str) -> int:
    configured = os.environ.get('STREAMING_SHARED_DECODED_BYTES')
    budget = int(configured) if configured else DEFAULT_BUDGET
    try:
        stats = os.statvfs(directory)
        return min(budget, stats.f_bavail * stats.f_frsize // 2)
    except OSError:
        return budget


class DecodedUnits:
    """The decoded units of one dataset on one node, in its ``SharedDir`` (see module doc)."""

    def __init__(self, shared: SharedDir, budget: int | None = None) -> None:
        self.shared = shared
        self.directory = shared.file_path('decoded')
        self._budget = budget

    @property
    def budget(self) -> int:
        if self._budget is None:
            os.makedirs(self.directory, exist_ok=True)
            self._budget = _budget(self.directory)
        return self._budget

    def path(self, shard_id: int) -> str:
        return os.path.join(self.directory, f'unit-{shard_id}')

    def decodes(self) -> np.ndarray:
        """Decodes made on the node so far, per shard (a copy)."""
        return np.array(self.shared.array('unit_decodes'))

    def unit(self, shard_id: int, reader: SharedUnit, wait: bool = True) -> Any:
        """The columns of ``reader``'s unit: mapped from the node's file, or decoded here.

        Without ``wait``, None at once if another process is decoding it now.
        """
        found = self._mapped(shard_id, reader)
        if found is not None:
            return found
        if os.path.exists(self.path(shard_id) + '.local'):
            return self._decode_here(shard_id, reader)
        lock = self.shared.lock(f'decode-{shard_id}')
        if not lock.acquire(blocking=wait):
            return None
        try:
            found = self._mapped(shard_id, reader)
            if found is not None:
                return found
            for left in glob.glob(os.path.join(self.directory, f'.unit-{shard_id}.*')):
                remove_quietly(left)  # A decoder killed mid-write (we hold its lock now).
            columns = self._decode_here(shard_id, reader)
            if not getattr(columns, 'shared', True):
                os.makedirs(self.directory, exist_ok=True)
                open(self.path(shard_id) + '.local', 'a').close()
                return columns
            return self._publish(shard_id, reader, columns)
        finally:
            lock.release()

    def _decode_here(self, shard_id: int, reader: SharedUnit) -> Any:
        columns = reader.columns_checked()
        self.count(shard_id)
        return columns

    def count(self, shard_id: int) -> None:
        """Count a decode of the unit (also those made without the store: see ``decodes``)."""
        with self.shared.lock('decoded'):
            self.shared.array('unit_decodes')[shard_id] += 1

    def _mapped(self, shard_id: int, reader: SharedUnit) -> Any:
        """The unit's columns from its file, or None if there is none (or not a whole one)."""
        try:
            columns, _ = reader.map_columns(self.path(shard_id))
        except (FileNotFoundError, ValueError):
            return None
        self.shared.array('unit_file_access')[shard_id] = time.monotonic_ns()
        return columns

    def _publish(self, shard_id: int, reader: SharedUnit, columns: Any) -> Any:
        """Write ``columns`` as the unit's file, make room under the budget, map it back.

        A file that cannot be written (the shared directory full) is not shared: this process
        keeps what it decoded.
        """
        path = self.path(shard_id)
        try:
            os.makedirs(self.directory, exist_ok=True)
            with atomic_open(path) as file:
                size = reader.write_columns(file, columns)
        except OSError:
            return columns
        with self.shared.lock('decoded'):
            sizes = self.shared.array('unit_file_bytes')
            total = self.shared.array('unit_files_total')
            total[0] += size - sizes[shard_id]
            sizes[shard_id] = size
            self.shared.array('unit_file_access')[shard_id] = time.monotonic_ns()
            self._make_room(keep=shard_id)
        return self._mapped(shard_id, reader) or columns

    def _make_room(self, keep: int) -> None:
        """Remove the least recently mapped files until the total fits (lock held)."""
        sizes = self.shared.array('unit_file_bytes')
        total = self.shared.array('unit_files_total')
        access = self.shared.array('unit_file_access')
        while total[0] > self.budget:
            held = np.flatnonzero(sizes > 0)
            held = held[held != keep]
            if not len(held):
                return
            self._remove_locked(int(held[np.argmin(access[held])]))

    def _remove_locked(self, shard_id: int) -> None:
        sizes = self.shared.array('unit_file_bytes')
        remove_quietly(self.path(shard_id))
        self.shared.array('unit_files_total')[0] -= sizes[shard_id]
        sizes[shard_id] = 0

    def drop(self, shard_id: int) -> None:
        """Remove the unit's file (its shard was evicted from the cache)."""
        with self.shared.lock('decoded'):
            self._remove_locked(shard_id)
        remove_quietly(self.path(shard_id) + '.local')
