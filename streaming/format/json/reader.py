"""``JSONReader``: random access into JSON-lines shards."""

from __future__ import annotations

import json
from typing import Any

from streaming.format.index import FileInfo
from streaming.format.reader import DataMetaShardReader

__all__ = ['JSONReader']


class JSONReader(DataMetaShardReader):
    """One JSON-lines shard."""

    header_keys = ('format', 'columns', 'newline')

    def __init__(self, dirname: str, split: str | None, columns: dict[str, str],
                 compression: str | None, hashes: list[str], newline: str, raw_data: FileInfo,
                 raw_meta: FileInfo, samples: int, size_limit: int | str | None,
                 zip_data: FileInfo | None, zip_meta: FileInfo | None) -> None:
        super().__init__(dirname, split, compression, hashes, raw_data, raw_meta, samples,
                         size_limit, zip_data, zip_meta)
        self.columns = columns
        self.newline = newline

    def decode_sample(self, data: bytes) -> dict[str, Any]:
        # Drop the newline: json.loads tolerates only whitespace ones, and any string is allowed.
        newline = self.newline.encode('utf-8')
        if newline and data.endswith(newline):
            data = data[:-len(newline)]
        return json.loads(data)
