"""Token windows over an MDS dataset whose samples hold token arrays in one column."""

from __future__ import annotations

import warnings
from typing import Any, Iterator

import numpy as np

__all__ = ['MDSTokenWindows']


class MDSTokenWindows:
    """Fixed windows of ``seq_len`` tokens over the concatenation of ``column`` of ``dataset``.

    ``dataset``: anything indexable returning dicts (``streaming.LocalDataset``,
    ``StreamingDataset``), or a local MDS directory. The column's values (1-D integer arrays,
    e.g. ``ndarray:uint32``) are read back to back, as the token shards pack documents; window
    ``i`` is ``tokens[i * seq_len : (i + 1) * seq_len]`` (``+ 1`` token with ``labels``).

    ``tokens_per_sample``: when every sample holds the same number of tokens, give it and no
    sample is read up front; otherwise each sample's length is read once, at construction.
    A window inside one sample is a view of the decoded array; one spanning samples is joined.
    """

    def __init__(self, dataset: Any, column: str, *, seq_len: int, labels: bool = False,
                 tokens_per_sample: int | None = None, as_tensor: bool = True) -> None:
        if isinstance(dataset, str):
            from streaming.local_dataset import LocalDataset
            dataset = LocalDataset(dataset)
        if seq_len <= 0:
            raise ValueError(f'seq_len must be positive, got {seq_len}.')
        self.dataset, self.column = dataset, column
        self.seq_len, self.labels, self.as_tensor = seq_len, labels, as_tensor
        count = len(dataset)
        if tokens_per_sample is not None:
            self.starts = np.arange(count + 1, dtype=np.int64) * tokens_per_sample
        else:
            lengths = np.fromiter((len(self._sample(i)) for i in range(count)), np.int64, count)
            self.starts = np.concatenate([[0], np.cumsum(lengths)])
        self.num_tokens = int(self.starts[-1])
        usable = self.num_tokens - 1 if labels else self.num_tokens
        self.num_windows = max(0, usable // seq_len)

    def _sample(self, index: int) -> np.ndarray:
        sample = self.dataset[index]
        if self.column not in sample:
            raise KeyError(f'MDSTokenWindows: samples have no column {self.column!r} '
                           f'(columns: {sorted(sample)}).')
        value = np.asarray(sample[self.column])
        if value.ndim != 1 or value.dtype.kind not in 'iu':
            raise TypeError(f'MDSTokenWindows: column {self.column!r} of sample {index} is '
                            f'{value.dtype} with shape {value.shape}, not 1-D integers.')
        return value

    def __len__(self) -> int:
        return self.num_windows

    def window(self, index: int) -> np.ndarray:
        if not 0 <= index < self.num_windows:
            raise IndexError(f'window {index} out of range ({self.num_windows} windows).')
        start = index * self.seq_len
        end = start + self.seq_len + self.labels
        first = int(np.searchsorted(self.starts, start, side='right')) - 1
        pieces: list[np.ndarray] = []
        sample = first
        while start < end:
            tokens = self._sample(sample)
            offset = start - int(self.starts[sample])
            piece = tokens[offset:offset + end - start]
            pieces.append(piece)
            start += len(piece)
            sample += 1
        return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)

    def __getitem__(self, index: int) -> Any:
        array = self.window(index)
        if not self.as_tensor:
            return array
        import torch
        with warnings.catch_warnings():  # Decoded samples are read-only views: no copy.
            warnings.filterwarnings('ignore', 'The given NumPy array is not writable')
            return torch.from_numpy(np.ascontiguousarray(array))

    def __iter__(self) -> Iterator[Any]:
        for index in range(self.num_windows):
            yield self[index]
