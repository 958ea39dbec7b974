"""The node's downloads, started in the order the epoch first needs each shard.

On a real network a download waits 20-100 ms for its first byte and one connection carries a
fraction of the link, so throughput is set by how many transfers are in flight and how early
the ones needed first start. The epoch's order is known before its first sample, so:

* **one schedule per node.** The order of the epoch a dataset will read first is known when it
  is built (its next epoch, or a pending resume), and again when a pass begins. From it,
  ``streaming.order.first_use`` gives each shard's first use by any rank or worker of the node
  (``streaming.cache.walk`` walks them). One process of the node, the holder of the node's
  download lease, walks the shards in that order and keeps several downloads in flight, from
  the moment the dataset is built (before DataLoader workers exist) to the end of the epoch.
* **one table of shard states.** Every download goes through ``ShardCache.prepare`` and so
  through the node-wide table of shard states: a shard is claimed once and fetched once, and a
  reader needing a shard the downloader has not reached fetches it itself (nobody's idle).
* **takeover.** The lease is a kernel ``flock`` (``coord.Lease``): if its holder dies, every
  reading process tries to take it (at a pass's start and every half second while reading), and
  the first to succeed carries on the schedule; downloads the dead process left half done are
  reclaimed by ``prepare``, which sees their lock free.
* **how many in flight.** ``STREAMING_DOWNLOADS_IN_FLIGHT`` (an integer), or by default an
  adaptive count (``streaming.cache.concurrency``): it starts at ``START``, grows while each
  transfer receives as fast as the best seen (the link has room), settles where the link is
  full, and halves when the store throttles or downloads fail; it counts connections (a
  shard fetched as ranged parts takes one per part), and readers' own downloads count toward
  it. Under
  throttling the node's request rate is paced (``storage.pacing``, one pace for the node's
  processes). The epoch's last shards are fetched as ranged parts (``tail_parts``), so that
  they do not trickle in over one capped connection each while the link idles.
* **how far ahead.** An explicit ``predownload`` bounds the lookahead as in the reference
  (samples per worker ahead of the slowest reader); by default the lookahead is bounded only by
  bytes, as the cache allows (``ShardCache.budget``). Whether a shard fetched ahead fits, and
  the LRU marks that make eviction take shards fetched ahead last and shards every reader is
  past first, are the cache's (``room_for_ahead``, ``mark_ahead``, ``mark_passed``): the
  schedule only asks.

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
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

import numpy as np

from streaming.cache.concurrency import Concurrency, in_flight_setting
from streaming.cache.preload import preload_for_downloads
from streaming.cache.shard_cache import PREPARING, REMOTE, ShardCache
from streaming.cache.walk import EpochWalk
from streaming.coord import Lease, SharedDir
from streaming.order import sample_time
from streaming.storage.download import in_parts
from streaming.storage.pacing import PACER, PACING_FIELDS

__all__ = ['NodePrefetch', 'Progress', 'prefetch_arrays']

logger = logging.getLogger(__name__)

MAX_WORKERS = 64  # Workers per rank whose progress is tracked (more are not waited for).
_DONE = 1 << 62
# The plan: [generation, epoch, sample_in_epoch, workers, generation whose walk is complete,
# the time it was published (monotonic ns: the base of its shards' eviction marks)].
_GEN, _EPOCH, _START, _WORKERS, _COMPLETE, _PUBLISHED_NS = range(6)


def prefetch_arrays(local_world_size: int) -> dict[str, tuple[str, tuple]]:
    """The shared arrays the node's schedule needs, for the ``SharedDir`` to create."""
    return {'prefetch_plan': ('int64', (6,)),
            'prefetch_progress': ('int64', (local_world_size, MAX_WORKERS)),
            'download_pacing': ('float64', (PACING_FIELDS,))}


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
        self.sizes = cache.max_sizes()
        self.budget = cache.budget()

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
                plan[_PUBLISHED_NS] = time.monotonic_ns()
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
        # The base is the plan's, the same in every process and for every fetch of the plan
        # (whoever runs it, whenever its schedule begins); a later plan's marks are above.
        cache.mark_ahead(shard, first_use, int(self.shared.array('prefetch_plan')[_PUBLISHED_NS]))


def _absent() -> None:
    return None


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
        self.futures: dict[Future, tuple[int, int, int]] = {}  # (shard, parts, bytes)
        # Finished downloads, pushed by their threads: the loop sleeps on one event instead of
        # registering a waiter on every download in flight at each turn (``wait``).
        self.finished: deque[Future] = deque()
        self.woken = threading.Event()
        self.generation = -1
        self.throttles = PACER.throttles

    def _finished(self, future: Future) -> None:
        self.finished.append(future)
        self.woken.set()

    def _wait_for_one(self, timeout: float) -> list[Future]:
        """The downloads finished since last asked, waiting up to ``timeout`` for one."""
        if not self.finished:
            self.woken.wait(timeout)
        self.woken.clear()  # Whatever finishes after this sets it again.
        done = []
        while self.finished:
            done.append(self.finished.popleft())
        return done

    def _others_in_flight(self, states: np.ndarray) -> int:
        """Downloads of the node's readers (not this schedule's): they share the count."""
        preparing = int(np.count_nonzero(states == PREPARING))
        if not preparing:
            return 0
        mine = [shard for shard, _, _ in self.futures.values()]
        return max(0, preparing - int(np.count_nonzero(states[mine] == PREPARING)))

    @property
    def connections(self) -> int:
        """Connections this schedule's downloads use (a shard's ranged parts one each)."""
        return sum(parts for _, parts, _ in self.futures.values())

    def _unclaimed(self, states: np.ndarray) -> int:
        """Bytes of this schedule's downloads that have not reserved their room yet.

        A download reserves its shard's bytes in the cache when its thread claims the shard
        (``ShardCache.prepare``), which may be after the schedule has started several more: each
        must fit beside those too, or claiming them evicts shards that readers still need.
        States are read before the cache's usage: a claim in between is counted twice, never
        missed.
        """
        return sum(size for shard, _, size in self.futures.values() if states[shard] == REMOTE)

    def _room_for(self, states: np.ndarray) -> Callable[[float], bool]:
        """``ShardCache.room_for_ahead`` of a shard beside the unclaimed downloads."""
        room_for_ahead = self.owner.cache.room_for_ahead
        return lambda size: room_for_ahead(size + self._unclaimed(states))

    def _fetch(self, walk: EpochWalk, shard: int, first: int, parts: int) -> None:
        """``owner.fetch`` unless every reader is past the shard's last use by its turn.

        A download waits for a thread and for room: readers behind whom the schedule lags may
        fetch, read and let go of its shard meanwhile. It is then not fetched again, and one
        that lands after that is marked passed rather than ahead (where it would stay, its
        mark above every shard still needed).
        """
        if walk.is_past(shard):
            return
        self.owner.fetch(shard, first, parts)
        if walk.is_past(shard):
            self.owner.cache.mark_passed(shard)

    def _begin(self, plan: np.ndarray) -> None:
        owner = self.owner
        self.generation = int(plan[_GEN])
        self.epoch, self.start = int(plan[_EPOCH]), int(plan[_START])
        order = owner.order_for(self.epoch, self.start, int(plan[_WORKERS]) or 1)
        # Last uses only matter to a cache that evicts.
        self.walk = EpochWalk(order, owner.shard_starts, len(owner.sizes), owner.cache.evicts)
        self.ahead: deque[tuple[int, int]] = deque()  # (first use, bytes) fetched ahead.

    def run(self) -> None:
        owner = self.owner
        plan = owner.shared.array('prefetch_plan')
        states = owner.cache.states
        room_for = self._room_for(states)
        while True:
            if int(plan[_GEN]) != self.generation:
                self._begin(plan)
            workers = max(1, int(plan[_WORKERS]))
            now, everyone = owner.now(workers)
            if everyone:
                for shard in self.walk.passed(now):
                    owner.cache.mark_passed(shard)
            horizon = None if owner.ahead is None else now + owner.ahead * workers
            limit = self.concurrency.value
            others = self._others_in_flight(states)
            # Paced (the store throttles): one GET per shard, each taking a turn.
            walk = self.walk
            for shard, first, size, parts in walk.admit(
                    states, now, horizon, self.futures, others, limit, self.ahead,
                    lambda shard: int(owner.sizes[shard]), owner.budget,
                    room_for, self.connections, split_tail=PACER.rate is None):
                future = self.pool.submit(self._fetch, walk, shard, first, parts)
                self.futures[future] = (shard, parts, size)
                future.add_done_callback(self._finished)
            if self.walk.finished and not self.futures:
                with owner.shared.lock('prefetch'):
                    if int(plan[_GEN]) == self.generation:
                        plan[_COMPLETE] = self.generation
                        return
                continue
            held_back = self.connections + others >= limit
            if self.futures:
                done = self._wait_for_one(0.05)
            else:
                done = []  # Every finished download was in ``futures``: none to collect.
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
