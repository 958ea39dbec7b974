"""Per-worker iteration: the node's shared epoch order, and a loop that downloads ahead."""

from __future__ import annotations

import glob
import hashlib
import os
import threading
import uuid
from typing import Any, Callable, Iterator

import numpy as np

from streaming.coord import Namespace
from streaming.dataset.cache import ShardCache

__all__ = ['shared_epoch_order', 'Prefetcher', 'iterate_samples']


def shared_epoch_order(namespace: Namespace, params: dict[str, Any],
                       compute: Callable[[], np.ndarray]) -> np.ndarray:
    """The epoch's sample order, computed once per node and memory-mapped by everyone else.

    The first process to ask computes it and publishes it as a file named by a hash of
    ``params``; the others block on a lock meanwhile, then map that file read-only.
    """
    key = hashlib.sha1(repr(sorted(params.items())).encode()).hexdigest()[:20]
    path = namespace.file(f'order-{key}.npy')
    if not os.path.exists(path):
        with namespace.lock('order'):
            if not os.path.exists(path):
                order = compute()
                tmp = namespace.file(f'.order-{uuid.uuid4().hex}.npy')
                np.save(tmp, order)
                os.replace(tmp, path)
                for old in glob.glob(namespace.file('order-*.npy')):
                    if old != path:  # Maps of old orders stay valid after the unlink.
                        os.remove(old)
    return np.load(path, mmap_mode='r')


class Prefetcher:
    """Prepares the shards of upcoming samples in a background thread.

    It stays at most ``window`` samples ahead of the consumer, sleeping on an event (not a
    polling loop) when it is that far ahead. Its errors are not raised here: the consumer
    prepares a shard that is still missing itself, and gets the error then.
    """

    def __init__(self, cache: ShardCache, shard_ids: np.ndarray, window: int) -> None:
        self.cache = cache
        self.shard_ids = shard_ids
        self.window = max(window, 1)
        self.position = 0
        self.wake_at = 0
        self._wake = threading.Event()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name='streaming-prefetch', daemon=True)
        self._thread.start()

    def advance(self, position: int) -> None:
        """The consumer reached ``position``; wake the thread if it was waiting for that."""
        self.position = position
        if position >= self.wake_at:
            self._wake.set()

    def stop(self) -> None:
        self._stop = True
        self._wake.set()

    def _run(self) -> None:
        # Only the first sample of each run of equal shard ids matters.
        ids = self.shard_ids
        if not len(ids):
            return
        starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
        for position, shard_id in zip(starts.tolist(), ids[starts].tolist()):
            while position > self.position + self.window and not self._stop:
                self.wake_at = position - self.window
                self._wake.clear()
                if position > self.position + self.window:
                    self._wake.wait(timeout=1.0)
            if self._stop:
                return
            if not self.cache.is_local(shard_id):
                try:
                    self.cache.prepare(shard_id, blocking=False)
                except Exception:  # The consumer will hit and report it.
                    pass


def iterate_samples(count: int, read: Callable[[int], Any],
                    prefetcher: Prefetcher | None) -> Iterator[Any]:
    """Yield ``read(position)`` for each position, telling the prefetcher where we are."""
    try:
        if prefetcher is None:
            for position in range(count):
                yield read(position)
        else:
            for position in range(count):
                prefetcher.advance(position)
                yield read(position)
    finally:
        if prefetcher is not None:
            prefetcher.stop()
