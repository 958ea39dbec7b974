"""``LocalDataset``: a map-style dataset over a dataset directory on local disk."""

from __future__ import annotations

import bisect
import os
from typing import Any

from torch.utils.data import Dataset

from streaming.format import reader_from_json
from streaming.format.index import INDEX_BASENAME, load_index
from streaming.format.registry import check_safe_encodings
from streaming.indexing import IndexingMixin

__all__ = ['LocalDataset']


class LocalDataset(IndexingMixin, Dataset):
    """Random access to every sample of ``local/split`` (no download, no shared state).

    Columns whose decoding can run arbitrary code (``pkl``) are refused unless
    ``allow_unsafe_types``, as in ``StreamingDataset``. With ``validate_hash`` (an algorithm the
    index records, such as ``'xxh64'``), each shard file is checked against its checksum the
    first time it is opened: a corrupt payload is a ``ShardFileError``, never data.
    """

    def __init__(self, local: str, split: str | None = None, *,
                 allow_unsafe_types: bool = False, validate_hash: str | None = None) -> None:
        self.local = local
        self.split = split or ''
        path = os.path.join(local, self.split, INDEX_BASENAME)
        index = load_index(path)
        for i, entry in enumerate(index['shards']):
            check_safe_encodings(f'{path}, shard {i}', entry, allow_unsafe_types)
        self.shards = [reader_from_json(local, self.split, entry, validate=False)
                       for entry in index['shards']]
        for shard in self.shards:
            shard.validate_hash = validate_hash
        self.samples_per_shard = [shard.samples for shard in self.shards]
        # starts[k] is the global index of shard k's first sample.
        self._starts = [0]
        for count in self.samples_per_shard:
            self._starts.append(self._starts[-1] + count)
        self.num_samples = self._starts[-1]

    def __len__(self) -> int:
        return self.num_samples

    @property
    def size(self) -> int:
        """The number of samples."""
        return self.num_samples

    def get_item(self, sample_id: int) -> dict[str, Any]:
        """Sample ``sample_id`` (0 <= sample_id < len) as a dict of column values."""
        shard_id = bisect.bisect_right(self._starts, sample_id) - 1
        return self.shards[shard_id].get_item(sample_id - self._starts[shard_id])
