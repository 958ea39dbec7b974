"""JSON Lines files streamed as they are: one shard per range of whole lines.

Indexing is one streaming pass counting newlines (numpy over each chunk, no JSON parsing); a
file is cut into units of about ``unit_bytes`` (default 16 MiB) at line ends. Each non-empty
line is a sample and must be a JSON object in UTF-8, without a key given twice in one object;
empty lines (and a lone carriage return) are skipped. A line that breaks any of these (or is
nested deeper than the recursion limit) raises ``SourceFileError`` naming the file and the line
number, as does a line lacking a column asked for.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Iterator

import numpy as np

from streaming.errors import SourceFileError
from streaming.format.registry import register_format
from streaming.sources.arrow_values import Decoded
from streaming.sources.reader import SOURCE_KEYS, SourceReader, check_ranges_entry
from streaming.sources.registry import SourceFormat, register_source

__all__ = ['JSONLSource', 'JSONLReader']

_NL, _CR = 10, 13


def _blank(data: np.ndarray, starts: np.ndarray, ends: np.ndarray,
           carried: int | None = None) -> np.ndarray:
    """Which lines are empty or a lone carriage return.

    A negative start is a line begun in an earlier chunk; ``carried`` is its first byte.
    """
    length = ends - starts
    lone_cr = np.zeros(len(ends), bool)
    ones = np.flatnonzero(length == 1)
    here = ones[starts[ones] >= 0]
    lone_cr[here] = data[starts[here]] == _CR
    lone_cr[ones[starts[ones] < 0]] = carried == _CR
    return (length == 0) | lone_cr


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's pairs as a dict; a key given twice is an error (parsers disagree on it)."""
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise _DuplicateKey(f'key {twice!r} appears twice in one object')
    return value


_DECODER = json.JSONDecoder(object_pairs_hook=_unique_keys)


class JSONLSource(SourceFormat):
    """JSON Lines: units are ranges of whole lines of about ``unit_bytes``."""

    name = 'jsonl'
    extensions = ('.jsonl', '.ndjson')
    streamed = True
    options = {'unit_bytes': 16 << 20}

    def index_chunks(self, where: str, size: int, chunks: Iterator[bytes],
                     options: dict[str, Any]) -> dict[str, Any]:
        unit_bytes = int(options['unit_bytes'])
        units: list[dict[str, Any]] = []
        pos = 0  # Bytes seen before this chunk.
        unit_start, unit_samples, unit_line = 0, 0, 1
        # The current line: where it starts, its number and its first byte once seen. Nothing
        # of it is kept (a line of gigabytes costs no more than a short one).
        line_start, line_no, first = 0, 1, None
        for chunk in chunks:
            data = np.frombuffer(chunk, np.uint8)
            base = pos
            ends = np.flatnonzero(data == _NL)
            starts = np.empty_like(ends)
            starts[:1] = line_start - base
            starts[1:] = ends[:-1] + 1
            samples = (~_blank(data, starts, ends, first)).astype(np.int64)
            cum = np.cumsum(samples)
            taken = 0  # Lines of this chunk already in closed units.
            while True:
                # The first line end whose unit would reach unit_bytes.
                cut = int(np.searchsorted(ends + base + 1, unit_start + unit_bytes))
                if cut >= len(ends):
                    break
                count = int(cum[cut] - (cum[taken - 1] if taken else 0))
                end = int(ends[cut]) + base + 1
                units.append({'samples': unit_samples + count,
                              'ranges': [[unit_start, end - unit_start]],
                              'first_line': unit_line})
                unit_line = line_no + cut + 1
                unit_start, unit_samples, taken = end, 0, cut + 1
            unit_samples += int(cum[-1] - (cum[taken - 1] if taken else 0)) if len(cum) else 0
            line_no += len(ends)
            pos += len(chunk)
            if len(ends):
                line_start, first = int(ends[-1]) + base + 1, None
            if first is None and line_start < pos:
                first = int(data[line_start - base])
        if pos != size:
            raise SourceFileError(f'{where}: read {pos} bytes but the file has {size}: it '
                                  f'changed while it was indexed.')
        if pos > line_start and not (pos - line_start == 1 and first == _CR):
            unit_samples += 1  # A last line without a newline.
        if pos > unit_start:
            units.append({'samples': unit_samples, 'ranges': [[unit_start, pos - unit_start]],
                          'first_line': unit_line})
        return {'schema': None, 'units': units}

    def entry_extras(self, record: dict[str, Any], unit: dict[str, Any],
                     columns: list[str] | None) -> dict[str, Any]:
        return {'first_line': unit['first_line']}


class JSONLReader(SourceReader):
    """A range of whole lines of a JSONL file; sample ``i`` is its ``i``-th non-empty line."""

    def decode(self) -> tuple[Decoded, int]:
        data = self.data()
        start, length = self.ranges[0]
        if start + length < self.source_size and data[-1:] != b'\n':
            raise SourceFileError(f'{self.source} (bytes {start}-{start + length}): the unit '
                                  f'does not end with a newline as it did when indexed: the file '
                                  f'changed or the index is stale.')
        array = np.frombuffer(data, np.uint8)
        ends = np.flatnonzero(array == _NL)
        if not len(ends) or ends[-1] != len(array) - 1:
            ends = np.append(ends, len(array))  # A last line without a newline.
        starts = np.empty_like(ends)
        starts[:1] = 0
        starts[1:] = ends[:-1] + 1
        keep = np.flatnonzero(~_blank(array, starts, ends))
        if len(keep) != self.samples:
            raise SourceFileError(f'{self.source} (bytes {self.ranges[0][0]}-'
                                  f'{self.ranges[0][0] + self.ranges[0][1]}) has {len(keep)} '
                                  f'lines but the index says {self.samples}: the index is '
                                  f'stale.')
        begin, end = starts[keep].tolist(), ends[keep].tolist()
        numbers = (keep + self.first_line).tolist()
        del array, ends, starts  # No view of the map outlives decoding (it may be closed).
        source, columns = self.source, self.columns

        def get(i: int) -> Any:
            where = f'{source}, line {numbers[i]}'
            try:
                text = data[begin[i]:end[i]].decode('utf-8')
                if numbers[i] == 1 and text.startswith('\ufeff'):
                    text = text[1:]  # A byte order mark opening the file.
                value = _DECODER.decode(text)
            except UnicodeDecodeError as error:
                raise SourceFileError(f'{where}: not valid UTF-8 ({error}).') from None
            except RecursionError:
                raise SourceFileError(f'{where}: nested too deeply to parse (more levels than '
                                      f'Python\'s recursion limit, {sys.getrecursionlimit()}).'
                                      ) from None
            except ValueError as error:
                raise SourceFileError(f'{where}: not valid JSON ({error}).') from None
            if not isinstance(value, dict):
                raise SourceFileError(f'{where}: a JSON {type(value).__name__}, not an object.')
            if columns is not None:
                missing = [c for c in columns if c not in value]
                if missing:
                    raise SourceFileError(f'{where}: no key(s) {missing} (it has '
                                          f'{sorted(value)}).')
                value = {c: value[c] for c in columns}
            return value

        return Decoded({'': get}, None), 16 * len(keep)

    def get_item(self, idx: int) -> dict[str, Any]:
        return self.getters()[''](idx)


register_source(JSONLSource())
register_format('jsonl', reader=JSONLReader, check_entry=check_ranges_entry,
                required_keys={**SOURCE_KEYS, 'first_line': int})
