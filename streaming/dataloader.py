"""``StreamingDataLoader``: a torch DataLoader that can checkpoint where it is in the epoch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Iterator

import torch
from torch.utils.data import DataLoader

from streaming.dataset.dataset import StreamingDataset
from streaming.telemetry import LoaderStats

__all__ = ['StreamingDataLoader']


def _batch_len(batch: Any) -> int:
    """The number of samples in a collated batch."""
    if isinstance(batch, Mapping):
        return _batch_len(next(iter(batch.values())))
    if isinstance(batch, torch.Tensor):
        return len(batch)
    if isinstance(batch, (list, tuple)) and batch:
        first = batch[0]
        return len(first) if isinstance(first, (torch.Tensor, list, tuple, Mapping)) else \
            len(batch)
    return len(batch)


class StreamingDataLoader(DataLoader):
    """A DataLoader that counts the samples it yields, so ``state_dict()`` can resume mid-epoch."""

    def __init__(self, *args: Any, log_every: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.num_samples_yielded = 0
        # Data-stall telemetry (streaming.telemetry); log_every=N logs a line every N steps.
        self.stats = LoaderStats(self.num_workers, log_every)
        if isinstance(self.dataset, StreamingDataset):
            self.dataset._loader_stats = self.stats

    def __iter__(self) -> Iterator[Any]:
        self.num_samples_yielded = 0
        for batch in self.stats.timed(super().__iter__()):
            self.num_samples_yielded += _batch_len(batch)
            yield batch

    def state_dict(self) -> dict[str, Any] | None:
        """The dataset's resume state after the samples yielded so far (None if not streaming)."""
        if not isinstance(self.dataset, StreamingDataset):
            return None
        world = self.dataset.world
        ranks = world.world_size // (self.dataset.replication or 1)
        return self.dataset.state_dict(self.num_samples_yielded * ranks, False)

    def load_state_dict(self, obj: dict[str, Any]) -> None:
        """Resume the dataset from ``obj`` at the next iteration."""
        if isinstance(self.dataset, StreamingDataset):
            self.dataset.load_state_dict(obj)
