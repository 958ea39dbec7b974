"""Which windows each rank reads: an exactly-once epoch order, or a per-window random draw.

Both are plain iterables of window indices usable as a ``torch.utils.data.DataLoader`` sampler
(DataLoader workers then split the rank's indices among themselves), both are deterministic
functions of their arguments, and both resume from a small state dict.
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np

__all__ = ['BatchIndices', 'EpochSampler', 'WindowDrawSampler', 'window_seed']


def _check_rank(rank: int, world_size: int) -> None:
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f'rank {rank} must lie in [0, world_size={world_size}).')


class _Resumable:
    """Iteration over ``indices()`` from position ``consumed`` on."""

    consumed: int

    def indices(self) -> np.ndarray:
        raise NotImplementedError

    def __len__(self) -> int:
        return max(0, len(self.indices()) - self.consumed)

    def __iter__(self) -> Iterator[int]:
        yield from self.indices()[self.consumed:].tolist()

    def set_consumed(self, consumed: int) -> None:
        self.consumed = int(consumed)


class BatchIndices:
    """A sampler's remaining indices cut into batches: one int64 array per batch.

    A ``DataLoader`` built with ``batch_size=None`` and this as its sampler hands each array to
    the dataset whole (one gather per batch), without the per-index Python loop of
    ``BatchSampler``; the batches are the same as ``BatchSampler(sampler, batch_size,
    drop_last)``'s.
    """

    def __init__(self, sampler: _Resumable, batch_size: int, drop_last: bool = False) -> None:
        if batch_size < 1:
            raise ValueError(f'batch_size must be >= 1, got {batch_size}.')
        self.sampler, self.batch_size, self.drop_last = sampler, int(batch_size), drop_last

    def _order(self) -> np.ndarray:
        order = np.asarray(self.sampler.indices()[self.sampler.consumed:], np.int64)
        return order[:len(order) - len(order) % self.batch_size] if self.drop_last else order

    def __len__(self) -> int:
        count = len(self._order())
        return -(-count // self.batch_size)

    def __iter__(self) -> Iterator[np.ndarray]:
        order = self._order()
        for start in range(0, len(order), self.batch_size):
            yield order[start:start + self.batch_size]


class EpochSampler(_Resumable):
    """Every window exactly once per epoch, over all ranks.

    The epoch's order is a permutation of ``range(num_windows)`` seeded by ``(seed, epoch)``
    (or the identity with ``shuffle=False``); rank ``r`` takes positions ``r, r + world_size,
    ...``. Ranks' shares differ by at most one window; ``drop_last=True`` trims every share to
    the shortest (each window then at most once, and exactly once when ``world_size`` divides
    ``num_windows``).

    ``state_dict()`` / ``load_state_dict()`` carry ``{'epoch', 'consumed'}``: ``consumed``
    counts this rank's windows already trained on (``set_consumed`` from the training loop,
    which knows; the sampler itself runs ahead of training by the DataLoader's prefetch).
    """

    def __init__(self, num_windows: int, *, rank: int = 0, world_size: int = 1, seed: int = 0,
                 shuffle: bool = True, drop_last: bool = False, epoch: int = 0,
                 consumed: int = 0) -> None:
        _check_rank(rank, world_size)
        if num_windows < 0:
            raise ValueError(f'num_windows must be >= 0, got {num_windows}.')
        self.num_windows, self.rank, self.world_size = int(num_windows), rank, world_size
        self.seed, self.shuffle, self.drop_last = int(seed), shuffle, drop_last
        self.epoch, self.consumed = int(epoch), int(consumed)

    def order(self, epoch: int | None = None) -> np.ndarray:
        """The whole epoch's order (every rank's indices interleaved)."""
        epoch = self.epoch if epoch is None else epoch
        if not self.shuffle:
            return np.arange(self.num_windows, dtype=np.int64)
        rng = np.random.default_rng([self.seed & 0xFFFFFFFF, epoch & 0xFFFFFFFF])
        return rng.permutation(self.num_windows).astype(np.int64)

    def indices(self, epoch: int | None = None) -> np.ndarray:
        """This rank's windows of the epoch, in order."""
        share = self.order(epoch)[self.rank::self.world_size]
        if self.drop_last:
            share = share[:self.num_windows // self.world_size]
        return share

    def set_epoch(self, epoch: int) -> None:
        self.epoch, self.consumed = int(epoch), 0

    def state_dict(self) -> dict[str, Any]:
        return {'epoch': self.epoch, 'consumed': self.consumed, 'seed': self.seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if 'seed' in state and int(state['seed']) != self.seed:
            raise ValueError(f'EpochSampler state was saved with seed {state["seed"]}, this '
                             f'sampler has seed {self.seed}.')
        self.epoch, self.consumed = int(state['epoch']), int(state.get('consumed', 0))


def window_seed(uid: int, window: int) -> int:
    """The draw's seed: ``(uid * 1_000_003) XOR window``, truncated to 32 bits."""
    return ((int(uid) * 1_000_003) ^ int(window)) & 0xFFFFFFFF


class WindowDrawSampler(_Resumable):
    """A fresh random pool of windows for every training window, the same on every machine.

    For training window ``window`` of participant ``uid``, ``pool_size`` distinct indices are
    drawn from ``range(num_windows)`` with ``numpy.random.default_rng(window_seed(uid,
    window))``; rank ``r`` takes ``pool[r::world_size]``. Anyone knowing ``(uid, window)`` can
    rebuild the pool (to audit what was trained on). Draws of different windows are
    independent, so over many windows sampling is with replacement.

    State: ``{'uid', 'window', 'consumed'}``.
    """

    def __init__(self, num_windows: int, pool_size: int, *, uid: int, window: int = 0,
                 rank: int = 0, world_size: int = 1, consumed: int = 0) -> None:
        _check_rank(rank, world_size)
        if not 0 < pool_size <= num_windows:
            raise ValueError(f'pool_size {pool_size} must lie in [1, num_windows='
                             f'{num_windows}]: the pool is drawn without replacement.')
        self.num_windows, self.pool_size = int(num_windows), int(pool_size)
        self.uid, self.window, self.consumed = int(uid), int(window), int(consumed)
        self.rank, self.world_size = rank, world_size

    def pool(self, window: int | None = None) -> np.ndarray:
        """The whole pool of ``window`` (every rank's share)."""
        window = self.window if window is None else window
        rng = np.random.default_rng(window_seed(self.uid, window))
        return rng.choice(self.num_windows, self.pool_size, replace=False).astype(np.int64)

    def indices(self, window: int | None = None) -> np.ndarray:
        return self.pool(window)[self.rank::self.world_size]

    def set_window(self, window: int) -> None:
        self.window, self.consumed = int(window), 0

    def state_dict(self) -> dict[str, Any]:
        return {'uid': self.uid, 'window': self.window, 'consumed': self.consumed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if int(state['uid']) != self.uid:
            raise ValueError(f'WindowDrawSampler state belongs to uid {state["uid"]}, this '
                             f'sampler draws for uid {self.uid}.')
        self.window, self.consumed = int(state['window']), int(state.get('consumed', 0))
