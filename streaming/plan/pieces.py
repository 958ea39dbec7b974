"""The pieces a node's simulation moves: transfers, readers, the meter, and what it records.

``gets_per_file`` is the download layer's own split of a file into ranged GETs.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from functools import lru_cache

from streaming.storage.download import DownloadConfig, _split, in_parts

__all__ = ['NodeRun', 'Reader', 'SimMeter', 'Transfer', 'gets_per_file']


@lru_cache(maxsize=4096)  # A plan asks about a few sizes, tens of thousands of times.
def gets_per_file(size: int, parts: int) -> int:
    """GETs a ``size``-byte file takes when asked for in ``parts``.

    The download layer's own split (``storage.download._split``); big files are split whatever
    is asked.
    """
    with in_parts(parts):
        config = _split(DownloadConfig(), size)
    return 1 if size <= config.threshold else -(-size // config.part_size)


class SimMeter:
    """What ``Concurrency`` reads: bytes received, connection-seconds receiving, receiving now."""

    def __init__(self) -> None:
        self.received, self.area, self.open = 0.0, 0.0, 0

    def reading(self) -> tuple[int, float, int]:
        return int(self.received), self.area, self.open


@dataclass(eq=False)  # Compared by identity: the simulation removes finished ones by it.
class Transfer:
    shard: int
    remaining: float
    first_byte_at: float  # inf: not answered yet (waiting for a turn, or refused).
    by_schedule: bool
    refusals: int = 0


@dataclass
class Reader:
    """One DataLoader worker of one rank: its steps are ``worker, worker + workers, ...``."""

    rank: int
    worker: int
    next_step: int
    step: int = -1
    pending: deque = field(default_factory=deque)
    waiting_on: int = -1
    position: int = 0  # Rank time (``first_use.sample_time``) + 1; 0: not started.
    done: bool = False
    free_at: float = 0.0  # Busy decoding its last batch until then.


@dataclass
class NodeRun:
    """What one simulated node did over the whole run (times in seconds from the run's start)."""

    first_batch_s: float = 0.0
    # When the node's own ranks had the first step's batches (before nodes that run together
    # wait for each other at the step's barrier): None until they had.
    first_ready_s: float | None = None
    epoch_end_s: list[float] = field(default_factory=list)
    step_times: list[float] = field(default_factory=list)  # Each step's consumption.
    step_samples: list[int] = field(default_factory=list)
    stalls: list[tuple[int, float]] = field(default_factory=list)  # (step, seconds waited).
    fetched_bytes: float = 0.0
    gets: int = 0
    throttled: int = 0
    downloads: int = 0
    refetches: int = 0
    refetched_bytes: float = 0.0
    peak_cache: float = 0.0
    overfull: float = 0.0  # Bytes the cache had to hold above its limit (too small a limit).
    bytes_series: list[tuple[float, float]] = field(default_factory=list)
    cache_series: list[tuple[float, float]] = field(default_factory=list)
    get_times: list[float] = field(default_factory=list)
    in_flight_area: float = 0.0
    max_in_flight: int = 0
    steps_planned: int = 0  # Steps of every epoch; more than simulated if the run was cut.
    samples_planned: int = 0
    reads_planned: int = 0  # Shard reads (runs of a shard's samples in a batch) of every epoch.
    reads_done: int = 0
    cut: bool = False
    cut_at: float = 0.0

    @property
    def progress(self) -> float:
        """The share of the run simulated: its shard reads done (1.0 unless cut)."""
        if not self.cut or not self.reads_planned:
            return 1.0
        return max(self.reads_done, 1) / self.reads_planned
