"""The MDS format: typed binary columns, one file per shard."""

from __future__ import annotations

from typing import Any, Mapping

from streaming.errors import IndexFileError
from streaming.format.mds.encodings import get_coder, is_mds_encoding, is_mds_encoding_safe
from streaming.format.mds.reader import MDSReader
from streaming.format.mds.writer import MDSWriter
from streaming.format.registry import register_format
from streaming.format.schema import check_column_keys

__all__ = ['MDSReader', 'MDSWriter']

_COLUMN_KEYS = ('column_names', 'column_encodings', 'column_sizes')


def _check_entry(where: str, entry: Mapping[str, Any]) -> None:
    """Distinct names, known encodings, and each column size the one its encoding implies."""
    encodings, sizes = entry['column_encodings'], entry['column_sizes']
    check_column_keys(where, entry, 'column_names', encodings, is_mds_encoding,
                      'see streaming.format.mds.encodings')
    if len(sizes) != len(encodings):
        raise IndexFileError(f'{where}: "column_sizes" has {len(sizes)} entries but there are '
                             f'{len(encodings)} columns.')
    for name, encoding, size in zip(entry['column_names'], encodings, sizes):
        expected = get_coder(encoding).size
        if size != expected or isinstance(size, bool):
            raise IndexFileError(f'{where}: "column_sizes" says {size!r:.40} for column {name!r} '
                                 f'but its encoding {encoding!r} implies {expected}.')


def _unsafe_encodings(entry: Mapping[str, Any]) -> list[str]:
    return [e for e in entry['column_encodings'] if not is_mds_encoding_safe(e)]


register_format('mds', reader=MDSReader, writer=MDSWriter,
                required_keys={key: list for key in _COLUMN_KEYS},
                check_entry=_check_entry,
                unsafe_encodings=_unsafe_encodings, shape_only=True)
