"""The reference's ``streaming.base.format.json.reader``."""

from streaming.format.json import JSONReader

__all__ = ['JSONReader']
