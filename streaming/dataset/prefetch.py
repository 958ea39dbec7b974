"""The node's downloads, started in the order the epoch first needs each shard.

On a real network a download waits 20-100 ms for its first byte and one connection carries a
fraction of the link, so throughput is set by how many transfers are in flight and how early
the ones needed first start. The epoch's order is known before its first sample, so:

* **one schedule per node.** The order of the epoch a dataset will read first is known when it
  is built (its next epoch, or a pending resume), and again when a pass begins. From it,
  ``streaming.order.first_use`` gives each shard's first use by any rank or worker of the node.
  One process of the node, the holder of the node's download lease, walks the shards in that
  order and keeps several downloads in flight, from the moment the dataset is built (before
  DataLoader workers exist) to the end of the epoch.
* **one table of shard states.** Every download goes through ``ShardCache.prepare`` and so
  through the node-wide table of shard states: a shard is claimed once and fetched once, and a
  reader needing a shard the downloader has not reached fetches it itself (nobody's idle).
* **takeover.** The lease is a kernel ``flock`` (``coord.Lease``): if its holder dies, every
  reading process tries to take it (at a pass's start and every half second while reading), and
  the first to succeed carries on the schedule; downloads the dead process left half done are
  reclaimed by ``prepare``, which sees their lock free.
* **how many in flight.** ``STREAMING_DOWNLOADS_IN_FLIGHT`` (an integer), or by default an
  adaptive count (``Concurrency``): it starts at ``START``, grows while each transfer receives
  as fast as the best seen (the link has room), settles where the link is full, and halves
  when the store throttles or downloads fail; readers' own downloads count toward it. Under
  throttling the node's request rate is paced (``storage.pacing``, one pace for the node's
  processes). The epoch's last shards are fetched as ranged parts (``_tail_parts``), so that
  they do not trickle in over one capped connection each while the link idles.
* **how far ahead.** An explicit ``predownload`` bounds the lookahead as in the reference
  (samples per worker ahead of the slowest reader); by default the lookahead is bounded only by
  bytes: ``share_of`` ``cache_limit``, or ``AUTO_AHEAD_BYTES`` without a limit. Under a limit,
  shards fetched ahead are marked used-in-the-future, so LRU eviction takes them last, and
  among them the one needed last first (marks from the plan's start, not the fetch's end:
  otherwise the shard fetched first, needed soonest, went first, its reader fetched it again
  and evicted the next one: a cascade of re-downloads over one connection each).

Readers report how far they are (``Progress``) in a shared array; download retries, timeouts and
verification are the stream's (``download_retry``, ``download_timeout``, ``validate_hash``).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import weakref
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Callable

import numpy as np

from streaming.coord import Lease, SharedDir
from streaming.dataset.cache import LOCAL, PREPARING, REMOTE, ShardCache
from streaming.dataset.preload import preload_for_downloads
from streaming.order import iter_first_uses, last_uses, sample_time
from streaming.storage.download import in_parts
from streaming.storage.meter import METER, Meter
from streaming.storage.pacing import PACER, PACING_FIELDS

__all__ = ['AUTO_AHEAD_BYTES', 'IN_FLIGHT_ENV', 'Concurrency', 'NodePrefetch', 'Progress',
           'in_flight_setting', 'prefetch_arrays']

logger = logging.getLogger(__name__)

IN_FLIGHT_ENV = 'STREAMING_DOWNLOADS_IN_FLIGHT'
AUTO_AHEAD_BYTES = 4 << 30
MAX_WORKERS = 64  # Workers per rank whose progress is tracked (more are not waited for).
_DONE = 1 << 62
_AHEAD_NS = 1 << 50  # Marks of shards fetched ahead: above any read's for 13 days.
# The plan: [generation, epoch, sample_in_epoch, workers, generation whose walk is complete].
_GEN, _EPOCH, _START, _WORKERS, _COMPLETE = range(5)


def prefetch_arrays(local_world_size: int) -> dict[str, tuple[str, tuple]]:
    """The shared arrays the node's schedule needs, for the ``SharedDir`` to create."""
    return {'prefetch_plan': ('int64', (5,)),
            'prefetch_progress': ('int64', (local_world_size, MAX_WORKERS)),
            'download_pacing': ('float64', (PACING_FIELDS,))}


def in_flight_setting() -> int | None:
    """``STREAMING_DOWNLOADS_IN_FLIGHT`` as a count, or None (unset or ``auto``: adaptive)."""
    value = os.environ.get(IN_FLIGHT_ENV, '').strip().lower()
    if value in ('', 'auto'):
        return None
    try:
        count = int(value)
    except ValueError:
        count = 0
    if count < 1:
        raise ValueError(f'{IN_FLIGHT_ENV}={value!r} must be a positive integer or "auto".')
    return count


class Concurrency:
    """How many downloads to keep in flight: fixed, or grown while each transfer's rate holds.

    The signal is what this process's transfers receive (``streaming.storage.meter``): bytes
    per connection-second of receiving, which the time to first byte does not dilute. Every
    ``window`` seconds in which demand exceeded the count (``held_back``), that rate is compared
    with the best seen: at least ``hold`` of it, the link had room for the transfers added, so
    the count doubles; below it, the link (or this process) is full, so the count becomes
    what carries the bytes at the best rate per connection ever seen (``count * rate / peak``,
    plus ``headroom`` for transfers waiting for their first byte) and stays there for ``rest``
    seconds, after which the best is measured afresh and growth is tried again. A failed
    download halves the count (not below ``LOW``); so does a refusal by a throttling store (not
    below ``THROTTLED_LOW``: the node's request rate is then set by ``storage.pacing``, and the
    count only has to keep enough downloads waiting for their turns).
    """

    START, LOW, HIGH = 16, 2, 64
    FLOOR = 8  # Lowest count a full link sets (a slower rate may be noise, not congestion).
    THROTTLED_LOW = 4

    def __init__(self, fixed: int | None = None, window: float = 0.25, hold: float = 0.85,
                 headroom: float = 1.5, settle: float = 0.1, rest: float = 5.0,
                 meter: Meter = METER) -> None:
        self.fixed = fixed
        self.value = fixed or self.START
        self.window, self.hold, self.headroom = window, hold, headroom
        self.settle, self.rest, self.meter = settle, rest, meter
        self._since: float | None = None
        self._resume = 0.0  # No window begins before this time (after a change).
        self._frozen = 0.0  # No growth before this time (after the link was found full).
        self._busy = 0.0
        self._last = 0.0
        self._best = 0.0  # Best rate per connection since the last full link.
        self._peak = 0.0  # Best rate per connection ever: what one uncrowded transfer gets.
        self._mark = (0, 0.0)

    def failed(self, now: float | None = None, low: int | None = None) -> None:
        """A download failed: halve the count (not below ``low``), grow nothing for a while."""
        if self.fixed is None:
            self.value = max(self.LOW if low is None else low, self.value // 2)
            self._frozen = (time.monotonic() if now is None else now) + self.rest
            self._since = None

    def throttled(self, now: float | None = None) -> None:
        """The store refused requests (the pacer now sets the rate): fewer downloads queued."""
        self.failed(now, min(self.value, self.THROTTLED_LOW))

    def update(self, now: float, held_back: bool) -> None:
        """Called as the scheduler loops; ``held_back``: downloads waited for this count."""
        if self.fixed is not None:
            return
        if self._since is None:
            if now >= self._resume:
                received, area, _ = self.meter.reading()
                self._since, self._last, self._busy, self._mark = now, now, 0.0, (received,
                                                                                   area)
            return
        if held_back:
            self._busy += now - self._last
        self._last = now
        elapsed = now - self._since
        if elapsed < self.window:
            return
        received, area, _ = self.meter.reading()
        nbytes, seconds = received - self._mark[0], area - self._mark[1]
        busy, self._since, self._busy, self._mark = self._busy, now, 0.0, (received, area)
        if busy < 0.5 * elapsed or seconds < elapsed or nbytes <= 0:
            return  # Not held back by the count, or too little received to judge.
        rate = nbytes / seconds
        if self._frozen and now >= self._frozen:
            self._frozen, self._best = 0.0, 0.0  # Measure the best afresh and try growing.
        if rate >= self.hold * self._best:
            self._best = max(self._best, rate)
            self._peak = max(self._peak, rate)
            if not self._frozen:
                self._change(now, min(self.HIGH, self.value * 2))
        elif not self._frozen:
            full = int(self.value * rate / self._peak * self.headroom + 0.5)
            self._change(now, max(min(self.FLOOR, self.value), min(self.value, full)))
            self._frozen = now + self.rest

    def _change(self, now: float, value: int) -> None:
        if value != self.value:
            self.value = value
            self._since, self._resume = None, now + self.settle


class Progress:
    """One reader's position, published for the node's downloader (the ``Prefetcher`` API)."""

    def __init__(self, owner: NodePrefetch, rank: int, worker: int, workers: int,
                 batch_size: int) -> None:
        self.owner = owner
        self.row = owner.shared.array('prefetch_progress')[rank]
        self.worker, self.workers, self.batch_size = worker, workers, batch_size
        self._tracked = worker < MAX_WORKERS
        self._check_at = time.monotonic() + 0.5

    def advance(self, position: int) -> None:
        """This reader reached ``position`` of its order (padding included)."""
        if self._tracked:
            self.row[self.worker] = 1 + sample_time(position, self.worker, self.workers,
                                                    self.batch_size)
        now = time.monotonic()
        if now >= self._check_at:  # Take the schedule over if its process died.
            self._check_at = now + 0.5
            self.owner.ensure_running()

    def stop(self) -> None:
        if self._tracked:
            self.row[self.worker] = _DONE


class NodePrefetch:
    """The node's schedule as seen from one process; runs it while this process holds the lease.

    ``order_for(epoch, sample_in_epoch, workers)`` returns the node's ``(ranks, workers,
    batches, batch)`` order; ``ahead`` is the explicit ``predownload`` (None: bounded by bytes).
    """

    def __init__(self, shared: SharedDir, cache: ShardCache, shard_starts: np.ndarray,
                 order_for: Callable[[int, int, int], np.ndarray], batch_size: int,
                 ahead: int | None) -> None:
        self.shared, self.cache, self.shard_starts = shared, cache, shard_starts
        self.order_for, self.batch_size, self.ahead = order_for, batch_size, ahead
        self.lease = Lease(shared.file_path('downloader.lease'))
        # Every download of the node takes its turns from one pace under throttling.
        PACER.share(shared.array('download_pacing'), shared.lock('pacing'))
        # The schedule's threads must never import a module first (a worker forked meanwhile
        # would deadlock on its import lock): import what they use now, in this thread.
        preload_for_downloads(cache.streams)
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._start_lock = threading.Lock()
        sizes = np.asarray(cache._max_sizes(), np.int64)
        self.sizes = sizes
        largest = int(sizes.max()) if len(sizes) else 0
        budget = AUTO_AHEAD_BYTES if cache.limit is None else share_of(cache.limit, largest)
        # What cache_limit leaves for shards once the indexes (which count against it) are in.
        self.room = None if cache.limit is None else \
            cache.limit - sum(stream.get_index_size() for stream in cache.streams)
        # Bytes that downloads in flight may reserve under the limit.
        self.reservable = None if self.room is None else share_of(self.room, largest)
        self.budget = max(budget, largest)
        self.mark_base = time.monotonic_ns()  # Set again as each plan begins (see ``fetch``).

    def __reduce__(self) -> tuple:
        return (_absent, ())  # Per process: a spawned worker builds its own.

    # ---- the plan ----------------------------------------------------------------------------
    def publish(self, epoch: int, sample_in_epoch: int, workers: int) -> None:
        """The node will read ``epoch`` from ``sample_in_epoch`` (``workers`` per rank)."""
        with self.shared.lock('prefetch'):
            plan = self.shared.array('prefetch_plan')
            if plan[_GEN] == 0 or (plan[_EPOCH], plan[_START]) != (epoch, sample_in_epoch):
                self.shared.array('prefetch_progress')[:] = 0
                plan[_EPOCH], plan[_START], plan[_WORKERS] = epoch, sample_in_epoch, workers
                plan[_GEN] += 1
            else:
                plan[_WORKERS] = max(int(plan[_WORKERS]), workers)

    def session(self, epoch: int, sample_in_epoch: int, rank: int, worker: int,
                workers: int) -> Progress:
        """A pass begins: publish its plan, make sure someone runs it, and report progress."""
        self.publish(epoch, sample_in_epoch, workers)
        self.ensure_running()
        return Progress(self, rank, worker, workers, self.batch_size)

    def ensure_running(self) -> None:
        """Run the schedule in this process if nobody does (or its runner died)."""
        if self._pid != os.getpid():  # A forked child: the parent's thread is not ours.
            self._thread, self._pid, self._start_lock = None, os.getpid(), threading.Lock()
        with self._start_lock:
            if self._thread is not None and self._thread.is_alive():
                return
            plan = self.shared.array('prefetch_plan')
            if plan[_GEN] == 0 or plan[_COMPLETE] == plan[_GEN] or not self.lease.try_take():
                return
            self._thread = threading.Thread(target=_run, args=(weakref.ref(self),),
                                            name='streaming-node-downloads', daemon=True)
            self._thread.start()

    @property
    def running(self) -> bool:
        """Whether this process runs the node's schedule now."""
        return self._thread is not None and self._thread.is_alive() and self.lease.held

    def now(self, workers: int) -> tuple[int, bool]:
        """(The slowest reader's time, whether all ``workers`` of every rank have reported).

        The time is 0 before anyone reads.
        """
        progress = self.shared.array('prefetch_progress')
        reported = progress[progress > 0]
        everyone = bool((progress[:, :min(workers, MAX_WORKERS)] > 0).all())
        return (int(reported.min()) - 1 if len(reported) else 0), everyone

    # ---- one download ------------------------------------------------------------------------
    def fetch(self, shard: int, first_use: int, parts: int = 1) -> None:
        """Download ``shard`` (in ``parts`` ranged GETs) unless someone has or does."""
        cache = self.cache
        if cache.states[shard] != REMOTE:
            return
        with in_parts(parts):
            cache.prepare(shard, blocking=False)
        if cache.limit is not None:  # Fetched ahead: evicted after every shard already used,
            # and the one needed last first (``mark_base`` is the plan's: a later plan's marks
            # are above an earlier one's).
            cache.access[shard] = self.mark_base + _AHEAD_NS - first_use


def _absent() -> None:
    return None


def share_of(room: int, largest: int) -> int:
    """What the schedule may take of ``room`` bytes under ``cache_limit`` (``largest``: shard).

    Three quarters, as long as that leaves room for two of the largest shards (two readers
    each waiting for one); never less than half, the share it had before. Under a small limit,
    three quarters keeps more transfers in flight and fetches fewer shards twice (measured
    through the link emulator: docs/benchmarks.md, "Remote through an emulated network link").
    """
    return max(room // 2, min(room * 3 // 4, room - 2 * largest))


MAX_PARTS = 8


def _tail_parts(free: int, unstarted: int, limit: int) -> int:
    """Ranged parts to fetch the next shard in: 1, except at the end of the epoch.

    While at least ``limit`` shards are left to start, each is one GET. Past that, the last
    ones are split so that they still use ``limit`` connections (at most ``MAX_PARTS`` each):
    one capped connection per shard would leave the link idle while the last few trickle in.
    """
    if unstarted >= limit or free <= 0:
        return 1
    return max(1, min(MAX_PARTS, -(-limit // max(unstarted, 1))))


def _run(ref: weakref.ref) -> None:
    """The scheduler thread: walk the plan's first uses, keep the count in flight, until done."""
    owner = ref()
    if owner is None:
        return
    lease = owner.lease
    pool = ThreadPoolExecutor(Concurrency.HIGH, thread_name_prefix='streaming-download')
    try:
        _Schedule(owner, pool).run()
    except FileNotFoundError:
        pass  # The dataset or its shared directory is gone: the run is over.
    except RuntimeError:
        # The interpreter is exiting (the pool takes no more work): nothing left to fetch for.
        if not _exiting():
            logger.warning('The node\'s download schedule stopped; readers fetch their own '
                           'shards.', exc_info=True)
    except Exception:  # Readers fetch what they need themselves; say why we stopped.
        logger.warning('The node\'s download schedule stopped; readers fetch their own shards.',
                       exc_info=True)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        lease.give_up()


def _exiting() -> bool:
    """Whether this interpreter is shutting down (``concurrent.futures`` refuses new work)."""
    import concurrent.futures.thread as pool_module
    return sys.is_finalizing() or bool(getattr(pool_module, '_shutdown', False))


class _Schedule:
    """The loop of ``_run``: one plan after another while there is work."""

    def __init__(self, owner: NodePrefetch, pool: ThreadPoolExecutor) -> None:
        self.owner, self.pool = owner, pool
        self.concurrency = Concurrency(in_flight_setting())
        self.futures: dict[Future, tuple[int, int]] = {}
        self.generation = -1
        self.throttles = PACER.throttles

    def _others_in_flight(self, states: np.ndarray) -> int:
        """Downloads of the node's readers (not this schedule's): they share the count."""
        preparing = int(np.count_nonzero(states == PREPARING))
        if not preparing:
            return 0
        mine = [shard for shard, _ in self.futures.values()]
        return max(0, preparing - int(np.count_nonzero(states[mine] == PREPARING)))

    def _begin(self, plan: np.ndarray) -> None:
        owner = self.owner
        self.generation = int(plan[_GEN])
        self.epoch, self.start = int(plan[_EPOCH]), int(plan[_START])
        order = owner.order_for(self.epoch, self.start, int(plan[_WORKERS]) or 1)
        owner.mark_base = time.monotonic_ns()
        self.walk = iter_first_uses(order, owner.shard_starts, len(owner.sizes))
        # Under a cache limit, each shard's last use: once every reader is past it, the shard is
        # marked least recently used, so that eviction takes it before any shard still needed.
        self.dead: np.ndarray | None = None
        if owner.cache.limit is not None:
            self.last = last_uses(order, owner.shard_starts, len(owner.sizes))
            used = np.flatnonzero(self.last >= 0)
            self.dead = used[np.argsort(self.last[used], kind='stable')]
            self.dead_cursor = 0
        self.queue: deque[tuple[int, int]] = deque()
        self.ahead: deque[tuple[int, int]] = deque()  # (first use, bytes) fetched ahead.
        self.walked = False

    def _next(self) -> tuple[int, int] | None:
        while not self.queue:
            try:
                shards, times = next(self.walk)
            except StopIteration:
                self.walked = True
                return None
            self.queue.extend(zip(shards.tolist(), times.tolist()))
        return self.queue[0]

    def _may_reserve(self, size: int) -> bool:
        """Whether one more download may start under ``cache_limit``.

        Downloads in flight (each reserves its shard's bytes) keep to ``share_of`` the room the
        streams' indexes leave under the limit, so that readers can always make room for the
        shards they wait for.
        """
        reservable = self.owner.reservable
        if reservable is None:
            return True
        return sum(reserved for _, reserved in self.futures.values()) + size <= reservable

    def _room_for(self, size: int, states: np.ndarray) -> bool:
        """Whether a shard fetched ahead fits under ``cache_limit``.

        Evicting for it may take only shards every reader is past (marked with access 0).
        """
        cache = self.owner.cache
        if cache.limit is None:
            return True
        dead = (states == LOCAL) & (cache.access == 0)
        return cache.usage - int(self.owner.sizes[dead].sum()) + size <= cache.limit

    def _mark_dead(self, now: int, states: np.ndarray) -> None:
        if self.dead is None:
            return
        access = self.owner.cache.access
        while self.dead_cursor < len(self.dead):
            shard = int(self.dead[self.dead_cursor])
            if self.last[shard] >= now:
                return
            if states[shard] == LOCAL:
                access[shard] = 0
            self.dead_cursor += 1

    def run(self) -> None:
        owner = self.owner
        plan = owner.shared.array('prefetch_plan')
        states = owner.cache.states
        while True:
            if int(plan[_GEN]) != self.generation:
                self._begin(plan)
            workers = max(1, int(plan[_WORKERS]))
            now, everyone = owner.now(workers)
            if everyone:
                self._mark_dead(now, states)
            horizon = None if owner.ahead is None else now + owner.ahead * workers
            while self.ahead and self.ahead[0][0] <= now:
                self.ahead.popleft()
            ahead_bytes = sum(size for _, size in self.ahead)
            limit = self.concurrency.value
            others = self._others_in_flight(states)
            unstarted = -1  # Shards nobody fetches yet, counted when first needed.
            while len(self.futures) + others < limit:
                item = self._next()
                if item is None:
                    break
                shard, first = item
                if states[shard] != REMOTE:
                    self.queue.popleft()
                    continue
                if horizon is not None and first >= horizon:
                    break
                size = int(owner.sizes[shard])
                if first > now and (ahead_bytes + size > owner.budget or
                                    not self._room_for(size, states)):
                    break
                if self.futures and not self._may_reserve(size):
                    break
                self.queue.popleft()
                if unstarted < 0:
                    unstarted = int(np.count_nonzero(states == REMOTE))
                # Paced (the store throttles): one GET per shard, each taking a turn.
                parts = 1 if PACER.rate is not None else \
                    _tail_parts(limit - len(self.futures), unstarted, limit)
                unstarted -= 1
                self.futures[self.pool.submit(owner.fetch, shard, first, parts)] = (shard, size)
                if first > now:
                    self.ahead.append((first, size))
                    ahead_bytes += size
            dead_left = self.dead is not None and self.dead_cursor < len(self.dead)
            if self.walked and not self.queue and not self.futures and not dead_left:
                with owner.shared.lock('prefetch'):
                    if int(plan[_GEN]) == self.generation:
                        plan[_COMPLETE] = self.generation
                        return
                continue
            held_back = len(self.futures) + others >= limit
            if self.futures:
                done, _ = wait(list(self.futures), timeout=0.05, return_when=FIRST_COMPLETED)
            else:
                done = set()
                # Waiting for readers to move the horizon (slowly while none has begun).
                time.sleep(0.05 if now else 0.25)
            for future in done:
                self.futures.pop(future)
                if future.exception() is not None:
                    self.concurrency.failed()  # The reader will fetch it and report the error.
            if PACER.throttles != self.throttles:  # Refused requests, anywhere on the node.
                self.throttles = PACER.throttles
                self.concurrency.throttled()
            self.concurrency.update(time.monotonic(), held_back)
