"""``ShardRotation.loader``'s DataLoader: batches of windows, one gather each.

In the training process (``num_workers=0``, no ``pin_memory``, the default ``collate_fn``) the
loader yields ``dataset.batch(indices)`` for each index array of its sampler directly, without
the DataLoader iterator's per-batch work (fetcher, collate, profiler scope), which costs about
as much as gathering a 256 KiB batch. It still draws the seed a DataLoader iterator draws from
torch's random generator, so the training process's random stream is the same as with a plain
DataLoader. With workers or pinning, it is a plain DataLoader.
"""

from __future__ import annotations

from typing import Any, Iterator

__all__ = ['batch_loader']

_CLASS: Any = None


def _loader_class() -> Any:
    global _CLASS
    if _CLASS is None:
        import torch
        from torch.utils.data import DataLoader
        from torch.utils.data._utils.collate import default_convert

        class BatchLoader(DataLoader):
            """A DataLoader over index arrays whose in-process iteration gathers directly."""

            def __iter__(self) -> Iterator[Any]:
                if self.num_workers or self.pin_memory or self.collate_fn is not default_convert:
                    return super().__iter__()
                # What _BaseDataLoaderIter draws: keep the caller's random stream unchanged.
                torch.empty((), dtype=torch.int64).random_(generator=self.generator)
                gather = self.dataset.batch
                return (gather(indices) for indices in self.sampler)

        _CLASS = BatchLoader
    return _CLASS


def batch_loader(dataset: Any, batches: Any, **kwargs: Any) -> Any:
    """A ``DataLoader`` (``batch_size=None``) of ``dataset.batch(b)`` per index array ``b``.

    ``batches``: an iterable of index arrays, e.g. ``BatchIndices``.
    """
    return _loader_class()(dataset, batch_size=None, sampler=batches, **kwargs)
