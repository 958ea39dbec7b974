"""JSON Lines files streamed as they are: one shard per range of whole lines.

Indexing is one streaming pass counting newlines (numpy over each chunk, no JSON parsing); a
file is cut into units of about ``unit_bytes`` (default 16 MiB) at line ends. Each non-empty
line is a sample and must be a JSON object; empty lines (and a lone carriage return) are
skipped. A line that does not parse raises ``SourceFileError`` naming the file and the line
number.
"""

from __future__ import annotations

import json
from typing import Any, Iterator

import numpy as np

from streaming.errors import SourceFileError
from streaming.format.arrow_values import Decoded
from streaming.format.registry import register_format
from streaming.format.source_reader import SOURCE_KEYS, SourceReader, check_ranges_entry
from streaming.format.sources import SourceFormat, register_source

__all__ = ['JSONLSource', 'JSONLReader']

_NL, _CR = 10, 13


def _blank(data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Which lines are empty or a lone carriage return."""
    length = ends - starts
    lone_cr = np.zeros(len(ends), bool)
    ones = np.flatnonzero(length == 1)
    lone_cr[ones] = data[starts[ones]] == _CR
    return (length == 0) | lone_cr


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
        pos = 0  # Bytes seen.
        unit_start, unit_samples, unit_line = 0, 0, 1
        line_start, line_no, carry = 0, 1, b''  # carry: the current line's bytes so far.
        for chunk in chunks:
            data = np.frombuffer(carry + chunk, np.uint8)
            base = pos - len(carry)
            ends = np.flatnonzero(data == _NL)
            starts = np.empty_like(ends)
            starts[:1] = line_start - base
            starts[1:] = ends[:-1] + 1
            samples = (~_blank(data, starts, ends)).astype(np.int64)
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
                line_start = int(ends[-1]) + base + 1
            carry = bytes(data[line_start - base:]) if len(ends) else bytes(data)
        if pos != size:
            raise SourceFileError(f'{where}: read {pos} bytes but the file has {size}: it '
                                  f'changed while it was indexed.')
        if carry and carry not in (b'\r',):
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

        def get(i: int) -> Any:
            try:
                value = json.loads(data[begin[i]:end[i]])
            except ValueError as error:
                raise SourceFileError(f'{self.source}, line {numbers[i]}: not valid JSON '
                                      f'({error}).') from None
            if not isinstance(value, dict):
                raise SourceFileError(f'{self.source}, line {numbers[i]}: a JSON '
                                      f'{type(value).__name__}, not an object.')
            return value

        return Decoded({'': get}, None), 16 * len(keep)

    def get_item(self, idx: int) -> dict[str, Any]:
        sample = self.getters()[''](idx)
        if self.columns is not None:
            missing = [c for c in self.columns if c not in sample]
            if missing:
                raise SourceFileError(f'{self.source}: sample {idx} of unit {self.unit} has no '
                                      f'column(s) {missing} (it has {sorted(sample)}).')
            sample = {c: sample[c] for c in self.columns}
        return sample


register_source(JSONLSource())
register_format('jsonl', reader=JSONLReader, check_entry=check_ranges_entry,
                required_keys={**SOURCE_KEYS, 'first_line': int})
