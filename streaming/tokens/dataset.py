"""Fixed windows of tokens from one shard, memory-mapped and handed out without copies."""

from __future__ import annotations

import mmap
import os
from typing import Any, Iterator

import numpy as np

from streaming.tokens.format import NpyLayout, ShardEntry, TokenFormatError, read_npy_layout
from streaming.tokens.verify import ShardCorruptError, WindowCheck, await_verdict
from streaming.util import sorted_unique

__all__ = ['TokenWindowDataset']


class TokenWindowDataset:
    """Non-overlapping windows of ``seq_len`` tokens over one token shard.

    Window ``i`` is ``tokens[i * seq_len : (i + 1) * seq_len]``; with ``labels=True`` it holds
    one more token, ``tokens[i * seq_len : (i + 1) * seq_len + 1]``, so inputs and next-token
    targets come from one slice and no token pair is lost at window edges. A trailing part
    shorter than a window is not used.

    The file is memory-mapped once (header-aware for ``.npy``; ``raw_dtype`` for a headerless
    token file) and each window is a zero-copy view in the file's own dtype: a torch tensor
    (``torch.uint16``/``torch.uint32``) by default, or a numpy array with ``as_tensor=False``.
    The mapping is private (copy-on-write), so a caller writing into a window never changes
    the file.

    ``ids``: the sample-id sidecar; it must hold exactly one uint64 per ``seq_len`` window, and a
    mismatch raises TokenFormatError naming both files. ``expected``: the shard's manifest entry;
    its token count and byte sizes are checked too.

    ``verify=True`` (needs ``ids``): every window is hashed and compared with its sidecar id
    before it is first served (by ``window``, ``[]``, ``batch`` or iteration; the raw
    ``tokens``/``rows`` arrays are not checked), unless the shard carries a verified marker
    (``streaming.tokens.verify``). A mismatch raises ``ShardCorruptError`` naming the shard,
    window and both digests; with ``await_repair`` (seconds), it first waits for the process
    that downloads this shard to fetch and verify it again, then maps the new copy.
    """

    def __init__(self, tokens: str, ids: str | None = None, *, seq_len: int,
                 labels: bool = False, raw_dtype: Any = None, as_tensor: bool = True,
                 expected: ShardEntry | None = None, verify: bool = False,
                 await_repair: float | None = None, shard: int | None = None) -> None:
        if int(seq_len) <= 0:
            raise ValueError(f'seq_len must be a positive number of tokens, got {seq_len!r}.')
        self.path, self.ids_path = os.fspath(tokens), (os.fspath(ids) if ids else None)
        self.seq_len, self.labels, self.as_tensor = int(seq_len), bool(labels), as_tensor
        self.layout: NpyLayout = read_npy_layout(self.path, raw_dtype)
        self.num_tokens = self.layout.count
        self.num_windows = (self.num_tokens - 1) // self.seq_len if self.labels \
            else self.num_tokens // self.seq_len
        self.num_windows = max(0, self.num_windows)
        self._check(expected)
        self._tokens: np.ndarray | None = None
        self._ids: np.ndarray | None = None
        self._tensor: Any = None
        self._rows: np.ndarray | None = None
        if verify and self.ids_path is None:
            raise ValueError(f'{self.path}: verify=True needs the sample-id sidecar (ids=).')
        self.shard, self.await_repair = shard, await_repair
        self.verifier = WindowCheck(self.path, self.ids_path, self.seq_len,
                                    self.num_tokens // self.seq_len) \
            if verify and self.ids_path else None

    def _check(self, expected: ShardEntry | None) -> None:
        whole = self.num_tokens // self.seq_len
        if expected is not None:
            if expected.num_tokens != self.num_tokens:
                raise TokenFormatError(f'{self.path}: holds {self.num_tokens} tokens but the '
                                       f'manifest says {expected.num_tokens}.')
            if expected.tokens.bytes != os.path.getsize(self.path):
                raise TokenFormatError(f'{self.path}: {os.path.getsize(self.path)} bytes, the '
                                       f'manifest says {expected.tokens.bytes}.')
        if self.ids_path is not None:
            size = os.path.getsize(self.ids_path)
            if size % 8:
                raise TokenFormatError(f'{self.ids_path}: {size} bytes is not a whole number '
                                       f'of uint64 sample ids (is it a .npy file with a '
                                       f'header?); tokens in {self.path}.')
            if size // 8 != whole:
                raise TokenFormatError(
                    f'{self.ids_path} holds {size // 8} sample ids but {self.path} holds '
                    f'{self.num_tokens} tokens = {whole} windows of {self.seq_len}; the '
                    f'sidecar and the shard do not belong together.')

    # ---- mapping (lazy, and dropped when pickled to a DataLoader worker) ------------------
    @property
    def tokens(self) -> np.ndarray:
        """All tokens of the shard: a copy-on-write memory map in the file's dtype.

        A plain ndarray over the mapping (not an ``np.memmap``, whose slicing is slow).
        """
        if self._tokens is None:
            if self.num_tokens == 0:
                self._tokens = np.empty(0, self.layout.dtype)
            else:
                with open(self.path, 'rb') as f:
                    mapping = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
                self._tokens = np.frombuffer(mapping, self.layout.dtype, self.num_tokens,
                                             self.layout.offset)
        return self._tokens

    @property
    def rows(self) -> np.ndarray:
        """The windows as a read-only ``(num_windows, window)`` view of the tokens."""
        if self._rows is None:
            isize = self.layout.dtype.itemsize
            self._rows = np.lib.stride_tricks.as_strided(
                self.tokens, (self.num_windows, self.seq_len + self.labels),
                (self.seq_len * isize, isize), writeable=False)
        return self._rows

    @property
    def tensor(self) -> Any:
        """All tokens as one torch tensor sharing the mapping (windows are slices of it)."""
        if self._tensor is None:
            import torch
            self._tensor = torch.from_numpy(self.tokens)
        return self._tensor

    @property
    def ids(self) -> np.ndarray | None:
        """The sidecar's sample ids (uint64), or None without a sidecar."""
        if self._ids is None and self.ids_path is not None:
            count = os.path.getsize(self.ids_path) // 8
            self._ids = np.memmap(self.ids_path, '<u8', 'r', 0, (count,)) if count \
                else np.empty(0, '<u8')
        return self._ids

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state['_tokens'] = state['_ids'] = state['_tensor'] = state['_rows'] = None
        return state

    def close(self) -> None:
        """Drop the mappings (they are re-created on the next access)."""
        self._tokens = self._ids = self._tensor = self._rows = None

    # ---- access -----------------------------------------------------------------------------
    def __len__(self) -> int:
        return self.num_windows

    def _start(self, index: int) -> int:
        index = int(index)
        if index < 0:
            index += self.num_windows
        if not 0 <= index < self.num_windows:
            raise IndexError(f'window {index} out of range for {self.path} '
                             f'({self.num_windows} windows of {self.seq_len}).')
        return index * self.seq_len

    def window(self, index: int) -> np.ndarray:
        """Window ``index`` as a numpy view (no copy)."""
        start = self._start(index)
        return self.tokens[start:start + self.seq_len + self.labels]

    def __getitem__(self, index: Any) -> Any:
        """Window ``index`` (a view), or for a sequence of indices their batch (a copy)."""
        if not isinstance(index, (int, np.integer)):
            return self.batch(index)
        start = self._start(index)
        if self.verifier is not None and not self.verifier.done:
            self._verified(np.array([start // self.seq_len]),
                           [self.tokens[start:start + self.seq_len]])
        source = self.tensor if self.as_tensor else self.tokens
        return source[start:start + self.seq_len + self.labels]

    def _verified(self, indices: np.ndarray, rows: Any) -> bool:
        """Check the windows ``indices`` (whose bytes are ``rows``) not checked yet.

        Returns True if the shard was mapped again after a repair (the caller reads again).
        """
        verifier = self.verifier
        assert verifier is not None
        if self.labels:  # A window's extra token is the next one's first: check both.
            indices = sorted_unique(np.concatenate([indices, indices + 1]))
            indices = indices[indices < self.num_tokens // self.seq_len]
            rows = None
        todo = verifier.unchecked(indices)
        if not len(todo):
            return False
        seq = self.seq_len
        chosen = [rows[k] for k in todo.tolist()] if rows is not None else \
            [self.tokens[i * seq:(i + 1) * seq] for i in indices[todo].tolist()]
        mismatch = verifier.check(indices[todo], chosen, self.ids)
        if mismatch is None:
            return False
        if self.await_repair is None:
            raise ShardCorruptError(self.shard, mismatch, False)
        await_verdict(self.path, verifier.ids_path, self.seq_len, self.shard, mismatch,
                      self.await_repair)
        self.close()
        self.verifier = WindowCheck(self.path, verifier.ids_path, self.seq_len,
                                    self.num_tokens // self.seq_len)
        return True

    def batch(self, indices: Any) -> Any:
        """Windows ``indices`` gathered into one new ``(len(indices), window)`` array/tensor.

        One copy, done by numpy in one call: the fast path for a DataLoader, which passes
        each list of a ``BatchSampler`` here when built with ``batch_size=None``
        (``ShardRotation.loader`` does so).
        """
        try:
            out = np.take(self.rows, indices, axis=0)
        except IndexError:
            raise IndexError(f'window indices must lie in [0, {self.num_windows}) for '
                             f'{self.path}; got {list(indices)[:8]}...') from None
        if self.verifier is not None and not self.verifier.done:
            flat = np.asarray(indices, np.int64).reshape(-1) % max(1, self.num_windows)
            if self._verified(flat, out.reshape(len(flat), -1)):
                return self.batch(indices)
        if not self.as_tensor:
            return out
        import torch
        return torch.from_numpy(out)

    def __iter__(self) -> Iterator[Any]:
        for index in range(self.num_windows):
            yield self[index]

    def sample_id(self, index: int) -> int:
        """The sidecar's id of window ``index``: what receipts of trained windows record.

        The 8-byte blake2b digest of the window's first ``seq_len`` tokens' bytes (the label
        token of ``labels=True`` is not included), read as a little-endian uint64: equal to
        ``int.from_bytes(hashlib.blake2b(dataset.window(index)[:seq_len].tobytes(),
        digest_size=8).digest(), 'little')``. It is read from the sidecar, not computed; with
        ``verify=True`` the window's bytes were checked against it before being served.
        Negative indices count from the end; IndexError outside the shard.
        """
        ids = self.ids
        if ids is None:
            raise TokenFormatError(f'{self.path}: no sample-id sidecar was given.')
        start = self._start(index)
        return int(ids[start // self.seq_len])

    def __repr__(self) -> str:
        return (f'TokenWindowDataset({self.path!r}, {self.num_windows} windows of '
                f'{self.seq_len}{" + 1" if self.labels else ""} {self.layout.dtype.name})')
