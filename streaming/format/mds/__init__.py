"""The MDS format: typed binary columns, one file per shard."""

from __future__ import annotations

from typing import Any, Mapping

from streaming.format.index import check_same_lengths
from streaming.format.mds.encodings import is_mds_encoding_safe
from streaming.format.mds.reader import MDSReader
from streaming.format.mds.writer import MDSWriter
from streaming.format.registry import register_format

__all__ = ['MDSReader', 'MDSWriter']

_COLUMN_KEYS = ('column_names', 'column_encodings', 'column_sizes')


def _unsafe_encodings(entry: Mapping[str, Any]) -> list[str]:
    return [e for e in entry['column_encodings'] if not is_mds_encoding_safe(e)]


register_format('mds', reader=MDSReader, writer=MDSWriter,
                required_keys={key: list for key in _COLUMN_KEYS},
                check_entry=lambda where, entry: check_same_lengths(where, entry, _COLUMN_KEYS),
                unsafe_encodings=_unsafe_encodings)
