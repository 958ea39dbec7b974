"""The node-wide shard cache: which shards are local, how much disk they take, and eviction.

State lives in shared arrays of the dataset's ``SharedDir``, so every rank and worker on the node
sees the same cache. One process downloads a shard while the others wanting it block on that
shard's lock (no polling). Eviction picks the least recently used local shard, and never a
shard whose only copy is local (a stream without a remote): that would lose data.

The cache is the only reader of ``cache_limit`` and the only writer of its LRU marks. The read
path calls ``read(shard, index)``, which records the access, notices evictions made by other
processes, and prepares the shard when it is not known to be local. The node's download
schedule (``streaming.cache.prefetch``) asks it how far ahead it may fetch (``budget``),
whether a shard fetched ahead fits (``room_for_ahead``), and marks shards as needed later
(``mark_ahead``) or never again this epoch (``mark_passed``).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import numpy as np

from streaming.cache.budget import DownloadBudget, samples_that_fit
from streaming.cache.decoded_units import DecodedUnits, decoded_arrays
from streaming.coord import FileLock, SharedDir
from streaming.errors import ShardFileError
from streaming.format import Reader
from streaming.storage.meter import METER

__all__ = ['AHEAD_NS', 'LOCAL', 'PREPARING', 'REMOTE', 'CachedStream', 'ShardCache',
           'cache_arrays']

REMOTE, PREPARING, LOCAL = 0, 1, 2
AHEAD_NS = 1 << 50  # LRU marks of shards fetched ahead: above any read's for 13 days.


class CachedStream(Protocol):
    """What the cache and the node's downloads ask of a stream (``dataset.stream.Stream``)."""

    remote: str | None
    validate_hash: str | None
    download_timeout: float | None
    safe_keep_zip: bool

    @property
    def has_remote(self) -> bool: ...

    def get_index_size(self) -> int: ...

    def set_up_local(self, shards: Sequence[Reader], cache_usage_per_shard: np.ndarray) -> None:
        ...

    def prepare_shard(self, shard: Reader) -> int: ...


def cache_arrays(num_shards: int) -> dict[str, tuple[str, tuple]]:
    """The shared arrays the cache needs, for the ``SharedDir`` to create."""
    return {'shard_states': ('uint8', (num_shards,)),
            'shard_access': ('int64', (num_shards,)),
            'shard_generation': ('uint32', (num_shards,)),
            'cache_usage': ('int64', (1,)),
            'egress': ('int64', (2,)),  # The node's shard downloads: bytes received, GETs.
            **decoded_arrays(num_shards)}


class ShardCache:
    """Prepare (download and decompress) and evict shards under an optional byte limit."""

    def __init__(self, shared: SharedDir, shards: Sequence[Reader],
                 streams: Sequence[CachedStream], shard_streams: np.ndarray,
                 limit: int | None) -> None:
        self.shared = shared
        self.shards = shards
        self.streams = streams
        self.shard_streams = shard_streams
        self.limit = limit
        self._max_sizes: np.ndarray | None = None
        # A shard that takes no cache space (a unit read in place) is never evicted: that would
        # free nothing and only make every process drop what it decoded of it.
        remote = np.array([stream.has_remote for stream in streams], bool)
        self.evictable = (remote[np.asarray(shard_streams, np.int64)] if len(shard_streams)
                          else np.zeros(0, bool)) & (self.max_sizes() > 0)
        self._lock = shared.lock('cache')
        # This process's view, for the read path: may anything be evicted, which eviction
        # generation of each shard it has mapped, and which shards it knows to be local.
        self._any_evictable = bool(self.evictable.any())
        self._seen_generation = [0] * len(shards)
        self._known_local = [False] * len(shards)
        METER.take()  # What this process received before (the index) is not shard egress.
        self._built: list[Reader | None] = [None] * len(shards)  # Readers in use, by shard.
        self._refetched: set[int] = set()  # Shards found bad once and downloaded again.
        self._held: list[int] | None = None  # Maps to close on leaving ``maps_held``.
        self.decoded = DecodedUnits(shared)  # Units of data files decoded once for the node.

    @property
    def states(self) -> np.ndarray:
        return self.shared.array('shard_states')

    @property
    def access(self) -> np.ndarray:
        return self.shared.array('shard_access')

    @property
    def generation(self) -> np.ndarray:
        return self.shared.array('shard_generation')

    @property
    def usage(self) -> int:
        return int(self.shared.array('cache_usage')[0])

    def _add_usage(self, delta: int) -> None:
        self.shared.array('cache_usage')[0] += delta

    # ---- setup ----------------------------------------------------------------------------------
    def scan_local(self) -> None:
        """Record which shards are already complete on disk (local leader, once).

        Each stream's ``set_up_local`` says what its shards take on disk (0: not local), so a
        Stream subclass overriding it decides. The streams' ``index.json`` files count too, as
        ``get_index_size`` reports them.
        """
        with self._lock:
            usage = self.index_bytes()
            states = self.states
            per_shard = np.zeros(len(self.shards), np.int64)
            for stream_id, stream in enumerate(self.streams):
                members = np.flatnonzero(self.shard_streams == stream_id)
                if not len(members):
                    continue
                begin, end = int(members[0]), int(members[-1]) + 1
                stream.set_up_local(self.shards[begin:end], per_shard[begin:end])
            states[per_shard > 0] = LOCAL
            usage += int(per_shard.sum())
            self.shared.array('cache_usage')[0] = usage
        if self.limit is not None and usage > self.limit:
            with self._lock:
                self._make_room(0, keep=-1)

    def check_limit(self) -> None:
        """Refuse a cache_limit that cannot hold the indexes and two of the largest shards."""
        if self.limit is None or not self.shards:
            return
        largest = int(self.max_sizes().max())
        indexes = self.index_bytes()
        if self.limit < 2 * largest + indexes:
            raise ValueError(f'cache_limit={self.limit} bytes is too small: the largest '
                             f'shard needs {largest} bytes while it is prepared, the cache '
                             f'must hold at least two such shards plus the streams\' index.json '
                             f'files ({indexes} bytes): {2 * largest + indexes} bytes in all.')

    def samples_that_fit(self, samples_per_shard: np.ndarray) -> int | None:
        """About how many samples' shards fit in a quarter of ``cache_limit``; None without one.

        A block shuffle mixes about ``block_size`` consecutive samples, so the shards of one
        block must be local at once; a shard's samples spread over about two neighbouring blocks,
        so two blocks' shards are in use at a time. If they cannot fit in half the cache (the
        other half being room for the node's downloads ahead), shards would be evicted and
        downloaded again many times per epoch; the dataset caps the block size by this (a
        quarter rather than a half: fewer shards fetched twice through an emulated link, see
        docs/benchmark-history.md).
        """
        return samples_that_fit(self.limit, self.max_sizes(), samples_per_shard)

    def max_sizes(self) -> np.ndarray:
        """Each shard's peak local bytes (from the index summaries when readers are lazy)."""
        if self._max_sizes is None:
            column = getattr(self.shards, 'column', None)
            self._max_sizes = np.asarray(column('max_size'), np.int64) if column is not None \
                else np.array([shard.get_max_size() for shard in self.shards], np.int64)
        return self._max_sizes

    def index_bytes(self) -> int:
        """What the streams' ``index.json`` files take of the cache."""
        return sum(stream.get_index_size() for stream in self.streams)

    # ---- the download schedule's questions -------------------------------------------------------
    @property
    def evicts(self) -> bool:
        """Whether the cache evicts (it has a ``cache_limit``), by the LRU marks."""
        return self.limit is not None

    def budget(self) -> DownloadBudget:
        """How many bytes the node's downloads may fetch ahead and reserve at once."""
        sizes = self.max_sizes()
        largest = int(sizes.max()) if len(sizes) else 0
        return DownloadBudget.for_limit(self.limit, self.index_bytes() if self.evicts else 0,
                                        largest)

    def room_for_ahead(self, size: float) -> bool:
        """Whether a shard of ``size`` bytes fetched ahead fits under ``cache_limit``.

        Evicting for it may take only shards that every reader is past (``mark_passed``), and
        evicting one frees what it holds once prepared (its raw files, unless the compressed
        ones are kept), not its peak while prepared: counting the peak let a download ahead
        evict shards that readers still needed.
        """
        if self.limit is None:
            return True
        passed = np.flatnonzero((self.states == LOCAL) & (self.access == 0) & self.evictable)
        return self.usage - self._held_bytes(passed) + size <= self.limit

    def mark_ahead(self, shard_id: int, first_use: int, base: int) -> None:
        """Mark ``shard_id`` fetched ahead: evicted after every shard already used.

        Among shards fetched ahead, the one needed last goes first: the mark is the plan's start
        ``base`` (ns) plus a ceiling above any read's, less ``first_use``. It counts from the
        plan's start, not the fetch's end: otherwise the shard fetched first, needed soonest,
        went first, its reader fetched it again and evicted the next one.
        """
        if self.evicts:
            self.access[shard_id] = base + AHEAD_NS - first_use

    def mark_passed(self, shard_id: int) -> None:
        """Every reader is past ``shard_id``'s last use this epoch: evict it before others."""
        if self.states[shard_id] == LOCAL:
            self.access[shard_id] = 0

    # ---- use ------------------------------------------------------------------------------
    def ready(self, shard_id: int) -> Reader:
        """The reader of shard ``shard_id``, its files local (prepared first if needed).

        Records the access for LRU eviction (with a limit) and drops this process's map of a
        shard evicted since it was mapped. With a limit, a shard prepared here is mapped at
        once: readying a batch's shards one after another may evict an earlier one of them
        (its last use is older than any shard fetched ahead), and its map still reads it, where
        an unmapped one would be fetched again. A read may still find the files gone (evicted
        before they were mapped): catch ``FileNotFoundError``, call ``forget`` and ask again.
        """
        if self._any_evictable:
            generation = int(self.generation[shard_id])
            if generation != self._seen_generation[shard_id]:
                self._close_map(shard_id)  # Evicted since we mapped it: let the space go.
                self._seen_generation[shard_id] = generation
                self._known_local[shard_id] = False
            if self.limit is not None:
                self.touch(shard_id)
        if not self._known_local[shard_id]:
            self.prepare(shard_id)
            self._known_local[shard_id] = True
            reader = self._built[shard_id] = self.shards[shard_id]  # Built now if built lazily.
            if hasattr(reader, 'unit_store'):  # A unit of a data file: decoded once per node.
                reader.unit_store, reader.shard_id = self.decoded, shard_id
            elif self.limit is not None and self.evictable[shard_id]:
                _map_now(reader)
        return self._built[shard_id]  # type: ignore[return-value]

    @contextlib.contextmanager
    def maps_held(self) -> Iterator[None]:
        """Within: this process closes no shard map (those it would close, it closes on leaving).

        Values gathered as spans of the maps (``handoff.Scattered``) stay valid until the end of
        the block, however many shards are readied meanwhile; a map stays readable after its
        files are evicted, and a shard fetched again is the same bytes.
        """
        if self._held is not None:  # Nested: the outer block closes them.
            yield
            return
        self._held = []
        try:
            yield
        finally:
            held, self._held = self._held, None
            for shard_id in held:
                self.shards[shard_id].close()

    def _close_map(self, shard_id: int) -> None:
        if self._held is not None:
            self._held.append(shard_id)
        else:
            self.shards[shard_id].close()

    def forget(self, shard_id: int) -> None:
        """A read found the shard's files gone: prepare it again at the next ``ready``."""
        self._known_local[shard_id] = False

    def vanished(self, shard_id: int, retry: int) -> RuntimeError:
        """The error for a shard evicted under every one of ``retry + 1`` reads."""
        hint = ' (cache_limit may be too small for the shuffle: shards are evicted before use)' \
            if self.limit is not None else ''
        return RuntimeError(f'Shard {shard_id} vanished {retry + 1} times while being read'
                            f'{hint}.')

    def read(self, shard_id: int, index: int, retry: int = 7) -> Any:
        """Sample ``index`` of shard ``shard_id``, preparing the shard first if needed.

        See ``ready``; a shard evicted under the read is prepared again, up to ``retry`` times.
        """
        for _ in range(retry + 1):
            reader = self.ready(shard_id)
            try:
                return reader.get_item(index)
            except FileNotFoundError:
                self.forget(shard_id)
            except ShardFileError as error:
                self.refetch_once(shard_id, error)
        raise self.vanished(shard_id, retry)

    def refetch_once(self, shard_id: int, error: ShardFileError) -> None:
        """A damaged or mismatched cached copy: evict it so the next read downloads it again.

        Only once per shard and only for shards that have a remote; otherwise ``error`` is
        raised.
        """
        if not self.evictable[shard_id] or shard_id in self._refetched:
            raise error
        self._refetched.add(shard_id)
        self._close_map(shard_id)
        with self._lock:
            if self.states[shard_id] == LOCAL:
                self._evict_locked(shard_id)
        self.forget(shard_id)

    def touch(self, shard_id: int) -> None:
        self.access[shard_id] = time.monotonic_ns()

    def is_local(self, shard_id: int) -> bool:
        return self.states[shard_id] == LOCAL

    def prepare(self, shard_id: int, blocking: bool = True) -> bool:
        """Make a shard local; raise if it cannot be prepared.

        Returns False if another process is preparing it and ``blocking`` is False.
        """
        # Lock order: a shard's lock is taken under the cache lock only by the claimer, which
        # nobody else can be while we hold the cache lock, and only ever waited for with no
        # other lock held. So no two processes can wait on each other.
        attempts = 0
        while attempts < 100:
            with self._lock:
                state = int(self.states[shard_id])
                if state == LOCAL:
                    self.touch(shard_id)
                    return True
                shard_lock = self.shared.lock(f'shard-{shard_id}')
                if state == PREPARING and shard_lock.acquire(blocking=False):
                    # Marked as being prepared, yet nobody holds its lock: the preparer died.
                    shard_lock.release()
                    self.states[shard_id] = state = REMOTE
                    self._add_usage(-self.shards[shard_id].get_max_size())
                busy = None
                if state == REMOTE:
                    reserved = self.shards[shard_id].get_max_size()
                    busy = self._busy_until_prepared(reserved, keep=shard_id)
                if state == REMOTE and busy is None:
                    self._make_room(reserved, keep=shard_id)
                    self.states[shard_id] = PREPARING
                    self._add_usage(reserved)
                    shard_lock.acquire()  # Held until prepared: waiters block on it.
            if busy is not None:
                # No room until a shard being prepared elsewhere (a download ahead, another
                # reader's) lands and can be evicted: wait for it, holding nothing else.
                with self.shared.lock(f'shard-{busy}'):
                    pass
                continue
            attempts += 1
            if state == REMOTE:
                self._download(shard_id, reserved, shard_lock)
                return True
            if not blocking:
                return False
            with shard_lock:  # Wait for the preparer to finish (or die), holding nothing else.
                pass
        raise RuntimeError(f'Shard {shard_id} could not be prepared after 100 attempts.')

    def _download(self, shard_id: int, reserved: int, shard_lock: FileLock) -> None:
        shard = self.shards[shard_id]
        try:
            size = self.streams[self.shard_streams[shard_id]].prepare_shard(shard)
        except BaseException:
            with self._lock:
                self.states[shard_id] = REMOTE
                self._add_usage(-reserved)
                self._add_egress()
            shard_lock.release()
            raise
        with self._lock:
            self._add_egress()
            self._add_usage(size - reserved)
            self.states[shard_id] = LOCAL
            self.touch(shard_id)
        shard_lock.release()

    def _add_egress(self) -> None:
        """Add what this process received since it last did to the node's egress (lock held)."""
        received, gets = METER.take()
        if received or gets:
            self.shared.array('egress')[:] += (received, gets)

    def egress(self) -> tuple[int, int]:
        """(Bytes, GETs) the node has received for this dataset's shards so far."""
        received, gets = self.shared.array('egress').tolist()
        return int(received), int(gets)

    # ---- eviction --------------------------------------------------------------------------------
    def _busy_until_prepared(self, needed: int, keep: int) -> int | None:
        """A shard being prepared to wait for before ``needed`` bytes fit, or None (lock held).

        None when they fit after evicting what is local and evictable, or when nothing is being
        prepared (then ``_make_room`` says what is wrong). A shard whose preparer died is given
        back its REMOTE state here, as ``prepare`` does for the shard it is asked for.
        """
        if self.limit is None or self.usage + needed <= self.limit:
            return None
        local = np.flatnonzero((self.states == LOCAL) & self.evictable)
        freeable = self._held_bytes(local[local != keep])
        for busy in np.flatnonzero(self.states == PREPARING).tolist():
            if self.usage - freeable + needed <= self.limit:
                return None
            if busy == keep:
                continue
            lock = self.shared.lock(f'shard-{busy}')
            if not lock.acquire(blocking=False):
                return busy  # Someone is downloading it: it will be local (evictable) soon.
            lock.release()  # Its preparer died: nothing will come of it.
            self.states[busy] = REMOTE
            self._add_usage(-self.shards[busy].get_max_size())
        return None

    def _held_bytes(self, shard_ids: np.ndarray) -> int:
        """What local shards ``shard_ids`` hold of the cache (what evicting them frees)."""
        return sum(self.shards[i].get_persistent_size(
            self.streams[self.shard_streams[i]].safe_keep_zip) for i in shard_ids.tolist())

    def _make_room(self, needed: int, keep: int) -> None:
        """Evict least recently used shards until ``needed`` more bytes fit (lock held)."""
        if self.limit is None:
            return
        while self.usage + needed > self.limit:
            candidates = np.flatnonzero((self.states == LOCAL) & self.evictable)
            candidates = candidates[candidates != keep]
            if not len(candidates):
                raise RuntimeError(
                    f'cache_limit={self.limit} bytes is too small: {self.usage} bytes are '
                    f'in use by shards that cannot be evicted (being prepared, or with no remote '
                    f'to fetch them again) and {needed} more are needed; raise cache_limit to at '
                    f'least {self.usage + needed} bytes.')
            victim = int(candidates[np.argmin(self.access[candidates])])
            self._evict_locked(victim)

    def _evict_locked(self, shard_id: int) -> int:
        shard = self.shards[shard_id]
        stream = self.streams[self.shard_streams[shard_id]]
        for raw, zipped in shard.file_pairs:
            for info in (raw, zipped):
                if info is not None:
                    try:
                        os.remove(shard.path(info))
                    except FileNotFoundError:
                        pass
        if hasattr(shard, 'unit_store'):
            self.decoded.drop(shard_id)
        self.states[shard_id] = REMOTE
        self.generation[shard_id] += 1  # Tells readers elsewhere to drop their maps.
        self._add_usage(-shard.get_persistent_size(stream.safe_keep_zip))
        return shard_id

    def evict(self, shard_id: int) -> None:
        """Delete a local shard (which must have a remote to fetch it from again)."""
        if not self.evictable[shard_id]:
            raise ValueError(f'Shard {shard_id} has no remote: evicting it would delete the only '
                             f'copy of its data.')
        with self._lock:
            if self.states[shard_id] == LOCAL:
                self._evict_locked(shard_id)

    def evict_coldest(self) -> int:
        """Evict the least recently used evictable local shard; returns its id."""
        with self._lock:
            candidates = np.flatnonzero((self.states == LOCAL) & self.evictable)
            if not len(candidates):
                raise RuntimeError('No local shard can be evicted (none is local, or none has a '
                                   'remote to fetch it from again).')
            return self._evict_locked(int(candidates[np.argmin(self.access[candidates])]))


def _map_now(reader: Reader) -> None:
    """Map ``reader``'s files; a missing or bad file is left for its read to report."""
    try:
        reader.map_files()
    except (FileNotFoundError, ShardFileError):
        pass
