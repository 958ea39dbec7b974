"""Separated-values formats: CSV, TSV and XSV (any separator), a data and a ``.meta`` file each."""

from typing import Any, Mapping

from streaming.format.registry import register_format
from streaming.format.schema import check_column_keys, check_str
from streaming.format.text_columns import TEXT_ENCODINGS, is_text_encoding
from streaming.format.xsv.reader import CSVReader, TSVReader, XSVReader
from streaming.format.xsv.writer import CSVWriter, TSVWriter, XSVWriter

__all__ = ['CSVReader', 'CSVWriter', 'TSVReader', 'TSVWriter', 'XSVReader', 'XSVWriter']

_REQUIRED = {'column_encodings': list, 'column_names': list, 'newline': str}



def _check_entry(where: str, entry: Mapping[str, Any]) -> None:
    """Distinct names, text encodings, a non-empty newline (and separator, for xsv)."""
    check_column_keys(where, entry, 'column_names', entry['column_encodings'], is_text_encoding,
                      sorted(TEXT_ENCODINGS))
    check_str(where, 'newline', entry['newline'], nul=True)
    if entry.get('format') == 'xsv':
        check_str(where, 'separator', entry['separator'], nul=True)


for _name, _reader, _writer, _required in [
        ('csv', CSVReader, CSVWriter, _REQUIRED),
        ('tsv', TSVReader, TSVWriter, _REQUIRED),
        ('xsv', XSVReader, XSVWriter, {**_REQUIRED, 'separator': str})]:
    register_format(_name, reader=_reader, writer=_writer, required_keys=_required,
                    check_entry=_check_entry, shape_only=True)
