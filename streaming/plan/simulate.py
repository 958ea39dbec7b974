"""One node's run, replayed in simulated time: the real schedule's rules over a modelled link.

What is the library's own, imported rather than rewritten: the epoch order and each shard's
first and last use, walked as the schedule walks them (``streaming.cache.walk``), how many
downloads are in flight (``streaming.cache.concurrency``, fed by a simulated meter), how far
ahead it fetches and how much downloads may reserve (``DownloadBudget`` of the cache, or an
explicit ``predownload``), the ranged parts of the epoch's tail (``tail_parts``) and how the
download layer splits a file (``storage.download._split``), and the cache's states
(``REMOTE``/``PREPARING``/``LOCAL``). What is modelled:

* the link: a GET waits ``ttfb``, then every connection receiving shares the node's
  ``link_rate``, none above ``conn_rate`` (processor sharing, as the link emulator shapes it);
* the store's request limit: each node's share of it, its GETs paced by the library's own
  ``Pacer`` and refused above the share (``plan/store.py``; the schedule halves its count
  when it sees refusals, as ``Concurrency.throttled`` does);
* the readers: each rank's DataLoader workers take their batches in turn, ``prefetch_factor``
  batches each ahead of the model; a reader needing a shard that nobody fetches fetches it
  itself, one shard after another, and waits;
* the cache under ``cache_limit``: a download reserves its shard's bytes and evicts the least
  recently used local shard first, with the schedule's marks (shards fetched ahead taken last,
  the one needed last first; shards every reader is past taken first), as ``cache/shard_cache.py``
  and ``cache/prefetch.py`` do.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from typing import Any, Generator

import numpy as np

from streaming.cache.budget import DownloadBudget
from streaming.cache.concurrency import Concurrency
from streaming.cache.shard_cache import LOCAL, PREPARING, REMOTE
from streaming.cache.walk import EpochWalk
from streaming.plan.inputs import DatasetShape, RunSettings
from streaming.plan.orders import NodeSteps
from streaming.plan.pieces import NodeRun, Reader, SimMeter, Transfer, gets_per_file
from streaming.plan.profiles import LinkProfile
from streaming.plan.store import StoreQueue, ThrottledStore, TokenBucket

__all__ = ['NodeRun', 'NodeSimulation']

TICK = 0.05  # The schedule's longest wait between two looks (``_Schedule.run``).
IDLE_TICK = 0.25  # Its sleep while no reader has begun.
# Downloads simulated per plan at most (shared by the nodes it simulates): a run that refetches
# without end is cut there and extrapolated from the shard reads done (the output says so)
# rather than simulated for minutes.
MAX_DOWNLOADS = 40_000
AHEAD_MARK = 1e15  # Access marks of shards fetched ahead: above any read's.
EPOCH_MARK = 1e10  # A later plan's marks are above an earlier one's.


class NodeSimulation:
    """Simulate one node over its epochs (``steps[e]`` for epoch ``e``)."""

    def __init__(self, shape: DatasetShape, run: RunSettings, profile: LinkProfile,
                 in_flight: int | None = None, max_downloads: int = MAX_DOWNLOADS,
                 bucket: TokenBucket | None = None, barrier: Any = None, node: int = 0,
                 draw: int = 0, queue: StoreQueue | None = None) -> None:
        self.shape, self.run, self.profile = shape, run, profile
        self.max_downloads = max_downloads
        self.held = shape.held_bytes.astype(np.float64)
        self.fetch = shape.fetch_bytes.astype(np.float64)
        self.starts = np.concatenate([[0], np.cumsum(shape.samples)]).astype(np.int64)
        num = shape.num_shards
        # One buffer, two views: numpy for the cache's scans, bytes for the readers' lookups.
        self.state_bytes = bytearray([REMOTE]) * num
        self.states = np.frombuffer(self.state_bytes, np.int8)
        self.access = np.zeros(num)
        self.ever = np.zeros(num, bool)
        self.limit = run.cache_bytes
        self.usage = float(shape.index_bytes)
        self.budget = DownloadBudget.for_limit(None if self.limit is None else int(self.limit),
                                               int(shape.index_bytes),
                                               int(shape.held_bytes.max()))
        self.meter = SimMeter()
        self.concurrency = Concurrency(in_flight, meter=self.meter)  # type: ignore[arg-type]
        self.throttles_seen = 0
        self.barrier, self.node, self.epoch = barrier, node, 0
        if profile.request_limit and bucket is None:  # Alone: an equal share of the store.
            bucket = TokenBucket(profile.request_limit / run.nodes)
        if queue is None:  # Alone: an equal share of the store's answers.
            queue = StoreQueue(profile.store_rate and profile.store_rate / run.nodes)
        self.queue = queue
        self.store = None if bucket is None else ThrottledStore(
            bucket, profile.ttfb, lambda: self.t, self._refused, seed=draw * 1_000_003 + node,
            queue=queue, send_gap=run.send_gap_s)
        # Nodes run together begin at drawn instants within ``start_spread_s`` of each other.
        self.start_offset = random.Random(f'start {draw} {node}').uniform(
            0.0, run.start_spread_s) if barrier is not None else 0.0
        self.t = 0.0
        self.transfers: list[Transfer] = []
        self.parts_left = np.zeros(num, np.int64)
        self.scheduled: dict[int, tuple[int, float]] = {}  # shard -> (first use, reserved).
        self.waiters: dict[int, list[Reader]] = {}
        self._parts: dict[int, int] = {}  # GETs the shard's download was split into.
        self.model_free_at = 0.0  # When the model can take its next step.
        self.out = NodeRun()

    # ---- the cache --------------------------------------------------------------------------
    def _set_usage(self, delta: float) -> None:
        self.usage += delta
        if self.usage > self.out.peak_cache:
            self.out.peak_cache = self.usage
        self.out.cache_series.append((self.t, self.usage))

    def _make_room(self, needed: float, keep: int) -> None:
        if self.limit is None:
            return
        if self.usage + needed <= self.limit:
            return
        candidates = np.flatnonzero(self.states == LOCAL)
        candidates = candidates[candidates != keep]
        # Least recently used first (the lowest index among equals, as ``argmin`` picks).
        for victim in candidates[np.argsort(self.access[candidates], kind='stable')].tolist():
            self.states[victim] = REMOTE
            self._set_usage(-self.held[victim])
            if self.usage + needed <= self.limit:
                return
        self.out.overfull = max(self.out.overfull, self.usage + needed - self.limit)

    # ---- transfers --------------------------------------------------------------------------
    def _start(self, shard: int, parts: int, by_schedule: bool) -> None:
        """``ShardCache.prepare``: reserve, evict for room, and GET the shard (in parts)."""
        self._make_room(self.held[shard], keep=shard)
        self.states[shard] = PREPARING
        self._set_usage(self.held[shard])
        files = int(self.shape.files_per_shard[shard])
        count = files * gets_per_file(int(self.fetch[shard]) // files, parts)
        self.parts_left[shard] = count
        self._parts[shard] = count
        for _ in range(count):
            transfer = Transfer(shard, self.fetch[shard] / count, np.inf, by_schedule)
            self.transfers.append(transfer)
            if self.store is None:
                transfer.first_byte_at = self.queue.answer(self.t, self.profile.ttfb)
                self._sent(self.t)
            else:  # Sent at its pacer's turn, answered once admitted (``_store_due``).
                sent = self.store.request(transfer)
                if sent is not None:
                    self._sent(sent)
        if self.ever[shard]:
            self.out.refetches += 1
            self.out.refetched_bytes += self.fetch[shard]
        self.ever[shard] = True
        self.out.downloads += 1

    def _sent(self, at: float) -> None:
        self.out.gets += 1
        self.out.get_times.append(at)

    def _refused(self) -> None:
        self.out.throttled += 1

    def _store_due(self) -> None:
        if self.store is not None:
            for at in self.store.due():
                self._sent(at)

    def _rates(self) -> tuple[list[Transfer], float]:
        receiving = [x for x in self.transfers if x.first_byte_at <= self.t]
        if not receiving:
            return receiving, 0.0
        return receiving, min(self.profile.conn_rate, self.profile.link_rate / len(receiving))

    def _next_transfer_event(self) -> float:
        receiving, rate = self._rates()
        soonest = min((x.first_byte_at for x in self.transfers if x.first_byte_at > self.t),
                      default=np.inf)
        if receiving:
            soonest = min(soonest, self.t + min(x.remaining for x in receiving) / rate)
        return soonest

    def _advance(self, until: float) -> list[int]:
        """Move transfers on to ``until``; returns the shards that became local."""
        receiving, rate = self._rates()
        dt = until - self.t
        scheduled_receiving = sum(1 for x in receiving if x.by_schedule)
        self.meter.area += scheduled_receiving * dt
        self.meter.received += scheduled_receiving * rate * dt
        self.meter.open = scheduled_receiving
        self.out.in_flight_area += len(self.transfers) * dt
        for x in receiving:
            x.remaining -= rate * dt
        self.t = until
        done = 1e-6 * max(1.0, rate)
        finished = [x for x in self.transfers if x.remaining <= done and x.first_byte_at <= until]
        if not finished:
            return []
        self.transfers = [x for x in self.transfers if x not in finished]
        local = []
        for x in finished:
            self.out.fetched_bytes += self.fetch[x.shard] / self._parts.get(x.shard, 1)
            self.parts_left[x.shard] -= 1
            if self.parts_left[x.shard] == 0:
                local.append(x.shard)
        self.out.bytes_series.append((self.t, self.out.fetched_bytes))
        for shard in local:
            self.states[shard] = LOCAL
            self.access[shard] = self.t
            if shard in self.scheduled:
                first, _ = self.scheduled.pop(shard)
                if self.limit is not None:  # Passed while it came: marked so (``_fetch``).
                    self.access[shard] = 0.0 if self.walk.is_past(shard) else \
                        self.mark_base + AHEAD_MARK - first
        return local

    # ---- the schedule (``prefetch._Schedule``) -------------------------------------------------
    def _begin_plan(self, steps: NodeSteps, epoch: int) -> None:
        self.walk = EpochWalk(steps.order, self.starts, self.shape.num_shards,
                              track_last=self.limit is not None)
        self.ahead: deque[tuple[int, float]] = deque()
        self.mark_base = epoch * EPOCH_MARK

    def _reader_now(self) -> tuple[int, bool]:
        positions = [r.position for r in self.readers if r.position > 0]
        everyone = len(positions) == len(self.readers)
        return (min(positions) - 1 if positions else 0), everyone

    def _schedule(self) -> None:
        now, everyone = self._reader_now()
        if everyone:
            for shard in self.walk.passed(now):
                if self.states[shard] == LOCAL:
                    self.access[shard] = 0.0
        workers = self.run.loader_workers
        horizon = None if self.run.predownload is None else now + self.run.predownload * workers
        limit = self.concurrency.value
        for shard, first, size, parts in self.walk.admit(
                self.states, now, horizon, self.scheduled, 0, limit, self.ahead,
                lambda shard: float(self.held[shard]), self.budget, self._room_for,
                self._connections()):
            self.scheduled[shard] = (first, size)
            self._start(shard, parts, by_schedule=True)
        self.held_back = self._connections() >= limit
        if self.store is not None and self.store.pacer.throttles != self.throttles_seen:
            # Refused since the last look: fewer downloads queued for the pacer's turns.
            self.throttles_seen = self.store.pacer.throttles
            self.concurrency.throttled(self.t)
        self.concurrency.update(self.t, self.held_back)
        self.out.max_in_flight = max(self.out.max_in_flight, len(self.transfers))

    def _connections(self) -> int:
        """GETs of the schedule's downloads (a shard's ranged parts one each), as it counts."""
        return sum(self._parts[shard] for shard in self.scheduled)

    def _room_for(self, size: float) -> bool:
        if self.limit is None:
            return True
        dead = (self.states == LOCAL) & (self.access == 0)
        return self.usage - float(self.held[dead].sum()) + size <= self.limit

    def _schedule_alive(self) -> bool:
        """Whether the schedule still loops (it ends once walked, fetched and all marked)."""
        return not self.walk.finished or bool(self.scheduled)

    # ---- readers and the model ------------------------------------------------------------------
    def _dispatched(self, step: int) -> bool:
        ahead = self.run.loader_workers * self.run.prefetch_factor
        return step < ahead or self.consumed[step - ahead] >= 0

    def _advance_reader(self, reader: Reader) -> bool:
        """Move a reader as far as it can now; returns whether it moved."""
        moved = False
        batch = self.run.batch_size
        while not reader.done:
            if reader.step < 0:
                step = reader.next_step
                if step >= self.steps.steps:
                    reader.done, reader.position, moved = True, 1 << 62, True
                    break
                if not self._dispatched(step) or self.t < self.workers_at:
                    break
                if self.t < reader.free_at - 1e-9:
                    heapq.heappush(self.timers, reader.free_at)
                    break
                reader.step, reader.next_step = step, step + self.run.loader_workers
                reader.pending = deque(self.steps.reads[step][reader.rank])
                # A batch reader reports its batch's first sample before reading it
                # (``batches.take``).
                reader.position = step * batch + 1
                moved = True
            while reader.pending:
                shard = reader.pending[0]
                state = self.state_bytes[shard]
                if state == LOCAL:
                    if self.limit is not None:
                        self.access[shard] = self.t
                    reader.pending.popleft()
                    self.out.reads_done += 1
                    continue
                if state == REMOTE:
                    self._start(shard, 1, by_schedule=False)
                reader.waiting_on = shard
                self.waiters.setdefault(shard, []).append(reader)
                return moved
            reader.waiting_on = -1
            decode = self.run.decode_s_per_sample * batch
            self.ready_count[reader.step] += 1
            self.ready_at[reader.step] = max(self.ready_at[reader.step], self.t + decode)
            reader.free_at = self.t + decode
            if decode:
                heapq.heappush(self.timers, reader.free_at)
            reader.step = -1
            moved = True
        return moved

    def _consume(self) -> bool:
        """The model takes every step whose batches are ready, as its pace allows."""
        moved = False
        ranks, pace = self.run.ranks_per_node, self.run.step_seconds
        while self.next_consume < self.steps.steps:
            step = self.next_consume
            if self.ready_count[step] < ranks:
                return moved
            ready = float(self.ready_at[step])
            if self.out.first_ready_s is None:
                self.out.first_ready_s = ready
            if self.barrier is not None:  # Every node's ranks take the step together.
                ready = self.barrier.arrive(self.node, self.epoch, step, ready)
                if ready is None:
                    return moved
            wanted = self.model_free_at
            at = max(ready, wanted)
            if at > self.t + 1e-9:
                heapq.heappush(self.timers, at)
                return moved
            if ready > wanted + 1e-9:
                self.out.stalls.append((len(self.out.step_times), ready - wanted))
            self.consumed[step] = at
            self.out.step_times.append(at)
            self.out.step_samples.append(int(self.steps.samples[step]))
            self.model_free_at = at + pace
            self.next_consume += 1
            moved = True
        return moved

    def _settle(self) -> None:
        """Consume and read until nothing moves at this instant.

        Every move is progress (a step consumed, taken or read), so this ends; a cap here would
        leave work undone with nothing scheduled to resume it (a model with no pace and one
        worker moves two steps a round).
        """
        while True:
            moved = self._consume()
            for reader in self.readers:
                if reader.waiting_on < 0:
                    moved |= self._advance_reader(reader)
            if not moved:
                return

    def moves(self, epochs: list[NodeSteps], first_request: float
              ) -> Generator[float, float | None, None]:
        """Simulate the epochs; yields each time it is about to move its clock to."""
        start = self.start_offset
        for epoch, steps in enumerate(epochs):
            yield from self.run_epoch(steps, epoch, start, first_request)
            start = self.t
            if self.out.cut:
                return

    def run_epoch(self, steps: NodeSteps, epoch: int, start: float, first_request: float
                  ) -> Generator[float, float | None, None]:
        """Simulate one epoch whose dataset is built at ``start`` (see ``moves``)."""
        self.steps, self.epoch = steps, epoch
        self.t = max(self.t, start)
        self._begin_plan(steps, epoch)
        # The first epoch's schedule starts once the dataset is built (its index fetched).
        self.plan_at = start + (first_request + self.run.build_s if epoch == 0 else 0.0)
        self.workers_at = start + self.run.startup_s
        ranks, workers = self.run.ranks_per_node, self.run.loader_workers
        self.readers = [Reader(rank, worker, worker) for rank in range(ranks)
                        for worker in range(workers)]
        count = steps.steps
        self.ready_count = np.zeros(count, np.int64)
        self.ready_at = np.zeros(count)
        self.consumed = np.full(count, -1.0)
        self.next_consume = 0
        self.model_free_at = self.workers_at
        self.timers: list[float] = [self.plan_at, self.workers_at]
        self.held_back = False
        next_tick = self.plan_at
        while self.next_consume < count:
            if self.out.downloads > self.max_downloads:
                self.out.cut, self.out.cut_at = True, self.t
                break
            if self.t >= self.plan_at and self.t >= next_tick - 1e-12:
                self._schedule()
                # ``wait`` for a download up to TICK; with none, a sleep (longer before reads).
                next_tick = self.t + (TICK if self.scheduled or self._reader_now()[0]
                                      else IDLE_TICK)
            self._settle()
            if self.next_consume >= count:
                break
            while self.timers and self.timers[0] <= self.t + 1e-9:
                heapq.heappop(self.timers)
            candidates = [self._next_transfer_event()]
            if self.store is not None:
                candidates.append(self.store.next_event())
            if self.timers:
                candidates.append(self.timers[0])
            if self._schedule_alive():
                candidates.append(max(next_tick, self.plan_at))
            until = min(candidates)
            if until == np.inf and self.barrier is None:
                raise RuntimeError('plan: the simulation stalled (nothing left to wait for); '
                                   'this is a bug in the planner')
            # Nodes that run together move in the order of their clocks; one waiting for the
            # others at the step's barrier is woken when they arrive.
            woken = yield until
            until = until if woken is None else woken
            scheduled = len(self.scheduled)
            local = self._advance(max(until, self.t))
            self._store_due()
            for shard in local:
                for reader in self.waiters.pop(shard, []):
                    reader.waiting_on = -1
                    self._advance_reader(reader)
            if len(self.scheduled) < scheduled:  # ``wait`` returns when one of its is done.
                next_tick = min(next_tick, self.t)
        self.out.epoch_end_s.append(self.t)
        if epoch == 0:
            self.out.first_batch_s = self.out.step_times[0] if self.out.step_times else \
                self._first_batch_beyond_cut(steps)

    def _first_batch_beyond_cut(self, steps: NodeSteps) -> float:
        """Cut before the first step: when its reads would be done, at the pace of those done.

        The readers of the first ``workers`` steps read side by side, so the first step is ready
        about when that many steps' reads are; never earlier than the cut.
        """
        first_reads = sum(len(rank) for step in steps.reads[:self.run.loader_workers]
                          for rank in step)
        pace = (self.t - self.plan_at) / max(1, self.out.reads_done)
        return max(self.t, self.plan_at + pace * first_reads)

    def result(self) -> NodeRun:
        return self.out
