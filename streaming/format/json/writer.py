"""``JSONWriter``: one JSON object per line, offsets in a ``.meta`` file."""

from __future__ import annotations

import json
from typing import Any

from streaming.format.columns import check_columns, column_mismatch
from streaming.format.text_columns import check_text_value, is_text_encoding
from streaming.format.writer import DataMetaShardWriter

__all__ = ['JSONWriter']


class JSONWriter(DataMetaShardWriter):
    """Writes samples as JSON lines; ``columns`` maps names to 'str', 'int' or 'float'.

    Other arguments are those of ``Writer``; ``streaming.JSONWriter`` adds remote uploads.
    """

    format = 'json'

    def __init__(self, *, columns: dict[str, str], newline: str = '\n', **kwargs: Any) -> None:
        self.columns = check_columns(columns, is_text_encoding, "'str', 'int', 'float'")
        self.newline = newline
        super().__init__(**kwargs)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), 'columns': self.columns, 'newline': self.newline}

    def encode_sample(self, sample: dict[str, Any]) -> bytes:
        if not isinstance(sample, dict) or len(sample) != len(self.columns):
            raise column_mismatch(sample, sorted(self.columns))
        obj = {}
        for name, encoding in self.columns.items():
            if name not in sample:
                raise column_mismatch(sample, sorted(self.columns))
            check_text_value(name, encoding, sample[name])
            obj[name] = sample[name]
        return (json.dumps(obj, sort_keys=True) + self.newline).encode('utf-8')
