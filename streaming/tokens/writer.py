"""Writing token shards: fixed-size ``.npy`` files, their sidecars and the manifest.

Tokens are streamed to disk as they come (never a whole shard in memory): each shard is a
temporary file with a reserved 128-byte ``.npy`` header, the sidecar's window fingerprints and
the files' checksums are computed on the way, and both files are published atomically when the
shard is full. With a remote ``out`` each finished shard is uploaded in the background (and its
local copy deleted unless ``keep_local``); ``manifest.json`` goes last, once every shard made it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Sequence

import numpy as np

from streaming.fileio import atomic_write, create_temp, publish, remove_quietly
from streaming.tokens.format import (
    MANIFEST,
    FileEntry,
    Manifest,
    ShardEntry,
    ids_name,
    npy_header,
    token_dtype,
    token_name,
)

__all__ = ['TokenShardWriter']

logger = logging.getLogger(__name__)


def _hasher(algo: str) -> Any:
    if algo.startswith('xxh'):
        import xxhash
        return getattr(xxhash, algo)()
    return hashlib.new(algo)


class _Output:
    """One file being written: a temporary beside its final name, hashed as it grows."""

    def __init__(self, path: str, algos: Sequence[str]) -> None:
        self.path = path
        self.fd, self.temp = create_temp(path)
        self.file = os.fdopen(self.fd, 'wb', buffering=1 << 20)
        self.algos = list(algos)
        self.hashers = [_hasher(a) for a in algos]
        self.bytes = 0

    def write(self, data: bytes | memoryview) -> None:
        self.file.write(data)
        for hasher in self.hashers:
            hasher.update(data)
        self.bytes += len(data)

    def finish(self, header: bytes | None = None) -> FileEntry:
        """Publish the file.

        With ``header``, first overwrite its first bytes (and hash again from disk, since the
        hashes saw the placeholder).
        """
        if header is not None:
            self.file.seek(0)
            self.file.write(header)
            self.file.flush()
            self.file.seek(0)
            self.hashers = [_hasher(a) for a in self.algos]
            with open(self.temp, 'rb') as f:
                while block := f.read(8 << 20):
                    for hasher in self.hashers:
                        hasher.update(block)
        self.file.close()
        publish(self.temp, self.path)
        return FileEntry(os.path.basename(self.path), self.bytes,
                         {a: h.hexdigest() for a, h in zip(self.algos, self.hashers)})

    def abandon(self) -> None:
        self.file.close()
        remove_quietly(self.temp)


class TokenShardWriter:
    """Write token ids into shards of exactly ``shard_tokens`` tokens (the last may be shorter).

    ``out``: a local directory, or a remote URL (files are staged in a temporary directory and
    uploaded as each shard finishes). ``seq_len``: the window length of the sidecars;
    ``shard_tokens`` must be a multiple of it, so no window straddles two shards. ``dtype``:
    ``uint16`` or ``uint32``; a token id that does not fit is an error. ``hashes``: checksums
    recorded in the manifest. ``ids``: write the ``sample_ids_*.bin`` sidecars.
    ``first_shard``: the number of the first shard (to write a dataset in parts).
    ``manifest``: whether ``finish`` writes ``manifest.json`` (off when several writers each
    write part of one dataset and one manifest is written for all, as ``pretokenize_spark``).
    """

    def __init__(self, out: str, *, seq_len: int, shard_tokens: int, dtype: Any = 'uint32',
                 prefix: str = 'train', eos_id: int | None = None, tokenizer: str | None = None,
                 hashes: Sequence[str] = ('xxh3_128',), ids: bool = True,
                 keep_local: bool = False, upload_workers: int = 2, first_shard: int = 0,
                 manifest: bool = True) -> None:
        if seq_len <= 0:
            raise ValueError(f'TokenShardWriter: seq_len must be positive, got {seq_len}.')
        if shard_tokens <= 0 or shard_tokens % seq_len:
            raise ValueError(f'TokenShardWriter: shard_tokens ({shard_tokens}) must be a '
                             f'positive multiple of seq_len ({seq_len}).')
        self.dtype = token_dtype(dtype, 'TokenShardWriter dtype')
        self.max_id = np.iinfo(self.dtype).max
        from streaming.storage.registry import is_remote_url
        self.remote = out if is_remote_url(out) else None
        self._scratch = tempfile.mkdtemp(prefix='token-shards-') if self.remote else None
        self.local = self._scratch or out
        os.makedirs(self.local, exist_ok=True)
        self.seq_len, self.shard_tokens, self.prefix = seq_len, shard_tokens, prefix
        self.eos_id, self.tokenizer, self.hashes, self.ids = eos_id, tokenizer, hashes, ids
        self.keep_local = keep_local or not self.remote
        self.shards: list[ShardEntry] = []
        self.next_shard = first_shard
        self._tokens: _Output | None = None
        self._ids: _Output | None = None
        self._count = 0  # Tokens in the open shard.
        self._window = bytearray()  # The open window's bytes.
        self._pool = ThreadPoolExecutor(upload_workers) if self.remote else None
        self._uploads: list[Future] = []
        self.total_tokens = 0
        self.write_manifest = manifest

    # ---- writing ----------------------------------------------------------------------------
    def write(self, tokens: Any) -> None:
        """Append token ids (any integer array-like), cutting shards as they fill."""
        array = np.asarray(tokens)
        if array.ndim != 1:
            array = array.reshape(-1)
        if array.size and array.dtype != self.dtype:
            if array.dtype.kind not in 'iu':
                raise ValueError(f'TokenShardWriter.write: token ids must be integers, got '
                                 f'{array.dtype}.')
            low, high = int(array.min()), int(array.max())
            if low < 0 or high > self.max_id:
                bad = high if high > self.max_id else low
                raise ValueError(f'TokenShardWriter.write: token id {bad} does not fit dtype '
                                 f'{self.dtype.name}.')
            array = array.astype(self.dtype)
        while array.size:
            if self._tokens is None:
                self._open()
            room = self.shard_tokens - self._count
            part, array = array[:room], array[room:]
            self._append(part)
            if self._count == self.shard_tokens:
                self._close_shard()

    def write_document(self, tokens: Any) -> None:
        """Append one document's tokens followed by ``eos_id``."""
        self.write(tokens)
        if self.eos_id is None:
            raise ValueError('TokenShardWriter.write_document needs eos_id.')
        self.write(np.array([self.eos_id], self.dtype))

    def _open(self) -> None:
        index = self.next_shard
        self._tokens = _Output(os.path.join(self.local, token_name(self.prefix, index)),
                               self.hashes)
        self._tokens.write(npy_header(self.dtype, self.shard_tokens))
        if self.ids:
            self._ids = _Output(os.path.join(self.local, ids_name(index)), self.hashes)
        self._count = 0
        self._window.clear()

    def _append(self, part: np.ndarray) -> None:
        data = memoryview(np.ascontiguousarray(part)).cast('B')
        assert self._tokens is not None
        self._tokens.write(data)
        self._count += len(part)
        self.total_tokens += len(part)
        if self._ids is None:
            return
        step = self.seq_len * self.dtype.itemsize
        offset = 0
        if self._window:
            take = min(step - len(self._window), len(data))
            self._window += data[:take]
            offset = take
            if len(self._window) == step:
                self._fingerprint(self._window)
                self._window.clear()
        while len(data) - offset >= step:
            self._fingerprint(data[offset:offset + step])
            offset += step
        self._window += data[offset:]

    def _fingerprint(self, window: bytes | bytearray | memoryview) -> None:
        digest = hashlib.blake2b(window, digest_size=8).digest()
        assert self._ids is not None
        self._ids.write(digest)  # The digest's bytes are the little-endian uint64 itself.

    def _close_shard(self) -> None:
        assert self._tokens is not None
        index = self.next_shard
        header = npy_header(self.dtype, self._count) if self._count != self.shard_tokens \
            else None
        tokens = self._tokens.finish(header)
        ids = self._ids.finish() if self._ids is not None else None
        entry = ShardEntry(index, self._count, tokens, ids)
        self.shards.append(entry)
        self._tokens = self._ids = None
        self.next_shard += 1
        logger.info('Wrote shard %d: %d tokens.', index, entry.num_tokens)
        if self._pool is not None:
            for name in [tokens.basename] + ([ids.basename] if ids else []):
                self._uploads.append(self._pool.submit(self._upload, name))

    def _upload(self, name: str) -> None:
        from streaming.storage import upload_file
        path = os.path.join(self.local, name)
        upload_file(path, f'{self.remote.rstrip("/")}/{name}')  # type: ignore[union-attr]
        if not self.keep_local:
            remove_quietly(path)

    # ---- finishing --------------------------------------------------------------------------
    def manifest(self) -> Manifest:
        return Manifest(self.dtype.name, self.seq_len, list(self.shards), self.prefix,
                        self.eos_id, self.tokenizer)

    def finish(self) -> Manifest:
        """Close the last (shorter) shard, wait for uploads, then write the manifest."""
        if self._tokens is not None and self._count:
            self._close_shard()
        elif self._tokens is not None:
            self._abandon()
        for future in self._uploads:
            future.result()
        manifest = self.manifest()
        if self.write_manifest:
            atomic_write(os.path.join(self.local, MANIFEST), manifest.to_json())
            if self.remote:
                self._upload(MANIFEST)
        self._shutdown()
        return manifest

    def _abandon(self) -> None:
        for output in (self._tokens, self._ids):
            if output is not None:
                output.abandon()
        self._tokens = self._ids = None

    def _shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self._scratch and not self.keep_local:
            import shutil
            shutil.rmtree(self._scratch, ignore_errors=True)

    def __enter__(self) -> TokenShardWriter:
        return self

    def __exit__(self, kind: object, error: object, tb: object) -> None:
        if kind is None:
            self.finish()
        else:
            self._abandon()
            self._shutdown()

