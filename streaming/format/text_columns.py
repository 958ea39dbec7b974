"""Column encodings of the text formats (JSON, CSV, TSV, XSV): str, int and float."""

from __future__ import annotations

from typing import Any, Callable

from streaming.errors import ColumnTypeError

__all__ = ['TEXT_ENCODINGS', 'is_text_encoding', 'check_text_value']

# Encoding name -> (accepted Python types, parse function for text formats).
TEXT_ENCODINGS: dict[str, tuple[tuple[type, ...], Callable[[str], Any]]] = {
    'str': ((str,), str),
    'int': ((int,), int),
    'float': ((float,), float),
}


def is_text_encoding(encoding: Any) -> bool:
    """Whether ``encoding`` is one of the text formats' encodings."""
    return isinstance(encoding, str) and encoding in TEXT_ENCODINGS


def check_text_value(name: str, encoding: str, value: Any) -> None:
    """Raise ``ColumnTypeError`` naming the column unless ``value`` suits ``encoding``.

    The error is a TypeError and also the AttributeError the reference raises.
    """
    kinds = TEXT_ENCODINGS[encoding][0]
    if not isinstance(value, kinds) or (encoding != 'int' and isinstance(value, bool)):
        raise ColumnTypeError(f'Column {name!r} (encoding {encoding!r}) expects '
                        f'{kinds[0].__name__}, got {type(value).__name__} value {value!r:.60}.')
