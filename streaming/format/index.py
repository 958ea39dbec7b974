"""``index.json``: the list of shards of one dataset directory, version 2.

Writers emit it exactly as the reference does (one line, sorted keys, default separators) so the
files are byte-identical. ``load_index`` checks everything a reader relies on and reports a
problem with the path and the offending shard and key, instead of failing deep inside a reader.
"""

from __future__ import annotations

import json
from typing import Any, TypedDict

from streaming.errors import CorruptIndexError, IndexFileError, MissingIndexError
from streaming.fileio import atomic_write
from streaming.format.bulk_check import prove_entries
from streaming.format.compression import parse_compression
from streaming.format.registry import get_format, get_formats
from streaming.format.schema import (
    MAX_RAW_BYTES,
    MAX_SAMPLES,
    MAX_ZIP_BYTES,
    check_file_info,
    check_int,
    check_str,
)
from streaming.util import gc_paused

__all__ = ['INDEX_BASENAME', 'FileInfo', 'get_index_basename', 'load_index', 'dump_index',
           'write_index', 'validate_shard_entry', 'check_same_lengths', 'shard_basenames',
           'read_index_bytes', 'check_entries']

INDEX_BASENAME = 'index.json'
INDEX_VERSION = 2


class FileInfo(TypedDict):
    """One file of a shard as recorded in the index: name, size and checksums."""

    basename: str
    bytes: int
    hashes: dict[str, str]


def get_index_basename() -> str:
    """The basename of a dataset's index file."""
    return INDEX_BASENAME


def dump_index(shards: list[dict[str, Any]], sort_keys: bool = True) -> str:
    """Serialize shard entries the way the reference does (``merge_index`` does not sort)."""
    obj = {'shards': shards, 'version': INDEX_VERSION}
    if not sort_keys:
        obj = {'version': INDEX_VERSION, 'shards': shards}
    return json.dumps(obj, sort_keys=sort_keys)


def write_index(path: str, shards: list[dict[str, Any]], sort_keys: bool = True) -> None:
    """Write ``index.json`` atomically: a reader sees the old file or the whole new one."""
    atomic_write(path, dump_index(shards, sort_keys))


def validate_shard_entry(where: str, shard: Any) -> None:
    """Check one shard entry of an index, every field once; ``where`` names it in errors."""
    if not isinstance(shard, dict):
        raise IndexFileError(f'{where}: expected an object, got {type(shard).__name__}.')
    fmt = shard.get('format')
    try:
        shard_format = get_format(fmt)
    except KeyError:
        raise IndexFileError(f'{where}: "format" is an unknown shard format {fmt!r}; expected '
                             f'one of {get_formats()}.') from None
    if shard.get('version') != INDEX_VERSION or isinstance(shard.get('version'), bool):
        raise IndexFileError(f'{where}: shard "version" is {shard.get("version")!r}; only '
                             f'version {INDEX_VERSION} can be read.')
    for key, kind in shard_format.required_keys.items():
        value = shard.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise IndexFileError(f'{where}: "{key}" must be of type {kind.__name__}, got '
                                 f'{value!r:.80}.')
    # Writers never write an empty shard: a zero count hides a shard's samples.
    check_int(where, 'samples', shard['samples'], 1, MAX_SAMPLES)
    compression = shard.get('compression')
    if compression is not None:
        try:
            parse_compression(check_str(where, 'compression', compression))
        except ValueError as error:
            raise IndexFileError(f'{where}: "compression": {error}') from None
    hashes = shard.get('hashes', [])
    if not isinstance(hashes, list) or not all(isinstance(h, str) for h in hashes):
        raise IndexFileError(f'{where}: "hashes" must be a list of algorithm names, got '
                             f'{hashes!r:.80}.')
    if shard.get('size_limit') is not None:
        check_int(where, 'size_limit', shard['size_limit'], 0, MAX_RAW_BYTES)
    if shard_format.check_entry is not None:
        shard_format.check_entry(where, shard)
    for key in shard_format.file_keys:
        info = shard.get(key)
        if key.startswith('zip_'):
            if info is None:
                if compression:
                    raise IndexFileError(f'{where}: "compression" is {compression!r} but '
                                         f'"{key}" is null.')
                continue
            if not compression:
                raise IndexFileError(f'{where}: "{key}" names a compressed file but '
                                     f'"compression" is null.')
        check_file_info(where, key, info, MAX_ZIP_BYTES if key.startswith('zip_') else
                        MAX_RAW_BYTES)


def shard_basenames(shard: dict[str, Any]) -> list[tuple[str, str]]:
    """(key, basename) of each file a validated shard entry names."""
    keys = get_format(shard['format']).file_keys
    return [(key, shard[key]['basename']) for key in keys if shard.get(key) is not None]


def check_same_lengths(where: str, shard: Any, keys: tuple[str, ...]) -> None:
    """Raise ``IndexFileError`` unless the column lists under ``keys`` have equal lengths."""
    if len({len(shard[key]) for key in keys}) > 1:
        raise IndexFileError(f'{where}: {", ".join(keys)} differ in length.')


def read_index_bytes(path: str) -> bytes:
    """The bytes of an ``index.json``; ``MissingIndexError`` if there is none."""
    try:
        with open(path, 'rb') as f:
            return f.read()
    except FileNotFoundError:
        raise MissingIndexError(f'No index file at {path}: is this a dataset directory (or '
                                f'split)?') from None


def check_entries(path: str, shards: list[Any], first: int,
                  seen: dict[str, tuple[int, str]]) -> list[int] | None:
    """Validate shards ``first`` onwards of the index at ``path``; raise naming the first bad one.

    ``seen`` maps the file names of earlier shards to (shard, key) and gains these shards'.
    Checked in bulk where that proves them valid (``bulk_check``; the group of each shard is
    returned then), else entry by entry (None).
    """
    groups = prove_entries(path, shards, first, seen, validate_shard_entry)
    if groups is not None:
        return groups
    for i, shard in enumerate(shards, first):
        where = f'{path}, shard {i}'
        validate_shard_entry(where, shard)
        for key, name in shard_basenames(shard):
            name = name.replace('\\', '/')
            if name in seen:
                other, other_key = seen[name]
                raise IndexFileError(f'{where}: "{key}.basename" {name!r} is already used by '
                                     f'shard {other} "{other_key}": two entries may not name '
                                     f'the same file.')
            seen[name] = (i, key)
    return None


@gc_paused()
def load_index(path: str, text: bytes | None = None) -> dict[str, Any]:
    """Read and validate an ``index.json``; raise ``IndexFileError`` naming what is wrong.

    ``text``: the file's bytes, if already read.
    """
    if text is None:
        text = read_index_bytes(path)
    try:
        obj = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CorruptIndexError(f'{path} is not valid JSON ({error}); the file may be truncated '
                                f'or not an index.', getattr(error, 'doc', ''),
                                getattr(error, 'pos', 0)) from None
    if not isinstance(obj, dict):
        raise IndexFileError(f'{path}: expected a JSON object with "version" and "shards".')
    if obj.get('version') != INDEX_VERSION:
        raise IndexFileError(f'{path}: index version is {obj.get("version")!r}; only version '
                             f'{INDEX_VERSION} can be read.')
    shards = obj.get('shards')
    if not isinstance(shards, list):
        raise IndexFileError(f'{path}: "shards" must be a list.')
    check_entries(path, shards, 0, {})
    return obj
