"""The reference's ``streaming.base.format.json``."""

from streaming.format.json import JSONReader, JSONWriter

__all__ = ['JSONReader', 'JSONWriter']
