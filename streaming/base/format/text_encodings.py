"""The text formats' column encoding classes.

As the reference's ``json.encodings`` and ``xsv.encodings`` modules expose them, built on
``streaming.format.text_columns``. Their methods are class methods (``Str.encode('abc')`` works
on the class), and a value of the wrong type is refused by ``is_encoded`` and ``encode`` alike
with ``ColumnTypeError``, also the ``AttributeError`` the reference raises there.
"""

from __future__ import annotations

from typing import Any

from streaming.errors import ColumnTypeError
from streaming.format.text_columns import TEXT_ENCODINGS, is_text_encoding

__all__ = ['Encoding', 'Float', 'Int', 'Str', 'text_coders']


class Encoding:
    """A text-format column type: checks values, writes them as text and parses them back."""

    name = ''

    @classmethod
    def _check(cls, obj: Any) -> None:
        kinds = TEXT_ENCODINGS[cls.name][0]
        if not isinstance(obj, kinds):
            raise ColumnTypeError(f'Encoding {cls.name!r} ({cls.__module__}.{cls.__name__}) '
                                  f'expects {kinds[0].__name__}, got {type(obj).__name__} '
                                  f'value {obj!r:.60}.')

    @classmethod
    def is_encoded(cls, obj: Any) -> bool:
        """True if ``obj`` is a value of this type; else ``ColumnTypeError`` (as the reference)."""
        cls._check(obj)
        return True

    @classmethod
    def encode(cls, obj: Any) -> str:
        """``obj`` as the text stored in a CSV/TSV/XSV row (``ColumnTypeError`` if mistyped)."""
        cls._check(obj)
        return obj if isinstance(obj, str) else str(obj)

    @classmethod
    def decode(cls, obj: str) -> Any:
        """Parse the text of one field."""
        return TEXT_ENCODINGS[cls.name][1](obj)


class Str(Encoding):
    """A ``str`` column."""

    name = 'str'


class Int(Encoding):
    """An ``int`` column."""

    name = 'int'


class Float(Encoding):
    """A ``float`` column."""

    name = 'float'


text_coders: dict[str, type[Encoding]] = {'str': Str, 'int': Int, 'float': Float}


def coder(encoding: str) -> type[Encoding]:
    """The coder of ``encoding``; KeyError (as in the reference) naming the allowed ones."""
    if not is_text_encoding(encoding):
        raise KeyError(f'Unknown text-format encoding {encoding!r}; expected one of '
                         f'{sorted(TEXT_ENCODINGS)}.')
    return text_coders[encoding]
