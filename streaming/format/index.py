"""``index.json``: the list of shards of one dataset directory, version 2.

Writers emit it exactly as the reference does (one line, sorted keys, default separators) so the
files are byte-identical. ``load_index`` checks everything a reader relies on and reports a
problem with the path and the offending shard and key, instead of failing deep inside a reader.
"""

from __future__ import annotations

import json
import os
from typing import Any, TypedDict

from streaming.errors import CorruptIndexError, IndexFileError, MissingIndexError
from streaming.fileio import atomic_write
from streaming.format.registry import get_format, get_formats

__all__ = ['INDEX_BASENAME', 'FileInfo', 'get_index_basename', 'load_index', 'dump_index',
           'write_index', 'validate_shard_entry', 'check_same_lengths']

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


def _check_file_info(where: str, key: str, info: Any, optional: bool) -> None:
    if info is None and optional:
        return
    if not isinstance(info, dict) or not isinstance(info.get('basename'), str) or \
            not isinstance(info.get('bytes'), int) or not isinstance(info.get('hashes', {}), dict):
        raise IndexFileError(f'{where}: "{key}" must be an object with "basename" (str), "bytes" '
                             f'(int) and "hashes" (object), got {info!r}.')
    base = info['basename']
    if os.path.isabs(base) or '..' in base.replace('\\', '/').split('/'):
        raise IndexFileError(f'{where}: "{key}" basename {base!r} must be a relative path inside '
                             f'the dataset directory.')


def validate_shard_entry(where: str, shard: Any) -> None:
    """Check one shard entry of an index; ``where`` names it in error messages."""
    if not isinstance(shard, dict):
        raise IndexFileError(f'{where}: expected an object, got {type(shard).__name__}.')
    fmt = shard.get('format')
    try:
        shard_format = get_format(fmt)
    except KeyError:
        raise IndexFileError(f'{where}: unknown shard format {fmt!r}; expected one of '
                             f'{get_formats()}.') from None
    if shard.get('version') != INDEX_VERSION:
        raise IndexFileError(f'{where}: shard version is {shard.get("version")!r}; only version '
                             f'{INDEX_VERSION} can be read.')
    for key, kind in shard_format.required_keys.items():
        value = shard.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise IndexFileError(f'{where}: "{key}" must be of type {kind.__name__}, got '
                                 f'{value!r}.')
    if shard['samples'] < 0:
        raise IndexFileError(f'{where}: "samples" must not be negative, got {shard["samples"]}.')
    if shard_format.check_entry is not None:
        shard_format.check_entry(where, shard)
    compression = shard.get('compression')
    for key in shard_format.file_keys:
        _check_file_info(where, key, shard.get(key), optional=key.startswith('zip'))
        if key.startswith('zip') and compression and shard.get(key) is None:
            raise IndexFileError(f'{where}: compression is {compression!r} but "{key}" is null.')


def check_same_lengths(where: str, shard: Any, keys: tuple[str, ...]) -> None:
    """Raise ``IndexFileError`` unless the column lists under ``keys`` have equal lengths."""
    if len({len(shard[key]) for key in keys}) > 1:
        raise IndexFileError(f'{where}: {", ".join(keys)} differ in length.')


def load_index(path: str) -> dict[str, Any]:
    """Read and validate an ``index.json``; raise ``IndexFileError`` naming what is wrong."""
    try:
        with open(path, 'rb') as f:
            text = f.read()
    except FileNotFoundError:
        raise MissingIndexError(f'No index file at {path}: is this a dataset directory (or '
                                f'split)?') from None
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
    for i, shard in enumerate(shards):
        validate_shard_entry(f'{path}, shard {i}', shard)
    return obj
