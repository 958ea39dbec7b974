"""``XSVReader`` and its fixed-separator forms ``CSVReader`` and ``TSVReader``."""

from __future__ import annotations

from typing import Any

from streaming.format.index import FileInfo
from streaming.format.reader import DataMetaShardReader
from streaming.format.text_columns import TEXT_ENCODINGS

__all__ = ['XSVReader', 'CSVReader', 'TSVReader']


class XSVReader(DataMetaShardReader):
    """One separated-values shard."""

    fixed_separator = ''  # Set by formats whose name implies the separator.
    header_keys = ('format', 'column_names', 'column_encodings', 'newline', 'separator')

    def __init__(self, dirname: str, split: str | None, column_encodings: list[str],
                 column_names: list[str], compression: str | None, hashes: list[str],
                 newline: str, raw_data: FileInfo, raw_meta: FileInfo, samples: int,
                 size_limit: int | str | None, zip_data: FileInfo | None,
                 zip_meta: FileInfo | None, separator: str | None = None) -> None:
        super().__init__(dirname, split, compression, hashes, raw_data, raw_meta, samples,
                         size_limit, zip_data, zip_meta)
        self.column_encodings = column_encodings
        self.column_names = column_names
        self.newline = newline
        self.separator = separator or self.fixed_separator
        self._plan = [(name, TEXT_ENCODINGS[enc][1]) for name, enc in
                      zip(column_names, column_encodings)]

    def decode_sample(self, data: bytes) -> dict[str, Any]:
        text = str(data, 'utf-8')
        if not text.endswith(self.newline):
            raise ValueError('the line does not end with the newline')
        parts = text[:-len(self.newline)].split(self.separator)
        if len(parts) != len(self._plan):
            raise ValueError(f'the line has {len(parts)} fields, expected {len(self._plan)}')
        return {name: parse(part) for (name, parse), part in zip(self._plan, parts)}


class CSVReader(XSVReader):
    """One comma-separated shard."""

    fixed_separator = ','


class TSVReader(XSVReader):
    """One tab-separated shard."""

    fixed_separator = '\t'
