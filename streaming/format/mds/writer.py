"""``MDSWriter``: binary shards with typed columns."""

from __future__ import annotations

import struct
from typing import Any

from streaming.errors import ColumnTypeError, EncodingError
from streaming.format.columns import check_columns, column_mismatch
from streaming.format.mds.encodings import get_coder, is_mds_encoding
from streaming.format.writer import SingleFileShardWriter

__all__ = ['MDSWriter']


class MDSWriter(SingleFileShardWriter):
    """Writes samples (dicts) as MDS shards; ``columns`` maps each column name to its encoding.

    Each sample is stored as the uint32 lengths of its variable-size columns, then every column's
    bytes, columns in sorted name order. Other arguments are those of ``Writer`` (a local ``out``
    directory); ``streaming.MDSWriter`` adds remote uploads.
    """

    format = 'mds'

    def __init__(self, *, columns: dict[str, str], **kwargs: Any) -> None:
        columns = check_columns(columns, is_mds_encoding, 'see streaming.format.mds.encodings')
        self.columns = columns
        self.column_names = sorted(columns)
        self.column_encodings = [columns[name] for name in self.column_names]
        coders = [get_coder(encoding) for encoding in self.column_encodings]
        self.column_sizes = [coder.size for coder in coders]
        self._plan = list(zip(self.column_names, self.column_encodings, coders, self.column_sizes))
        num_var = sum(size is None for size in self.column_sizes)
        self._sizes_struct = struct.Struct(f'<{num_var}I')
        super().__init__(**kwargs)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), 'column_names': self.column_names,
                'column_encodings': self.column_encodings, 'column_sizes': self.column_sizes}

    def encode_sample(self, sample: dict[str, Any]) -> bytes:
        """The bytes of one sample; errors name the column at fault."""
        if not isinstance(sample, dict) or len(sample) != len(self._plan):
            raise column_mismatch(sample, self.column_names)
        sizes = []
        parts = []
        for name, encoding, coder, size in self._plan:
            try:
                value = sample[name]
            except KeyError:
                raise column_mismatch(sample, self.column_names) from None
            if type(value) is bytes:
                data = value  # Already encoded: stored as is, whatever the encoding.
            else:
                try:
                    data = coder.encode(value)
                except Exception as error:
                    kind = (ColumnTypeError if isinstance(error, ColumnTypeError) else
                            TypeError if isinstance(error, TypeError) else EncodingError)
                    raise kind(f'Column {name!r} (encoding {encoding!r}) cannot store '
                                      f'{type(value).__name__} value {_short(value)}: {error}') \
                        from error
            if size is None:
                sizes.append(len(data))
            elif len(data) != size:
                raise ValueError(f'Column {name!r} (encoding {encoding!r}) holds {size} bytes per '
                                 f'value, got {len(data)} bytes.')
            parts.append(data)
        return self._sizes_struct.pack(*sizes) + b''.join(parts)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + '...'
