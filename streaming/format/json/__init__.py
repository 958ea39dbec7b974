"""The JSON-lines format: a data file and a ``.meta`` offsets file per shard."""

from streaming.format.json.reader import JSONReader
from streaming.format.json.writer import JSONWriter
from streaming.format.registry import register_format

__all__ = ['JSONReader', 'JSONWriter']

register_format('json', reader=JSONReader, writer=JSONWriter,
                required_keys={'columns': dict, 'newline': str})
