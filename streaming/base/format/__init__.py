"""The reference's ``streaming.base.format`` import path."""

from streaming.format import *  # noqa: F401,F403
from streaming.format import __all__, _readers, reader_from_json  # noqa: F401
from streaming.writing import CSVWriter, JSONWriter, MDSWriter, TSVWriter, XSVWriter  # noqa: F401
