"""The JSON-lines split format."""

from streaming.format.json.reader import JSONReader
from streaming.format.json.writer import JSONWriter

__all__ = ['JSONReader', 'JSONWriter']
