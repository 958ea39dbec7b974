"""The reference's ``streaming.base.format.json.writer``."""

from streaming.format.json import JSONWriter

__all__ = ['JSONWriter']
