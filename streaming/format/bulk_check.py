"""Proving many index entries valid at once, column by column, instead of one by one.

A large index repeats one entry shape: every shard of a dataset has the same format, columns,
compression and hashes, and differs only in its sample count and its files. ``prove_entries``
groups the entries by everything but those (``shape_only`` formats), checks one entry of each
group with ``validate_shard_entry``, and checks the varying fields of all entries as columns
(types, ranges and names, in a few C-level passes). It answers only "all valid" or "not
proven": the caller then checks entry by entry, as before, so every error is raised by the same
code, with the same message and for the same (first) entry as without this module.
"""

from __future__ import annotations

import re
from itertools import repeat
from operator import itemgetter
from typing import Any, Callable, Sequence

from streaming.format.registry import get_format
from streaming.format.schema import MAX_NAME_CHARS, MAX_RAW_BYTES, MAX_SAMPLES, MAX_ZIP_BYTES

__all__ = ['digests_valid', 'names_valid', 'prove_entries']

_HEX_RUN = re.compile('[0-9a-fA-F]*')
# A basename component that is empty, "." or "..", between separators ("/", or "\0" between
# names): what ``check_basename`` refuses, found in all the names joined by "\0" at once.
_BAD_PARTS = tuple(f'{a}{mid}{b}' for mid in ('', '.', '..') for a in '/\0' for b in '/\0')
_BAD_NAMES = ('\0\0', '\0.\0', '\0..\0')  # The same, where no name has a "/".


def prove_entries(where: str, entries: Sequence[Any], first: int,
                  seen: dict[str, tuple[int, str]],
                  validate: Callable[[str, Any], None]) -> list[int] | None:
    """The group of each entry if all of ``entries`` are valid and name no file twice, else None.

    ``entries`` are shards ``first`` onwards of the index ``where``; ``seen`` maps the file
    names of the earlier shards to (shard, key), and gains these entries' names if they are
    proven. Entries of one group are alike in every key but ``samples`` and the file keys.
    ``validate(where, entry)`` is ``validate_shard_entry``, run on one entry of each group.
    """
    n = len(entries)
    if not n or set(map(type, entries)) != {dict}:
        return None
    keys = tuple(entries[0])
    if set(map(len, entries)) != {len(keys)} or 'format' not in keys:
        return None
    try:
        return _prove(where, entries, first, seen, validate, keys)
    except (KeyError, TypeError):  # Entries with other keys than the first one's, say.
        return None


def _prove(where: str, entries: Sequence[dict[str, Any]], first: int,
           seen: dict[str, tuple[int, str]], validate: Callable[[str, Any], None],
           keys: tuple[str, ...]) -> list[int] | None:
    n = len(entries)
    try:
        formats = set(map(itemgetter('format'), entries))
    except TypeError:  # An unhashable "format": not proven here.
        return None
    if len(formats) != 1:
        return None
    try:
        shard_format = get_format(formats.pop())
    except KeyError:
        return None
    varying = {'samples', *shard_format.file_keys}
    if not shard_format.shape_only or set(shard_format.required_keys) & varying - {'samples'}:
        return None
    stable = [key for key in keys if key not in varying]
    groups = _groups(entries, stable)
    if groups is None:
        return None
    group_of, representatives = groups
    try:
        for offset in representatives:
            validate(f'{where}, shard {first + offset}', entries[offset])
    except Exception:  # noqa: BLE001  The entry-by-entry check raises it, for the first entry.
        return None
    names = _varying_valid(entries, keys, shard_format.file_keys)
    if names is None:
        return None
    new: dict[str, tuple[int, str]] = {}
    for key, column in names:
        new.update(zip(column, zip(range(first, first + n), repeat(key))))
    if len(new) != sum(len(column) for _, column in names) or not seen.keys().isdisjoint(new):
        return None
    seen.update(new)
    return group_of


def _groups(entries: Sequence[dict[str, Any]],
            stable: list[str]) -> tuple[list[int], list[int]] | None:
    """(group of each entry, first entry of each group) by the entries' ``stable`` values.

    Values are compared by ``repr``, which tells apart what ``==`` does not (``1``, ``1.0`` and
    ``True``). None if there are too many groups for grouping to pay.
    """
    n = len(entries)
    values = list(map(itemgetter(*stable), entries)) if stable else [()] * n
    if values.count(values[0]) == n and _same_types(values, values[0]):
        return [0] * n, [0]
    shapes = list(map(repr, values))
    index: dict[str, int] = {}
    group_of = [index.setdefault(shape, len(index)) for shape in shapes]
    if len(index) > max(8, n // 16):
        return None
    firsts = dict(zip(reversed(group_of), range(n - 1, -1, -1)))
    return group_of, [firsts[g] for g in range(len(index))]


def _same_types(values: list[Any], first: Any) -> bool:
    """Whether values equal (``==``) to ``first`` are alike in type too, nested values included.

    ``==`` holds between ``1``, ``1.0`` and ``True`` only: their places in ``first`` are checked.
    """
    for path in _number_paths(first, ()):
        column: Any = values
        for part in path:
            column = map(itemgetter(part), column)
        if len(set(map(type, column))) != 1:
            return False
    return True


def _number_paths(value: Any, path: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    """The paths (keys and indices) to the numbers nested in ``value``."""
    if isinstance(value, (bool, int, float)):
        return [path]
    parts = enumerate(value) if isinstance(value, (list, tuple)) else value.items() \
        if isinstance(value, dict) else ()
    return [found for key, part in parts for found in _number_paths(part, (*path, key))]


def _all_of(values: list[Any], kind: type) -> bool:
    return set(map(type, values)) <= {kind}


def _ints_within(values: list[Any], low: int, high: int) -> bool:
    return _all_of(values, int) and (not values or low <= min(values) and max(values) <= high)


def _varying_valid(entries: Sequence[dict[str, Any]], keys: tuple[str, ...],
                   file_keys: tuple[str, ...]) -> list[tuple[str, list[str]]] | None:
    """Check ``samples`` and the file keys of every entry; (key, normalised names) per key."""
    if not _ints_within(list(map(itemgetter('samples'), entries)), 1, MAX_SAMPLES):
        return None
    compressed = list(map(bool, map(itemgetter('compression'), entries))) \
        if 'compression' in keys else [False] * len(entries)
    names = []
    for key in file_keys:
        infos = list(map(itemgetter(key), entries)) if key in keys else [None] * len(entries)
        if key.startswith('zip_'):
            if [info is not None for info in infos] != compressed:
                return None
            infos = [info for info in infos if info is not None]
        column = _file_infos_valid(infos, MAX_ZIP_BYTES if key.startswith('zip_') else
                                   MAX_RAW_BYTES)
        if column is None:
            return None
        names.append((key, column))
    return names


def _file_infos_valid(infos: list[Any], high: int) -> list[str] | None:
    """What ``check_file_info`` checks, for a column of file objects; their normalised names."""
    if not infos:
        return []
    if not _all_of(infos, dict):
        return None
    names = list(map(itemgetter('basename'), infos))  # KeyError: not proven (prove_entries).
    if not _all_of(names, str) or not _ints_within(list(map(itemgetter('bytes'), infos)), 0,
                                                    high):
        return None
    hashes = [info.get('hashes', {}) for info in infos]
    if not _all_of(hashes, dict):
        return None
    algos = [algo for value in hashes for algo in value]
    digests = [digest for value in hashes for digest in value.values()]
    if not _all_of(algos, str) or not _all_of(digests, str) or not digests_valid(digests):
        return None
    return names_valid(names)


def names_valid(names: list[str]) -> list[str] | None:
    """What ``check_basename`` checks, for a column of names (all ``str``); normalised, or None.

    Normalised: backslashes as ``/``, the form in which two entries may not name the same file.
    """
    if not names:
        return []
    if max(map(len, names)) > MAX_NAME_CHARS:
        return None
    joined = '\0' + '\0'.join(names) + '\0'
    if joined.count('\0') != len(names) + 1 or ':' in joined:  # A NUL in a name; or a drive.
        return None
    normal = joined.replace('\\', '/')
    if any(part in normal for part in (_BAD_PARTS if '/' in normal else _BAD_NAMES)):
        return None
    return normal[1:-1].split('\0')


def digests_valid(digests: list[str]) -> bool:
    """Whether a column of digests (all ``str``) are all non-empty hex, as ``check_file_info``."""
    return not digests or min(map(len, digests)) > 0 and \
        _HEX_RUN.fullmatch(''.join(digests)) is not None
