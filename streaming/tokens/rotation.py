"""Shard rotation: one shard active, the next ones downloading, old ones evicted past a budget.

The shard in use is a pure function of a counter (``advance()``) or of the global step
(``on_step(step)`` with ``steps_per_shard``): the ``g``-th shard started is
``shards[g % len(shards)]``, in cycle ``g // len(shards)``. A restart passes the same step (or the
saved ``state_dict``) and lands on the same shard; the sampler's position inside the shard is
``step % steps_per_shard``. After the last shard the rotation cycles back to the first,
downloading it again if it was evicted.

One process per node downloads (local rank 0, or global rank 0 with ``shared_filesystem``): it
fetches the first shard in the foreground, then the next ``prefetch`` shards in a background
thread, and evicts least-recently-used shards (never the active one) only when a new one would
exceed ``keep`` shards or ``disk_budget`` bytes. Other ranks wait for the files to be published
(see ``streaming.tokens.store``), never in a collective with a fixed timeout.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import OrderedDict
from typing import Any, Iterator, Sequence

from streaming.tokens.dataset import TokenWindowDataset
from streaming.tokens.sampler import BatchIndices, EpochSampler
from streaming.tokens.store import OVERHEAD, RemoteShard, ShardStore
from streaming.tokens.verify import ShardCorruptError

__all__ = ['DiskBudgetError', 'ShardRotation']

logger = logging.getLogger(__name__)


class DiskBudgetError(ValueError):
    """The disk budget cannot hold the shard that must be active."""


class ShardRotation:
    """Rotate through ``shards`` (remote token shards) cached in ``local``.

    ``keep``: most shards on disk at once, counting the active one and those downloading
    (``None``: no limit). ``disk_budget``: most bytes on disk at once (an int or ``'500gb'``;
    ``None``: no limit). ``keep=None, disk_budget=None`` keeps every shard ever fetched.
    ``prefetch``: shards fetched ahead of the active one. ``steps_per_shard``: with ``on_step``,
    the number of steps spent on each shard. ``start_step`` / ``start_shard``: where to begin
    (the g-th shard started, counting cycles). ``world``: ranks (default
    ``streaming.world.World.detect()``). ``downloader``: whether this process downloads and evicts
    (default: local rank 0; rank 0 only with ``shared_filesystem=True``).
    ``retries``/``timeout``: per file, as in ``download_file``. ``stall_timeout``: how long a
    waiting rank tolerates no download progress. ``verify``: check every window against the
    sidecar (and the manifest's checksums): a prefetched shard in the background right after
    its download, before the swap; a shard that becomes active unverified (the first one, or
    one found on disk without a marker from a process still running: after a restart, every
    shard is checked again) window by window before use while a
    background pass finishes it. A mismatch costs one verified re-download of the shard, then
    ``ShardCorruptError``. The remaining options go to ``TokenWindowDataset``.
    """

    def __init__(self, shards: Sequence[RemoteShard], local: str, *, seq_len: int,
                 labels: bool = False, keep: int | None = 2, disk_budget: int | str | None = None,
                 prefetch: int = 1, steps_per_shard: int | None = None, start_step: int = 0,
                 start_shard: int | None = None, world: Any = None,
                 downloader: bool | None = None, shared_filesystem: bool = False,
                 retries: int = 4, timeout: float = 60.0, stall_timeout: float = 600.0,
                 raw_dtype: Any = None, verify: bool = True) -> None:
        if not shards:
            raise ValueError('ShardRotation: shards is empty.')
        if keep is not None and keep < 1:
            raise ValueError(f'ShardRotation: keep must be >= 1 (or None for no limit), got '
                             f'{keep}.')
        if prefetch < 0:
            raise ValueError(f'ShardRotation: prefetch must be >= 0, got {prefetch}.')
        if steps_per_shard is not None and steps_per_shard < 1:
            raise ValueError(f'ShardRotation: steps_per_shard must be >= 1, got '
                             f'{steps_per_shard}.')
        if disk_budget is not None:
            from streaming.util import bytes_to_int
            disk_budget = bytes_to_int(disk_budget)
        self.shards = list(shards)
        self.seq_len, self.labels, self.raw_dtype = seq_len, labels, raw_dtype
        self.keep, self.disk_budget, self.prefetch = keep, disk_budget, prefetch
        self.steps_per_shard, self.verify = steps_per_shard, verify
        self._verifier: Any = None  # A one-thread pool verifying an active, unverified shard.
        if world is None:
            from streaming.world import World
            world = World.detect()
        self.world = world
        if downloader is None:
            downloader = world.rank == 0 if shared_filesystem else world.local_rank == 0
        self.downloader = downloader
        self.store = ShardStore(local, retries=retries, timeout=timeout,
                                stall_timeout=stall_timeout)
        if start_shard is None:
            start_shard = self.shard_for_step(start_step) if steps_per_shard else 0
        self.started = int(start_shard)  # Shards started so far, minus one: the g of above.
        self.dataset_: TokenWindowDataset | None = None
        self.active: int | None = None
        self.last_wait = 0.0
        self.waits: list[tuple[int, float]] = []
        self._sizes: dict[int, int] = {}
        self._resident: OrderedDict[int, int] = OrderedDict()  # position -> reserved bytes
        self._events: dict[int, threading.Event] = {}
        self._errors: dict[int, BaseException] = {}
        self._evicting: set[int] = set()  # Queued for eviction by the fetcher.
        self._lock = threading.Lock()
        self._queue: queue.Queue[tuple[int, list[int]] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._closed = False
        if downloader:
            self._scan()

    # ---- positions --------------------------------------------------------------------------
    def shard_for_step(self, step: int) -> int:
        """The g of ``step``: how many shards were started before the one ``step`` uses."""
        if not self.steps_per_shard:
            raise ValueError('ShardRotation: steps_per_shard is not set.')
        if step < 0:
            raise ValueError(f'step must be >= 0, got {step}.')
        return step // self.steps_per_shard

    @property
    def position(self) -> int:
        """Index into ``shards`` of the current shard."""
        return self.started % len(self.shards)

    @property
    def cycle(self) -> int:
        """How many times the whole list was gone through before the current shard."""
        return self.started // len(self.shards)

    def step_in_shard(self, step: int) -> int:
        """Steps already taken on ``step``'s shard."""
        return step - self.shard_for_step(step) * self.steps_per_shard  # type: ignore[operator]

    # ---- the public cycle -------------------------------------------------------------------
    @property
    def dataset(self) -> TokenWindowDataset:
        """The active shard's dataset (the first access blocks until it is on disk)."""
        if self.dataset_ is None or self.active != self.started:
            self._activate()
        assert self.dataset_ is not None
        return self.dataset_

    def advance(self) -> TokenWindowDataset:
        """Swap to the next shard (the first again after the last); returns its dataset."""
        self.started += 1
        return self.dataset

    def on_step(self, step: int) -> bool:
        """Make ``step``'s shard the active one; True if that swapped shards.

        Idempotent: a second call with the same step (or any step of the same shard) changes
        nothing.
        """
        target = self.shard_for_step(step)
        if target == self.active:
            self.started = target
            return False
        self.started = target
        self._activate()
        return True

    def sampler(self, *, seed: int = 0, step: int | None = None, batch_size: int = 1,
                **kwargs: Any) -> EpochSampler:
        """An exactly-once sampler over the active shard for this rank.

        Seeded per visit (the g of the shard), resumed at ``step``
        (``step_in_shard(step) * batch_size`` windows of this rank already consumed).
        """
        consumed = self.step_in_shard(step) * batch_size if step is not None else 0
        return EpochSampler(len(self.dataset), rank=self.world.rank,
                            world_size=self.world.world_size, seed=seed, epoch=self.started,
                            consumed=consumed, **kwargs)

    def loader(self, batch_size: int, *, seed: int = 0, step: int | None = None,
               drop_last: bool = False, **kwargs: Any) -> Any:
        """A ``torch.utils.data.DataLoader`` of batches over the active shard.

        Batches are ``(batch_size, window)`` tensors in ``sampler(...)``'s order, each
        gathered in one copy (``TokenWindowDataset.batch``); without workers the loader
        gathers in the calling thread directly (``streaming.tokens.loader``).
        """
        from streaming.tokens.loader import batch_loader
        batches = BatchIndices(self.sampler(seed=seed, step=step, batch_size=batch_size),
                               batch_size, drop_last)
        return batch_loader(self.dataset, batches, **kwargs)

    def batches(self, batch_size: int, *, seed: int = 0, step: int | None = None,
                drop_last: bool = False) -> Iterator[Any]:
        """The batches of ``loader(...)``, in the same order, without a DataLoader.

        The fast path when batches are read in the training process (a DataLoader with no
        workers only adds its per-batch overhead): each batch is one gather from the map.
        """
        dataset = self.dataset
        for indices in BatchIndices(self.sampler(seed=seed, step=step, batch_size=batch_size),
                                    batch_size, drop_last):
            yield dataset.batch(indices)

    def state_dict(self) -> dict[str, Any]:
        return {'started': self.started, 'num_shards': len(self.shards)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if int(state.get('num_shards', len(self.shards))) != len(self.shards):
            raise ValueError(f'ShardRotation state was saved over {state["num_shards"]} shards, '
                             f'this rotation has {len(self.shards)}.')
        self.started = int(state['started'])

    def close(self, wait: bool = False) -> None:
        """Stop prefetching; queued shards are dropped.

        A download in flight finishes in the background (it cannot be cut short), or before
        returning with ``wait=True``.
        """
        self._closed = True
        thread = self._thread
        if thread is not None:
            self._queue.put(None)
            if wait:
                thread.join()
        if self._verifier is not None:
            self._verifier.shutdown(wait=wait, cancel_futures=True)
        if self.dataset_ is not None:
            self.dataset_.close()

    def __enter__(self) -> ShardRotation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- activation -------------------------------------------------------------------------
    def _activate(self) -> None:
        position = self.position
        shard = self.shards[position]
        started = time.monotonic()
        if self.downloader:
            self._make_current(position)
        else:
            self.store.wait(shard)
        waited = time.monotonic() - started
        old = self.dataset_
        checked = self.verify and shard.ids_name is not None
        self.dataset_ = TokenWindowDataset(
            self.store.path(shard.tokens_name),
            self.store.path(shard.ids_name) if shard.ids_name else None, seq_len=self.seq_len,
            labels=self.labels, raw_dtype=self.raw_dtype, expected=shard.entry,
            verify=checked, await_repair=self.store.stall_timeout, shard=shard.index)
        self.active = self.started
        if self.verify and self.downloader and not self.store.verified(shard, self.seq_len):
            self.dataset_.tokens, self.dataset_.ids  # noqa: B018 - mapped before any repair.
            self._verify_in_background(position)
        if old is not None:
            old.close()
            self.last_wait = waited
            self.waits.append((self.started, waited))
            if waited >= 0.01:
                logger.info('Waited %.2fs at the swap to shard %d (%s) for its download.',
                            waited, shard.index, shard.tokens_name)
        if self.downloader:
            self._schedule(position)

    def _make_current(self, position: int) -> None:
        if position in self._evicting:
            self._drain()  # Its files are about to be deleted: let that happen first.
        with self._lock:
            victims = self._reserve(position, {position} | set(self._events))
        if victims is None:
            self._drain()  # Let the downloads in flight end, then make room among them.
            with self._lock:
                victims = self._reserve(position, {position})
            if victims is None:
                raise DiskBudgetError(
                    f'disk_budget={self.disk_budget} / keep={self.keep} cannot hold shard '
                    f'{self.shards[position].index} ({self._size(position)} bytes).')
        self._evict(victims)
        event = self._events.get(position)
        if event is not None:
            event.wait()
        error = self._errors.pop(position, None)
        if isinstance(error, ShardCorruptError):
            raise error  # Already downloaded twice and checked: no third attempt.
        if error is not None:
            logger.warning('Fetching shard %d again in the foreground after: %s',
                           self.shards[position].index, error)
        if not self.store.ready(self.shards[position]):
            self.store.fetch(self.shards[position])

    def _schedule(self, position: int) -> None:
        protect = {position}
        for ahead in range(1, self.prefetch + 1):
            target = (position + ahead) % len(self.shards)
            if target in protect:
                break
            with self._lock:
                victims = self._reserve(target, protect | set(self._events))
                if victims is None:
                    logger.info('Not prefetching shard %d yet: the disk budget is full.',
                                self.shards[target].index)
                    break
                protect.add(target)
                if target in self._events or (not victims and
                                              self.store.ready(self.shards[target])):
                    continue
                self._events[target] = threading.Event()
                self._evicting.update(victims)
            self._ensure_thread()
            self._queue.put((target, victims))  # Evicted by the fetcher, off the swap's path.

    def _drain(self) -> None:
        for event in list(self._events.values()):
            event.wait()

    # ---- the budget -------------------------------------------------------------------------
    def _size(self, position: int) -> int:
        if position not in self._sizes:
            shard = self.shards[position]
            if shard.entry is not None:
                size = shard.entry.bytes
            else:
                from streaming.storage import get_backend
                size = 0
                for url, _, _ in shard.files():
                    info = get_backend(url).stat(url, timeout=self.store.timeout)
                    size += info.size or 0
            self._sizes[position] = size + OVERHEAD
        return self._sizes[position]

    def _scan(self) -> None:
        """Count shards already in the directory (finished or partial), oldest first."""
        found = []
        for position, shard in enumerate(self.shards):
            size, mtime = self.store.on_disk(shard)
            if size:
                found.append((mtime, position))
        for _, position in sorted(found):
            self._resident[position] = self._size(position)

    def used(self) -> int:
        """Bytes reserved on disk: every shard there or downloading, at its full size."""
        return sum(self._resident.values())

    def _fits(self, extra: int, count: int, leaving: list[int]) -> bool:
        if self.keep is not None and count > self.keep:
            return False
        freed = sum(self._resident[p] for p in leaving)
        return self.disk_budget is None or self.used() - freed + extra <= self.disk_budget

    def _reserve(self, position: int, protect: set[int]) -> list[int] | None:
        """Make room for ``position`` among the resident shards.

        Returns the least recently used shards (never one in ``protect``) that must be
        evicted first, already dropped from the accounting, or None if the budget cannot hold
        ``position`` without evicting a protected one. The caller deletes them (``_evict``).
        """
        if position in self._resident:
            self._resident.move_to_end(position)
            return []
        need = self._size(position)
        resident = [p for p in self._resident]
        victims: list[int] = []
        while not self._fits(need, len(resident) - len(victims) + 1, victims):
            victim = next((p for p in resident if p not in protect and p not in victims),
                          None)
            if victim is None:
                return None
            victims.append(victim)
        for victim in victims:
            del self._resident[victim]
        self._resident[position] = need
        return victims

    def _evict(self, victims: list[int]) -> None:
        for position in victims:
            shard = self.shards[position]
            logger.info('Evicting shard %d (%s) to stay within the disk budget.', shard.index,
                        shard.tokens_name)
            self.store.remove(shard)

    def _verify_in_background(self, position: int) -> None:
        """Verify the active shard off the training path (its windows are checked on use)."""
        if self._verifier is None:
            from concurrent.futures import ThreadPoolExecutor
            self._verifier = ThreadPoolExecutor(1, thread_name_prefix='token-shard-verify')
        shard = self.shards[position]

        def run() -> None:
            try:
                # Fetched again only while still active: an evicted shard stays evicted.
                self.store.verify(shard, self.seq_len, self.raw_dtype,
                                  refetch=lambda: self.position == position and not self._closed)
            except FileNotFoundError:
                logger.info('Shard %d left the disk before its verification ended.', shard.index)
            except BaseException as error:  # noqa: BLE001 - the windows' checks raise it.
                logger.error('%s', error)
        self._verifier.submit(run)

    # ---- the background fetcher -------------------------------------------------------------
    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._fetcher, daemon=True,
                                            name='token-shard-prefetch')
            self._thread.start()

    def _fetcher(self) -> None:
        while True:
            item = self._queue.get()
            if item is None or self._closed:
                return
            position, victims = item
            started = time.monotonic()
            try:
                self._evict(victims)
                self._evicting.difference_update(victims)
                self.store.fetch(self.shards[position])
                if self.verify:
                    self.store.verify(self.shards[position], self.seq_len, self.raw_dtype)
                logger.info('Prefetched shard %d in %.1fs.', self.shards[position].index,
                            time.monotonic() - started)
            except BaseException as error:  # noqa: BLE001 - raised at the swap that needs it.
                logger.warning('Prefetching shard %d failed: %s', self.shards[position].index,
                               error)
                self._errors[position] = error
            finally:
                with self._lock:
                    event = self._events.pop(position, None)
                if event is not None:
                    event.set()
