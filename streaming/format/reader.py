"""The reader machinery shared by every format: shard files, their sizes, and fast access.

A reader stands for one shard. It knows the shard's files from its index entry, finds or makes
the raw (uncompressed) files on first access, memory-maps them once, and checks the offset table
once, so that reading sample ``i`` is a couple of slices of the map: no reopening, no re-reading.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
from typing import Any

import numpy as np

from streaming.errors import MissingShardFileError, ShardFileError
from streaming.format.compression import decompress_file
from streaming.format.hashing import get_hash
from streaming.format.index import FileInfo
from streaming.indexing import IndexingMixin

__all__ = ['Reader', 'SingleFileShardReader', 'DataMetaShardReader', 'JointReader', 'SplitReader',
           'FileInfo']

_SAMPLE_SPAN = struct.Struct('<II')  # (begin, end) of one sample in an offset table.


def _map_file(path: str, expected_bytes: int) -> mmap.mmap:
    """Memory-map a whole file read-only after checking its size against the index."""
    with open(path, 'rb') as f:
        size = os.fstat(f.fileno()).st_size
        if size != expected_bytes:
            raise ShardFileError(f'Shard file {path} has {size} bytes but the index says '
                                 f'{expected_bytes}: it is truncated or does not belong to this '
                                 f'index.')
        if size == 0:
            raise ShardFileError(f'Shard file {path} is empty.')
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def _check_hash(path: str, data: mmap.mmap, info: FileInfo, algo: str) -> None:
    """The file's checksum must be the one its index entry records."""
    expected = info.get('hashes', {}).get(algo)
    if expected is None:
        raise ShardFileError(f'validate_hash={algo!r}, but the index records no {algo} checksum '
                             f'for {path} (it has {sorted(info.get("hashes", {}))}).')
    if get_hash(algo, data) != expected:  # type: ignore[arg-type]
        raise ShardFileError(f'Shard file {path} does not match its {algo} checksum in the '
                             f'index: it is corrupt.')


def check_offsets(path: str, offsets: np.ndarray, begin: int, end: int) -> None:
    """Offsets must start at ``begin``, never decrease, and end at ``end``."""
    if len(offsets) == 0 or offsets[0] != begin or offsets[-1] != end or \
            not bool(np.all(offsets[1:] >= offsets[:-1])):
        raise ShardFileError(f'Shard file {path} has a corrupt offset table (expected offsets from '
                             f'{begin} to {end}, non-decreasing).')


def _offset_table(what: str, header: mmap.mmap, samples: int) -> np.ndarray:
    """The offsets after a header's uint32 sample count, once the count matches the index."""
    if len(header) < 4 * (samples + 2):
        raise ShardFileError(f'{what} is too short for {samples} samples.')
    count = int(np.frombuffer(header, np.uint32, 1)[0])
    if count != samples:
        raise ShardFileError(f'{what} holds {count} samples but the index says {samples}.')
    return np.frombuffer(header, np.uint32, count + 1, 4)


def check_config(path: str, data: bytes, reader: Reader) -> None:
    """The settings a shard records about itself must agree with its index entry.

    ``data`` is the JSON the writer put after the offset table; each of the reader's
    ``header_keys`` found there must equal the reader's attribute of that name (as the index gave
    it). A shard whose columns were renamed, swapped or re-encoded in the index is refused.
    """
    if not data:
        return
    try:
        config = json.loads(bytes(data))
    except (ValueError, UnicodeDecodeError):
        raise ShardFileError(f'Shard file {path} has a corrupt header: its settings are not '
                             f'valid JSON.') from None
    if not isinstance(config, dict):
        raise ShardFileError(f'Shard file {path} has a corrupt header: its settings are not a '
                             f'JSON object.')
    for key in reader.header_keys:
        expected = getattr(reader, key, config.get(key))  # A reader built by hand may lack one.
        if key in config and config[key] != expected:
            raise ShardFileError(f'Shard file {path} disagrees with its index entry: the shard '
                                 f'says {key}={config[key]!r:.200} but the index says '
                                 f'{expected!r:.200}.')


class Reader(IndexingMixin):
    """One shard of a dataset directory (``dirname/split``).

    ``file_keys`` names the keys of an index entry that describe this kind of shard's files
    (raw and compressed forms); index validation and ``merge_index`` read it. ``header_keys``
    names the settings a shard records in its own header, checked against the index entry
    the first time the shard is opened.
    """

    file_keys: tuple[str, ...] = ()
    header_keys: tuple[str, ...] = ('format',)

    def __init__(self, dirname: str, split: str | None, compression: str | None,
                 hashes: list[str], samples: int, size_limit: int | str | None) -> None:
        self.dirname = dirname
        self.split = split or ''
        self.compression = compression
        self.hashes = hashes
        self.samples = samples
        self.size_limit = size_limit
        self.file_pairs: list[tuple[FileInfo, FileInfo | None]] = []
        self._maps: list[mmap.mmap] | None = None
        self.validate_hash: str | None = None  # Set by a dataset: check files when first opened.

    # ---- sizes and files -----------------------------------------------------------------------
    def __len__(self) -> int:
        return self.samples

    def path(self, info: FileInfo) -> str:
        """Where one of this shard's files lives locally."""
        return os.path.join(self.dirname, self.split, info['basename'])

    def get_raw_size(self) -> int:
        """Bytes of the uncompressed files."""
        return sum(raw['bytes'] for raw, _ in self.file_pairs)

    def get_zip_size(self) -> int | None:
        """Bytes of the compressed files, or None if the shard is not compressed."""
        sizes = [zipped['bytes'] for _, zipped in self.file_pairs if zipped is not None]
        return sum(sizes) if len(sizes) == len(self.file_pairs) else None

    def get_max_size(self) -> int:
        """Peak local bytes: while decompressing, both forms exist."""
        return self.get_raw_size() + (self.get_zip_size() or 0)

    def get_persistent_size(self, keep_zip: bool) -> int:
        """Local bytes once ready: the raw files, plus the compressed ones if kept."""
        if keep_zip:
            return self.get_max_size()
        return self.get_raw_size()

    # ---- opening -------------------------------------------------------------------------------
    def ensure_raw(self) -> None:
        """Make sure each raw file exists locally, decompressing a compressed copy if needed."""
        for raw, zipped in self.file_pairs:
            raw_path = self.path(raw)
            if os.path.exists(raw_path):
                continue
            if zipped is None or not os.path.exists(self.path(zipped)):
                where = raw_path if zipped is None else f'{raw_path} or {self.path(zipped)}'
                raise MissingShardFileError(f'Shard file not found: {where}.')
            decompress_file(self.path(zipped), raw_path, self.compression,  # type: ignore[arg-type]
                            raw['bytes'])

    def _open(self) -> list[mmap.mmap]:
        """Map the raw files and check their headers; done once per shard."""
        self.ensure_raw()
        maps = [_map_file(self.path(raw), raw['bytes']) for raw, _ in self.file_pairs]
        try:
            if self.validate_hash:
                for (raw, _), data in zip(self.file_pairs, maps):
                    _check_hash(self.path(raw), data, raw, self.validate_hash)
            self.check_files(maps)
        except BaseException:
            for m in maps:
                try:
                    m.close()
                except BufferError:
                    pass  # A numpy view in the traceback still uses it; freeing it closes it.
            raise
        self._maps = maps
        return maps

    def map_files(self) -> None:
        """Map the files now if they are not mapped (what the first read does).

        A map stays readable after its files are deleted, until ``close``: a cache that evicts
        maps a shard as soon as it is ready, so that evicting it before its read costs nothing.
        """
        if self._maps is None:
            self._open()

    def close(self) -> None:
        """Drop the memory maps (before evicting files, say); the next access reopens."""
        maps, self._maps = self._maps, None
        for m in maps or ():
            m.close()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state['_maps'] = None  # Maps do not cross processes; each process maps on first use.
        return state

    def check_files(self, maps: list[mmap.mmap]) -> None:
        """Check the mapped files (in ``file_pairs`` order): headers and offset tables."""
        raise NotImplementedError

    # ---- samples -------------------------------------------------------------------------------
    def get_sample_data(self, idx: int) -> bytes:
        """The raw bytes of sample ``idx`` of this shard."""
        raise NotImplementedError

    def decode_sample(self, data: bytes) -> dict[str, Any]:
        """Turn one sample's bytes into a dict."""
        raise NotImplementedError

    def get_item(self, idx: int) -> dict[str, Any]:
        """Sample ``idx`` of this shard, decoded."""
        data = self.get_sample_data(idx)
        try:
            return self.decode_sample(data)
        except ShardFileError:
            raise
        except Exception as error:
            raise ShardFileError(f'Sample {idx} of shard {self.path(self.file_pairs[0][0])} '
                                 f'cannot be decoded ({type(error).__name__}: {error}); the shard '
                                 f'is corrupt.') from error


class SingleFileShardReader(Reader):
    """A shard that is one file holding its own offset table in a header."""

    file_keys = ('raw_data', 'zip_data')

    def __init__(self, dirname: str, split: str | None, compression: str | None,
                 hashes: list[str], raw_data: FileInfo, samples: int,
                 size_limit: int | str | None, zip_data: FileInfo | None) -> None:
        super().__init__(dirname, split, compression, hashes, samples, size_limit)
        self.raw_data = raw_data
        self.zip_data = zip_data
        self.file_pairs = [(raw_data, zip_data)]

    def check_files(self, maps: list[mmap.mmap]) -> None:
        data, = maps
        path = self.path(self.raw_data)
        offsets = _offset_table(f'Shard file {path}', data, self.samples)
        if offsets[0] < 4 * (self.samples + 2):
            raise ShardFileError(f'Shard file {path} has a corrupt offset table.')
        check_offsets(path, offsets, int(offsets[0]), len(data))
        check_config(path, data[4 * (self.samples + 2):int(offsets[0])], self)

    def get_sample_data(self, idx: int) -> bytes:
        data = (self._maps or self._open())[0]
        begin, end = _SAMPLE_SPAN.unpack_from(data, 4 + 4 * idx)
        return data[begin:end]


class DataMetaShardReader(Reader):
    """A shard with a data file and a separate ``.meta`` file holding the offsets into it."""

    file_keys = ('raw_data', 'zip_data', 'raw_meta', 'zip_meta')

    def __init__(self, dirname: str, split: str | None, compression: str | None,
                 hashes: list[str], raw_data: FileInfo, raw_meta: FileInfo, samples: int,
                 size_limit: int | str | None, zip_data: FileInfo | None,
                 zip_meta: FileInfo | None) -> None:
        super().__init__(dirname, split, compression, hashes, samples, size_limit)
        self.raw_data, self.raw_meta = raw_data, raw_meta
        self.zip_data, self.zip_meta = zip_data, zip_meta
        self.file_pairs = [(raw_meta, zip_meta), (raw_data, zip_data)]

    def check_files(self, maps: list[mmap.mmap]) -> None:
        meta, data = maps
        path = self.path(self.raw_meta)
        offsets = _offset_table(f'Meta file {path}', meta, self.samples)
        check_offsets(path, offsets, int(offsets[0]), len(data))
        check_config(path, meta[4 * (self.samples + 2):], self)

    def get_sample_data(self, idx: int) -> bytes:
        maps = self._maps or self._open()
        begin, end = _SAMPLE_SPAN.unpack_from(maps[0], 4 + 4 * idx)
        return maps[1][begin:end]



# The reference's names.
JointReader = SingleFileShardReader
SplitReader = DataMetaShardReader
