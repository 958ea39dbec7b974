"""A binary summary of a stream's ``index.json``, and shard readers built only when used.

Parsing and validating the JSON index of 50k shards, and building a reader per shard, takes a
second or more; a run needs, at set-up, only each shard's sample count (and, to see which
shards are already local, its raw files). So the first run that parses an index also writes a
summary of it (``index.bin`` in the stream's set-up cache directory, ``cache_dirs``: outside
the stream's local directory, keyed by it): per shard its
samples, sizes, raw files, whether a column needs ``allow_unsafe_types``, and its entry's JSON
text. Later runs read the summary instead, and a shard's reader is built from its entry the
first time the shard is used (``LazyShards``).

The summary is keyed by the index file's size, modification time and xxh3-128 digest, and by the
registered shard formats; it is written atomically and checksummed (``checked_file``), so an
index that changed, or a summary that is truncated or damaged, is never used: the index is
parsed again and the summary rewritten. A directory that cannot be written just goes without.
"""

from __future__ import annotations

import json
import os
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from operator import itemgetter
from typing import Any, Iterator, overload

import numpy as np
import xxhash

from streaming.dataset.cache_dirs import setup_cache_dir
from streaming.dataset.checked_file import digest, read_checked, write_checked
from streaming.format import Reader, reader_from_json
from streaming.format.index import load_index
from streaming.format.registry import (
    check_safe_encodings,
    get_format,
    get_formats,
    unsafe_encodings,
)
from streaming.util import gc_paused

__all__ = ['IndexDict', 'IndexSummary', 'LazyShards', 'ShardTable', 'entry_columns', 'index_key',
           'load_summary', 'save_summary']

SUMMARY_BASENAME = 'index.bin'
_KIND = 'index2'  # 2: entries may be followed by separators (index_scan)
_DECODER = json.JSONDecoder()
_FIELDS = ('samples', 'unsafe', 'raw_size', 'max_size', 'entry_offsets', 'entries',
           'file_offsets', 'files')


def index_key(path: str, text: bytes) -> bytes:
    """The key of the summary of the index at ``path`` whose bytes are ``text``."""
    st = os.stat(path)
    return digest({'size': len(text), 'stat_size': st.st_size, 'mtime_ns': st.st_mtime_ns,
                   'xxh3_128': xxhash.xxh3_128_hexdigest(text), 'formats': tuple(get_formats())})


@dataclass(frozen=True)
class IndexSummary:
    """What set-up needs of each shard of an index, as arrays."""

    samples: np.ndarray  # int64
    unsafe: np.ndarray  # bool: a column encoding needs allow_unsafe_types
    raw_size: np.ndarray  # int64: bytes of the raw files
    max_size: np.ndarray  # int64: raw plus compressed bytes
    entry_offsets: np.ndarray
    entries: bytes  # Each shard's index entry as JSON, end to end.
    file_offsets: np.ndarray  # Shard i's raw files are lines file_offsets[i]:[i + 1].
    files: bytes  # Every shard's raw files, a line 'basename<TAB>bytes' each.

    def __len__(self) -> int:
        return len(self.samples)

    def entry(self, shard: int) -> dict[str, Any]:
        """Shard ``shard``'s index entry (its text may be followed by the index's separators)."""
        text = self.entries[self.entry_offsets[shard]:self.entry_offsets[shard + 1]].decode()
        return _DECODER.raw_decode(text)[0]

    def raw_files(self) -> tuple[list[str], list[int]]:
        """(basename, bytes) of every shard's raw files, shard after shard (``file_offsets``)."""
        lines = self.files.decode().split('\n') if self.files else []
        names, sizes = [], []
        for line in lines:
            name, size = line.rsplit('\t', 1)
            names.append(name)
            sizes.append(int(size))
        return names, sizes

    @classmethod
    @gc_paused()
    def build(cls, entries: list[dict[str, Any]]) -> IndexSummary | None:
        """The summary of validated index entries.

        None if a format's files are not ``raw_*``/``zip_*`` pairs (then readers are built from
        the entries at once, as they are).
        """
        columns = entry_columns(entries)
        if columns is None:
            return None
        texts = [json.dumps(entry, separators=(',', ':')).encode() for entry in entries]
        file_offsets = np.zeros(len(entries) + 1, np.int64)
        np.cumsum(columns['file_counts'], out=file_offsets[1:])
        return cls(columns['samples'], columns['unsafe'], columns['raw_size'],
                   columns['max_size'], _offsets(texts), b''.join(texts), file_offsets,
                   columns['files'].encode())

    def pack(self) -> list[np.ndarray]:
        """The payload of the summary file, as parts written one after another (no copy)."""
        parts = [np.ascontiguousarray(getattr(self, name)) if not isinstance(
            getattr(self, name), bytes) else np.frombuffer(getattr(self, name), np.uint8)
            for name in _FIELDS]
        raw = [part.view(np.uint8).reshape(-1) for part in parts]
        lengths = np.array([len(part) for part in raw], '<i8').view(np.uint8)
        return [lengths, *raw]

    @classmethod
    def unpack(cls, payload: bytes) -> IndexSummary:
        lengths = np.frombuffer(payload, '<i8', len(_FIELDS))
        dtypes = {'samples': '<i8', 'unsafe': bool, 'raw_size': '<i8', 'max_size': '<i8',
                  'entry_offsets': '<i8', 'file_offsets': '<i8'}
        values: dict[str, Any] = {}
        start = 8 * len(_FIELDS)
        for name, length in zip(_FIELDS, lengths.tolist()):
            chunk = payload[start:start + length]
            values[name] = chunk if name not in dtypes else np.frombuffer(chunk, dtypes[name])
            start += length
        if start != len(payload):
            raise ValueError('index summary: lengths do not add up')
        return cls(**values)


def entry_columns(entries: list[dict[str, Any]],
                  unsafe: np.ndarray | None = None) -> dict[str, Any] | None:
    """Per entry: samples, unsafe, raw_size, max_size, file_counts (arrays); files (text).

    ``unsafe`` (whether each entry needs ``allow_unsafe_types``) is computed when not given.
    None if a format's files are not ``raw_*``/``zip_*`` pairs.
    """
    if unsafe is None:
        unsafe = np.array([bool(unsafe_encodings(entry)) for entry in entries], bool)
    formats = set(map(itemgetter('format'), entries))
    if len(formats) == 1:
        keys = get_format(formats.pop()).file_keys
        raw_keys = [key for key in keys if key.startswith('raw_')]
        if len(keys) != 2 * len(raw_keys):
            return None
        raws = [[entry.get(key) for entry in entries] for key in raw_keys]
        if all(info is not None for infos in raws for info in infos):
            zip_keys = [key for key in keys if key.startswith('zip_')]
            return _one_format_columns(entries, raws, zip_keys, unsafe)
    samples, raw_sizes, max_sizes, files = [], [], [], []
    for entry in entries:
        keys = get_format(entry['format']).file_keys
        raws = [entry[k] for k in keys if k.startswith('raw_') and entry.get(k) is not None]
        zips = [entry[k] for k in keys if k.startswith('zip_') and entry.get(k) is not None]
        if len(keys) != 2 * sum(k.startswith('raw_') for k in keys):
            return None
        raw_size = sum(raw['bytes'] for raw in raws)
        zip_size = sum(z['bytes'] for z in zips) if len(zips) == len(raws) else 0
        samples.append(entry['samples'])
        raw_sizes.append(raw_size)
        max_sizes.append(raw_size + zip_size)
        files.append([f'{raw["basename"]}\t{raw["bytes"]}' for raw in raws])
    return {'samples': np.array(samples, np.int64), 'unsafe': unsafe,
            'raw_size': np.array(raw_sizes, np.int64), 'max_size': np.array(max_sizes, np.int64),
            'file_counts': np.array([len(f) for f in files], np.int64),
            'files': '\n'.join(line for lines in files for line in lines)}


def _one_format_columns(entries: list[dict[str, Any]], raws: list[list[dict[str, Any]]],
                        zip_keys: list[str], unsafe: np.ndarray) -> dict[str, Any]:
    """``entry_columns`` of entries of one format whose raw files are all present, by column."""
    raw_bytes = np.array([list(map(itemgetter('bytes'), infos)) for infos in raws], np.int64)
    zips = [[entry.get(key) for entry in entries] for key in zip_keys]
    zipped = np.array([[0 if info is None else info['bytes'] for info in infos]
                       for infos in zips], np.int64).reshape(len(zips), len(entries))
    whole = np.array([[info is not None for info in infos] for infos in zips],
                     bool).reshape(len(zips), len(entries)).all(0)
    raw_size = raw_bytes.sum(0)
    names = [map(itemgetter('basename'), infos) for infos in raws]
    lines = chain.from_iterable(zip(*[map('{}\t{}'.format, column, sizes) for column, sizes in
                                      zip(names, raw_bytes.tolist())]))
    return {'samples': np.array(list(map(itemgetter('samples'), entries)), np.int64),
            'unsafe': unsafe, 'raw_size': raw_size,
            'max_size': raw_size + np.where(whole, zipped.sum(0), 0),
            'file_counts': np.full(len(entries), len(raws), np.int64),
            'files': '\n'.join(lines)}


def _offsets(texts: list[bytes]) -> np.ndarray:
    offsets = np.zeros(len(texts) + 1, np.int64)
    np.cumsum([len(t) for t in texts], out=offsets[1:])
    return offsets


def summary_path(local_dir: str) -> str | None:
    """Where the summary of ``local_dir``'s index is kept (None: nowhere can be used)."""
    try:
        return os.path.join(setup_cache_dir(local_dir), SUMMARY_BASENAME)
    except OSError:
        return None


def load_summary(local_dir: str, key: bytes) -> IndexSummary | None:
    """The summary for ``key`` of the index in ``local_dir``, if one is there, whole and current."""
    path = summary_path(local_dir)
    payload = None if path is None else read_checked(path, key, _KIND)
    if payload is None:
        return None
    try:
        summary = IndexSummary.unpack(payload)
    except ValueError:
        return None
    consistent = (len(summary.unsafe) == len(summary.raw_size) == len(summary.max_size) ==
                  len(summary) == len(summary.entry_offsets) - 1 ==
                  len(summary.file_offsets) - 1)
    return summary if consistent else None


def save_summary(local_dir: str, key: bytes, summary: IndexSummary) -> None:
    """Write the summary of the index in ``local_dir``; quietly nothing if it cannot be."""
    path = summary_path(local_dir)
    if path is None:
        return
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_checked(path, key, _KIND, summary.pack())
    except OSError:
        pass


class LazyShards(Sequence):
    """A stream's shard readers, each built from its index entry the first time it is used.

    Indexing and iterating give readers, as a list of them would; ``summary`` holds the
    per-shard arrays, so that set-up needs no reader at all. Each entry is checked for unsafe
    encodings as its reader is built, as for a parsed index.
    """

    def __init__(self, summary: IndexSummary, local: str, split: str, allow_unsafe_types: bool,
                 where: str) -> None:
        self.summary = summary
        self.local, self.split, self.where = local, split, where
        self.allow_unsafe_types = allow_unsafe_types
        self._readers: list[Reader | None] = [None] * len(summary)

    def __len__(self) -> int:
        return len(self._readers)

    @overload
    def __getitem__(self, index: int) -> Reader: ...

    @overload
    def __getitem__(self, index: slice) -> list[Reader]: ...

    def __getitem__(self, index: int | slice) -> Reader | list[Reader]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        reader = self._readers[index]
        if reader is None:
            if index < 0:
                index += len(self)
            entry = self.summary.entry(index)
            check_safe_encodings(f'{self.where}, shard {index}', entry, self.allow_unsafe_types)
            reader = reader_from_json(self.local, self.split, entry, validate=False)
            self._readers[index] = reader
        return reader

    def __iter__(self) -> Iterator[Reader]:
        return (self[i] for i in range(len(self)))


class IndexDict(dict):
    """An index as ``load_index`` gives it, with the key of its summary (and the summary).

    Made from a summary, it holds only ``"version"`` until ``"shards"`` is first looked up;
    the index file is parsed then.
    """

    def __init__(self, path: str, key: bytes, summary: IndexSummary | None,
                 index: dict[str, Any] | None = None, unsaved: bool = False) -> None:
        super().__init__(index if index is not None else {'version': 2})
        self.path, self.key, self.summary = path, key, summary
        self.unsaved = unsaved  # A summary made from the index just now, not written yet.

    def __missing__(self, name: str) -> Any:
        if name != 'shards' or self.summary is None:
            raise KeyError(name)
        self.update(load_index(self.path))
        return dict.__getitem__(self, 'shards')

    def get(self, name: str, default: Any = None) -> Any:
        try:
            return self[name]
        except KeyError:
            return default

    def __contains__(self, name: object) -> bool:
        return dict.__contains__(self, name) or (name == 'shards' and self.summary is not None)


class ShardTable(Sequence):
    """All streams' shard sequences end to end, as one sequence of readers."""

    def __init__(self, parts: list[Sequence[Reader]]) -> None:
        self.parts = parts
        self.starts = np.concatenate([[0], np.cumsum([len(p) for p in parts])]).astype(np.int64)
        # Plain ints for the scalar lookups every batch makes (one per shard it touches).
        self._start_list = self.starts.tolist()
        self._length = self._start_list[-1]

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            for part, begin in zip(self.parts, self.starts.tolist()):
                if (start, stop, step) == (begin, begin + len(part), 1):
                    return part
            return [self[i] for i in range(start, stop, step)]
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError(f'shard {index} out of range ({self._length} shards)')
        if len(self.parts) == 1:
            return self.parts[0][index]
        part = bisect_right(self._start_list, index) - 1
        return self.parts[part][index - self._start_list[part]]

    def __iter__(self) -> Iterator[Reader]:
        for part in self.parts:
            yield from part

    def column(self, name: str) -> np.ndarray:
        """A per-shard summary array (``samples``, ``max_size``...), from summaries if lazy."""
        out = []
        for part in self.parts:
            if isinstance(part, LazyShards):
                out.append(getattr(part.summary, name))
            elif name == 'samples':
                out.append(np.array([r.samples for r in part], np.int64))
            else:
                out.append(np.array([getattr(r, f'get_{name}')() for r in part], np.int64))
        return np.concatenate(out) if out else np.zeros(0, np.int64)
