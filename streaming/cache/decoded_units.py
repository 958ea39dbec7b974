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

A unit whose decoding is only a copy (Parquet pages stored
uncompressed, read in place) gets a marker (``unit-<shard>.local``) instead: each process reads
it itself, without waiting.

Bounded: the files take at most ``budget`` bytes (``STREAMING_SHARED_DECODED_BYTES``, default
1 GiB, at most half the free space of the shared directory's file system); publishing one past
it removes the least recently mapped others. A process that still maps a removed file keeps its
pages until it drops them (its own ``DecodedCache`` budget). The shard cache removes a unit's
file when it evicts the shard, and the whole directory goes with the ``SharedDir``.

``decodes()`` counts, per shard, the decodes made on the node, shared or not (the test and the
benchmark check "each unit decoded once"). ``STREAMING_SHARED_DECODE=0`` turns the sharing off
(each process decodes what it reads, as before; still counted), for comparison.

Thrashing made visible: a shuffled epoch whose decoded working set is larger than the budget that
keeps it (this one, or a process's ``STREAMING_DECODED_BYTES``) decodes a whole unit again for a
few samples, over and over. The decodes are also counted per epoch (``epoch_decodes()``); the
first unit of an epoch decoded more than ``REDECODES_TO_WARN`` times beyond one per process
reading on the node logs one warning for the node and epoch, naming the stream, the budget and
the ways out (docs/sources/parquet.md, "Shuffled reads larger than the decode budget").
"""

from __future__ import annotations

import glob
import logging
import os
import time
from typing import Any, Protocol

import numpy as np

from streaming.coord import SharedDir
from streaming.fileio import create_temp, publish, remove_quietly

__all__ = ['DecodedUnits', 'SharedUnit', 'decoded_arrays']

DEFAULT_BUDGET = 1 << 30
# Decodes of one unit in one epoch beyond one per process reading on the node before the warning.
REDECODES_TO_WARN = 3

logger = logging.getLogger(__name__)


class SharedUnit(Protocol):
    """What the store asks of a unit's reader (``sources.reader.SourceReader``)."""

    def write_decoded(self, file: Any) -> tuple[Any, int | None]: ...

    def decode_columns(self) -> Any: ...

    def map_columns(self, path: str) -> tuple[Any, int]: ...

    def decode_note(self) -> tuple[str, int, int]: ...


def decoded_arrays(num_shards: int) -> dict[str, tuple[str, tuple]]:
    """The shared arrays the store needs, for the ``SharedDir`` to create."""
    return {'unit_decodes': ('int64', (num_shards,)),  # Decodes made on the node, per shard.
            'unit_file_bytes': ('int64', (num_shards,)),  # Size of each published unit file.
            'unit_file_access': ('int64', (num_shards,)),  # When each was last mapped (ns).
            'unit_files_total': ('int64', (1,)),
            'epoch_unit_decodes': ('int64', (num_shards,)),  # Decodes in the epoch counted.
            'unit_decoded_bytes': ('int64', (num_shards,)),  # Each unit's size decoded.
            'decode_epochs': ('int64', (2,))}  # 1 + the epoch counted, 1 + the one warned of.


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
        self.epoch = 0  # The epoch this process reads (``StreamingDataset.__iter__`` sets it).

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

        None when the unit is not shared (each process decodes it itself, counting it with
        ``count``) or, without ``wait``, when another process is decoding it now.
        """
        found = self._mapped(shard_id, reader)
        if found is not None or os.path.exists(self.path(shard_id) + '.local'):
            return found
        lock = self.shared.lock(f'decode-{shard_id}')
        if not lock.acquire(blocking=wait):
            return None
        try:
            found = self._mapped(shard_id, reader)
            if found is not None or os.path.exists(self.path(shard_id) + '.local'):
                return found
            for left in glob.glob(os.path.join(self.directory, f'.unit-{shard_id}.*')):
                remove_quietly(left)  # A decoder killed mid-write (we hold its lock now).
            return self._decode_and_publish(shard_id, reader)
        finally:
            lock.release()

    def epoch_decodes(self) -> np.ndarray:
        """Decodes made on the node in the latest epoch counted, per shard (a copy)."""
        return np.array(self.shared.array('epoch_unit_decodes'))

    def count(self, shard_id: int, reader: SharedUnit, nbytes: int = 0,
              shared: bool = False) -> None:
        """Count a decode of ``reader``'s unit; warn of thrashing (see the module docstring).

        ``nbytes``: its size decoded; ``shared``: published for the node. Also the decodes
        made without the store are counted (see ``decodes``).
        """
        with self.shared.lock('decoded'):
            self.shared.array('unit_decodes')[shard_id] += 1
            seen = self._count_in_epoch(shard_id, nbytes, reader.decode_note()[1])
        if seen is not None:
            self._warn(reader, shared, *seen)

    def _count_in_epoch(self, shard_id: int, nbytes: int,
                        readers: int) -> tuple[int, int, int] | None:
        """Count the decode in this epoch (lock held); what to warn of, if it is time to.

        That is the first time in the epoch a unit is decoded too often: (its decodes, the
        units decoded in the epoch, their decoded bytes).
        """
        marks = self.shared.array('decode_epochs')
        counts = self.shared.array('epoch_unit_decodes')
        sizes = self.shared.array('unit_decoded_bytes')
        epoch = self.epoch + 1
        if marks[0] < epoch:  # The first decode of a new epoch on the node.
            counts[:] = 0
            marks[0] = epoch
        if nbytes:
            sizes[shard_id] = nbytes
        if marks[0] != epoch:  # A process still on the previous epoch.
            return None
        counts[shard_id] += 1
        if counts[shard_id] <= readers + REDECODES_TO_WARN or marks[1] >= epoch:
            return None
        marks[1] = epoch
        touched = counts > 0
        return int(counts[shard_id]), int(touched.sum()), int(sizes[touched].sum())

    def _warn(self, reader: SharedUnit, shared: bool, decodes: int, units: int,
              decoded: int) -> None:
        where, _, process_budget = reader.decode_note()
        variable, budget = ('STREAMING_SHARED_DECODED_BYTES', self.budget) if shared else \
            ('STREAMING_DECODED_BYTES', process_budget)
        # A worker keeps the units it mapped under its own budget: both bound a shared read.
        to_raise = f'{variable} and STREAMING_DECODED_BYTES={process_budget}' if shared else \
            variable
        logger.warning(
            'Stream %s: a unit was decoded %d times in epoch %d (%d units, %d MiB decoded, '
            'read so far): the decoded working set of the epoch does not fit %s=%d (%d MiB), so '
            'units are decoded again and again for a few samples each. Raise %s past the '
            'decoded size the shuffle keeps in use, or make the shuffle keep fewer units at '
            'once: a smaller shuffle_block_size (whatever the shuffle_algo, the units of one '
            'shuffle window must fit the budget decoded). See '
            'docs/sources/parquet.md, "Shuffled reads larger than the decode budget".',
            where, decodes, self.epoch, units, decoded >> 20, variable, budget, budget >> 20,
            to_raise)

    def _mapped(self, shard_id: int, reader: SharedUnit) -> Any:
        """The unit's columns from its file, or None if there is none (or not a whole one)."""
        try:
            columns, _ = reader.map_columns(self.path(shard_id))
        except (FileNotFoundError, ValueError):
            return None
        self.shared.array('unit_file_access')[shard_id] = time.monotonic_ns()
        return columns

    def _decode_and_publish(self, shard_id: int, reader: SharedUnit) -> Any:
        """Decode the unit into its file, publish it, make room under the budget, map it back.

        (Lock of the unit held.) A file that cannot be written (the shared directory full) is
        not shared: this process keeps what it decoded, or decodes it again for itself when
        the reader wrote its columns to the file alone (``write_decoded`` gives None). A unit
        not worth sharing gets its marker: every process decodes it itself from then on.
        """
        path = self.path(shard_id)
        os.makedirs(self.directory, exist_ok=True)
        fd, temp = create_temp(path)
        decoded = False
        try:
            with os.fdopen(fd, 'wb') as file:
                columns, size = reader.write_decoded(file)
                decoded = True
        except OSError:
            remove_quietly(temp)
            if not decoded:
                raise
            size = 0  # Decoded, but the file could not be finished.
        except BaseException:
            remove_quietly(temp)
            raise
        self.count(shard_id, reader, size or 0, shared=bool(size))
        if not size:
            remove_quietly(temp)
            if size is None:
                open(path + '.local', 'a').close()
            return columns if columns is not None else reader.decode_columns()
        publish(temp, path)
        with self.shared.lock('decoded'):
            sizes = self.shared.array('unit_file_bytes')
            total = self.shared.array('unit_files_total')
            total[0] += size - sizes[shard_id]
            sizes[shard_id] = size
            self.shared.array('unit_file_access')[shard_id] = time.monotonic_ns()
            self._make_room(keep=shard_id)
        mapped = self._mapped(shard_id, reader)
        if mapped is not None:
            return mapped
        return columns if columns is not None else reader.decode_columns()

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
