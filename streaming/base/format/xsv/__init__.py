"""The reference's ``streaming.base.format.xsv``."""

from streaming.format.xsv import CSVReader, TSVReader, XSVReader
from streaming.writing import CSVWriter, TSVWriter, XSVWriter

__all__ = ['CSVReader', 'CSVWriter', 'TSVReader', 'TSVWriter', 'XSVReader', 'XSVWriter']
