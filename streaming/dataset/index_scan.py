"""A stream's ``index.json`` turned straight into its binary summary, a batch of shards at a time.

The cold start of a large dataset is its index: 50k shard entries to parse, check and summarise
(``index_cache``). Here the entries are parsed one by one from the text (``raw_decode``), so that
each one's place in the file is known (or, for the usual index whose entries differ only in
their samples and files, matched as text: ``index_uniform``): the summary keeps the index's own
bytes and those offsets, instead of serialising every entry again. Each batch is checked in bulk
(``check_entries``), reduced to the summary's columns with numpy, and dropped, so the parsed
entries of the whole index are never in memory at once.

Anything unusual (not ASCII, not an object with ``"shards"`` and ``"version"`` 2, a bad entry, a
format whose files the summary cannot describe) gives None: the caller then loads the index with
``load_index``, which raises the same error as always for a bad one.
"""

from __future__ import annotations

import json
import re
from json.decoder import scanstring  # type: ignore[attr-defined]
from operator import itemgetter
from typing import Any

import numpy as np

from streaming.dataset.index_cache import IndexSummary, entry_columns
from streaming.dataset.index_uniform import scan_uniform
from streaming.errors import IndexFileError
from streaming.format.index import check_entries
from streaming.format.registry import get_format, unsafe_encodings
from streaming.util import gc_paused

__all__ = ['scan_index']

BATCH = 4096  # Entries parsed, checked and summarised at a time.
_WS = re.compile(r'[ \t\n\r]*')
_NEXT = re.compile(r'[ \t\n\r]*([,\]])[ \t\n\r]*')
_DECODER = json.JSONDecoder()


class _NotScanned(Exception):
    """The index is not of the plain kind scanned here (the caller loads it the usual way)."""


@gc_paused()
def scan_index(path: str, text: bytes) -> IndexSummary | None:
    """The summary of the valid index at ``path`` whose bytes are ``text``; else None."""
    if not text.isascii():  # Then character offsets are byte offsets.
        return None
    try:
        return _scan(path, text.decode('ascii'), text)
    except (_NotScanned, IndexFileError, ValueError, LookupError, TypeError, StopIteration):
        return None


def _scan(path: str, doc: str, text: bytes) -> IndexSummary:
    top: dict[str, Any] = {}
    summary = None
    i = _skip(doc, 0, '{')
    while doc[i] != '}':
        if doc[i] != '"':
            raise _NotScanned
        key, i = scanstring(doc, i + 1)
        i = _skip(doc, i, ':')
        if key == 'shards':
            if key in top or doc[i] != '[':
                raise _NotScanned
            summary, i = _scan_shards(path, doc, i, text)
            top[key] = None
        else:
            top[key], i = _DECODER.raw_decode(doc, i)
        i = _space(doc, i)
        if doc[i] == ',':
            i = _space(doc, i + 1)
            if doc[i] == '}':
                raise _NotScanned
        elif doc[i] != '}':
            raise _NotScanned
    if _space(doc, i + 1) != len(doc) or top.get('version') != 2 or summary is None:
        raise _NotScanned
    return summary


def _space(doc: str, i: int) -> int:
    """Past the whitespace from ``i`` (the pattern matches an empty string: never None)."""
    return _WS.match(doc, i).end()  # type: ignore[union-attr]


def _skip(doc: str, i: int, char: str) -> int:
    """Past whitespace, ``char`` and whitespace from ``i``."""
    i = _space(doc, i)
    if doc[i] != char:
        raise _NotScanned
    return _space(doc, i + 1)


def _scan_shards(path: str, doc: str, i: int, text: bytes) -> tuple[IndexSummary, int]:
    """The summary of the shards array at ``doc[i]`` (a ``[``), and the position after it."""
    i = _space(doc, i + 1)
    starts: list[int] = []
    batch: list[Any] = []
    parts: list[dict[str, Any]] = []
    seen: dict[str, tuple[int, str]] = {}
    end = i + 1
    if doc[i] != ']':
        uniform = scan_uniform(path, doc, i)
        if uniform is not None:
            runs, starts, end, i = uniform
            return _join(runs, np.array([*starts, end], np.int64), text), i
        # scan_once is raw_decode without its wrapper: StopIteration where no value starts.
        decode = _DECODER.scan_once  # type: ignore[attr-defined]
        after, add_start, add = _NEXT.match, starts.append, batch.append
        while True:
            add_start(i)
            entry, end = decode(doc, i)
            add(entry)
            if doc.startswith(', {', end):  # The usual separator, as json.dumps writes it.
                i = end + 2
            else:
                found = after(doc, end)
                if found is None:
                    raise _NotScanned
                i = found.end()
                if found.group(1) == ']':
                    break
            if len(batch) == BATCH:
                parts.append(_summarise(path, batch, len(starts) - len(batch), seen))
                batch = []
                add = batch.append
    if batch:
        parts.append(_summarise(path, batch, len(starts) - len(batch), seen))
    offsets = np.array([*starts, end], np.int64)
    return _join(parts, offsets, text), i


def _summarise(path: str, batch: list[Any], first: int,
               seen: dict[str, tuple[int, str]]) -> dict[str, Any]:
    """Check shards ``first`` onwards (``batch``), and their columns of the summary."""
    groups = check_entries(path, batch, first, seen)
    formats = set(map(itemgetter('format'), batch))
    shape_only = len(formats) == 1 and get_format(next(iter(formats))).shape_only
    columns = entry_columns(batch, _unsafe(batch, groups, shape_only))
    if columns is None:
        raise _NotScanned  # The summary describes raw_*/zip_* pairs only.
    return columns


def _unsafe(batch: list[Any], groups: list[int] | None, shape_only: bool) -> np.ndarray:
    """Whether each entry has a column encoding that needs ``allow_unsafe_types``."""
    if groups is None or not shape_only:
        return np.array([bool(unsafe_encodings(entry)) for entry in batch], bool)
    flags: dict[int, bool] = {}
    for offset, group in enumerate(groups):
        if group not in flags:
            flags[group] = bool(unsafe_encodings(batch[offset]))
    return np.array([flags[group] for group in groups], bool)


def _join(parts: list[dict[str, Any]], entry_offsets: np.ndarray, text: bytes) -> IndexSummary:
    def column(name: str, dtype: Any) -> np.ndarray:
        return np.concatenate([part[name] for part in parts]) if parts else np.zeros(0, dtype)

    file_offsets = np.zeros(len(entry_offsets), np.int64)
    np.cumsum(column('file_counts', np.int64), out=file_offsets[1:])
    files = '\n'.join(part['files'] for part in parts if part['files'])
    return IndexSummary(column('samples', np.int64), column('unsafe', bool),
                        column('raw_size', np.int64), column('max_size', np.int64),
                        entry_offsets, text, file_offsets, files.encode())
