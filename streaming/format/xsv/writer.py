"""``XSVWriter`` and its fixed-separator forms ``CSVWriter`` and ``TSVWriter``."""

from __future__ import annotations

from typing import Any

from streaming.format.columns import check_columns, column_mismatch
from streaming.format.text_columns import check_text_value, is_text_encoding
from streaming.format.writer import DataMetaShardWriter

__all__ = ['XSVWriter', 'CSVWriter', 'TSVWriter']


class XSVWriter(DataMetaShardWriter):
    """Writes samples as separated values under a header line.

    There is no quoting, so values may not contain the separator or the newline (checked).
    Other arguments are those of ``Writer``; ``streaming.XSVWriter`` adds remote uploads.
    """

    format = 'xsv'

    def __init__(self, *, columns: dict[str, str], separator: str, newline: str = '\n',
                 **kwargs: Any) -> None:
        columns = check_columns(columns, is_text_encoding, "'str', 'int', 'float'")
        if not isinstance(separator, str) or not separator:
            raise ValueError(f'separator must be a non-empty string, got {separator!r}.')
        if not isinstance(newline, str) or not newline or \
                separator in newline or newline in separator:
            raise ValueError(f'newline must be a non-empty string distinct from the separator, '
                             f'got {newline!r}.')
        for name in columns:
            if separator in name or newline in name:
                raise ValueError(f'Column name {name!r} contains the separator {separator!r} or '
                                 f'the newline {newline!r}.')
        self.columns = columns
        self.column_names = sorted(columns)
        self.column_encodings = [columns[name] for name in self.column_names]
        self.separator = separator
        self.newline = newline
        super().__init__(**kwargs)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), 'column_names': self.column_names,
                'column_encodings': self.column_encodings, 'newline': self.newline,
                'separator': self.separator}

    def data_header(self) -> bytes:
        return (self.separator.join(self.column_names) + self.newline).encode('utf-8')

    def encode_sample(self, sample: dict[str, Any]) -> bytes:
        if not isinstance(sample, dict) or len(sample) != len(self.column_names):
            raise column_mismatch(sample, self.column_names)
        values = []
        for name, encoding in zip(self.column_names, self.column_encodings):
            if name not in sample:
                raise column_mismatch(sample, self.column_names)
            value = sample[name]
            check_text_value(name, encoding, value)
            text = str(value)
            if self.separator in text or self.newline in text:
                raise ValueError(f'Column {name!r}: value {text!r:.60} contains the separator '
                                 f'{self.separator!r} or the newline {self.newline!r}, which this '
                                 f'format cannot escape.')
            values.append(text)
        line = self.separator.join(values)
        if len(self.separator) > 1 and line.split(self.separator) != values:
            # A value starting or ending with part of the separator ('x|' with '||'): readers
            # would split the line in the wrong place.
            parts = line.split(self.separator)
            name = next((n for n, v, p in zip(self.column_names, values, parts) if v != p),
                        self.column_names[-1])
            raise ValueError(f'Column {name!r}: the values {values!r:.80} cannot be told apart '
                             f'when joined by the separator {self.separator!r}.')
        return (line + self.newline).encode('utf-8')


class _FixedSeparatorWriter(XSVWriter):
    """An XSV writer whose format implies the separator, which the index then leaves out."""

    fixed_separator = ''

    def __init__(self, *, columns: dict[str, str], newline: str = '\n', **kwargs: Any) -> None:
        super().__init__(columns=columns, separator=self.fixed_separator, newline=newline,
                         **kwargs)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        del config['separator']
        return config


class CSVWriter(_FixedSeparatorWriter):
    """Comma-separated values."""

    format = 'csv'
    fixed_separator = ','


class TSVWriter(_FixedSeparatorWriter):
    """Tab-separated values."""

    format = 'tsv'
    fixed_separator = '\t'
