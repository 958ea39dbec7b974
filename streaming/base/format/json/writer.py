"""The reference's ``streaming.base.format.json.writer``."""

from streaming.writing import JSONWriter

__all__ = ['JSONWriter']
