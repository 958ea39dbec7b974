"""The reference's ``streaming.base.format.xsv.encodings``: the CSV/TSV/XSV column types."""

from __future__ import annotations

from typing import Any

from streaming.base.format.text_encodings import Encoding, Float, Int, Str, coder
from streaming.format.text_columns import is_text_encoding

__all__ = ['Encoding', 'Float', 'Int', 'Str', 'is_xsv_encoding', 'xsv_decode', 'xsv_encode']


def is_xsv_encoding(encoding: str) -> bool:
    """Whether ``encoding`` is an XSV column type (``str``, ``int`` or ``float``)."""
    return is_text_encoding(encoding)


def xsv_encode(encoding: str, value: Any) -> str:
    """``value`` as the text of one field of column type ``encoding``.

    ``ColumnTypeError`` (also the reference's ``AttributeError``) if it is not of that type.
    """
    return coder(encoding).encode(value)


def xsv_decode(encoding: str, value: str) -> Any:
    """Parse the text of one field of column type ``encoding``."""
    return coder(encoding).decode(value)
