"""Separated-values formats: CSV, TSV and XSV (any separator), a data and a ``.meta`` file each."""

from streaming.format.index import check_same_lengths
from streaming.format.registry import register_format
from streaming.format.xsv.reader import CSVReader, TSVReader, XSVReader
from streaming.format.xsv.writer import CSVWriter, TSVWriter, XSVWriter

__all__ = ['CSVReader', 'CSVWriter', 'TSVReader', 'TSVWriter', 'XSVReader', 'XSVWriter']

_COLUMN_KEYS = ('column_names', 'column_encodings')
_REQUIRED = {'column_encodings': list, 'column_names': list, 'newline': str}

for _name, _reader, _writer, _required in [
        ('csv', CSVReader, CSVWriter, _REQUIRED),
        ('tsv', TSVReader, TSVWriter, _REQUIRED),
        ('xsv', XSVReader, XSVWriter, {**_REQUIRED, 'separator': str})]:
    register_format(_name, reader=_reader, writer=_writer, required_keys=_required,
                    check_entry=lambda where, entry: check_same_lengths(where, entry, _COLUMN_KEYS))
