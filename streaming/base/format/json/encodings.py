"""The reference's ``streaming.base.format.json.encodings``: the JSON format's column types."""

from __future__ import annotations

from typing import Any

from streaming.base.format.text_encodings import Encoding, Float, Int, Str, coder
from streaming.format.text_columns import is_text_encoding

__all__ = ['Encoding', 'Float', 'Int', 'Str', 'is_json_encoded', 'is_json_encoding']


def is_json_encoding(encoding: str) -> bool:
    """Whether ``encoding`` is a JSON-format column type (``str``, ``int`` or ``float``)."""
    return is_text_encoding(encoding)


def is_json_encoded(encoding: str, value: Any) -> bool:
    """True if ``value`` is a value of column type ``encoding``.

    Else ``ColumnTypeError``, also the reference's ``AttributeError``.
    """
    return coder(encoding).is_encoded(value)
