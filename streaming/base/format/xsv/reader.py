"""The reference's ``streaming.base.format.xsv.reader``."""

from streaming.format.xsv import CSVReader, TSVReader, XSVReader

__all__ = ['CSVReader', 'TSVReader', 'XSVReader']
