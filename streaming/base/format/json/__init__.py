"""The reference's ``streaming.base.format.json``."""

from streaming.format.json import JSONReader
from streaming.writing import JSONWriter

__all__ = ['JSONReader', 'JSONWriter']
