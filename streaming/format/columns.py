"""Checks shared by every writer's ``columns`` argument and per-sample column sets."""

from __future__ import annotations

from typing import Any, Callable

from streaming.errors import ColumnMismatchError

__all__ = ['check_columns', 'column_mismatch']


def check_columns(columns: Any, is_encoding: Callable[[str], bool], known: str) -> dict[str, str]:
    """Validate a ``{name: encoding}`` mapping; ``known`` lists the valid encodings for errors."""
    if not isinstance(columns, dict) or not columns:
        raise ValueError(f'columns must be a non-empty dict of column name -> encoding, got '
                         f'{columns!r}.')
    for name, encoding in columns.items():
        if not isinstance(name, str):
            raise ValueError(f'Column names must be strings, got {name!r}.')
        if not is_encoding(encoding):
            raise ValueError(f'Column {name!r} has unknown encoding {encoding!r}; known: {known}.')
    return dict(columns)


def column_mismatch(sample: Any, names: list[str]) -> ColumnMismatchError | TypeError:
    """The error to raise when a sample does not have exactly the writer's columns."""
    if not isinstance(sample, dict):
        return TypeError(f'A sample must be a dict of column name -> value, got '
                         f'{type(sample).__name__}.')
    missing = sorted(set(names) - set(sample))
    extra = sorted(set(sample) - set(names), key=str)
    parts = []
    if missing:
        parts.append(f'missing column(s) {missing}')
    if extra:
        parts.append(f'unexpected column(s) {extra}')
    return ColumnMismatchError(f'Sample has {" and ".join(parts)}; the writer\'s columns are '
                               f'{names}.')
