"""The text formats' column encoding classes.

As the reference's ``json.encodings`` and ``xsv.encodings`` modules expose them, built on
``streaming.format.text_columns``.
"""

from __future__ import annotations

from typing import Any

from streaming.format.text_columns import TEXT_ENCODINGS, is_text_encoding

__all__ = ['Encoding', 'Float', 'Int', 'Str', 'text_coders']


class Encoding:
    """A text-format column type: checks values, writes them as text and parses them back."""

    name = ''

    @classmethod
    def _kinds(cls) -> tuple[type, ...]:
        return TEXT_ENCODINGS[cls.name][0]

    def is_encoded(self, obj: Any) -> bool:
        """Whether ``obj`` is a value of this type."""
        return isinstance(obj, self._kinds())

    def encode(self, obj: Any) -> str:
        """``obj`` as the text stored in a CSV/TSV/XSV row."""
        return str(obj)

    def decode(self, obj: str) -> Any:
        """Parse the text of one field."""
        return TEXT_ENCODINGS[self.name][1](obj)


class Str(Encoding):
    """A ``str`` column."""

    name = 'str'


class Int(Encoding):
    """An ``int`` column."""

    name = 'int'


class Float(Encoding):
    """A ``float`` column."""

    name = 'float'


text_coders: dict[str, Encoding] = {'str': Str(), 'int': Int(), 'float': Float()}


def coder(encoding: str) -> Encoding:
    """The coder of ``encoding``; KeyError (as in the reference) naming the allowed ones."""
    if not is_text_encoding(encoding):
        raise KeyError(f'Unknown text-format encoding {encoding!r}; expected one of '
                         f'{sorted(TEXT_ENCODINGS)}.')
    return text_coders[encoding]
