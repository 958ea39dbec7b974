"""The shards array of a uniform ``index.json`` matched as text, without parsing each entry.

A large index is one entry repeated: every shard of a dataset has the same format, columns,
compression and hash algorithms, and differs only in its sample count and its files' names,
sizes and digests. Here the first entry is parsed and checked as usual, and turned into a
regular expression that matches its own text with those varying values left open (a string
with no escape, or an integer with no sign or leading zero). The shards array is then matched
with it in C, each entry where the last one ended: an entry that matches has the value of the
first one with its own varying values, so it needs only the checks of those values, made as
columns (``bulk_check``). Neither a dict per entry nor a JSON decode of the whole file is made:
at 50,000 shards the match takes about a fifth of the time of ``json.loads``. An entry that
does not match starts a new run, with its own template (a merged index of datasets of a few
shapes, say), up to a few runs or one per 256 entries.

Anything else (an entry not written as ``json.dumps`` writes it, or invalid; too many runs; a
varying value that does not check; one file named twice) gives None, and the caller scans the
index entry by entry (``index_scan``), which raises the usual error for a bad one.
"""

from __future__ import annotations

import json
import re
from itertools import chain
from typing import Any

import numpy as np

from streaming.format.bulk_check import digests_valid, names_valid
from streaming.format.index import validate_shard_entry
from streaming.format.registry import get_format, unsafe_encodings
from streaming.format.schema import MAX_RAW_BYTES, MAX_SAMPLES, MAX_ZIP_BYTES

__all__ = ['scan_uniform']

_STRING = r'"([^"\\\x00-\x1f]*)"'  # A JSON string with no escape (the text is ASCII).
_INT = '(0|[1-9][0-9]{0,17})'  # A JSON integer >= 0 that fits an int64.
_NEXT = re.compile(r'[ \t\n\r]*([,\]])[ \t\n\r]*')
_DECODER = json.JSONDecoder()
# Runs of alike entries matched before giving up, unless they average this many entries.
_RUNS, _RUN_ENTRIES = 8, 256


def scan_uniform(path: str, doc: str,
                 i: int) -> tuple[list[dict[str, Any]], list[int], int, int] | None:
    """The shards array whose first entry starts at ``doc[i]``, matched as text; or None.

    Returns the columns of each run of alike entries (as ``entry_columns``), the start of each
    entry, the end of the last one, and the position after the array's ``]`` and the
    whitespace that follows it.
    """
    starts: list[int] = []
    parts: list[dict[str, Any]] = []
    names: list[str] = []
    while True:  # A run of entries alike, each time.
        if len(parts) >= max(_RUNS, len(starts) // _RUN_ENTRIES):
            return None  # Too many shapes for templates to pay: entry by entry.
        try:
            first, end = _DECODER.raw_decode(doc, i)
        except ValueError:
            return None
        template = _template(path, first, doc[i:end])
        if template is None:
            return None
        pattern, fields = template
        rows: list[tuple[str, ...]] = []
        add_start, add_row = starts.append, rows.append
        scan = pattern.scanner(doc, i).match  # Anchored: each match where the last one ended.
        match = None
        while (found := scan()) is not None:
            match = found
            add_start(match.start())
            add_row(match.groups())
        if match is None:
            return None
        columns = _columns(first, fields, rows, names)
        if columns is None:
            return None
        parts.append(columns)
        end = match.end()
        if doc.startswith(', ', end - 2):  # The separator matched: another entry follows.
            i = end
            continue
        after = _NEXT.match(doc, end)
        if after is None:
            return None
        i = after.end()
        if after.group(1) == ']':
            break
    if len(set(names)) != len(names):  # Two entries name one file.
        return None
    return parts, starts, end, i


def _template(path: str, entry: Any, text: str) -> tuple[re.Pattern[str], list[tuple]] | None:
    """The pattern matching entries like ``entry`` (whose text is ``text``), and its fields.

    Fields, in the order of the pattern's groups: ``('samples',)``, ``(key, 'basename')``,
    ``(key, 'bytes')`` or ``(key, 'hashes', algorithm)`` for each file key.
    """
    if type(entry) is not dict or json.dumps(entry) != text:
        return None
    try:
        shard_format = get_format(entry.get('format'))
    except (KeyError, TypeError):
        return None
    file_keys = shard_format.file_keys
    raw_keys = [key for key in file_keys if key.startswith('raw_')]
    if not shard_format.shape_only or set(shard_format.required_keys) & set(file_keys) or \
            not raw_keys or len(file_keys) != 2 * len(raw_keys) or \
            any(entry.get(key) is None for key in raw_keys):
        return None
    try:
        validate_shard_entry(f'{path}, shard 0', entry)
    except Exception:  # noqa: BLE001  The entry-by-entry scan raises it.
        return None
    marks: dict[str, tuple] = {}

    def mark(field: tuple) -> str:
        name = f'@{len(marks)}@'
        marks[name] = field
        return name

    open_entry = dict(entry, samples=mark(('samples',)))
    for key in file_keys:
        info = entry.get(key)
        if info is not None:
            hashes = {algo: mark((key, 'hashes', algo)) for algo in info.get('hashes', {})}
            open_entry[key] = dict(info, basename=mark((key, 'basename')),
                                   bytes=mark((key, 'bytes')))
            if 'hashes' in info:
                open_entry[key]['hashes'] = hashes
    if '@' in text:  # A mark would be ambiguous.
        return None
    parts = re.split('"(@[0-9]+@)"', json.dumps(open_entry))
    fields = [marks[name] for name in parts[1::2]]
    ints = {('samples',), *((key, 'bytes') for key in file_keys)}
    pattern = ''.join(re.escape(part) if n % 2 == 0 else
                      _INT if fields[n // 2] in ints else _STRING
                      for n, part in enumerate(parts))
    return re.compile(pattern + '(?:, )?'), fields


def _columns(first: dict[str, Any], fields: list[tuple], rows: list[tuple[str, ...]],
             names: list[str]) -> dict[str, Any] | None:
    """``entry_columns`` of the matched entries, if their varying values are valid; else None.

    ``names`` gains their files' normalised names.
    """
    n = len(rows)
    values = dict(zip(fields, zip(*rows)))
    samples = np.fromiter(map(int, values[('samples',)]), np.int64, n)
    if samples.min() < 1 or samples.max() > MAX_SAMPLES:
        return None
    file_keys = get_format(first['format']).file_keys
    present = [key for key in file_keys if first.get(key) is not None]
    digests = [values[field] for field in fields if len(field) == 3]
    if not digests_valid(list(chain.from_iterable(digests))):
        return None
    sizes = {}
    for key in present:
        sizes[key] = np.fromiter(map(int, values[(key, 'bytes')]), np.int64, n)
        if sizes[key].max() > (MAX_ZIP_BYTES if key.startswith('zip_') else MAX_RAW_BYTES):
            return None
        normal = names_valid(list(values[(key, 'basename')]))
        if normal is None:
            return None
        names += normal
    raw_keys = [key for key in present if key.startswith('raw_')]
    zip_keys = [key for key in file_keys if key.startswith('zip_')]
    raw_size = sum(sizes[key] for key in raw_keys)
    whole = all(key in sizes for key in zip_keys)
    max_size = raw_size + sum(sizes[key] for key in zip_keys) if whole else raw_size
    lines = chain.from_iterable(zip(*[map('{}\t{}'.format, values[(key, 'basename')],
                                          values[(key, 'bytes')]) for key in raw_keys]))
    return {'samples': samples, 'unsafe': np.full(n, bool(unsafe_encodings(first)), bool),
            'raw_size': raw_size, 'max_size': max_size,
            'file_counts': np.full(n, len(raw_keys), np.int64), 'files': '\n'.join(lines)}
