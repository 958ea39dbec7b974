"""The base of the reference's domain datasets (``streaming.text``, ``.vision``, ``.multimodal``).

Those classes keep the reference's older defaults (``partition_algo='orig'``,
``shuffle_algo='py1s'``, ``shuffle_block_size=1 << 18``) so that existing configs give the same
runs; unlike the reference they also pass on any newer ``StreamingDataset`` argument
(``sampling_method``, ``batching_method``, ``replication``, ``streams``, ...).
"""

from __future__ import annotations

from typing import Any

from streaming.dataset.dataset import StreamingDataset

__all__ = ['LegacyDataset']


class LegacyDataset(StreamingDataset):
    """``StreamingDataset`` with the reference's domain-dataset defaults."""

    def __init__(self, *, remote: str | None = None, local: str | None = None,
                 split: str | None = None, download_retry: int = 2, download_timeout: float = 60,
                 validate_hash: str | None = None, keep_zip: bool = False,
                 epoch_size: int | str | None = None, predownload: int | None = None,
                 cache_limit: int | str | None = None, partition_algo: str = 'orig',
                 num_canonical_nodes: int | None = None, batch_size: int | None = None,
                 shuffle: bool = False, shuffle_algo: str = 'py1s', shuffle_seed: int = 9176,
                 shuffle_block_size: int | None = 1 << 18, **kwargs: Any) -> None:
        super().__init__(remote=remote, local=local, split=split, download_retry=download_retry,
                         download_timeout=download_timeout, validate_hash=validate_hash,
                         keep_zip=keep_zip, epoch_size=epoch_size, predownload=predownload,
                         cache_limit=cache_limit, partition_algo=partition_algo,
                         num_canonical_nodes=num_canonical_nodes, batch_size=batch_size,
                         shuffle=shuffle, shuffle_algo=shuffle_algo, shuffle_seed=shuffle_seed,
                         shuffle_block_size=shuffle_block_size, **kwargs)
