"""The reference's ``streaming.base.format.xsv.writer``."""

from streaming.writing import CSVWriter, TSVWriter, XSVWriter

__all__ = ['CSVWriter', 'TSVWriter', 'XSVWriter']
