"""The JSON-lines format: a data file and a ``.meta`` offsets file per shard."""

from typing import Any, Mapping

from streaming.errors import IndexFileError
from streaming.format.json.reader import JSONReader
from streaming.format.json.writer import JSONWriter
from streaming.format.registry import register_format
from streaming.format.schema import check_str
from streaming.format.text_columns import TEXT_ENCODINGS, is_text_encoding

__all__ = ['JSONReader', 'JSONWriter']



def _check_entry(where: str, entry: Mapping[str, Any]) -> None:
    """Columns map non-empty names to text encodings; the newline is not empty."""
    check_str(where, 'newline', entry['newline'], nul=True)
    columns = entry['columns']
    if not columns:
        raise IndexFileError(f'{where}: "columns" must name at least one column.')
    for name, encoding in columns.items():
        if not is_text_encoding(encoding):
            raise IndexFileError(f'{where}: "columns" gives column {name!r} the unknown '
                                 f'encoding {encoding!r:.40}; known: {sorted(TEXT_ENCODINGS)}.')


register_format('json', reader=JSONReader, writer=JSONWriter,
                required_keys={'columns': dict, 'newline': str}, check_entry=_check_entry,
                shape_only=True)
