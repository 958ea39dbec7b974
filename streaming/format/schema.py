"""Field checks of ``index.json`` entries: types, ranges and names, each error naming the field.

``streaming.format.index`` runs these once per index (``load_index``); the formats' own
``check_entry`` functions use them for their column keys. Every violation is an
``IndexFileError`` whose message starts with ``where`` (the index path and the shard number)
and names the offending key.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Iterable, Mapping

from streaming.errors import IndexFileError

__all__ = ['MAX_SAMPLES', 'MAX_RAW_BYTES', 'MAX_ZIP_BYTES', 'check_int', 'check_basename',
           'check_file_info', 'check_names', 'check_str', 'check_column_keys']

# Shard offsets and counts are uint32: a shard holds fewer than 2**32 samples and raw bytes.
MAX_SAMPLES = (1 << 32) - 2
MAX_RAW_BYTES = (1 << 32) - 1
MAX_ZIP_BYTES = 1 << 33  # A compressed file may be a little larger than its raw form.
MAX_NAME_CHARS = 4096
_HEX = re.compile('[0-9a-fA-F]+')


def _fail(where: str, key: str, problem: str) -> IndexFileError:
    return IndexFileError(f'{where}: "{key}" {problem}')


def check_int(where: str, key: str, value: Any, low: int, high: int) -> int:
    """``value`` must be an int (not a bool) in ``[low, high]``."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise _fail(where, key, f'must be an integer, got {_short(value)}.')
    if not low <= value <= high:
        raise _fail(where, key, f'must be from {low} to {high}, got {value}.')
    return value


def check_str(where: str, key: str, value: Any, nul: bool = False) -> str:
    """``value`` must be a non-empty string, without NUL characters unless ``nul``."""
    if not isinstance(value, str) or not value or (not nul and '\0' in value):
        need = 'a non-empty string' + ('' if nul else ' without NUL characters')
        raise _fail(where, key, f'must be {need}, got {_short(value)}.')
    return value


def check_basename(where: str, key: str, name: Any) -> str:
    """A file name relative to the dataset directory: no NUL, no absolute part, no ``..``."""
    check_str(where, f'{key}.basename', name)
    parts = name.replace('\\', '/').split('/')
    if len(name) > MAX_NAME_CHARS or name.startswith(('/', '\\')) or ':' in parts[0] or \
            any(part in ('', '.', '..') for part in parts):
        raise _fail(where, f'{key}.basename', f'must be a plain relative file name inside the '
                    f'dataset directory (no absolute part, "..", "." or empty component), got '
                    f'{_short(name)}.')
    return name


def check_file_info(where: str, key: str, info: Any, high: int) -> None:
    """One ``{"basename", "bytes", "hashes"}`` object of a shard entry."""
    if not isinstance(info, dict):
        raise _fail(where, key, f'must be an object with "basename" (str), "bytes" (int) and '
                    f'"hashes" (object), got {_short(info)}.')
    check_basename(where, key, info.get('basename'))
    check_int(where, f'{key}.bytes', info.get('bytes'), 0, high)
    hashes = info.get('hashes', {})
    if not isinstance(hashes, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and _HEX.fullmatch(v)
            for k, v in hashes.items()):
        raise _fail(where, f'{key}.hashes', f'must map algorithm names to hex digests, got '
                    f'{_short(hashes)}.')


def check_names(where: str, key: str, names: Any) -> list[str]:
    """A non-empty list of distinct column names (strings; writers accept any string)."""
    if not isinstance(names, list) or not names:
        raise _fail(where, key, f'must be a non-empty list, got {_short(names)}.')
    for i, name in enumerate(names):
        if not isinstance(name, str):
            raise _fail(where, f'{key}[{i}]', f'must be a string, got {_short(name)}.')
    if len(set(names)) != len(names):
        repeated = sorted({n for n in names if names.count(n) > 1})
        raise _fail(where, key, f'repeats column name(s) {repeated}.')
    return names


def check_column_keys(where: str, entry: Mapping[str, Any], names_key: str, encodings: Any,
                      is_encoding: Callable[[Any], bool], known: Iterable[str] | str,
                      encodings_key: str = 'column_encodings') -> None:
    """Column names distinct, and as many encodings as names, each one ``is_encoding`` accepts."""
    names = check_names(where, names_key, entry.get(names_key))
    if len(encodings) != len(names):
        raise IndexFileError(f'{where}: "{names_key}" has {len(names)} columns but the '
                             f'encodings list {len(encodings)}.')
    for name, encoding in zip(names, encodings):
        if not is_encoding(encoding):
            raise IndexFileError(f'{where}: "{encodings_key}" gives column {name!r} the unknown '
                                 f'encoding {_short(encoding)}; known: {known}.')


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + '...'
