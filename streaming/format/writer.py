"""The writer machinery shared by every format.

A writer encodes each sample to bytes as it arrives, groups samples into shards no larger than
``size_limit``, and hands each full shard to a thread pool that compresses, hashes and writes it
while the caller keeps encoding. ``index.json`` is written by ``finish()`` only, so a run that
fails part-way never publishes an index that looks complete.

Writers here only encode and write local files. Each finished file (every shard file, then the
index) is announced through the ``on_file_done`` hook with its basename; ``streaming.writing``
uses that hook to upload files to a remote, so this layer never touches storage.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import Any, Callable, TypeVar

import numpy as np

from streaming.coord.dir_lock import DirectoryLock
from streaming.errors import OutputError
from streaming.fileio import atomic_write, create_temp, remove_quietly
from streaming.format.compression import compress, get_compression_extension, parse_compression
from streaming.format.hashing import get_hash, validate_hashes
from streaming.format.index import INDEX_BASENAME, FileInfo, write_index
from streaming.util import bytes_to_int, parse_quantity

_W = TypeVar('_W', bound='Writer')

__all__ = ['Writer', 'SingleFileShardWriter', 'DataMetaShardWriter', 'FileDoneHook',
           'parse_size_limit', 'make_output_dir']

# Offsets inside a shard are uint32, so no shard may reach 4 GiB.
MAX_SHARD_BYTES = (1 << 32) - 1

FileDoneHook = Callable[[str], None]  # Called with the basename of each finished file.


def parse_size_limit(size_limit: int | str | None) -> int | None:
    """Validate ``size_limit`` (bytes, or a string like '64mb'); None or 0 means no limit."""
    if not size_limit:
        return None
    value = parse_quantity('size_limit', size_limit, bytes_to_int)
    if value > MAX_SHARD_BYTES:
        raise ValueError(f'size_limit must be below 2**32 bytes (4 GiB; shard offsets are '
                         f'uint32), got {size_limit!r} = {value} bytes.')
    return value


class Writer:
    """Base writer: subclasses set ``format`` and implement the ``encode_*`` hooks."""

    format: str = ''

    def __init__(self, *, out: Any, on_file_done: FileDoneHook | None = None,
                 compression: str | None = None, hashes: list[str] | None = None,
                 size_limit: int | str | None = 1 << 26, extra_bytes_per_shard: int = 0,
                 extra_bytes_per_sample: int = 0, progress_bar: bool = False,
                 max_workers: int | None = None) -> None:
        parse_compression(compression)  # Raises ValueError for an unknown compression.
        self.compression = compression or None
        self.hashes = validate_hashes(hashes)
        self.size_limit = parse_size_limit(size_limit)
        self.extra_bytes_per_shard = extra_bytes_per_shard
        self.extra_bytes_per_sample = extra_bytes_per_sample
        self.on_file_done = on_file_done
        # One writer per directory: a second one fails at once, naming the directory and holder.
        self._out_lock = DirectoryLock('out')
        self.local = self.open_output(out)  # Last: nothing on disk changes for bad arguments.
        self._out_lock.acquire(self.local)
        _check_writable(self.local, 'out')
        self._pool = ThreadPoolExecutor(max_workers=max_workers or
                                        min(4, (os.cpu_count() or 1) + 1),
                                        thread_name_prefix='shard-writer')
        self._pending: list[Future] = []
        self._shards: list[dict[str, Any]] = []
        self._progress = None
        if progress_bar:
            from tqdm import tqdm
            self._progress = tqdm(desc='Writing shards', unit='sample', leave=False)
        self.shard_id = 0
        self._finished = False
        self._start_shard()

    def open_output(self, out: Any) -> str:
        """Prepare the output and return the local directory shard files go to.

        Here ``out`` must be a local directory, created if missing. ``streaming.writing``
        overrides this to accept remotes and sets ``on_file_done`` to upload each file.
        """
        if not isinstance(out, str):
            raise ValueError(f'out must be a local directory (str), got {out!r}; the writers in '
                             f'streaming.writing (streaming.MDSWriter, ...) also take remotes.')
        make_output_dir(out, 'out')
        return out

    # ---- subclass hooks ----------------------------------------------------------------------
    def get_config(self) -> dict[str, Any]:
        """The shard-format settings recorded in the index and in each shard."""
        return {'version': 2, 'format': self.format, 'compression': self.compression,
                'hashes': self.hashes, 'size_limit': self.size_limit}

    def encode_sample(self, sample: dict[str, Any]) -> bytes:
        """The bytes of one sample; raise naming the column at fault for a bad value."""
        raise NotImplementedError

    def encode_shard(self, shard_id: int, samples: list[bytes]) -> list[tuple[str, bytes]]:
        """The files of one shard as (basename, raw bytes), in the order the index names them."""
        raise NotImplementedError

    def shard_entry(self, samples: int, files: list[tuple[FileInfo, FileInfo | None]]) -> dict:
        """The index entry of one shard, given its (raw, compressed) files in encode order."""
        raise NotImplementedError

    # ---- writing -----------------------------------------------------------------------------
    def _start_shard(self) -> None:
        """Empty the buffer of the shard being filled (its fixed overhead counts already)."""
        self.new_samples: list[bytes] = []
        self.new_shard_size = self.extra_bytes_per_shard

    def write(self, sample: dict[str, Any]) -> None:
        """Encode one sample and add it to the current shard, starting a new shard if full."""
        if self._finished:
            raise RuntimeError('write() called after finish(): this writer is closed.')
        encoded = self.encode_sample(sample)
        size = len(encoded) + self.extra_bytes_per_sample
        limit = self.size_limit or MAX_SHARD_BYTES
        if self.new_samples and limit < self.new_shard_size + size:
            self.flush_shard()
        if self.extra_bytes_per_shard + size > MAX_SHARD_BYTES:
            raise ValueError(f'A sample of {len(encoded)} bytes cannot fit in a shard (shards must '
                             f'stay below 4 GiB).')
        self.new_samples.append(encoded)
        self.new_shard_size += size

    def flush_shard(self) -> None:
        """Hand the current shard to the worker pool and start a new one."""
        self._raise_pending_errors()
        if not self.new_samples:
            return
        samples, shard_id = self.new_samples, self.shard_id
        self.shard_id += 1
        self._start_shard()
        files = self.encode_shard(shard_id, samples)
        self._pending.append(self._pool.submit(self._finish_shard, len(samples), files))
        if self._progress is not None:
            self._progress.update(len(samples))
        # Bound memory: at most a few encoded shards wait in the pool.
        while sum(not f.done() for f in self._pending) > 2 * self._pool._max_workers:
            self._pending[0].result()
            self._collect_done()

    def _file_done(self, basename: str) -> None:
        if self.on_file_done is not None:
            self.on_file_done(basename)

    def _finish_shard(self, samples: int, files: list[tuple[str, bytes]]) -> dict[str, Any]:
        """Compress, hash and write one shard's files; returns its index entry."""
        pairs = []
        for basename, raw in files:
            raw_info = FileInfo(basename=basename, bytes=len(raw),
                                hashes={h: get_hash(h, raw) for h in self.hashes})
            zip_info = None
            data, name = raw, basename
            if self.compression:
                data = compress(self.compression, raw)
                name = f'{basename}.{get_compression_extension(self.compression)}'
                zip_info = FileInfo(basename=name, bytes=len(data),
                                    hashes={h: get_hash(h, data) for h in self.hashes})
            _write_output(os.path.join(self.local, name), data)
            self._file_done(name)
            pairs.append((raw_info, zip_info))
        return self.shard_entry(samples, pairs)

    def _collect_done(self) -> None:
        while self._pending and self._pending[0].done():
            self._shards.append(self._pending.pop(0).result())

    def _collect_all(self) -> None:
        """Wait for every shard flushed so far and record its index entry, in shard order."""
        while self._pending:
            self._shards.append(self._pending.pop(0).result())

    def _raise_pending_errors(self) -> None:
        for future in self._pending:
            if future.done() and future.exception() is not None:
                raise future.exception()  # type: ignore[misc]

    def finish(self) -> None:
        """Flush the last shard, wait for all shard files, then write ``index.json``."""
        if self._finished:
            return
        self._finished = True
        try:
            self.flush_shard()
            self._collect_all()
            path = os.path.join(self.local, INDEX_BASENAME)
            try:
                write_index(path, self._shards)
            except OSError as error:
                raise _output_error(path, error) from None
            self._file_done(INDEX_BASENAME)
        finally:
            self._close()

    def _close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        if self._progress is not None:
            self._progress.close()
        self._out_lock.release()

    def __enter__(self: _W) -> _W:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if exc_type is None:
            self.finish()
        else:
            # Unlike the reference, a failed run publishes no index: readers will not mistake
            # a partial dataset for a complete one.
            self._finished = True
            self._close()


def make_output_dir(path: str, parameter: str) -> None:
    """Create ``path`` if missing; ``OutputError`` naming ``parameter`` if that fails."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as error:
        raise OutputError(f'{parameter}={path!r} cannot be created: '
                          f'{error.strerror or error}.', error.errno) from None


def _output_error(path: str, error: OSError) -> OutputError:
    return OutputError(f'Cannot write {path}: {error.strerror or error}; no index.json is '
                       f'written, so the partial output is not mistaken for a dataset.',
                       error.errno)


def _write_output(path: str, data: bytes) -> None:
    """Publish one shard file; a full disk or other OS failure is an OutputError naming it."""
    try:
        atomic_write(path, data)
    except OSError as error:
        raise _output_error(path, error) from None


def _offsets(start: int, samples: list[bytes]) -> np.ndarray:
    """uint32 offsets of each sample's start, plus the end, beginning at ``start``."""
    sizes = np.fromiter(map(len, samples), np.int64, len(samples))
    offsets = np.empty(len(samples) + 1, np.int64)
    offsets[0] = start
    np.cumsum(sizes, out=offsets[1:])
    offsets[1:] += start
    return offsets.astype(np.uint32)


class SingleFileShardWriter(Writer):
    """Each shard is one file: a header (count, offsets, config JSON), then the samples."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(extra_bytes_per_shard=0, extra_bytes_per_sample=4, **kwargs)
        self.config_data = json.dumps(self.get_config(), sort_keys=True).encode('utf-8')
        # count + final offset + config; each sample adds its own offset.
        self.extra_bytes_per_shard = 4 + 4 + len(self.config_data)
        self._start_shard()

    def encode_shard(self, shard_id: int, samples: list[bytes]) -> list[tuple[str, bytes]]:
        count = np.uint32(len(samples)).tobytes()
        start = 4 + 4 * (len(samples) + 1) + len(self.config_data)
        header = count + _offsets(start, samples).tobytes() + self.config_data
        basename = f'shard.{shard_id:05}.{self.format}'
        return [(basename, b''.join([header, *samples]))]

    def shard_entry(self, samples: int, files: list[tuple[FileInfo, FileInfo | None]]) -> dict:
        (raw, zipped), = files
        return {'samples': samples, 'raw_data': raw, 'zip_data': zipped, **self.get_config()}


class DataMetaShardWriter(Writer):
    """Each shard is two files: the data (samples), and a binary ``.meta`` with their offsets."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(extra_bytes_per_shard=0, extra_bytes_per_sample=0, **kwargs)

    def data_header(self) -> bytes:
        """Bytes at the start of every data file (a CSV's header line, say)."""
        return b''

    def encode_shard(self, shard_id: int, samples: list[bytes]) -> list[tuple[str, bytes]]:
        header = self.data_header()
        config = json.dumps(self.get_config(), sort_keys=True).encode('utf-8')
        meta = np.uint32(len(samples)).tobytes() + _offsets(len(header), samples).tobytes() + config
        basename = f'shard.{shard_id:05}.{self.format}'
        return [(f'{basename}.meta', meta), (basename, b''.join([header, *samples]))]

    def shard_entry(self, samples: int, files: list[tuple[FileInfo, FileInfo | None]]) -> dict:
        (raw_meta, zip_meta), (raw_data, zip_data) = files
        return {'samples': samples, 'raw_data': raw_data, 'zip_data': zip_data,
                'raw_meta': raw_meta, 'zip_meta': zip_meta, **self.get_config()}


def _check_writable(path: str, parameter: str) -> None:
    """Create and remove a temporary file in ``path``; ``OutputError`` naming ``parameter``."""
    try:
        fd, temp = create_temp(os.path.join(path, 'probe'))
        os.close(fd)
        remove_quietly(temp)
    except OSError as error:
        raise OutputError(f'{parameter}={path!r} is not writable: '
                          f'{error.strerror or error}.', error.errno) from None
