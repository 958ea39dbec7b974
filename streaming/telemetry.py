"""Data-stall telemetry: how long training waited for each batch, and where workers spent time.

``StreamingDataLoader.stats`` is a ``LoaderStats``. The loader times each ``next()`` of its
iterator (the training loop's wait for a batch); each DataLoader worker (or the main process
with ``num_workers=0``) adds, per batch it fetches, its time waiting for shards to be ready
(downloads, decompression), reading and decoding, and running a custom ``collate_fn``, and the
CPU seconds its process (all its threads) used meanwhile, to its row of a small shared-memory
table. Costs a few ``perf_counter``/``process_time`` calls per batch, not per sample.

``log_every=N`` (a ``StreamingDataLoader`` argument) logs ``stats.log_line()`` every N steps
at INFO on the ``streaming.loader`` logger.

Egress: ``stats.egress`` lists, per epoch this loader iterated, the bytes and GETs the node
received for the dataset's shards since the previous epoch ended (the first: since the dataset
was made, its downloads starting then), all its ranks and workers together: the dataset keeps
the node's totals in its shared directory (``ShardCache.egress``); ``stats.node_egress()`` is
the running total. Downloads made ahead for the next epoch count in the epoch they arrive in.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any, Callable, Iterator

import numpy as np

__all__ = ['LoaderStats', 'WorkerClock', 'WORKER_FIELDS']

logger = logging.getLogger('streaming.loader')

# Columns of a worker's row.
WORKER_FIELDS = ('shard_wait_s', 'read_s', 'collate_s', 'samples', 'batches', 'fetch_cpu_s')
_WAIT, _READ, _COLLATE, _SAMPLES, _BATCHES, _CPU = range(len(WORKER_FIELDS))


class WorkerClock:
    """Accumulates one worker's times into its ``row`` (float64, WORKER_FIELDS).

    Amounts are gathered in a Python list and added to the row every ``FLUSH_EVERY`` batches
    and at the end of the worker's epoch (``flush``): the row lags by at most that many
    batches. Adding (not storing) keeps ``LoaderStats.reset`` effective while workers run.
    """

    FLUSH_EVERY = 8

    def __init__(self, row: np.ndarray) -> None:
        self.row = row
        self._pending = [0.0] * len(WORKER_FIELDS)

    def add_wait(self, seconds: float) -> None:
        self._pending[_WAIT] += seconds

    def add_read(self, seconds: float, samples: int, cpu_seconds: float = 0.0) -> None:
        """A batch read: its wall seconds, its samples, and the process's CPU seconds meanwhile."""
        pending = self._pending
        pending[_READ] += seconds
        pending[_CPU] += cpu_seconds
        pending[_SAMPLES] += samples
        pending[_BATCHES] += 1
        if pending[_BATCHES] >= self.FLUSH_EVERY:
            self.flush()

    def add_collate(self, seconds: float) -> None:
        self._pending[_COLLATE] += seconds

    def flush(self) -> None:
        """Add what was gathered since the last flush to the shared row."""
        self.row += self._pending
        self._pending = [0.0] * len(WORKER_FIELDS)


class LoaderStats:
    """Per-step waits of the training loop, and per-worker time (see the module docstring).

    ``steps``, ``wait_s`` (total), ``last_wait_s``, ``max_wait_s`` count batches handed to the
    training loop since the stats were created (``reset()`` starts over); ``workers()`` reads
    the workers' rows.
    """

    def __init__(self, num_workers: int = 0, log_every: int | None = None,
                 egress_source: Callable[[], tuple[int, int]] | None = None) -> None:
        import torch
        self.log_every = log_every
        self.egress_source = egress_source  # The node's (bytes, GETs) so far, if known.
        # Shared memory, so that worker processes (forked or spawned) write rows we can read.
        self._table = torch.zeros((max(num_workers, 1), len(WORKER_FIELDS)),
                                  dtype=torch.float64).share_memory_()
        self.reset()

    def reset(self) -> None:
        """Zero every counter (the workers' rows too)."""
        self.steps = 0
        self.wait_s = 0.0
        self.last_wait_s = 0.0
        self.max_wait_s = 0.0
        self._started = time.perf_counter()
        self._table.zero_()
        self.egress: list[dict[str, int]] = []
        # The node's totals at the end of the last epoch (None: count from the dataset's start).
        self._egress_mark = self.node_egress() if self.egress_source else None

    def node_egress(self) -> dict[str, int]:
        """The node's shard downloads so far: ``{'bytes': ..., 'gets': ...}`` (zeros if unknown)."""
        received, gets = self.egress_source() if self.egress_source else (0, 0)
        return {'bytes': received, 'gets': gets}

    def worker_clock(self, worker_id: int) -> WorkerClock:
        """The clock a worker (``worker_id``, 0 in the main process) adds its times to."""
        return WorkerClock(self._table[worker_id % len(self._table)].numpy())

    def timed(self, batches: Iterator[Any]) -> Iterator[Any]:
        """Yield from ``batches``, timing how long each one took to arrive."""
        try:
            yield from self._timed(batches, time.perf_counter)
        finally:  # The epoch ended, or was broken off: what the node received since the last.
            self._close_egress()

    def _close_egress(self) -> None:
        """Record the epoch's egress; best effort, never raising from a loader's ``finally``.

        A loader left mid-epoch is closed by the garbage collector, possibly while the
        interpreter shuts down, when the shared directory may be gone or unreadable.
        """
        if sys.is_finalizing():
            return
        try:
            now = self.node_egress()
        except Exception:  # noqa: BLE001 - telemetry must not turn a clean exit into an error.
            return
        before = self._egress_mark or dict.fromkeys(now, 0)
        self.egress.append({name: now[name] - before[name] for name in now})
        self._egress_mark = now

    def _timed(self, batches: Iterator[Any], clock: Callable[[], float]) -> Iterator[Any]:
        while True:
            started = clock()
            try:
                batch = next(batches)
            except StopIteration:
                return
            waited = clock() - started
            self.steps += 1
            self.wait_s += waited
            self.last_wait_s = waited
            if waited > self.max_wait_s:
                self.max_wait_s = waited
            if self.log_every and self.steps % self.log_every == 0:
                logger.info(self.log_line())
            yield batch

    def workers(self) -> list[dict[str, float]]:
        """Per worker: its totals of WORKER_FIELDS."""
        return [dict(zip(WORKER_FIELDS, row)) for row in self._table.tolist()]

    def summary(self) -> dict[str, Any]:
        """Everything as plain numbers: waits, the stall fraction, and the workers' totals."""
        elapsed = time.perf_counter() - self._started
        return {'steps': self.steps, 'wait_s': self.wait_s, 'last_wait_s': self.last_wait_s,
                'max_wait_s': self.max_wait_s,
                'mean_wait_s': self.wait_s / self.steps if self.steps else 0.0,
                'stall_fraction': self.wait_s / elapsed if elapsed > 0 else 0.0,
                'workers': self.workers(), 'egress': list(self.egress),
                'node_egress': self.node_egress()}

    def log_line(self) -> str:
        """One line: steps, mean and max wait, stall fraction, summed worker times."""
        s = self.summary()
        totals = {k: sum(w[k] for w in s['workers']) for k in WORKER_FIELDS}
        return (f'steps={s["steps"]} wait mean={1e3 * s["mean_wait_s"]:.2f}ms '
                f'max={1e3 * s["max_wait_s"]:.2f}ms stall={100 * s["stall_fraction"]:.1f}% '
                f'workers: shard_wait={totals["shard_wait_s"]:.2f}s '
                f'read={totals["read_s"]:.2f}s collate={totals["collate_s"]:.2f}s '
                f'samples={int(totals["samples"])}')

    def __repr__(self) -> str:
        return f'LoaderStats({self.log_line()})'
